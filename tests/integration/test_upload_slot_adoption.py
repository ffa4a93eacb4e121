"""`run_released` on the control plane, through the wire with a raw protocol client: the slot is
given back once (a repeated frame changes nothing), the run stays running until run_finished, an
agent without the capability is never read as releasing, and after a hard stop of the control
plane the adopted run does not take its released slot again."""

from __future__ import annotations

import pytest

from codefy_jupyter.wire import protocol as wp

from test_headless import SMALL, api, wait_status
from test_worker_adoption import _close_agents, kill_hard, servers  # noqa: F401  (fixtures)
from test_worker_adoption import hello as connect
from test_worker_handlers import RawAgent

pytestmark = pytest.mark.slow




def taken(state) -> int:
    code, listing = api(state, "GET", "workers")
    assert code == 200
    (box,) = listing["workers"]
    return box["slots"][0]["slots"]["taken"]


def status(state, rid: str) -> str:
    return api(state, "GET", f"runs/{rid}")[1]["status"]


async def start_on_worker(state, agent: RawAgent) -> str:
    code, run = api(state, "POST", "runs", {"graph": SMALL, "options": {"target": {"worker": "box"}}})
    assert code == 201, run
    rid = (await agent.expect(wp.Assign)).run_id
    await agent.run_frame(wp.RunStarted(run_id=rid))
    return rid


async def test_released_gives_the_slot_back_once_and_the_run_ends_with_its_finish(servers):
    state = servers.start()
    agent, welcome = await connect(state, ["ack", "run_released"])
    assert "run_released" in welcome.capabilities
    rid = await start_on_worker(state, agent)
    await agent.until_ack(rid, 1)
    assert taken(state) == 1
    await agent.run_frame(wp.RunReleased(run_id=rid, upload_bytes=123))
    await agent.until_ack(rid, 2)
    assert taken(state) == 0 and status(state, rid) == "running"
    facts = api(state, "GET", f"runs/{rid}")[1]["execution_facts"]
    assert facts["released_upload_bytes"] == 123 and isinstance(facts["released_at"], float)
    # A second release (a confused agent) and a replay of the first change nothing.
    await agent.run_frame(wp.RunReleased(run_id=rid))
    await agent.run_frame(wp.RunReleased(run_id=rid, upload_bytes=123), seq=2)
    await agent.until_ack(rid, 3)
    assert taken(state) == 0 and status(state, rid) == "running"
    assert api(state, "GET", f"runs/{rid}")[1]["execution_facts"]["released_at"] == facts["released_at"]
    # A second run takes the slot while the first is still running.
    other = await start_on_worker(state, agent)
    await agent.until_ack(other, 1)
    assert taken(state) == 1
    await agent.run_frame(wp.RunFinished(run_id=rid, status="succeeded", executed=2))
    assert wait_status(state, rid, {"succeeded", "failed"})["status"] == "succeeded"
    assert taken(state) == 1  # the finish of a released run gives nothing back twice
    await agent.run_frame(wp.RunFinished(run_id=other, status="succeeded", executed=2))
    assert wait_status(state, other, {"succeeded", "failed"})["status"] == "succeeded"
    assert taken(state) == 0
    assert servers.stop().returncode == 0


async def test_an_agent_without_the_capability_is_not_offered_it(servers):
    state = servers.start()
    agent, welcome = await connect(state, ["ack"])
    assert "run_released" not in welcome.capabilities
    assert servers.stop().returncode == 0


async def test_an_adopted_run_does_not_take_its_released_slot_again(servers):
    from test_headless import free_port

    port = free_port()
    state = servers.start(port)
    agent, _ = await connect(state, ["ack", "run_released"])
    rid = await start_on_worker(state, agent)
    await agent.run_frame(wp.RunReleased(run_id=rid, upload_bytes=5))
    await agent.until_ack(rid, 2)  # acknowledged: its facts (released_at) are in the store
    kill_hard(servers, state)
    await agent.closed()

    state = servers.start(port)
    assert wait_status(state, rid, {"disconnected"})["status"] == "disconnected"
    agent, _ = await connect(state, ["ack", "run_released"])
    assert taken(state) == 0
    await agent.send(wp.RunAlive(runs={rid: 2}))
    await agent.run_frame(wp.RunFinished(run_id=rid, status="succeeded", executed=2), seq=3)
    assert wait_status(state, rid, {"succeeded", "failed", "interrupted"})["status"] == "succeeded"
    assert taken(state) == 0
    assert servers.stop().returncode == 0
