"""Recorded outputs over the worker protocol, against a real control plane, with the agent reduced
to its wire (RawAgent): what `fetch_output` carries and how chunked `output_answer` frames come
back; `cancel_fetch` after a 504; 503 when the connection closes mid-read; and what an agent
without the `record_outputs` capability gets (refused when named, failed at start through any)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from codefy_jupyter.wire import protocol as wp
from codefy_jupyter.wire.frames import CancelFetch, DropOutputs, FetchOutput, OutputAnswer
from codefy_jupyter.wire.output_reads import chunks

from test_server_runs import call, wait_status
from test_worker_handlers import (  # noqa: F401  (fixtures)
    SMALL, RawAgent, _close_agents, agent_factory, server_token,
)

pytestmark = pytest.mark.slow


# A read waits 30 s for the worker: a busy machine's slow chunks never run it out. The test of the
# timeout itself takes 3 s (`short_fetch`).
FETCH_S = 30


@pytest.fixture
def jp_server_config(tmp_path, request):
    codefy = {"data_dir": str(tmp_path / "codefy"), "worker_output_fetch_timeout_s": FETCH_S}
    codefy.update(getattr(request, "param", {}))
    return {"ServerApp": {"jpserver_extensions": {"codefy_jupyter": True}}, "CodefyApp": codefy}


async def finished_run(jp_fetch, agent: RawAgent, worker: str) -> str:
    code, run = await call(jp_fetch, "api", "runs", method="POST", body={
        "graph": SMALL, "options": {"record_outputs": True, "target": {"worker": worker}}})
    assert code == 201, run
    assign = await agent.expect(wp.Assign)
    assert assign.options.record_outputs is True
    rid = assign.run_id
    await agent.run_frame(wp.RunStarted(run_id=rid, pid=4242))
    await agent.run_frame(wp.RunFinished(run_id=rid, status="succeeded", executed=2))
    assert (await wait_status(jp_fetch, rid, {"succeeded", "failed"}))["status"] == "succeeded"
    return rid


async def test_reads_travel_as_fetch_output_and_come_back_in_chunks(jp_fetch, agent_factory):
    agent = await agent_factory("rec", capabilities=["ack", "record_outputs"])
    rid = await finished_run(jp_fetch, agent, "rec")
    read = asyncio.ensure_future(call(jp_fetch, "api", "execution", "outputs", rid, "s", "y"))
    fetch = await agent.expect(FetchOutput)
    assert (fetch.run_id, fetch.kind, fetch.query) == (rid, "port", {"node_id": "s", "port": "y"})
    assert fetch.wait_s == FETCH_S
    body = {"run_id": rid, "node_id": "s", "port": "y", "type": "float", "value": 6.0, "pad": "x" * 600_000}
    parts = chunks(body)
    assert len(parts) == 3
    for i, part in enumerate(parts):
        await agent.send(OutputAnswer(request_id=fetch.request_id, http_status=200, chunk=part, final=i == len(parts) - 1))
    code, answer = await read
    assert code == 200 and answer == body
    # The port's summary of a finished run is cached here: a second read does not reach the worker.
    assert await call(jp_fetch, "api", "execution", "outputs", rid, "s", "y") == (200, body)
    with pytest.raises(asyncio.TimeoutError):
        await agent.expect(FetchOutput, timeout=0.5)
    # Deleting the run deletes its outputs on the worker too.
    code, _ = await call(jp_fetch, "api", "runs", rid, method="DELETE")
    assert code == 204
    drop = await agent.expect(DropOutputs)
    assert drop.run_id == rid
    assert (await call(jp_fetch, "api", "execution", "outputs", rid))[0] == 404


@pytest.mark.parametrize("jp_server_config", [{"worker_output_fetch_timeout_s": 3}], indirect=True, ids=["short_fetch"])
async def test_a_read_nobody_answers_is_504_and_cancelled_on_the_worker(jp_fetch, agent_factory):
    agent = await agent_factory("mute", capabilities=["ack", "record_outputs"])
    rid = await finished_run(jp_fetch, agent, "mute")
    read = asyncio.ensure_future(call(jp_fetch, "api", "execution", "outputs", rid))
    fetch = await agent.expect(FetchOutput)
    cancel = await agent.expect(CancelFetch)
    assert cancel.request_id == fetch.request_id
    code, body = await read
    assert code == 504 and body["error"]["code"] == "worker_output_timeout"
    assert body["error"]["params"]["worker"] == "mute"
    # A late answer for it is ignored; the next read is a new request.
    await agent.send(OutputAnswer(request_id=fetch.request_id, http_status=200, chunk="{}", final=True))
    read = asyncio.ensure_future(call(jp_fetch, "api", "execution", "outputs", rid))
    second = await agent.expect(FetchOutput)
    assert second.request_id != fetch.request_id
    await agent.send(OutputAnswer(request_id=second.request_id, http_status=200, chunk='{"run_id": "%s", "nodes": []}' % rid))
    assert await read == (200, {"run_id": rid, "nodes": []})


async def test_a_connection_that_closes_mid_read_answers_503(jp_fetch, agent_factory):
    agent = await agent_factory("flaky", capabilities=["ack", "record_outputs"])
    rid = await finished_run(jp_fetch, agent, "flaky")
    read = asyncio.ensure_future(call(jp_fetch, "api", "execution", "outputs", rid))
    await agent.expect(FetchOutput)
    agent.close()
    code, body = await read
    assert code == 503 and body["error"]["code"] == "worker_connection_closed"
    assert body["error"]["params"]["worker"] == "flaky"


async def test_an_agent_without_the_capability_is_refused_when_named_and_fails_the_run_through_any(
        jp_fetch, agent_factory):
    agent = await agent_factory("old", capabilities=["ack"])
    before = (await call(jp_fetch, "api", "runs"))[1]
    code, body = await call(jp_fetch, "api", "runs", method="POST", body={
        "graph": SMALL, "options": {"record_outputs": True, "target": {"worker": "old"}}})
    assert code == 400 and body["error"]["code"] == "record_outputs_unsupported", body
    assert body["error"]["params"] == {"field": "options.record_outputs", "worker": "old"}
    assert (await call(jp_fetch, "api", "runs"))[1] == before  # nothing written
    # Through `any` it is placed there, then fails at start with the reason (and is never assigned).
    code, run = await call(jp_fetch, "api", "runs", method="POST", body={
        "graph": SMALL, "options": {"record_outputs": True, "target": {"worker": "any"}}})
    assert code == 201, run
    done = await wait_status(jp_fetch, run["id"], {"failed", "succeeded"})
    assert done["status"] == "failed" and done["worker_id"] == "old"
    assert done["error"]["code"] == "record_outputs_unsupported" and "record_outputs" in done["error"]["message"]
    with pytest.raises(asyncio.TimeoutError):
        await agent.expect(wp.Assign, timeout=1)


async def test_a_client_that_goes_away_cancels_the_read_on_the_worker(jp_fetch, agent_factory):
    agent = await agent_factory("left", capabilities=["ack", "record_outputs"])
    rid = await finished_run(jp_fetch, agent, "left")
    read = asyncio.ensure_future(jp_fetch("codefy", "api", "execution", "outputs", rid, request_timeout=2))
    fetch = await agent.expect(FetchOutput)
    started = asyncio.get_running_loop().time()
    with pytest.raises(Exception):
        await read  # the client stopped waiting
    cancel = await agent.expect(CancelFetch)
    assert cancel.request_id == fetch.request_id
    assert asyncio.get_running_loop().time() - started < FETCH_S - 5  # before the server's own wait ran out
