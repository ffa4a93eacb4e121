"""Recorded outputs of worker runs across control-plane restarts, with real `codefy start` servers
on one data dir. A finished run (a real same-machine `codefy agent start`, which reads the server's
token from server.json and dials again) is found again from its row (worker + record_outputs) and
reads the same as before; a run adopted after a hard stop (the agent reduced to its wire) is kept
again when it ends."""

from __future__ import annotations

import asyncio
import os
import signal
from typing import Any

import pytest
import test_headless as headless
from test_agent_survives_restart import connected_worker, local_agent, servers  # noqa: F401  (fixtures)
from test_worker_handlers import RawAgent, _close_agents  # noqa: F401  (fixture)
from tornado.httpclient import HTTPRequest
from tornado.websocket import websocket_connect

from codefy_jupyter._version import __version__
from codefy_jupyter.wire import protocol as wp
from codefy_jupyter.wire.frames import FetchOutput, OutputAnswer

pytestmark = pytest.mark.slow

GRAPH = {"nodes": [{"id": "k", "type": "Float", "params": {"value": 2}},
                   {"id": "s", "type": "Scale", "params": {"factor": 3}}],
         "edges": [{"source": "k", "source_port": "value", "target": "s", "target_port": "x"}]}


def read(state: dict[str, Any], *path: str) -> tuple[int, Any]:
    return headless.api(state, "GET", "/".join(("execution", "outputs") + path))


@pytest.mark.timeout(480)
def test_a_finished_worker_runs_outputs_are_found_again_after_a_restart(servers, local_agent):
    port = headless.free_port()
    state = servers.start(port)
    agent = local_agent(state["url"])
    connected_worker(state, agent)
    run = headless.submit(state, GRAPH, options={"record_outputs": True, "target": {"worker": "box"}})
    done = headless.wait_status(state, run["id"], {"succeeded", "failed", "interrupted"}, timeout=90)
    assert done["status"] == "succeeded", (done, agent.output())
    before = [read(state, run["id"]), read(state, run["id"], "s", "y")]
    assert [code for code, _ in before] == [200, 200], before
    assert before[1][1]["value"] == 6.0
    stopped = servers.stop()
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    state = servers.start(port)
    connected_worker(state, agent)
    after = [read(state, run["id"]), read(state, run["id"], "s", "y")]
    assert after == before


async def test_a_run_adopted_after_a_hard_stop_keeps_its_outputs_readable(servers):  # noqa: F811
    async def connect(state: dict[str, Any]) -> RawAgent:
        url = state["url"].replace("http://", "ws://") + "codefy/ws/worker"
        agent = RawAgent(await websocket_connect(HTTPRequest(url, headers={"Authorization": f"token {state['token']}"})))
        code, nodes = headless.api(state, "GET", "nodes")
        await agent.send(wp.Hello(name="box", version=__version__, protocol_version=wp.PROTOCOL_VERSION,
                                  catalog_hash=nodes["catalog"]["hash"], node_types=nodes["catalog"]["types"],
                                  devices=[{"device": "cpu"}], capabilities=["ack", "record_outputs"]))
        await agent.expect(wp.Welcome)
        return agent

    port = headless.free_port()
    state = servers.start(port)
    agent = await connect(state)
    try:
        run = headless.submit(state, GRAPH, options={"record_outputs": True, "target": {"worker": "box"}})
        assign = await agent.expect(wp.Assign)
        rid = assign.run_id
        assert rid == run["id"] and assign.options.record_outputs is True
        await agent.run_frame(wp.RunStarted(run_id=rid, pid=4242))
        await agent.until_ack(rid, 1)
        os.kill(state["pid"], signal.SIGKILL)
        headless.wait_gone(state["pid"])
        await agent.closed()

        state = servers.start(port)
        agent = await connect(state)
        await agent.send(wp.RunAlive(runs={rid: 1}))
        await agent.run_frame(wp.RunFinished(run_id=rid, status="succeeded", executed=2), seq=2)
        done = await asyncio.to_thread(headless.wait_status, state, rid, {"succeeded", "failed", "interrupted"})
        assert done["status"] == "succeeded"
        read = asyncio.ensure_future(asyncio.to_thread(read_outputs, state, rid))
        fetch = await agent.expect(FetchOutput)
        assert fetch.run_id == rid and fetch.kind == "list"
        await agent.send(OutputAnswer(request_id=fetch.request_id, http_status=200,
                                      chunk='{"run_id": "%s", "nodes": []}' % rid))
        assert await read == (200, {"run_id": rid, "nodes": []})
    finally:
        agent.close()
    assert servers.stop().returncode == 0


def read_outputs(state: dict[str, Any], run_id: str) -> tuple[int, Any]:
    return read(state, run_id)
