"""What one `hello` (and the heartbeats after it) may carry: the documented bounds, checked on
both ends. Pure.

Why bounds: a hello's inventory lives as long as its worker is known (in memory, and in its workers
row while it is offline) and every `GET codefy/api/workers` renders it. Without them one holder of
a worker token could list 50,000 devices and make that answer 13 MB long, holding the control
plane's event loop for seconds on each read. With them a worker's part of the answer stays a few
hundred KB at most, whatever it sends.

A hello over a bound is refused before it is judged: a `reject` whose code is `too_large` and whose
message names the field (`hello.devices: 50000 devices, at most 256`), then close 4413. The agent
checks its own hello the same way before it dials (a clear error instead of a refusal). A
heartbeat over a bound is dropped alone, as any malformed frame after the welcome.

    HELLO_MAX_BYTES             the hello as sent (UTF-8 bytes), checked before it is parsed
    HELLO_MAX_DEVICES           entries of `devices` (of a heartbeat's too)
    HELLO_MAX_DEVICE_CHARS      one device entry as compact JSON
    HELLO_MAX_NODE_TYPES        entries of `node_types`
    HELLO_MAX_NAME_CHARS        the worker's name and instance, a node type's name, a capability, a mount label
    HELLO_MAX_TEXT_CHARS        version, platform, machine_id, catalog_hash, instance_id, one_shot_run_id,
                                a node type's definition hash
    HELLO_MAX_PATH_CHARS        a mount's path
    HELLO_MAX_CAPABILITIES      entries of `capabilities`
    HELLO_MAX_MOUNTS            entries of `mounts`
    HELLO_MAX_FINGERPRINT_CHARS the environment fingerprint as compact JSON
    HEARTBEAT_MAX_RUNNING       run ids in a heartbeat's `running`
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from . import compact_json
from .frames import Heartbeat, Hello, ProtocolError

HELLO_MAX_BYTES = 2 * 1024 * 1024  # well under the socket's MAX_FRAME_BYTES (16 MiB)
HELLO_MAX_DEVICES = 256
HELLO_MAX_DEVICE_CHARS = 512
HELLO_MAX_NODE_TYPES = 4096
HELLO_MAX_NAME_CHARS = 128
HELLO_MAX_TEXT_CHARS = 1024
HELLO_MAX_PATH_CHARS = 4096
HELLO_MAX_CAPABILITIES = 64
HELLO_MAX_MOUNTS = 64
HELLO_MAX_FINGERPRINT_CHARS = 256 * 1024
HEARTBEAT_MAX_RUNNING = 4096

TOO_LARGE = "too_large"


def _too_large(path: str, message: str, got: int, limit: int) -> ProtocolError:
    return ProtocolError(TOO_LARGE, message, path=path, params={"got": got, "limit": limit})


def check_hello_size(data: str | bytes) -> None:
    """Refuse a first frame over HELLO_MAX_BYTES before parsing it (ProtocolError `too_large`)."""
    if isinstance(data, str):
        # n characters are n..4n UTF-8 bytes: encode only when the bounds do not decide.
        if len(data) * 4 <= HELLO_MAX_BYTES:
            return
        size = len(data) if len(data) > HELLO_MAX_BYTES else len(data.encode("utf-8", "surrogatepass"))
    else:
        size = len(data)
    if size > HELLO_MAX_BYTES:
        raise _too_large("hello", f"{size} bytes, at most {HELLO_MAX_BYTES}", size, HELLO_MAX_BYTES)


def _count(path: str, items: Any, what: str, limit: int) -> None:
    if len(items) > limit:
        raise _too_large(path, f"{len(items)} {what}, at most {limit}", len(items), limit)


def _chars(path: str, value: Any, limit: int) -> None:
    if isinstance(value, str) and len(value) > limit:
        raise _too_large(path, f"{len(value)} characters, at most {limit}", len(value), limit)


def json_chars(value: Any) -> int:
    try:
        return len(compact_json.dumps(value))
    except (TypeError, ValueError, RecursionError):  # not JSON: the type checks name it, not us
        return 0


def check_devices(devices: list[Any], path: str) -> None:
    """A hello's or heartbeat's `devices`: how many, and each entry's size."""
    _count(path, devices, "devices", HELLO_MAX_DEVICES)
    for i, device in enumerate(devices):
        size = json_chars(device)
        if size > HELLO_MAX_DEVICE_CHARS:
            raise _too_large(f"{path}[{i}]", f"{size} characters of JSON, at most {HELLO_MAX_DEVICE_CHARS}",
                             size, HELLO_MAX_DEVICE_CHARS)


def check_hello(hello: Hello) -> None:
    """Every bound of a hello's fields (ProtocolError `too_large`, its path the field)."""
    for name in ("name", "instance"):
        _chars(f"hello.{name}", getattr(hello, name), HELLO_MAX_NAME_CHARS)
    for name in ("version", "platform", "machine_id", "catalog_hash", "instance_id", "one_shot_run_id"):
        _chars(f"hello.{name}", getattr(hello, name), HELLO_MAX_TEXT_CHARS)
    check_devices(hello.devices, "hello.devices")
    if hello.node_types is not None:
        _count("hello.node_types", hello.node_types, "node types", HELLO_MAX_NODE_TYPES)
        for type_name, definition in hello.node_types.items():
            _chars(f"hello.node_types.{type_name[:HELLO_MAX_NAME_CHARS]}", type_name, HELLO_MAX_NAME_CHARS)
            _chars(f"hello.node_types.{type_name}", definition, HELLO_MAX_TEXT_CHARS)
    _count("hello.capabilities", hello.capabilities, "capabilities", HELLO_MAX_CAPABILITIES)
    for i, capability in enumerate(hello.capabilities):
        _chars(f"hello.capabilities[{i}]", capability, HELLO_MAX_NAME_CHARS)
    _count("hello.mounts", hello.mounts, "mounts", HELLO_MAX_MOUNTS)
    for label, path in hello.mounts.items():
        _chars(f"hello.mounts.{label[:HELLO_MAX_NAME_CHARS]}", label, HELLO_MAX_NAME_CHARS)
        _chars(f"hello.mounts.{label}", path, HELLO_MAX_PATH_CHARS)
    if hello.fingerprint:
        size = json_chars(hello.fingerprint)
        if size > HELLO_MAX_FINGERPRINT_CHARS:
            raise _too_large("hello.fingerprint", f"{size} characters of JSON, at most {HELLO_MAX_FINGERPRINT_CHARS}",
                             size, HELLO_MAX_FINGERPRINT_CHARS)


def check_heartbeat(heartbeat: Heartbeat) -> None:
    check_devices(heartbeat.devices, "heartbeat.devices")
    _count("heartbeat.running", heartbeat.running, "run ids", HEARTBEAT_MAX_RUNNING)


def bounded_devices(devices: Iterable[Any]) -> list[dict[str, Any]]:
    """Devices kept from a stored row (an older version stored any hello): the first
    HELLO_MAX_DEVICES objects within HELLO_MAX_DEVICE_CHARS each, the rest left out."""
    kept: list[dict[str, Any]] = []
    for device in devices:
        if len(kept) >= HELLO_MAX_DEVICES:
            break
        if isinstance(device, Mapping) and 0 < json_chars(device) <= HELLO_MAX_DEVICE_CHARS:
            kept.append(dict(device))
    return kept


__all__ = [
    "HEARTBEAT_MAX_RUNNING", "HELLO_MAX_BYTES", "HELLO_MAX_CAPABILITIES", "HELLO_MAX_DEVICES", "HELLO_MAX_DEVICE_CHARS",
    "HELLO_MAX_FINGERPRINT_CHARS", "HELLO_MAX_MOUNTS", "HELLO_MAX_NAME_CHARS", "HELLO_MAX_NODE_TYPES",
    "HELLO_MAX_PATH_CHARS", "HELLO_MAX_TEXT_CHARS", "TOO_LARGE", "bounded_devices", "check_devices",
    "check_heartbeat", "check_hello", "check_hello_size", "json_chars",
]
