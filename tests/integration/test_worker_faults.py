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
from typing import Any

import pytest
from tornado.websocket import WebSocketClosedError

from codefy_jupyter.core import worker_protocol as wp
from codefy_jupyter.server.worker_handlers import HELLO_TIMEOUT_SETTING

from test_server_runs import SMALL, all_events, call, wait_status
from test_worker_handlers import (  # noqa: F401  (fixtures)
    RawAgent, _close_agents, agent_factory, enroll, node_event, submit_to,
)
from test_workers_e2e import (  # noqa: F401  (fixtures)
    agents, assert_gapless_without_duplicates, control, naps, pack_env, server_token, until_connected,
    until_event, worker_state,
)

pytestmark = pytest.mark.slow


@pytest.fixture
def jp_server_config(tmp_path, request):
    codefy = {"data_dir": str(tmp_path / "codefy")}
    codefy.update(getattr(request, "param", {}))
    return {"ServerApp": {"jpserver_extensions": {"codefy_jupyter": True},
                          "tornado_settings": {HELLO_TIMEOUT_SETTING: 1.0}},
            "CodefyApp": codefy}


def settings(**values: Any):
    return pytest.mark.parametrize("jp_server_config", [values], indirect=True,
                                   ids=[",".join(f"{k}={v}" for k, v in values.items())])


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
