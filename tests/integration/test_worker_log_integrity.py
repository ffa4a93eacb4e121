"""A run's log never wedges and never lies (issue: the seams), on a real jupyter-server with a real
SQLite file and a raw protocol client as the worker.

- A worker frame whose payload holds what JSON parsing admits but storage cannot (NaN, Infinity, a
  lone UTF-16 surrogate) is recorded in a documented normal form, and the run goes on: later frames
  are recorded, cancel works, the run ends.
- A store that refuses a run's events (a real SQLite trigger raising on insert) fails that run with
  `event_log_write_failed`, says which events were lost, and never acknowledges a frame it did not
  record, not even when the agent sends it again later.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

from codefy_jupyter.wire import protocol as wp

from test_server_runs import all_events, call, wait_status
from test_worker_handlers import (  # noqa: F401  (fixtures)
    RawAgent, _close_agents, agent_factory, jp_server_config, node_event, server_token, submit_to,
)

TRIGGER = ("CREATE TRIGGER refuse_poison BEFORE INSERT ON run_events WHEN NEW.payload LIKE '%poison%' "
           "BEGIN SELECT RAISE(ABORT, 'the disk says no'); END")


def refuse_poison(tmp_path: Path) -> None:
    """From now on the server's own database refuses any event whose payload mentions poison."""
    conn = sqlite3.connect(tmp_path / "codefy" / "codefy.sqlite")
    try:
        conn.execute(TRIGGER)
        conn.commit()
    finally:
        conn.close()


def raw_event(run_id: str, seq: int, payload: dict, replace: dict[str, str]) -> str:
    """An event frame's text with JSON the encoder would never write (NaN, lone surrogates)."""
    text = wp.encode(wp.Event(run_id=run_id, seq=seq, event={"type": "node_status", "payload": payload}))
    for marker, raw in replace.items():
        text = text.replace(f'"{marker}"', raw)
    return text


async def acks_within(agent: RawAgent, seconds: float) -> None:
    """Read (noting acks) for `seconds`: long enough for an ack that was going to come."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while (left := deadline - loop.time()) > 0:
        try:
            await asyncio.wait_for(agent.recv(), left)
        except asyncio.TimeoutError:
            return


async def test_nan_infinity_and_lone_surrogates_are_recorded_normalised_and_the_run_goes_on(jp_fetch, agent_factory):
    agent = await agent_factory("box")
    run = await submit_to(jp_fetch, "box")
    rid = run["id"]
    await agent.expect(wp.Assign)
    await agent.run_frame(wp.RunStarted(run_id=rid))  # 1
    await agent.send_raw(raw_event(rid, 2, {"node_id": "n", "node_type": "Float", "status": "done", "value": "V",
                                            "big": "B", "text": "T", "K": 1},
                                   {"V": "NaN", "B": "-Infinity", "T": '"half \\ud800 a pair"',
                                    "K": '"key \\udfff"'}))
    agent.seq[rid] = 2
    await agent.run_frame(wp.Metrics(run_id=rid, points=[{"name": "loss", "value": 0.5, "step": 1, "node_id": "n"}]))
    await agent.run_frame(wp.Event(run_id=rid, event=node_event("m", "done")))  # 4
    await agent.until_ack(rid, 4)  # recorded, and the log moves on past the odd frame
    code, body = await call(jp_fetch, "api", "runs", rid, "cancel", method="POST")
    assert code == 200 and body["status"] in ("running", "cancelling", "cancelled"), body
    await agent.expect(wp.Cancel)
    await agent.run_frame(wp.RunFinished(run_id=rid, status="cancelled"))
    done = await wait_status(jp_fetch, rid, {"cancelled", "failed", "succeeded"})
    assert done["status"] == "cancelled"
    events = await all_events(jp_fetch, rid)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    odd = next(e["payload"] for e in events if e["type"] == "node_status" and e["payload"]["node_id"] == "n")
    assert odd["value"] == "NaN" and odd["big"] == "-Infinity"
    assert odd["text"] == "half \ufffd a pair" and odd["key \ufffd"] == 1
    assert [e["type"] for e in events][-2:] == ["node_status", "execution_stopped"]
    code, _ = await call(jp_fetch, "api", "runs", rid, method="DELETE")
    assert code == 204  # a finished run, not wedged


async def test_a_refused_write_fails_the_run_and_unrecorded_frames_are_never_acknowledged(
        jp_fetch, agent_factory, tmp_path):
    agent = await agent_factory("box")
    run = await submit_to(jp_fetch, "box")
    rid = run["id"]
    await agent.expect(wp.Assign)
    await agent.run_frame(wp.RunStarted(run_id=rid))  # 1
    await agent.run_frame(wp.Event(run_id=rid, event=node_event("fine", "done")))  # 2
    await agent.until_ack(rid, 2)
    refuse_poison(tmp_path)
    await agent.run_frame(wp.Event(run_id=rid, event=node_event("poison", "done")))  # 3: refused by the store
    await agent.run_frame(wp.Event(run_id=rid, event=node_event("after", "done")))  # 4
    cancel = await agent.expect(wp.Cancel)
    assert cancel.run_id == rid and "could not record" in cancel.reason
    done = await wait_status(jp_fetch, rid, {"failed", "succeeded", "cancelled"})
    assert done["status"] == "failed" and done["error"]["code"] == "event_log_write_failed", done["error"]
    assert "the disk says no" in done["error"]["message"]
    events = await all_events(jp_fetch, rid)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert events[-1]["type"] == "execution_error"
    assert events[-1]["payload"]["error"]["code"] == "event_log_write_failed"
    assert "poison" not in [e["payload"].get("node_id") for e in events]
    # The agent ends the run and, as agents do, sends its finish and replays what is unacknowledged.
    await agent.run_frame(wp.RunFinished(run_id=rid, status="cancelled"))  # 5
    await agent.send(wp.Event(run_id=rid, seq=3, event=node_event("poison", "done")))
    await acks_within(agent, 1.5)
    assert agent.acks.get(rid, 0) == 2, agent.acks  # frame 3 was never recorded: never acknowledged


async def test_a_refused_write_fails_an_in_process_run_with_the_loss_on_record(jp_fetch, tmp_path):
    code, first = await call(jp_fetch, "api", "runs", method="POST", body={"graph": {"nodes": [
        {"id": "k", "type": "Float", "params": {"value": 1}}]}})
    assert code == 201
    await wait_status(jp_fetch, first["id"], {"succeeded"})  # the database exists, the queue is up
    refuse_poison(tmp_path)
    graph = {"nodes": [{"id": "poison", "type": "Float", "params": {"value": 1}},
                       {"id": "nap", "type": "Sleep", "params": {"seconds": 5}}],
             "edges": [{"source": "poison", "source_port": "value", "target": "nap", "target_port": "value"}]}
    code, run = await call(jp_fetch, "api", "runs", method="POST", body={"graph": graph})
    assert code == 201, run
    done = await wait_status(jp_fetch, run["id"], {"failed", "succeeded", "cancelled"})
    assert done["status"] == "failed" and done["error"]["code"] == "event_log_write_failed", done["error"]
    lost = done["error"]["params"]
    assert 1 <= lost["first_seq"] <= lost["last_seq"] and "the disk says no" in lost["error"]
    events = await all_events(jp_fetch, run["id"])
    # What was lost is said; what follows continues the log without a hole.
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert len(events) == lost["first_seq"] and events[-1]["type"] == "execution_error"
    # The queue is not wedged: the next run goes through.
    code, after = await call(jp_fetch, "api", "runs", method="POST", body={"graph": {"nodes": [
        {"id": "k", "type": "Float", "params": {"value": 2}}]}})
    assert (await wait_status(jp_fetch, after["id"], {"succeeded", "failed"}))["status"] == "succeeded"
