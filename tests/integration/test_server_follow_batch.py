"""`/codefy/ws/execution` followers of every run that ask for `batch` frames, on a real server."""

from __future__ import annotations

import asyncio
import json

import pytest


@pytest.fixture
def jp_server_config(tmp_path):
    return {"ServerApp": {"jpserver_extensions": {"codefy_jupyter": True}},
            "CodefyApp": {"data_dir": str(tmp_path / "codefy"), "run_queue_max_concurrent_cpu": 4}}


GRAPH = {"nodes": [{"id": "k", "type": "Float", "params": {"value": 2}},
                   {"id": "s", "type": "Scale", "params": {"factor": 3}}],
         "edges": [{"source": "k", "source_port": "value", "target": "s", "target_port": "x"}]}
CLOSING = {"execution_complete", "execution_error", "execution_stopped"}


async def submit(jp_fetch) -> str:
    response = await jp_fetch("codefy", "api", "runs", method="POST", body=json.dumps({"graph": GRAPH}))
    return json.loads(response.body)["id"]


async def rest_log(jp_fetch, run_id: str) -> list[dict]:
    response = await jp_fetch("codefy", "api", "runs", run_id, "events")
    return json.loads(response.body)["events"]


async def test_batch_frames_carry_every_run_whole_and_in_order(jp_fetch, jp_ws_fetch):
    plain = await jp_ws_fetch("codefy", "ws", "execution")
    await plain.write_message(json.dumps({"type": "subscribe", "all": True}))
    batched = await jp_ws_fetch("codefy", "ws", "execution")
    await batched.write_message(json.dumps({"type": "subscribe", "all": True, "batch": True}))
    await asyncio.sleep(0.2)  # both subscriptions taken before the runs exist
    ids = await asyncio.gather(*(submit(jp_fetch) for _ in range(12)))

    async def collect(ws, unpack: bool) -> dict[str, list[dict]]:
        logs: dict[str, list[dict]] = {}
        while not all(i in logs and logs[i][-1]["type"] in CLOSING for i in ids):
            message = json.loads(await asyncio.wait_for(ws.read_message(), 60))
            if unpack:
                assert message["type"] == "batch" and message["frames"], message
                frames = message["frames"]
            else:
                frames = [message]
            for frame in frames:
                assert frame["type"] == "events", frame
                assert frame["cursor"] == frame["events"][-1]["seq"]
                logs.setdefault(frame["run_id"], []).extend(frame["events"])
        return logs

    got_batched, got_plain = await asyncio.gather(collect(batched, True), collect(plain, False))
    for run_id in ids:
        whole = await rest_log(jp_fetch, run_id)
        assert [e["seq"] for e in got_batched[run_id]] == list(range(1, len(whole) + 1))
        assert [(e["seq"], e["type"], e["payload"]) for e in got_batched[run_id]] == \
            [(e["seq"], e["type"], e["payload"]) for e in whole]
        assert got_plain[run_id] == got_batched[run_id]
    plain.close()
    batched.close()


async def test_batch_must_be_a_boolean(jp_ws_fetch):
    ws = await jp_ws_fetch("codefy", "ws", "execution")
    await ws.write_message(json.dumps({"type": "subscribe", "all": True, "batch": "yes"}))
    frame = json.loads(await asyncio.wait_for(ws.read_message(), 60))
    assert frame["type"] == "error"
    assert frame["error"]["code"] == "invalid_request" and frame["error"]["params"]["field"] == "batch"
    ws.close()
