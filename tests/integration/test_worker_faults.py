"""Faults at the worker socket and in worker agents, each with a clear reason (a code and a text) and
nothing lost: malformed, stray and oversized frames, refused hellos (reserved or taken names, another
protocol version), a replayed enrollment token, an agent that stops heartbeating, a run process that
ignores cancel. Raw protocol clients (test_worker_handlers.RawAgent) where the fault is on the wire,
real `codefy agent start` subprocesses where it is the agent's."""

from __future__ import annotations

import asyncio
import json
import os
import signal

import pytest
from tornado.websocket import WebSocketClosedError

from codefy_jupyter.wire import protocol as wp

from test_server_runs import all_events, call, wait_status
from test_worker_handlers import (  # noqa: F401  (fixtures)
    RawAgent, _close_agents, agent_factory, enroll, jp_server_config, node_event, settings, submit_to,
)
from test_workers_e2e import (  # noqa: F401  (fixtures)
    agents, assert_gapless_without_duplicates, control, naps, pack_env, server_token, until_connected,
    until_event, worker_state,
)

pytestmark = pytest.mark.slow


# -- on the wire ---------------------------------------------------------------------------------------

async def test_an_oversized_frame_ends_the_connection_and_the_run_resumes_on_the_next(jp_fetch, agent_factory):
    agent = await agent_factory("box")
    run = await submit_to(jp_fetch, "box")
    rid = run["id"]
    await agent.expect(wp.Assign)
    await agent.run_frame(wp.RunStarted(run_id=rid))
    await agent.run_frame(wp.Event(run_id=rid, event=node_event("n1", "done")))
    await agent.until_ack(rid, 2)
    huge = json.dumps({"type": "warning", "run_id": rid, "seq": 3, "code": "big",
                       "message": "x" * (wp.MAX_FRAME_BYTES + 1)})
    try:
        await agent.send_raw(huge)
    except WebSocketClosedError:
        pass  # the server stops reading at the frame's header and closes
    assert await agent.closed() == 1009
    await wait_status(jp_fetch, rid, {"disconnected"})
    reason = {"code": "frame_too_large", "params": {"close_code": 1009, "limit_bytes": wp.MAX_FRAME_BYTES},
              "text": f"it sent a frame over the limit of {wp.MAX_FRAME_BYTES} bytes"}
    assert (await worker_state(jp_fetch, "box"))["disconnect_reason"] == reason
    events = await all_events(jp_fetch, rid)
    assert events[-1]["payload"]["code"] == "worker_disconnected" and events[-1]["payload"]["params"]["reason"] == reason

    # The agent comes back and goes on: what was acknowledged stays, the frame that never arrived is
    # recorded as a gap, nothing is written twice.
    back = await agent_factory("box")
    await back.send(wp.RunAlive(runs={rid: 3}))
    await back.run_frame(wp.Event(run_id=rid, event=node_event("n2", "done")), seq=4)
    await back.run_frame(wp.RunFinished(run_id=rid, status="succeeded"), seq=5)
    await wait_status(jp_fetch, rid, {"succeeded"})
    events = await all_events(jp_fetch, rid)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert [e["payload"]["node_id"] for e in events if e["type"] == "node_status"] == ["n1", "n2"]
    codes = [(e["payload"]["code"], e["payload"]["params"]) for e in events if e["type"] == "run_warning"]
    assert [c for c, _ in codes] == ["worker_disconnected", "worker_reconnected", "worker_frames_lost"]
    assert codes[2][1] == {"worker": "box", "first": 3, "last": 3}


async def test_frames_for_a_run_of_another_worker_are_refused_and_change_nothing(jp_fetch, agent_factory):
    box = await agent_factory("box")
    other = await agent_factory("other")
    run = await submit_to(jp_fetch, "box")
    rid = run["id"]
    await box.expect(wp.Assign)
    await box.run_frame(wp.RunStarted(run_id=rid))
    await box.until_ack(rid, 1)
    # Another worker claims the run: told to stop it, and nothing reaches the run's log.
    await other.run_frame(wp.Event(run_id=rid, event=node_event("intruder", "done")), seq=2)
    await other.run_frame(wp.RunFinished(run_id=rid, status="failed", error={"message": "not mine"}), seq=3)
    stray = await other.expect(wp.Cancel)
    assert stray.run_id == rid and stray.grace_s == 0
    await box.run_frame(wp.Event(run_id=rid, event=node_event("n", "done")))
    await box.run_frame(wp.RunFinished(run_id=rid, status="succeeded"))
    done = await wait_status(jp_fetch, rid, {"succeeded", "failed"})
    assert done["status"] == "succeeded" and done["worker_id"] == "box"
    events = await all_events(jp_fetch, rid)
    assert [e["type"] for e in events] == ["execution_start", "node_status", "execution_complete"]
    assert events[1]["payload"]["node_id"] == "n"


async def test_malformed_frames_that_name_no_run_are_dropped_and_the_connection_goes_on(jp_fetch, agent_factory):
    agent = await agent_factory("box")
    for text in ("{not json", json.dumps([1, 2]), json.dumps({"type": "teleport", "run_id": 5}),
                 json.dumps({"type": "event", "seq": 1})):
        await agent.send_raw(text)
    run = await submit_to(jp_fetch, "box")
    assign = await agent.expect(wp.Assign)  # still connected, still given runs
    assert assign.run_id == run["id"]
    await agent.run_frame(wp.RunStarted(run_id=run["id"]))
    await agent.run_frame(wp.RunFinished(run_id=run["id"], status="succeeded"))
    await wait_status(jp_fetch, run["id"], {"succeeded"})
    assert (await worker_state(jp_fetch, "box"))["state"] == "connected"


# -- names and tokens ----------------------------------------------------------------------------------

async def test_the_paths_enroll_and_enrollments_are_never_worker_names(jp_fetch, agent_factory, agents):
    for name in ("enroll", "enrollments"):
        raw = await agent_factory(name, welcome=False)
        frame = await raw.expect(wp.Reject)
        assert frame.code == "reserved_name" and frame.params == {"name": name}
        assert frame.message == f"worker name {name!r} is reserved (any, enroll, enrollments, local, pool)"
        assert await raw.closed() == 4400
    code, issued = await call(jp_fetch, "api", "workers", "enrollments", method="POST")
    assert code == 201
    no_session = {"Authorization": ""}
    code, body = await call(jp_fetch, "api", "workers", "enroll", method="POST",
                            body={"token": issued["token"], "name": "enrollments"}, headers=no_session)
    assert code == 400 and body["error"]["params"]["field"] == "name" and "reserved" in body["error"]["message"]
    code, body = await call(jp_fetch, "api", "workers", "enroll", method="POST",
                            body={"token": issued["token"], "name": "gpu-box"}, headers=no_session)
    assert code == 201 and body["name"] == "gpu-box"  # the refusal did not spend the token
    agent = agents(name="enroll")
    assert await agent.exited() == 2
    assert "worker name 'enroll' is reserved" in agent.output()


async def test_a_replayed_enrollment_token_is_refused_and_the_agent_says_why(jp_fetch, agents):
    code, issued = await call(jp_fetch, "api", "workers", "enrollments", method="POST")
    assert code == 201
    first = agents(name="first", token=issued["token"])
    await until_connected(jp_fetch, first)
    second = agents(name="second", token=issued["token"])
    assert await second.exited() == 1
    out = second.output()
    assert "enrollment refused" in out and "enrollment_used" in out
    code, listing = await call(jp_fetch, "api", "workers")
    assert [(w["name"], w["state"]) for w in listing["workers"]] == [("first", "connected")]


async def test_an_agent_whose_name_is_taken_is_told_so_and_gets_in_once_it_is_free(jp_fetch, agents, tmp_path,
                                                                                   control, request):
    from test_workers_e2e import AgentProcess

    holder = agents(name="box")  # the server's own token
    await until_connected(jp_fetch, holder)
    token = await enroll(jp_fetch, "box")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    other = AgentProcess(elsewhere, control, name="box", token=token)
    request.addfinalizer(other.cleanup)
    deadline = asyncio.get_running_loop().time() + 120
    while "hello refused (name_taken)" not in other.output():
        assert other.proc.poll() is None, other.output()
        assert asyncio.get_running_loop().time() < deadline, other.output()
        await asyncio.sleep(0.1)
    assert "worker name 'box' is taken by another connected worker" in other.output()
    holder.proc.send_signal(signal.SIGTERM)
    assert await holder.exited() == 0
    worker = await until_connected(jp_fetch, other)
    assert worker["enrolled"] is True


# -- an agent that stops answering, a run that ignores cancel ------------------------------------------

# Beats 2 s apart: a real agent on a busy machine may beat late, and three late beats of 1 s would
# disconnect it before the test freezes it.
@settings(worker_heartbeat_s=2)
async def test_a_frozen_agent_is_disconnected_after_three_missed_heartbeats_and_resumes(jp_fetch, agents):
    agent = agents()
    await until_connected(jp_fetch, agent)
    code, run = await call(jp_fetch, "api", "runs", method="POST",
                           body={"graph": naps(8, 0.3), "options": {"target": {"worker": "box"}}})
    assert code == 201
    rid = run["id"]
    await until_event(jp_fetch, rid, lambda e: e["type"] == "node_status" and e["payload"]["node_id"] == "nap1")
    os.kill(agent.proc.pid, signal.SIGSTOP)  # frozen: no heartbeat, no frame, the socket stays open
    try:
        gone = await wait_status(jp_fetch, rid, {"disconnected"}, timeout=120)
        assert gone["status"] == "disconnected"
        worker = await worker_state(jp_fetch, "box")
        reason = {"code": "no_heartbeat", "params": {"seconds": 6}, "text": "no heartbeat for 6 s"}
        assert worker["state"] == "disconnected" and worker["disconnect_reason"] == reason
    finally:
        os.kill(agent.proc.pid, signal.SIGCONT)
    done = await wait_status(jp_fetch, rid, {"succeeded", "failed", "interrupted"}, timeout=120)
    assert done["status"] == "succeeded", done
    events = await all_events(jp_fetch, rid)
    assert_gapless_without_duplicates(events)
    warnings = [e["payload"] for e in events if e["type"] == "run_warning"]
    assert [w["code"] for w in warnings] == ["worker_disconnected", "worker_reconnected"]
    assert warnings[0]["params"]["reason"] == reason
    for i in range(8):
        mine = [e["payload"]["status"] for e in events if e["type"] == "node_status"
                and e["payload"]["node_id"] == f"nap{i}"]
        assert mine == ["running", "done"], (i, mine)
    assert (await worker_state(jp_fetch, "box"))["state"] == "connected"


@settings(worker_cancel_grace_s=1)
async def test_a_run_process_that_ignores_sigterm_is_killed_and_the_run_ends_cancelled(jp_fetch, agents, pack_env):
    agent = agents(env=pack_env)
    await until_connected(jp_fetch, agent)
    code, run = await call(jp_fetch, "api", "runs", method="POST", body={
        "graph": {"nodes": [{"id": "deaf", "type": "IgnoreTerm", "params": {"seconds": 60}}], "edges": []},
        "options": {"target": {"worker": "box"}}})
    assert code == 201
    rid = run["id"]
    log = agent.dir / "agent-runs" / rid / "output.log"
    deadline = asyncio.get_running_loop().time() + 120
    while not (log.exists() and "ignoring SIGTERM" in log.read_text()):  # its handler is in place
        assert asyncio.get_running_loop().time() < deadline, agent.output()
        await asyncio.sleep(0.05)
    code, _ = await call(jp_fetch, "api", "runs", rid, "cancel", method="POST")
    assert code == 200
    done = await wait_status(jp_fetch, rid, {"cancelled", "failed", "succeeded", "interrupted"}, timeout=120)
    assert done["status"] == "cancelled", done
    out = agent.output()
    assert "sending SIGTERM" in out and "sending SIGKILL" in out
    events = await all_events(jp_fetch, rid)
    assert_gapless_without_duplicates(events)
    closing = events[-1]
    assert closing["type"] == "execution_stopped" and closing["payload"]["status"] == "cancelled"
    assert closing["payload"]["reason"] == {
        "code": "cancelled", "params": {"signal": signal.SIGKILL},
        "message": "cancel requested; the run's process did not stop in time and was ended with SIGKILL"}
    assert agent.proc.poll() is None  # the agent lives on


@settings(worker_heartbeat_s=2)
async def test_a_cancel_that_cannot_reach_the_worker_says_so_and_the_run_stops_when_it_is_back(jp_fetch, agents):
    agent = agents()
    await until_connected(jp_fetch, agent)
    code, run = await call(jp_fetch, "api", "runs", method="POST",
                           body={"graph": naps(1, 600), "options": {"target": {"worker": "box"}}})
    assert code == 201
    rid = run["id"]
    await until_event(jp_fetch, rid, lambda e: e["type"] == "node_status" and e["payload"]["node_id"] == "nap0")
    children = agent.processes()[1:]
    os.kill(agent.proc.pid, signal.SIGSTOP)  # frozen: missed heartbeats leave the run disconnected
    try:
        await wait_status(jp_fetch, rid, {"disconnected"}, timeout=120)
        code, _ = await call(jp_fetch, "api", "runs", rid, "cancel", method="POST")
        assert code == 200
        done = await wait_status(jp_fetch, rid, {"cancelled", "failed", "succeeded", "interrupted"}, timeout=120)
        assert done["status"] == "cancelled"
    finally:
        os.kill(agent.proc.pid, signal.SIGCONT)
    events = await all_events(jp_fetch, rid)
    assert_gapless_without_duplicates(events)
    warnings = [e["payload"] for e in events if e["type"] == "run_warning"]
    assert [w["code"] for w in warnings] == ["worker_disconnected", "worker_unreachable"]
    assert warnings[1]["params"] == {"worker": "box"}
    assert warnings[1]["message"] == ("the cancel could not reach worker box, which is not connected; if it comes "
                                      "back with this run, it is told to stop it")
    # Back, the agent lists the run as alive and is told to stop it: its run process ends long before
    # its 600 s nap would, and what it reports then is kept as the run's late result.
    deadline = asyncio.get_running_loop().time() + 120
    while True:
        code, row = await call(jp_fetch, "api", "runs", rid)
        late = (row.get("execution_facts") or {}).get("late_result")
        if late is not None:
            break
        assert asyncio.get_running_loop().time() < deadline, f"no late result:\n{agent.output()}"
        await asyncio.sleep(0.1)
    assert late["status"] == "cancelled" and row["status"] == "cancelled"
