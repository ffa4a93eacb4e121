"""The bounds of a hello (wire/hello_limits.py) on a real jupyter-server with enrolled worker
tokens: a hello listing 50,000 devices is refused (reject `too_large`, close 4413, the reason naming
`hello.devices`) and leaves nothing behind; with two workers at the largest accepted inventory,
GET codefy/api/workers read over and over answers a bounded listing and leaves the server answering
other requests between them (issue 27, item 1: such a hello used to be accepted and then held the
loop 23-25 s on every GET workers)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from codefy_jupyter._version import __version__
from codefy_jupyter.core.workers.session import CLOSE_HELLO_TOO_LARGE
from codefy_jupyter.wire import hello_limits as hl
from codefy_jupyter.wire import protocol as wp
from codefy_jupyter.wire.compact_json import dumps

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import request_cost  # noqa: E402  (the largest hello, shared with the benchmark)

from test_server_runs import call
from test_worker_placement_e2e import until_state
from test_worker_handlers import (  # noqa: F401 (fixtures)
    RawAgent, _close_agents, catalog, enroll, server_token,
)
from codefy_jupyter.server.worker_handlers import HELLO_TIMEOUT_SETTING


@pytest.fixture
def jp_server_config(tmp_path, request):
    """As test_worker_handlers', with a generous hello deadline: sending the largest hello (2 MiB)
    beside busy cores can take longer than the 1 s that file tests the deadline with."""
    codefy = {"data_dir": str(tmp_path / "codefy")}
    codefy.update(getattr(request, "param", {}))
    return {"ServerApp": {"jpserver_extensions": {"codefy_jupyter": True},
                          "tornado_settings": {HELLO_TIMEOUT_SETTING: 60.0}},
            "CodefyApp": codefy}


async def largest_hello(jp_fetch, name: str, box: int) -> wp.Hello:
    """A hello at the bounds that show in GET workers: every device, every node type (all of them
    the server's and as many more as fit, listed as extra), the longest version and platform; the
    same one benchmarks/request_cost.py measures the listing with."""
    return request_cost.largest_hello(name, box, await catalog(jp_fetch))


async def connect(jp_http_port, jp_base_url, token: str) -> RawAgent:
    return await RawAgent.connect(jp_http_port, jp_base_url, token=token)


async def test_a_hello_listing_50000_devices_is_refused_naming_the_field(jp_fetch, jp_http_port, jp_base_url,
                                                                        server_token):
    token = await enroll(jp_fetch, "big-box")
    hello = wp.to_dict(wp.Hello(name="big-box", version=__version__, protocol_version=wp.PROTOCOL_VERSION))
    # 50,000 devices as short as they come (1.3 MB): refused for their number.
    hello["devices"] = [{"device": f"cuda:{i}"} for i in range(50_000)]
    agent = await connect(jp_http_port, jp_base_url, token)
    await agent.send_raw(json.dumps(hello))
    reject = await agent.expect(wp.Reject)
    assert reject.code == "too_large" and reject.message == "hello.devices: 50000 devices, at most 256"
    assert reject.params == {"path": "hello.devices", "got": 50_000, "limit": hl.HELLO_MAX_DEVICES}
    assert await agent.closed() == CLOSE_HELLO_TOO_LARGE
    assert agent.conn.close_reason == "hello.devices: 50000 devices, at most 256"
    # With names and UUIDs as in the report (3.6 MB): refused for its size, before it is parsed.
    hello["devices"] = [{"device": f"cuda:{i}", "name": "NVIDIA H100 80GB HBM3", "uuid": f"GPU-{i:08d}"}
                        for i in range(50_000)]
    text = json.dumps(hello)
    agent = await connect(jp_http_port, jp_base_url, token)
    await agent.send_raw(text)
    reject = await agent.expect(wp.Reject)
    size = len(text.encode())
    assert reject.code == "too_large" and reject.message == f"hello: {size} bytes, at most {hl.HELLO_MAX_BYTES}"
    assert await agent.closed() == CLOSE_HELLO_TOO_LARGE
    # Nothing of either was kept: the enrolled worker is still offline, with no devices.
    code, listing = await call(jp_fetch, "api", "workers")
    [box] = [w for w in listing["workers"] if w["name"] == "big-box"]
    assert box["state"] == "offline" and box["devices"] == []
    # The same worker with a hello within the bounds is welcomed.
    agent = await connect(jp_http_port, jp_base_url, token)
    await agent.send(await largest_hello(jp_fetch, "big-box", 0))
    assert (await agent.expect(wp.Welcome)).name == "big-box"


async def test_get_workers_with_the_largest_inventories_keeps_the_loop_answering(
        jp_fetch, jp_http_port, jp_base_url, server_token):
    agents = []
    for box in range(2):
        name = f"big-box-{box}"
        agent = await connect(jp_http_port, jp_base_url, await enroll(jp_fetch, name))
        await agent.send(await largest_hello(jp_fetch, name, box))
        welcome = await agent.expect(wp.Welcome)
        assert welcome.status == "degraded" and welcome.missing_types == []
        extra = len(welcome.extra_types)
        agents.append(agent)

    code, listing = await call(jp_fetch, "api", "workers")
    assert code == 200
    boxes = [w for w in listing["workers"] if w["name"].startswith("big-box-")]
    assert [len(w["devices"]) for w in boxes] == [hl.HELLO_MAX_DEVICES] * 2
    # Every device with its slot, and the CPU (implied: one slot more).
    assert [len(w["slots"]) for w in boxes] == [hl.HELLO_MAX_DEVICES + 1] * 2
    assert all(d["slots"]["limit"] >= 1 for w in boxes for d in w["devices"])
    assert [w["extra_types_count"] for w in boxes] == [extra] * 2 and extra > hl.HELLO_MAX_NODE_TYPES - 100
    assert all(len(w["extra_types"]) <= 100 for w in boxes)

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    reads = 0
    sizes: set[int] = set()

    async def read_workers() -> None:  # as the Workers panel would, only without a pause
        nonlocal reads
        while not stop.is_set():
            response = await jp_fetch("codefy", "api", "workers")  # not parsed: this loop is the server's too
            assert response.code == 200
            sizes.add(len(response.body))
            reads += 1

    pings = 0

    async def ping() -> None:  # a small REST read beside them, answered between the listings
        nonlocal pings
        while not stop.is_set():
            code, _ = await call(jp_fetch, "api", "runs", limit=1)
            assert code == 200
            pings += 1
            await asyncio.sleep(0.01)

    tasks = [asyncio.ensure_future(t()) for t in (read_workers, ping)]
    deadline = loop.time() + 240  # a generous deadline: the old code took 23 s per listing
    while (reads < 40 or pings < 40) and loop.time() < deadline and not any(t.done() for t in tasks):
        await asyncio.sleep(0.05)
    stop.set()
    await asyncio.gather(*tasks)
    assert reads >= 40 and pings >= 40, (reads, pings)
    # What one listing costs is bounded by the hello's bounds: two of the largest workers answer
    # well under a megabyte each (the 50,000-device hello answered 13.5 MB). How long the loop
    # waits meanwhile is a measurement (docs/performance.md, "What one request costs the others").
    assert all(200_000 < size < 2 * 1024 * 1024 for size in sizes), sorted(sizes)

    # Offline, the workers keep their (bounded) inventory and the listing stays as cheap.
    for agent in agents:
        agent.close()
    for box in range(2):
        worker = await until_state(jp_fetch, f"big-box-{box}", "disconnected")
        assert len(worker["devices"]) == hl.HELLO_MAX_DEVICES
