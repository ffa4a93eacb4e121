"""The bounds of a hello (wire/hello_limits.py), pure: each field over its bound is refused with
`too_large` and a path naming it, the largest hello within every bound passes (and is under the
frame cap), a heartbeat is bounded the same way, the session closes an oversized hello with 4413
before parsing it, and the registry keeps bounded devices from stored rows and heartbeats."""

from __future__ import annotations

import json
import re

import pytest

from codefy_jupyter.core.workers import session as ws
from codefy_jupyter.core.workers.registry import WorkerRegistry, _bounded_info
from codefy_jupyter.core.workers.session import Close, Judge, Send, WorkerSession
from codefy_jupyter.wire import hello_limits as hl
from codefy_jupyter.wire.compact_json import dumps
from codefy_jupyter.wire.protocol import (
    PROTOCOL_VERSION, Heartbeat, Hello, ProtocolError, Reject, decode, encode, to_dict,
)

MAX = hl.HELLO_MAX_NAME_CHARS


def device(i: int, chars: int = hl.HELLO_MAX_DEVICE_CHARS) -> dict:
    """A device entry of exactly `chars` characters of compact JSON."""
    entry = {"device": f"cuda:{i}", "uuid": f"GPU-{i}", "name": ""}
    entry["name"] = "N" * (chars - len(dumps(entry)))
    assert len(dumps(entry)) == chars
    return entry


def largest() -> Hello:
    """A hello at every bound at once."""
    return Hello(
        name="b" * 63, version="v" * hl.HELLO_MAX_TEXT_CHARS, protocol_version=PROTOCOL_VERSION,
        fingerprint={"packages": ["p" * 100] * 2000},
        catalog_hash="c" * hl.HELLO_MAX_TEXT_CHARS,
        node_types={f"T{i:05d}".ljust(MAX, "t"): "h" * 64 for i in range(hl.HELLO_MAX_NODE_TYPES)},
        capabilities=[f"cap{i}".ljust(MAX, "c") for i in range(hl.HELLO_MAX_CAPABILITIES)],
        machine_id="m" * hl.HELLO_MAX_TEXT_CHARS,
        devices=[device(i) for i in range(hl.HELLO_MAX_DEVICES)],
        mounts={f"m{i}".ljust(MAX, "m"): "/" * hl.HELLO_MAX_PATH_CHARS for i in range(hl.HELLO_MAX_MOUNTS)},
        platform="p" * hl.HELLO_MAX_TEXT_CHARS, instance="i" * 63, instance_id="d" * hl.HELLO_MAX_TEXT_CHARS,
        one_shot_run_id="r" * hl.HELLO_MAX_TEXT_CHARS)


def refusal(**changes) -> ProtocolError:
    fields = to_dict(largest())
    fields.update(changes)
    with pytest.raises(ProtocolError) as caught:
        decode(json.dumps(fields), sender="agent")
    return caught.value


def test_the_largest_hello_within_every_bound_passes_and_fits_the_hello_cap():
    text = encode(largest())  # encode checks the bounds too (the agent's own side)
    assert len(text.encode()) <= hl.HELLO_MAX_BYTES
    hl.check_hello_size(text)
    assert decode(text, sender="agent") == largest()


CASES = [
    ("hello.devices", dict(devices=[{"device": "cpu"}] * 50_000), "50000 devices, at most 256"),
    ("hello.devices", dict(devices=[{"device": "cpu"}] * (hl.HELLO_MAX_DEVICES + 1)), "257 devices, at most 256"),
    ("hello.devices[3]", dict(devices=[device(0), device(1), device(2), device(3, hl.HELLO_MAX_DEVICE_CHARS + 1)]),
     f"{hl.HELLO_MAX_DEVICE_CHARS + 1} characters of JSON, at most {hl.HELLO_MAX_DEVICE_CHARS}"),
    ("hello.node_types", dict(node_types={f"T{i}": "h" for i in range(hl.HELLO_MAX_NODE_TYPES + 1)}),
     f"{hl.HELLO_MAX_NODE_TYPES + 1} node types, at most {hl.HELLO_MAX_NODE_TYPES}"),
    ("hello.node_types." + "T" * MAX, dict(node_types={"T" * (MAX + 1): "h"}), f"{MAX + 1} characters, at most {MAX}"),
    ("hello.node_types.T", dict(node_types={"T": "h" * (hl.HELLO_MAX_TEXT_CHARS + 1)}),
     f"{hl.HELLO_MAX_TEXT_CHARS + 1} characters"),
    ("hello.name", dict(name="n" * (MAX + 1)), f"{MAX + 1} characters, at most {MAX}"),
    ("hello.instance", dict(instance="i" * (MAX + 1)), f"{MAX + 1} characters, at most {MAX}"),
    ("hello.version", dict(version="v" * (hl.HELLO_MAX_TEXT_CHARS + 1)), "characters, at most"),
    ("hello.platform", dict(platform="p" * (hl.HELLO_MAX_TEXT_CHARS + 1)), "characters, at most"),
    ("hello.machine_id", dict(machine_id="m" * (hl.HELLO_MAX_TEXT_CHARS + 1)), "characters, at most"),
    ("hello.catalog_hash", dict(catalog_hash="c" * (hl.HELLO_MAX_TEXT_CHARS + 1)), "characters, at most"),
    ("hello.instance_id", dict(instance_id="d" * (hl.HELLO_MAX_TEXT_CHARS + 1)), "characters, at most"),
    ("hello.one_shot_run_id", dict(one_shot_run_id="r" * (hl.HELLO_MAX_TEXT_CHARS + 1)), "characters, at most"),
    ("hello.capabilities", dict(capabilities=["ack"] * (hl.HELLO_MAX_CAPABILITIES + 1)),
     f"{hl.HELLO_MAX_CAPABILITIES + 1} capabilities, at most {hl.HELLO_MAX_CAPABILITIES}"),
    ("hello.capabilities[1]", dict(capabilities=["ack", "c" * (MAX + 1)]), f"{MAX + 1} characters"),
    ("hello.mounts", dict(mounts={f"m{i}": "/x" for i in range(hl.HELLO_MAX_MOUNTS + 1)}),
     f"{hl.HELLO_MAX_MOUNTS + 1} mounts, at most {hl.HELLO_MAX_MOUNTS}"),
    ("hello.mounts." + "m" * MAX, dict(mounts={"m" * (MAX + 1): "/x"}), f"{MAX + 1} characters"),
    ("hello.mounts.data", dict(mounts={"data": "/" * (hl.HELLO_MAX_PATH_CHARS + 1)}),
     f"{hl.HELLO_MAX_PATH_CHARS + 1} characters, at most {hl.HELLO_MAX_PATH_CHARS}"),
    ("hello.fingerprint", dict(fingerprint={"x": "f" * hl.HELLO_MAX_FINGERPRINT_CHARS}),
     f"characters of JSON, at most {hl.HELLO_MAX_FINGERPRINT_CHARS}"),
]


@pytest.mark.parametrize("path, changes, says", CASES, ids=[f"{c[0][:40]}-{i}" for i, c in enumerate(CASES)])
def test_each_field_over_its_bound_is_refused_naming_it(path, changes, says):
    err = refusal(**changes)
    assert err.code == hl.TOO_LARGE and err.path == path, err
    assert str(err).startswith(f"{path}: ") and says in str(err)
    assert err.params["got"] > err.params["limit"]
    fields = {k: v for k, v in {**to_dict(largest()), **changes}.items() if k != "type"}
    with pytest.raises(ValueError, match=re.escape(f"{path}: ")):  # the agent's side cannot encode it either
        encode(Hello(**fields))


def test_a_hello_over_the_byte_cap_is_refused_before_it_is_parsed():
    text = '{"type": "hello", "x": "' + "a" * hl.HELLO_MAX_BYTES + '"}'
    with pytest.raises(ProtocolError) as caught:
        hl.check_hello_size(text)
    assert caught.value.code == hl.TOO_LARGE and caught.value.path == "hello"
    hl.check_hello_size("é" * (hl.HELLO_MAX_BYTES // 2))  # 2 bytes each: exactly at the cap
    with pytest.raises(ProtocolError):
        hl.check_hello_size("é" * (hl.HELLO_MAX_BYTES // 2 + 1))
    with pytest.raises(ProtocolError):
        hl.check_hello_size(b"x" * (hl.HELLO_MAX_BYTES + 1))


def test_the_session_closes_an_oversized_hello_with_4413_and_the_field_in_the_reason():
    base = to_dict(Hello(name="box", version="1", protocol_version=PROTOCOL_VERSION))
    s = WorkerSession(hello_timeout_s=10.0)
    s.opened()
    send, close = s.received(json.dumps({**base, "devices": [{"device": f"cuda:{i}"} for i in range(50_000)]}))
    assert isinstance(send, Send) and isinstance(send.frame, Reject)
    assert send.frame.code == "too_large"
    assert send.frame.params == {"path": "hello.devices", "got": 50_000, "limit": hl.HELLO_MAX_DEVICES}
    assert close == Close(ws.CLOSE_HELLO_TOO_LARGE, "hello.devices: 50000 devices, at most 256")
    assert s.state == ws.CLOSED
    # Over the byte cap: refused by its size alone, before parsing (it is not even JSON).
    s = WorkerSession(hello_timeout_s=10.0)
    s.opened()
    send, close = s.received('{"type": "hello", ' + " " * hl.HELLO_MAX_BYTES)
    assert send.frame.code == "too_large" and send.frame.params["path"] == "hello"
    assert close.code == ws.CLOSE_HELLO_TOO_LARGE and close.reason.startswith("hello: ")
    # The largest accepted hello is judged.
    s = WorkerSession(hello_timeout_s=10.0)
    s.opened()
    [judge] = s.received(encode(largest()))
    assert isinstance(judge, Judge) and judge.hello == largest()


def test_a_heartbeat_is_bounded_like_the_hello():
    with pytest.raises(ProtocolError) as caught:
        decode(json.dumps({"type": "heartbeat", "devices": [{"device": "cpu"}] * (hl.HELLO_MAX_DEVICES + 1)}))
    assert caught.value.path == "heartbeat.devices" and caught.value.code == hl.TOO_LARGE
    with pytest.raises(ProtocolError) as caught:
        decode(json.dumps({"type": "heartbeat", "devices": [device(0, hl.HELLO_MAX_DEVICE_CHARS + 1)]}))
    assert caught.value.path == "heartbeat.devices[0]"
    with pytest.raises(ProtocolError) as caught:
        decode(json.dumps({"type": "heartbeat", "running": ["r"] * (hl.HEARTBEAT_MAX_RUNNING + 1)}))
    assert caught.value.path == "heartbeat.running"
    assert decode(encode(Heartbeat(devices=[device(i) for i in range(hl.HELLO_MAX_DEVICES)])))


def test_heartbeats_adding_fields_cannot_grow_a_device_without_bound():
    from codefy_jupyter.core.workers.handshake import Accepted, CatalogDiff, Credential

    registry = WorkerRegistry()
    hello = Hello(name="box", version="1", protocol_version=PROTOCOL_VERSION,
                  devices=[{"device": "cuda:0", "uuid": "GPU-0"}])
    accepted = Accepted(name="box", capabilities=(), catalog=CatalogDiff(reported=True, matches=True),
                        heartbeat_s=10.0, grace_s=30.0)

    class Link:
        peer = "127.0.0.1"

        def send(self, frame):
            pass

        def close(self, code, reason):
            pass

    registry.register(accepted, hello, Credential("server", "server"), Link(), 0.0)
    for beat in range(200):  # each adds 30 new fields of its own, within the per-entry bound
        fields = {f"b{beat}_{k}": "x" * 10 for k in range(30)}
        registry.heartbeat("box", Heartbeat(devices=[{"device": "cuda:0", "free_memory": beat, **fields}]), float(beat))
    [dev] = registry.get("box").devices
    assert len(dumps(dev)) <= 2 * hl.HELLO_MAX_DEVICE_CHARS
    assert dev["uuid"] == "GPU-0" and dev["free_memory"] == 199
    # The usual heartbeat (the same fields every time) keeps what earlier ones said.
    registry.heartbeat("box", Heartbeat(devices=[{"device": "cuda:0", "free_memory": 5}]), 300.0)
    assert registry.get("box").devices[0]["free_memory"] == 5


def test_a_stored_row_of_an_older_version_is_bounded_on_read():
    info = {"version": "v" * 100_000, "platform": "linux",
            "devices": [{"device": f"cuda:{i}"} for i in range(50_000)] + ["junk"]}
    kept = _bounded_info(info)
    assert len(kept["devices"]) == hl.HELLO_MAX_DEVICES and kept["devices"][0] == {"device": "cuda:0"}
    assert len(kept["version"]) == hl.HELLO_MAX_TEXT_CHARS and kept["platform"] == "linux"
    assert hl.bounded_devices([{"device": "cpu", "x": "y" * 5000}, "junk", {"device": "cuda:0"}]) == [{"device": "cuda:0"}]
    registry = WorkerRegistry()
    registry.load_enrolled([{"name": "old", "info": info}])
    assert len(registry.get("old").devices) == hl.HELLO_MAX_DEVICES


def test_a_stored_info_over_the_read_cap_reads_as_none():
    from codefy_jupyter.core.store import workers as store_workers

    big = json.dumps({"devices": [{"device": f"cuda:{i}", "name": "x" * 200} for i in range(50_000)]})
    assert len(big) > store_workers.STORED_INFO_MAX_CHARS
    row = store_workers._worker(("box", "box", "h", 1.0, 2.0, big, None))
    assert row["info"] == {} and row["name"] == "box"
    small = json.dumps({"version": "1", "devices": [{"device": "cpu"}]})
    assert store_workers._worker(("box", "box", "h", 1.0, 2.0, small, None))["info"]["version"] == "1"
    assert store_workers._worker(("box", "box", "h", 1.0, 2.0, "[1, 2]", None))["info"] == {}
