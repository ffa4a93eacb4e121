"""Placement on real worker agents: real `codefy agent start` subprocesses on loopback against a real
control plane, each with a declared device inventory (cuda cards with NVML UUIDs), as the server
itself may have one. A named worker, `any` (workers first in name order, this server last, never a
renumbered CUDA set here), device sets, queue keys, every waiting reason with its code and params,
the immediate refusals, and cards that this server and a worker on the same machine share."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from test_server_runs import SMALL, all_events, call, sleepy, wait_status
from test_workers_e2e import (  # noqa: F401  (fixtures)
    AgentProcess, agents, control, naps, pack_env, server_token, until_connected, worker_state,
)

pytestmark = pytest.mark.slow

BOX_CARDS = [{"key": "cuda:0", "name": "Box A", "uuid": "GPU-box-aaaa", "memory_total_mib": 8192},
             {"key": "cuda:1", "name": "Box B", "uuid": "GPU-box-bbbb", "memory_total_mib": 8192}]
SERVER_CARDS = [{"key": "cuda:0", "name": "Server A", "uuid": "GPU-srv-0000"},
                {"key": "cuda:1", "name": "Server B", "uuid": "GPU-srv-1111"}]


def write_inventory(path: Path, cards: list[dict[str, Any]]) -> Path:
    path.write_text(json.dumps({"devices": cards}))
    return path


@pytest.fixture
def jp_server_config(tmp_path, request, monkeypatch):
    """`server_cards`: this server's declared inventory; `machine_id`: a digest this server reports
    as its machine's (the agents report the real one: a loopback peer on another machine, as through
    an SSH tunnel); any other key is a CodefyApp setting."""
    codefy: dict[str, Any] = {"data_dir": str(tmp_path / "codefy")}
    values = dict(getattr(request, "param", {}))
    cards = values.pop("server_cards", None)
    if cards is not None:
        codefy["device_inventory"] = str(write_inventory(tmp_path / "server-inventory.json", cards))
    machine_id = values.pop("machine_id", None)
    if machine_id is not None:
        # The machine's identity is the edge here: this process plays a server on another machine.
        monkeypatch.setattr("codefy_jupyter.server.app.machine_id_digest", lambda: machine_id)
    codefy.update(values)
    return {"ServerApp": {"jpserver_extensions": {"codefy_jupyter": True}}, "CodefyApp": codefy}


def server(**values: Any):
    return pytest.mark.parametrize("jp_server_config", [values], indirect=True,
                                   ids=[",".join(sorted(values)) or "plain"])


def start_agent(agents, tmp_path: Path, name: str, cards: list[dict[str, Any]],
                env: dict[str, str] | None = None) -> AgentProcess:
    inventory = write_inventory(tmp_path / f"inventory-{name}-{len(cards)}.json", cards)
    return agents(name=name, env={**(env or {}), "CODEFY_DEVICE_INVENTORY": str(inventory)})


async def post_run(jp_fetch, graph: dict[str, Any], **options: Any) -> tuple[int, dict[str, Any]]:
    return await call(jp_fetch, "api", "runs", method="POST", body={"graph": graph, "options": options})


async def queued(jp_fetch, graph: dict[str, Any], **options: Any) -> dict[str, Any]:
    code, run = await post_run(jp_fetch, graph, **options)
    assert code == 201, run
    return run


async def reason_of(jp_fetch, run_id: str) -> dict[str, Any] | None:
    code, row = await call(jp_fetch, "api", "runs", run_id)
    assert code == 200 and row["status"] == "queued", row
    return row["queue_reason"]


async def until_reason(jp_fetch, run_id: str, code: str, timeout: float = 90.0) -> dict[str, Any]:
    """A worker's change reaches the queue a moment after the route answers: await the reason."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        reason = await reason_of(jp_fetch, run_id)
        if reason is not None and reason["code"] == code:
            return reason
        assert asyncio.get_running_loop().time() < deadline, f"reason stayed {reason}"
        await asyncio.sleep(0.05)


async def until_state(jp_fetch, name: str, state: str, timeout: float = 90.0) -> dict[str, Any]:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        worker = await worker_state(jp_fetch, name)
        if worker is not None and worker["state"] == state:
            return worker
        assert asyncio.get_running_loop().time() < deadline, f"worker {name} stayed {worker and worker['state']}"
        await asyncio.sleep(0.05)


async def refused(jp_fetch, graph: dict[str, Any], **options: Any) -> dict[str, Any]:
    code, body = await post_run(jp_fetch, graph, **options)
    assert code == 400, body
    return body["error"]


async def succeeded(jp_fetch, run_id: str) -> dict[str, Any]:
    done = await wait_status(jp_fetch, run_id, {"succeeded", "failed", "cancelled", "interrupted"}, timeout=120)
    assert done["status"] == "succeeded", done
    return done


def slot(worker_or_listing: dict[str, Any], name: str) -> dict[str, Any]:
    rows = worker_or_listing["slots"] if "slots" in worker_or_listing else worker_or_listing["local"]
    return next(s for s in rows if s["slot"] == name)


# -- a named worker, `any`, device sets, queue keys, draining ----------------------------------------

@server(server_cards=SERVER_CARDS)
async def test_named_worker_any_and_device_sets_with_their_queue_keys(jp_fetch, agents, pack_env, tmp_path):
    # No worker yet: a worker that never showed up is refused, and so is an `any` run that only this
    # server could take by renumbering its cards (a worker's run sees its cards from cuda:0; this
    # server's process does not).
    err = await refused(jp_fetch, SMALL, target={"worker": "box"})
    assert err["code"] == "worker_unknown" and err["params"] == {"field": "options.target.worker", "worker": "box"}
    err = await refused(jp_fetch, SMALL, device="cuda:1", target={"worker": "any"})
    assert err["code"] == "device_not_offered" and "only as [cuda:0]" in err["message"]
    assert err["params"] == {"field": "options.device", "worker": "any", "devices": ["cuda:1"]}
    err = await refused(jp_fetch, SMALL, target={"worker": "any", "devices": ["cuda:0", "cuda:1"]})
    assert err["code"] == "device_not_offered" and err["params"]["field"] == "options.target.devices"

    box = start_agent(agents, tmp_path, "box", BOX_CARDS, pack_env)
    worker = await until_connected(jp_fetch, box)
    assert worker["status"] == "online" and worker["same_host"] is True
    assert [(d["device"], d.get("uuid")) for d in worker["devices"]] == [
        ("cpu", None), ("cuda:0", "GPU-box-aaaa"), ("cuda:1", "GPU-box-bbbb")]

    # Refused at once: a device the worker does not offer, the interactive lane.
    err = await refused(jp_fetch, SMALL, device="cuda:2", target={"worker": "box"})
    assert err["code"] == "device_not_offered" and "worker box does not offer cuda:2" in err["message"]
    assert err["params"] == {"field": "options.device", "worker": "box", "devices": ["cuda:2"],
                             "offered": ["cpu", "cuda:0", "cuda:1"]}
    err = await refused(jp_fetch, SMALL, lane="interactive", session="s1", target={"worker": "box"})
    assert err["code"] == "worker_interactive" and err["params"]["field"] == "options.lane"
    err = await refused(jp_fetch, SMALL, lane="interactive", session="s1", target={"worker": "any"})
    assert err["code"] == "worker_interactive"

    # A device set on the named worker: its queue is its first device's, the run's process sees the
    # cards in the order asked for.
    environ = {"nodes": [{"id": "e", "type": "Environ"}], "edges": []}
    pair = await queued(jp_fetch, environ, target={"worker": "box", "devices": ["cuda:1", "cuda:0"]})
    assert pair["queue_key"] == "box/cuda:1" and pair["devices"] == ["cuda:1", "cuda:0"]
    done = await succeeded(jp_fetch, pair["id"])
    assert done["worker_id"] == "box" and done["devices"] == ["cuda:1", "cuda:0"]
    seen = next(e["payload"]["params"] for e in await all_events(jp_fetch, pair["id"])
                if e["type"] == "run_warning" and e["payload"]["code"] == "environ")
    assert seen["CUDA_VISIBLE_DEVICES"] == "1,0" and seen["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"

    # `any`: a connected worker before this server; its queue is `any/<device>`.
    anywhere = await queued(jp_fetch, SMALL, target={"worker": "any"})
    assert anywhere["queue_key"] == "any/cpu"
    done = await succeeded(jp_fetch, anywhere["id"])
    assert done["worker_id"] == "box" and done["queue_key"] == "box/cpu"  # where it went
    card = await queued(jp_fetch, SMALL, device="cuda:1", target={"worker": "any"})
    assert card["queue_key"] == "any/cuda:1"
    done = await succeeded(jp_fetch, card["id"])
    assert done["worker_id"] == "box" and done["devices"] == ["cuda:1"]
    events = await all_events(jp_fetch, card["id"])
    assert events[0]["type"] == "execution_start" and events[0]["payload"]["queue_key"] == "box/cuda:1"

    # Draining: the named worker's runs wait with its reason; `any` skips it and this server takes
    # what it may (cuda:0), never a card it would renumber (cuda:1).
    code, view = await call(jp_fetch, "api", "workers", "box", "drain", method="POST")
    assert code == 200 and view["state"] == "draining" and view["draining"] is True
    named = await queued(jp_fetch, SMALL, target={"worker": "box"})
    assert named["queue_key"] == "box/cpu"
    reason = await until_reason(jp_fetch, named["id"], "worker_draining")
    assert reason == {"code": "worker_draining", "message": "worker box is draining", "params": {"worker": "box"}}
    renumbered = await queued(jp_fetch, SMALL, device="cuda:1", target={"worker": "any"})
    reason = await until_reason(jp_fetch, renumbered["id"], "waiting_for_offer")
    assert reason == {"code": "waiting_for_offer", "message": "waiting for a worker that offers cuda:1: box is draining",
                      "params": {"devices": ["cuda:1"], "worker": "any", "draining": ["box"]}}
    here = await queued(jp_fetch, SMALL, device="cuda:0", target={"worker": "any"})
    done = await succeeded(jp_fetch, here["id"])
    assert done["worker_id"] is None and done["devices"] == ["cuda:0"]  # this server, last in line
    events = await all_events(jp_fetch, here["id"])
    assert events[0]["payload"]["queue_key"] == "any/cuda:0"

    code, view = await call(jp_fetch, "api", "workers", "box", "undrain", method="POST")
    assert code == 200 and view["state"] == "connected"
    assert (await succeeded(jp_fetch, named["id"]))["worker_id"] == "box"
    done = await succeeded(jp_fetch, renumbered["id"])
    assert done["worker_id"] == "box" and done["devices"] == ["cuda:1"]


async def test_runs_wait_for_a_stopped_worker_and_for_the_devices_it_offers(jp_fetch, agents, tmp_path):
    box = start_agent(agents, tmp_path, "box", BOX_CARDS)
    await until_connected(jp_fetch, box)
    box.proc.send_signal(signal.SIGTERM)  # `codefy agent stop` does the same
    assert await box.exited() == 0
    worker = await until_state(jp_fetch, "box", "disconnected")
    assert worker["disconnect_reason"]["code"] == "connection_closed"

    # A known worker that is away: its runs wait for it, a device only it offers waits for an offer.
    plain = await queued(jp_fetch, SMALL, target={"worker": "box"})
    card = await queued(jp_fetch, SMALL, device="cuda:1", target={"worker": "box"})
    anywhere = await queued(jp_fetch, SMALL, device="cuda:1", target={"worker": "any"})
    for run in (plain, card):
        assert await reason_of(jp_fetch, run["id"]) == {
            "code": "worker_disconnected", "message": "waiting for worker box to reconnect", "params": {"worker": "box"}}
    assert await reason_of(jp_fetch, anywhere["id"]) == {
        "code": "waiting_for_offer", "message": "waiting for a worker that offers cuda:1",
        "params": {"devices": ["cuda:1"], "worker": "any"}}
    # Still refused at once: what its last report lacks.
    err = await refused(jp_fetch, SMALL, device="cuda:7", target={"worker": "box"})
    assert err["code"] == "device_not_offered" and err["params"]["offered"] == ["cpu", "cuda:0", "cuda:1"]

    # Back with one card only: the cpu run goes, the cuda:1 runs wait for an offer.
    again = start_agent(agents, tmp_path, "box", BOX_CARDS[:1])
    await until_connected(jp_fetch, again)
    assert (await succeeded(jp_fetch, plain["id"]))["worker_id"] == "box"
    assert await until_reason(jp_fetch, card["id"], "waiting_for_offer") == {
        "code": "waiting_for_offer", "message": "waiting for worker box to offer cuda:1",
        "params": {"devices": ["cuda:1"], "worker": "box"}}
    assert await reason_of(jp_fetch, anywhere["id"]) == {
        "code": "waiting_for_offer", "message": "waiting for a worker that offers cuda:1",
        "params": {"devices": ["cuda:1"], "worker": "any"}}
    for run in (card, anywhere):
        code, _ = await call(jp_fetch, "api", "runs", run["id"], "cancel", method="POST")
        assert code == 200
        assert (await wait_status(jp_fetch, run["id"], {"cancelled"}))["status"] == "cancelled"


async def test_any_takes_the_first_worker_by_name_with_room(jp_fetch, agents, tmp_path):
    # Started in the other order: the order is by name, not by connection.
    beta = start_agent(agents, tmp_path, "beta", BOX_CARDS[:1])
    alpha = start_agent(agents, tmp_path, "alpha", [{**BOX_CARDS[0], "uuid": "GPU-alpha-0"}])
    await until_connected(jp_fetch, beta)
    await until_connected(jp_fetch, alpha)
    first = await queued(jp_fetch, naps(1, 60), device="cuda:0", target={"worker": "any"})
    second = await queued(jp_fetch, naps(1, 60), device="cuda:0", target={"worker": "any"})
    third = await queued(jp_fetch, SMALL, device="cuda:0", target={"worker": "any"})
    assert (await wait_status(jp_fetch, first["id"], {"running"}))["worker_id"] == "alpha"
    assert (await wait_status(jp_fetch, second["id"], {"running"}))["worker_id"] == "beta"
    # Both cards taken (and this server has none): waiting its turn, no other reason.
    code, row = await call(jp_fetch, "api", "runs", third["id"])
    assert row["status"] == "queued" and row["queue_reason"] is None and row["queue_position"] == 1
    await call(jp_fetch, "api", "runs", second["id"], "cancel", method="POST")
    assert (await succeeded(jp_fetch, third["id"]))["worker_id"] == "beta"
    await call(jp_fetch, "api", "runs", first["id"], "cancel", method="POST")
    assert (await wait_status(jp_fetch, first["id"], {"cancelled"}))["status"] == "cancelled"


# -- one physical card, two providers ------------------------------------------------------------------

SHARED = "GPU-shared-0001"


@server(server_cards=[{"key": "cuda:0", "name": "The card", "uuid": SHARED}],
        run_queue_max_concurrent="cuda:0=2,box/cuda:1=1")
async def test_a_card_this_server_shares_with_a_worker_on_its_machine_takes_one_run(jp_fetch, agents, tmp_path):
    # The agent numbers the shared card cuda:1; it also has a card of its own.
    box = start_agent(agents, tmp_path, "box", [{"key": "cuda:0", "uuid": "GPU-box-own"},
                                                {"key": "cuda:1", "uuid": SHARED}])
    worker = await until_connected(jp_fetch, box)
    assert worker["same_host"] is True  # a loopback peer with this machine's id
    code, listing = await call(jp_fetch, "api", "workers")
    (worker,) = listing["workers"]
    # The smallest limit of the card's providers applies (box/cuda:1=1 under cuda:0=2).
    assert slot(listing, "cuda:0") == {"slot": "cuda:0", "device": "cuda:0", "uuid": SHARED,
                                       "slots": {"limit": 1, "taken": 0, "limited_by": "box/cuda:1"},
                                       "same_card": ["box/cuda:1"]}
    assert slot(worker, "box/cuda:1") == {"slot": "box/cuda:1", "device": "cuda:1", "uuid": SHARED,
                                          "slots": {"limit": 1, "taken": 0, "limited_by": "box/cuda:1"},
                                          "same_card": ["cuda:0"], "shared_with": "local"}
    assert slot(worker, "box/cuda:0") == {"slot": "box/cuda:0", "device": "cuda:0", "uuid": "GPU-box-own",
                                          "slots": {"limit": 1, "taken": 0, "limited_by": "box/cuda:0"},
                                          "same_card": []}
    # The same machine's CPU is this server's CPU.
    cpu = slot(worker, "box/cpu")
    assert cpu["same_card"] == ["cpu"] and cpu["shared_with"] == "local" and cpu["slots"]["limited_by"] == "cpu"
    # Each reported device carries its slot's figures.
    shared = next(d for d in worker["devices"] if d["device"] == "cuda:1")
    assert shared["uuid"] == SHARED and shared["shared_with"] == "local" and shared["same_card"] == ["cuda:0"]
    assert shared["slots"] == {"limit": 1, "taken": 0, "limited_by": "box/cuda:1"}

    # A run here holds the card: the worker's run for the same card waits its turn.
    here = await queued(jp_fetch, sleepy(60), device="cuda:0")
    await wait_status(jp_fetch, here["id"], {"running"})
    there = await queued(jp_fetch, SMALL, target={"worker": "box", "devices": ["cuda:1"]})
    assert there["queue_key"] == "box/cuda:1"
    code, row = await call(jp_fetch, "api", "runs", there["id"])
    assert row["status"] == "queued" and row["queue_position"] == 1 and row["queue_reason"] is None
    code, listing = await call(jp_fetch, "api", "workers")
    assert slot(listing["workers"][0], "box/cuda:1")["slots"]["taken"] == 1
    own = await queued(jp_fetch, SMALL, target={"worker": "box", "devices": ["cuda:0"]})  # its other card is free
    assert (await succeeded(jp_fetch, own["id"]))["devices"] == ["cuda:0"]
    code, row = await call(jp_fetch, "api", "runs", there["id"])
    assert row["status"] == "queued"
    await call(jp_fetch, "api", "runs", here["id"], "cancel", method="POST")
    stopped = await wait_status(jp_fetch, here["id"], {"cancelled"})
    done = await succeeded(jp_fetch, there["id"])
    assert done["worker_id"] == "box" and done["started_at"] >= stopped["finished_at"] - 0.05

    # And the other way round: a worker run on the card holds it against a run here.
    there = await queued(jp_fetch, naps(1, 60), target={"worker": "box", "devices": ["cuda:1"]})
    await wait_status(jp_fetch, there["id"], {"running"})
    here = await queued(jp_fetch, SMALL, device="cuda:0")
    code, row = await call(jp_fetch, "api", "runs", here["id"])
    assert row["status"] == "queued" and row["queue_position"] == 1
    code, listing = await call(jp_fetch, "api", "workers")
    assert slot(listing, "cuda:0")["slots"]["taken"] == 1
    await call(jp_fetch, "api", "runs", there["id"], "cancel", method="POST")
    stopped = await wait_status(jp_fetch, there["id"], {"cancelled", "failed", "interrupted"}, timeout=120)
    assert stopped["status"] == "cancelled"
    done = await succeeded(jp_fetch, here["id"])
    assert done["worker_id"] is None and done["started_at"] >= stopped["finished_at"] - 0.05


@server(server_cards=[{"key": "cuda:0", "name": "The card", "uuid": SHARED}], machine_id="0" * 64)
async def test_a_loopback_agent_reporting_another_machine_is_not_on_this_machine(jp_fetch, agents, tmp_path):
    # As through an SSH reverse tunnel: a loopback peer, another machine id.
    box = start_agent(agents, tmp_path, "box", [{"key": "cuda:0", "uuid": SHARED}])
    worker = await until_connected(jp_fetch, box)
    assert worker["same_host"] is False
    cpu = slot(worker, "box/cpu")
    assert cpu["same_card"] == [] and "shared_with" not in cpu and cpu["slots"]["limited_by"] == "box/cpu"
    # A card is known by its UUID wherever it is reported: still one card.
    card = slot(worker, "box/cuda:0")
    assert card["same_card"] == ["cuda:0"] and card["slots"]["limit"] == 1
    here = await queued(jp_fetch, sleepy(60), device="cuda:0")
    await wait_status(jp_fetch, here["id"], {"running"})
    there = await queued(jp_fetch, SMALL, target={"worker": "box", "devices": ["cuda:0"]})
    code, row = await call(jp_fetch, "api", "runs", there["id"])
    assert row["status"] == "queued" and row["queue_position"] == 1
    # Its CPU is its own: a CPU run there does not count against this server's CPU.
    cpu_runs = [await queued(jp_fetch, sleepy(60)) for _ in range(2)]
    for run in cpu_runs:
        await wait_status(jp_fetch, run["id"], {"running"})
    on_box = await queued(jp_fetch, SMALL, target={"worker": "box"})
    assert (await succeeded(jp_fetch, on_box["id"]))["worker_id"] == "box"
    for run in (*cpu_runs, here, there):
        await call(jp_fetch, "api", "runs", run["id"], "cancel", method="POST")


# -- a worker whose node catalog differs ---------------------------------------------------------------

AGENT_ONLY_PACK = '''
from codefy_jupyter.engine import node


@node("OnlyOnAgent", outputs={"ok": "bool"}, cacheable=False)
def only_on_agent(ctx):
    return {"ok": True}
'''


@pytest.fixture
def degraded_env(tmp_path):
    """This server gets the test node pack (tests/unit/agent_nodes.py) that the agent lacks; the agent
    gets a pack of its own, installed as a third-party pack would be, that this server lacks."""
    import importlib

    from codefy_jupyter.engine import default_registry

    registry = default_registry()
    before = dict(registry._defs)
    import agent_nodes

    importlib.reload(agent_nodes)
    site = tmp_path / "agent-site"
    info = site / "codefy_agent_only_nodes-0.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: codefy-agent-only-nodes\nVersion: 0.0\n")
    (info / "entry_points.txt").write_text("[codefy_jupyter.nodes]\nagent_only = agent_only_nodes\n")
    (site / "agent_only_nodes.py").write_text(AGENT_ONLY_PACK)
    yield {"PYTHONPATH": str(site)}
    registry._defs.clear()
    registry._defs.update(before)


async def test_a_degraded_worker_is_listed_refuses_graphs_it_cannot_run_and_any_skips_it(
        jp_fetch, agents, degraded_env, tmp_path, monkeypatch):
    presets = tmp_path / "presets"
    presets.mkdir()
    (presets / "talker.json").write_text(json.dumps({
        "nodes": [{"id": "s", "type": "Say", "params": {"text": "from a preset"}}], "edges": [],
        "inputs": {}, "outputs": {"value": {"node": "s", "port": "value"}}}))
    monkeypatch.setenv("CODEFY_PRESETS_DIR", str(presets))

    box = start_agent(agents, tmp_path, "box", BOX_CARDS, degraded_env)
    worker = await until_connected(jp_fetch, box)
    assert worker["status"] == "degraded"
    assert worker["missing_types"] == ["Chatter", "Environ", "IgnoreTerm", "Say", "Segfault", "Stubborn", "Threads"]
    assert worker["extra_types"] == ["OnlyOnAgent"]
    assert "missing node types: Chatter, Environ, IgnoreTerm, Say, Segfault, Stubborn, Threads" in box.output()

    # A graph with a type the worker lacks is refused at once, naming the types, wherever they hide.
    say = {"id": "say", "type": "Say", "params": {"text": "hi"}}
    inner = {"nodes": [say], "edges": [], "inputs": {}, "outputs": {"value": {"node": "say", "port": "value"}}}
    graphs = {
        "top level": {"nodes": [say, {"id": "e", "type": "Environ"}], "edges": []},
        "subgraph": {"nodes": [{"id": "block", "type": "Subgraph", "params": {"graph": inner}}], "edges": []},
        "preset": {"nodes": [{"id": "p", "type": "Preset", "params": {"preset": "talker"}}], "edges": []},
    }
    for where, graph in graphs.items():
        err = await refused(jp_fetch, graph, target={"worker": "box"})
        missing = ["Environ", "Say"] if where == "top level" else ["Say"]
        assert err["code"] == "worker_missing_node_types", where
        assert err["params"] == {"field": "options.target.worker", "worker": "box", "missing_types": missing}, where
        assert err["message"] == ("options.target.worker: worker box lacks node types this graph uses: "
                                  + ", ".join(missing)), where
    # A type only the worker has is unknown here: the graph itself is refused.
    code, body = await post_run(jp_fetch, {"nodes": [{"id": "o", "type": "OnlyOnAgent"}], "edges": []},
                                target={"worker": "box"})
    assert code == 400 and body["error"]["code"] == "invalid_graph" and "OnlyOnAgent" in body["error"]["message"]

    # What it can run, it runs when named.
    named = await queued(jp_fetch, SMALL, target={"worker": "box"})
    assert (await succeeded(jp_fetch, named["id"]))["worker_id"] == "box"
    # `any` never picks a degraded worker: this server takes it (the worker is free).
    anywhere = await queued(jp_fetch, SMALL, target={"worker": "any"})
    done = await succeeded(jp_fetch, anywhere["id"])
    assert done["worker_id"] is None
    # A card only the degraded worker offers: `any` waits for a worker that offers it.
    card = await queued(jp_fetch, SMALL, device="cuda:1", target={"worker": "any"})
    assert (await reason_of(jp_fetch, card["id"]))["code"] == "waiting_for_offer"
    await call(jp_fetch, "api", "runs", card["id"], "cancel", method="POST")


async def until_logged(caplog, test, count: int, timeout: float = 90.0) -> list[str]:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        found = [r.getMessage() for r in caplog.records if r.name == "codefy.workers" and test(r.getMessage())]
        if len(found) >= count:
            return found
        assert asyncio.get_running_loop().time() < deadline, f"logged {found}"
        await asyncio.sleep(0.05)


@server(server_cards=[{"key": "cuda:0", "name": "The card", "uuid": SHARED}], run_queue_max_concurrent="box/cuda:1=3")
async def test_each_connect_warns_of_a_lowered_override_and_a_card_without_a_uuid_is_logged_once(
        jp_fetch, agents, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="codefy.workers")
    box = start_agent(agents, tmp_path, "box", [{"key": "cuda:0", "name": "No id"}, {"key": "cuda:1", "uuid": SHARED}])
    await until_connected(jp_fetch, box)
    lowered = lambda m: "box/cuda:1=3 is lowered to 1: cuda:0 is the same physical device" in m  # noqa: E731
    await until_logged(caplog, lowered, 1)
    os.kill(box.proc.pid, signal.SIGUSR1)  # the agent drops its socket and dials again: a second connect
    await until_logged(caplog, lowered, 2)
    assert [r.levelno for r in caplog.records if lowered(r.getMessage())] == [logging.WARNING] * 2
    no_uuid = [m for m in await until_logged(caplog, lambda m: "cuda:0 reports no UUID" in m, 1)]
    assert no_uuid == ["codefy: worker box's cuda:0 reports no UUID: it keeps a slot of its own and shares no "
                       "limit with another provider of the same physical card"]  # once, over both connects
    code, listing = await call(jp_fetch, "api", "workers")
    assert slot(listing["workers"][0], "box/cuda:0")["same_card"] == []


# -- reservations on a worker's cards, one-shot workers -------------------------------------------------

async def test_a_device_set_on_a_worker_reserves_its_cards_and_says_what_it_waits_for(jp_fetch, agents, tmp_path):
    box = start_agent(agents, tmp_path, "box", [*BOX_CARDS, {"key": "cuda:2", "uuid": "GPU-box-cccc"}])
    await until_connected(jp_fetch, box)
    busy = await queued(jp_fetch, naps(1, 60), target={"worker": "box", "devices": ["cuda:1"]})
    await wait_status(jp_fetch, busy["id"], {"running"})
    pair = await queued(jp_fetch, SMALL, target={"worker": "box", "devices": ["cuda:0", "cuda:1"]})
    assert pair["queue_key"] == "box/cuda:0"
    assert await reason_of(jp_fetch, pair["id"]) == {
        "code": "waiting_for_set_devices", "params": {"devices": ["box/cuda:1"]},
        "message": "waiting for box/cuda:1: a device-set run starts when every device is free"}
    # box/cuda:0 is free but held for the set run that waits ahead (a run behind it in its own queue,
    # box/cuda:0, would simply wait its turn).
    later = await queued(jp_fetch, SMALL, target={"worker": "box", "devices": ["cuda:2", "cuda:0"]})
    assert await reason_of(jp_fetch, later["id"]) == {
        "code": "device_reserved", "params": {"device": "box/cuda:0", "run_id": pair["id"], "name": None},
        # unnamed: the id as every surface shows it (12 characters, a prefix every reader accepts)
        "message": f"box/cuda:0 is reserved for run {pair['id'][:12]}, which waits ahead of this run"}
    await call(jp_fetch, "api", "runs", busy["id"], "cancel", method="POST")
    stopped = await wait_status(jp_fetch, busy["id"], {"cancelled"}, timeout=120)
    done_pair = await succeeded(jp_fetch, pair["id"])
    done_later = await succeeded(jp_fetch, later["id"])
    assert done_pair["started_at"] >= stopped["finished_at"] - 0.05
    assert done_later["started_at"] >= done_pair["finished_at"] - 0.05


async def test_one_shot_workers_say_why_a_run_naming_them_waits(jp_fetch, agents, tmp_path):
    mine = await queued(jp_fetch, naps(1, 60), target={"pool": "one-shot"})
    assert mine["queue_key"] == "pool:one-shot/cpu"
    assert (await reason_of(jp_fetch, mine["id"]))["code"] == "one_shot_pool"
    job = agents("--one-shot", "--run-id", mine["id"], name="job")
    await wait_status(jp_fetch, mine["id"], {"running"}, timeout=120)
    other = await queued(jp_fetch, SMALL, target={"worker": "job"})
    assert await reason_of(jp_fetch, other["id"]) == {
        "code": "one_shot_run_id", "params": {"worker": "job", "run_id": mine["id"], "name": None},
        "message": f"one-shot worker job was started for run {mine['id'][:12]}"}  # the id as surfaces show it

    solo = agents("--one-shot", name="solo")
    await until_connected(jp_fetch, solo)
    taken = await queued(jp_fetch, naps(1, 60), target={"pool": "one-shot"})
    assert (await wait_status(jp_fetch, taken["id"], {"running"}, timeout=120))["worker_id"] == "solo"
    second = await queued(jp_fetch, SMALL, target={"worker": "solo"})
    assert await reason_of(jp_fetch, second["id"]) == {
        "code": "one_shot_taken", "params": {"worker": "solo"},
        "message": "one-shot worker solo has already taken its run"}

    # Its run over, the one-shot agent leaves: a run naming it waits for an agent of that name to start
    # (one_shot_start: a one-shot agent never reconnects, so "waiting to reconnect" would mislead).
    await call(jp_fetch, "api", "runs", mine["id"], "cancel", method="POST")
    assert await job.exited() == 0
    assert (await until_reason(jp_fetch, other["id"], "one_shot_start"))["params"] == {"worker": "job"}
    for run in (taken, other, second):
        await call(jp_fetch, "api", "runs", run["id"], "cancel", method="POST")


async def test_a_queued_run_fails_naming_the_types_when_its_worker_comes_back_without_them(
        jp_fetch, agents, pack_env, tmp_path):
    box = start_agent(agents, tmp_path, "box", BOX_CARDS, pack_env)
    assert (await until_connected(jp_fetch, box))["status"] == "online"
    box.proc.send_signal(signal.SIGTERM)
    assert await box.exited() == 0
    await until_state(jp_fetch, "box", "disconnected")
    # Accepted: the worker had the pack when it was last seen.
    run = await queued(jp_fetch, {"nodes": [{"id": "say", "type": "Say"}], "edges": []}, target={"worker": "box"})
    assert (await reason_of(jp_fetch, run["id"]))["code"] == "worker_disconnected"
    again = start_agent(agents, tmp_path, "box", BOX_CARDS)  # without the pack now
    assert (await until_connected(jp_fetch, again))["status"] == "degraded"
    done = await wait_status(jp_fetch, run["id"], {"failed", "succeeded"}, timeout=120)
    assert done["status"] == "failed"
    assert done["error"]["code"] == "worker_missing_node_types" and done["error"]["params"]["missing_types"] == ["Say"]
    events = await all_events(jp_fetch, run["id"])
    assert events[-1]["type"] == "execution_error"
    assert events[-1]["payload"]["error"]["message"] == "worker box lacks node types this graph uses: Say"
