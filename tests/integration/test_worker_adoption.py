"""Adoption: a real headless control plane (`codefy start`) is killed with SIGKILL while a run executes
on a worker, and started again on the same store (the SQLite file, and a database on a real
PostgreSQL server through CODEFY_STORE_URL: `store_at`). The run keeps its slot, waits disconnected,
and continues in the same log once the worker (a raw protocol client here) is back; a worker that
does not come back within the grace leaves its run interrupted (worker_lost_after_restart)."""

from __future__ import annotations

import os
import signal

import pytest
from tornado.httpclient import HTTPRequest
from tornado.websocket import websocket_connect

from codefy_jupyter._version import __version__
from codefy_jupyter.wire import protocol as wp

from test_headless import SMALL, Servers, all_events, api, free_port, wait_gone, wait_status
from test_worker_handlers import RawAgent, node_event

pytestmark = pytest.mark.slow


@pytest.fixture
def servers(tmp_path, request, store_at) -> Servers:
    s = Servers(tmp_path)
    target = store_at("codefy.sqlite")
    if isinstance(target, str):
        s.env["CODEFY_STORE_URL"] = target
        s.env["CODEFY_RUN_FILES_SHARED"] = "1"  # the one replica's run files count as shared
    request.addfinalizer(s.kill_leftovers)
    return s


@pytest.fixture(autouse=True)
def _close_agents():
    yield
    while RawAgent.opened:
        RawAgent.opened.pop().close()


async def hello(state, capabilities: list[str]) -> tuple[RawAgent, wp.Welcome]:
    """An agent on this machine, with the server's own token, saying hello as `box` with
    `capabilities`; the agent and the server's Welcome."""
    url = state["url"].replace("http://", "ws://") + "codefy/ws/worker"
    agent = RawAgent(await websocket_connect(HTTPRequest(url, headers={"Authorization": f"token {state['token']}"})))
    code, nodes = api(state, "GET", "nodes")
    assert code == 200
    await agent.send(wp.Hello(name="box", version=__version__, protocol_version=wp.PROTOCOL_VERSION,
                              catalog_hash=nodes["catalog"]["hash"], node_types=nodes["catalog"]["types"],
                              devices=[{"device": "cpu"}], capabilities=capabilities))
    return agent, await agent.expect(wp.Welcome)


async def connect(state) -> RawAgent:
    agent, _ = await hello(state, ["ack"])
    return agent


def kill_hard(servers: Servers, state) -> None:
    os.kill(state["pid"], signal.SIGKILL)
    wait_gone(state["pid"])


async def start_on_worker(state, agent: RawAgent, events: int) -> str:
    code, run = api(state, "POST", "runs", {"graph": SMALL, "options": {"target": {"worker": "box"}}})
    assert code == 201, run
    assign = await agent.expect(wp.Assign)
    rid = assign.run_id
    await agent.run_frame(wp.RunStarted(run_id=rid))
    for i in range(1, events + 1):
        await agent.run_frame(wp.Event(run_id=rid, event=node_event(f"n{i}", "done")))
    return rid


async def test_a_run_on_a_worker_is_adopted_after_a_hard_stop_and_finishes_in_the_same_log(servers):
    port = free_port()
    state = servers.start(port)
    agent = await connect(state)
    rid = await start_on_worker(state, agent, events=3)  # frames 1..4
    await agent.until_ack(rid, 4)
    await agent.run_frame(wp.Event(run_id=rid, event=node_event("n4", "done")))  # 5: perhaps recorded, not acked
    kill_hard(servers, state)
    await agent.closed()

    state = servers.start(port)
    run = wait_status(state, rid, {"disconnected"})
    assert run["worker_id"] == "box"
    code, listing = api(state, "GET", "workers")
    assert listing["workers"] == []  # an agent of the server's token: a placeholder, unlisted until it is back

    agent = await connect(state)
    code, listing = api(state, "GET", "workers")
    (box,) = listing["workers"]
    assert box["runs"] == [rid] and box["slots"][0]["slots"]["taken"] == 1  # the adopted run held its slot
    await agent.send(wp.RunAlive(runs={rid: 6}))
    await agent.run_frame(wp.Event(run_id=rid, event=node_event("n4", "done")), seq=5)
    await agent.run_frame(wp.Event(run_id=rid, event=node_event("n5", "done")), seq=6)
    await agent.run_frame(wp.RunFinished(run_id=rid, status="succeeded", executed=5), seq=7)
    done = wait_status(state, rid, {"succeeded", "failed", "interrupted"})
    assert done["status"] == "succeeded"
    events = all_events(state, rid)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert [e["payload"]["node_id"] for e in events if e["type"] == "node_status"] == ["n1", "n2", "n3", "n4", "n5"]
    warnings = [e["payload"]["code"] for e in events if e["type"] == "run_warning"]
    assert warnings == ["worker_adopted", "worker_reconnected"]
    assert [e["type"] for e in events].count("execution_start") == 1
    assert events[-1]["type"] == "execution_complete"
    await agent.until_ack(rid, 7)
    assert servers.stop().returncode == 0
    # The run lived where the setting said: the SQLite file exists only without a store_url.
    assert (servers.data_dir / "codefy.sqlite").exists() == ("CODEFY_STORE_URL" not in servers.env)


async def killed_with_a_run_on_its_worker(servers) -> tuple[int, str]:
    """A server killed hard while a run streamed on its worker, whose agent is gone too: (port, run id)."""
    port = free_port()
    state = servers.start(port)
    agent = await connect(state)
    rid = await start_on_worker(state, agent, events=1)
    await agent.until_ack(rid, 2)
    kill_hard(servers, state)
    agent.close()
    return port, rid


async def test_an_adopted_run_whose_worker_stays_away_ends_interrupted(servers):
    port, rid = await killed_with_a_run_on_its_worker(servers)
    servers.env["CODEFY_WORKER_RESUME_GRACE_S"] = "1"
    state = servers.start(port)
    done = wait_status(state, rid, {"interrupted", "succeeded", "failed"})
    assert done["status"] == "interrupted"
    assert done["execution_facts"]["error_reason"] == "worker_lost_after_restart"
    events = all_events(state, rid)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    last = events[-1]
    assert last["type"] == "execution_stopped" and last["payload"]["reason"]["code"] == "worker_lost_after_restart"
    assert last["payload"]["reason"]["params"]["reason"]["code"] == "no_reconnect_after_restart"
    code, listing = api(state, "GET", "workers")
    assert listing["workers"] == []  # a server-token agent is only a placeholder until it connects
    assert servers.stop().returncode == 0


async def test_a_graceful_stop_ends_an_adopted_run_whose_worker_is_not_back(servers):
    # Seed (execution architecture, disconnects): on a normal shutdown, adopted runs whose worker has
    # not come back end at once, interrupted, and the next start does not take them over again.
    port, rid = await killed_with_a_run_on_its_worker(servers)
    state = servers.start(port)  # the resume grace is the default 300 s: the run waits for its worker
    assert wait_status(state, rid, {"disconnected"})["worker_id"] == "box"
    assert servers.stop().returncode == 0
    wait_gone(state["pid"])

    state = servers.start(port)
    done = wait_status(state, rid, {"interrupted", "succeeded", "failed", "disconnected"})
    assert done["status"] == "interrupted", done
    events = all_events(state, rid)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    closing = [e for e in events if e["type"] in ("execution_stopped", "execution_error", "execution_complete")]
    assert len(closing) == 1 and closing[0] == events[-1] and closing[0]["type"] == "execution_stopped", events
    assert closing[0]["payload"]["reason"]["code"] == "server_shutdown", closing
    assert "worker_adopted" in [e["payload"]["code"] for e in events if e["type"] == "run_warning"]
    assert servers.stop().returncode == 0
