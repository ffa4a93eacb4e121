"""A study with one child taken over from a worker and one the restart retired, across a hard kill
of a real `codefy start`. Found by benchmarks/chaos.py: the study carried on with the taken-over
child and, once it ended, sat `running` for ever with the retired repetition interrupted and
nothing in flight. Now the retired child interrupts the study as it would without a worker child:
an auto study resumes at once (the retired repetition runs again, same seed, once), an explicit one
waits for a resume while the worker's child runs on. The worker is an agent reduced to its wire."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

import pytest

from codefy_jupyter.wire import protocol as wp

from test_headless import Servers, api, free_port
from test_worker_adoption import _close_agents, hello, kill_hard  # noqa: F401 (an autouse fixture)
from test_worker_handlers import RawAgent, node_event

pytestmark = pytest.mark.slow


@pytest.fixture
def servers(tmp_path, request) -> Servers:
    s = Servers(tmp_path)
    s.env["CODEFY_RUN_QUEUE_MAX_CONCURRENT"] = "box/cpu=1"  # the worker takes one child, this server the other
    request.addfinalizer(s.kill_leftovers)
    return s


def edge(s, sp, t, tp):
    return {"source": s, "source_port": sp, "target": t, "target_port": tp}


def graph(values: list[float], nap: float) -> dict[str, Any]:
    return {"nodes": [{"id": "vals", "type": "List", "params": {"values": values}},
                      {"id": "nap", "type": "Sleep", "params": {"seconds": nap}},
                      {"id": "m", "type": "Mean"}],
            "edges": [edge("vals", "values", "nap", "value"), edge("nap", "value", "m", "values")]}


def spec(policy: str) -> dict[str, Any]:
    # The local child sleeps long enough to be running when the server dies.
    return {"name": "adopted", "objective": {"node_id": "m", "metric": "mean", "direction": "minimize"},
            "variants": [{"label": "a", "graph": graph([1, 2], 8)}, {"label": "b", "graph": graph([3, 4], 8)}],
            "repetitions": 1, "seed": 5, "resume_policy": policy, "options": {"target": {"worker": "any"}},
            "budget": {"max_parallel_runs": 2}}


def study(state, study_id) -> dict[str, Any]:
    code, body = api(state, "GET", f"studies/{study_id}")
    assert code == 200, body
    return body


async def until(state, study_id, check, what: str, timeout: float = 90.0,
                helper: asyncio.Future | None = None) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        current = study(state, study_id)
        if check(current):
            return current
        if helper is not None and helper.done():
            helper.result()  # the fake worker's failure, not a timeout
        assert time.monotonic() < deadline, (what, current["status"], current["counts"],
                                             [(r["status"], r["worker_id"]) for r in runs_of(state, study_id)])
        await asyncio.sleep(0.1)


def runs_of(state, study_id) -> list[dict[str, Any]]:
    code, listing = api(state, "GET", "runs?limit=50")
    assert code == 200, listing
    return [r for r in listing["runs"] if r.get("study_id") == study_id]


async def finish(agent: RawAgent, run_id: str, value: float, seq: int) -> None:
    await agent.run_frame(wp.Event(run_id=run_id, event={"type": "metric", "payload": {
        "node_id": "m", "name": "mean", "value": value, "step": None}}), seq=seq)
    await agent.run_frame(wp.Event(run_id=run_id, event=node_event("m", "done")), seq=seq + 1)
    await agent.run_frame(wp.RunFinished(run_id=run_id, status="succeeded", executed=3), seq=seq + 2)
    await agent.until_ack(run_id, seq + 2)


async def serve(agent: RawAgent) -> None:
    """Every later assign (a retry may come to the worker once it is free) runs at once."""
    while (frame := await agent.recv(timeout=600)) is not None:
        if isinstance(frame, wp.Assign):
            await agent.run_frame(wp.RunStarted(run_id=frame.run_id))
            await finish(agent, frame.run_id, 1.0, 2)


async def one_on_the_worker_one_here_then_kill(servers: Servers, policy: str) -> tuple[Any, str, str, int]:
    port = free_port()
    state = servers.start(port)
    agent, _ = await hello(state, ["ack"])
    code, created = api(state, "POST", "studies", spec(policy))
    assert code == 201, created
    assign = await agent.expect(wp.Assign, timeout=60)  # the first child: the worker's (any: workers first)
    worker_run = assign.run_id
    await agent.run_frame(wp.RunStarted(run_id=worker_run))
    await agent.until_ack(worker_run, 1)
    # The second child finds the worker's one slot taken and runs on this server.
    await until(state, created["id"], lambda s: s["counts"]["running"] == 2, "both children running")
    local = [r for r in runs_of(state, created["id"]) if r["worker_id"] is None]
    assert len(local) == 1 and local[0]["status"] == "running", runs_of(state, created["id"])
    kill_hard(servers, state)
    await agent.closed()
    state = servers.start(port)
    agent, _ = await hello(state, ["ack"])
    await agent.send(wp.RunAlive(runs={worker_run: 1}))
    return state, agent, created["id"], worker_run


@pytest.mark.timeout(240)
async def test_an_auto_study_retries_the_child_the_restart_retired_beside_a_taken_over_one(servers):
    state, agent, study_id, worker_run = await one_on_the_worker_one_here_then_kill(servers, "auto")
    # Resumed at once: the retired repetition has a second attempt while the worker's child runs on.
    resumed = await until(state, study_id, lambda s: any(len(v["attempts"]) == 2 for v in s["variants"]),
                          "the retired repetition's second attempt")
    assert resumed["status"] == "running", resumed["status"]
    await finish(agent, worker_run, 1.5, 2)
    server = asyncio.ensure_future(serve(agent))
    final = await until(state, study_id, lambda s: s["status"] not in ("running", "queued"), "the study's end",
                        helper=server)
    server.cancel()
    assert final["status"] == "succeeded", (final["status"], final["counts"])
    types = [e["type"] for e in api(state, "GET", f"studies/{study_id}/events?cursor=0")[1]["events"]]
    assert types.count("study_interrupted") == 1 and types.count("study_resumed") == 1, types
    runs = runs_of(state, study_id)
    assert all(n == 1 for n in Counter(r["study_attempt_id"] for r in runs).values()), runs
    for v in final["variants"]:
        assert [a["status"] for a in v["attempts"] if a["status"] == "succeeded"] == ["succeeded"], v["attempts"]
        assert len({a["seed"] for a in v["attempts"]}) == 1  # the retry reuses its repetition's seed
    retried = [v for v in final["variants"] if len(v["attempts"]) == 2]
    assert len(retried) == 1 and retried[0]["attempts"][0]["status"] == "interrupted"
    assert servers.stop().returncode == 0


@pytest.mark.timeout(240)
async def test_an_explicit_study_waits_for_a_resume_while_the_taken_over_child_runs_on(servers):
    state, agent, study_id, worker_run = await one_on_the_worker_one_here_then_kill(servers, "explicit")
    after = study(state, study_id)
    assert after["status"] == "interrupted", (after["status"], after["counts"])
    await finish(agent, worker_run, 1.5, 2)
    ended = await until(state, study_id, lambda s: s["counts"]["running"] == 0, "the worker's child to end")
    assert ended["status"] == "interrupted" and ended["counts"]["succeeded"] == 1, ended["counts"]
    server = asyncio.ensure_future(serve(agent))
    code, body = api(state, "POST", f"studies/{study_id}/resume", {})
    assert code == 200, body
    final = await until(state, study_id, lambda s: s["status"] not in ("running", "queued"), "the study's end",
                        timeout=120, helper=server)
    server.cancel()
    assert final["status"] == "succeeded", (final["status"], final["counts"])
    assert servers.stop().returncode == 0
