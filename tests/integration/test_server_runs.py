"""The control plane on a real jupyter-server with a real SQLite file: submit, follow, cancel, delete."""

from __future__ import annotations

import asyncio
import json

import pytest
from tornado.httpclient import HTTPClientError


@pytest.fixture
def jp_server_config(tmp_path):
    return {"ServerApp": {"jpserver_extensions": {"codefy_jupyter": True}},
            "CodefyApp": {"data_dir": str(tmp_path / "codefy")}}


def edge(s, sp, t, tp):
    return {"source": s, "source_port": sp, "target": t, "target_port": tp}


SMALL = {"nodes": [{"id": "k", "type": "Float", "params": {"value": 2}},
                   {"id": "s", "type": "Scale", "params": {"factor": 3}}],
         "edges": [edge("k", "value", "s", "x")]}


def sleepy(seconds):
    return {"nodes": [{"id": "k", "type": "Float", "params": {"value": 1}},
                      {"id": "nap", "type": "Sleep", "params": {"seconds": seconds}}],
            "edges": [edge("k", "value", "nap", "value")]}


async def call(jp_fetch, *path, method="GET", body=None, headers=None, **params):
    kwargs = {"method": method, "raise_error": False}
    if headers:
        kwargs["headers"] = headers
    if body is not None:
        kwargs["body"] = json.dumps(body)
    elif method == "POST":
        kwargs["body"] = b""
    if params:
        kwargs["params"] = params
    response = await jp_fetch("codefy", *path, **kwargs)
    return response.code, (json.loads(response.body) if response.body and
                           response.headers.get("Content-Type", "").startswith("application/json") else response.body)


async def wait_status(jp_fetch, run_id, statuses, timeout=120.0, headers=None):
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        code, run = await call(jp_fetch, "api", "runs", run_id, headers=headers)
        assert code == 200
        if run["status"] in statuses:
            return run
        assert asyncio.get_running_loop().time() < deadline, f"run stayed {run['status']}"
        await asyncio.sleep(0.05)


async def all_events(jp_fetch, run_id):
    events, cursor = [], 0
    while True:
        code, page = await call(jp_fetch, "api", "runs", run_id, "events", cursor=cursor)
        assert code == 200
        events += page["events"]
        cursor = page["cursor"]
        if not page["more"]:
            return events


async def test_submit_runs_to_completion_with_a_gapless_log(jp_fetch):
    code, run = await call(jp_fetch, "api", "runs", method="POST", body={"graph": SMALL, "name": "small"})
    assert code == 201, run
    assert run["status"] in ("queued", "running") and run["device"] == "cpu" and run["name"] == "small"
    done = await wait_status(jp_fetch, run["id"], {"succeeded", "failed"})
    assert done["status"] == "succeeded" and done["started_at"] and done["finished_at"]
    events = await all_events(jp_fetch, run["id"])
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    types = [e["type"] for e in events]
    assert types[0] == "execution_start" and types[-1] == "execution_complete"
    assert types.count("node_status") == 4  # running + done for both nodes


async def test_list_is_newest_first_with_total_and_filters(jp_fetch):
    ids = []
    for i in range(3):
        code, run = await call(jp_fetch, "api", "runs", method="POST", body={"graph": SMALL, "name": f"r{i}"})
        ids.append(run["id"])
    for run_id in ids:
        await wait_status(jp_fetch, run_id, {"succeeded"})
    code, page = await call(jp_fetch, "api", "runs", limit=2)
    assert code == 200 and page["total"] == 3 and [r["id"] for r in page["runs"]] == ids[::-1][:2]
    code, page = await call(jp_fetch, "api", "runs", status="failed")
    assert page["total"] == 0 and page["runs"] == []
    code, body = await call(jp_fetch, "api", "runs", limit=51)
    assert code == 400 and body["error"]["params"]["field"] == "limit"


async def test_cpu_queue_runs_two_at_once_and_keeps_fifo(jp_fetch):
    ids = []
    for i in range(3):
        # 3 s each: the third is read while the first two still run, however busy the machine.
        code, run = await call(jp_fetch, "api", "runs", method="POST", body={"graph": sleepy(3), "name": f"s{i}"})
        assert code == 201
        ids.append(run["id"])
    code, third = await call(jp_fetch, "api", "runs", ids[2])
    assert third["status"] == "queued" and third["queue_position"] == 1
    runs = [await wait_status(jp_fetch, i, {"succeeded"}) for i in ids]
    assert runs[2]["started_at"] >= min(runs[0]["finished_at"], runs[1]["finished_at"]) - 0.05


async def test_cancel_a_queued_run_leaves_the_line_at_once(jp_fetch):
    # Long runs, cancelled or left to the server's stop: the third is still queued when it is cancelled.
    ids = [(await call(jp_fetch, "api", "runs", method="POST", body={"graph": sleepy(60)}))[1]["id"]
           for _ in range(3)]
    code, run = await call(jp_fetch, "api", "runs", ids[2], "cancel", method="POST")
    assert code == 200 and run["status"] == "cancelled" and run["started_at"] is None
    events = await all_events(jp_fetch, ids[2])
    assert [e["type"] for e in events] == ["execution_stopped"]
    code, run = await call(jp_fetch, "api", "runs", ids[0], "cancel", method="POST")
    assert code == 200
    stopped = await wait_status(jp_fetch, ids[0], {"cancelled", "succeeded"})
    assert stopped["status"] == "cancelled"
    code, body = await call(jp_fetch, "api", "runs", ids[2], "cancel", method="POST")
    assert code == 409 and body["error"]["code"] == "run_finished"


async def test_delete_removes_a_finished_run_and_refuses_an_active_one(jp_fetch):
    code, run = await call(jp_fetch, "api", "runs", method="POST", body={"graph": sleepy(3)})  # active at the DELETE
    code, body = await call(jp_fetch, "api", "runs", run["id"], method="DELETE")
    assert code == 409 and body["error"]["code"] == "run_active"
    await wait_status(jp_fetch, run["id"], {"succeeded"})
    code, _ = await call(jp_fetch, "api", "runs", run["id"], method="DELETE")
    assert code == 204
    code, body = await call(jp_fetch, "api", "runs", run["id"])
    assert code == 404 and body["error"]["code"] == "run_not_found"


@pytest.mark.parametrize("body,status,code,field", [
    ({"graph": SMALL, "options": {"colour": 1}}, 422, "invalid_request", "options.colour"),
    ({"graph": SMALL, "options": {"seed": "x"}}, 422, "invalid_request", "options.seed"),
    ({"nodes": []}, 422, "invalid_request", "nodes"),
    ({"graph": {"nodes": [{"id": "a", "type": "Nope"}]}}, 400, "invalid_graph", None),
    ({"graph": SMALL, "options": {"device": "tpu"}}, 400, "device_invalid", "options.device"),
    ({"graph": SMALL, "options": {"device": "cuda:0"}}, 400, "device_unavailable", None),
    ({"graph": SMALL, "options": {"target": {"devices": ["cuda"]}}}, 400, "device_set_bare_cuda", None),
])
async def test_refusals_have_one_shape(jp_fetch, body, status, code, field):
    got, payload = await call(jp_fetch, "api", "runs", method="POST", body=body)
    assert got == status, payload
    error = payload["error"]
    assert set(error) == {"code", "message", "params"} and error["code"] == code and error["message"]
    if field is not None:
        assert error["params"].get("field") == field


async def test_unknown_runs_and_cursors_past_the_end(jp_fetch):
    code, body = await call(jp_fetch, "api", "runs", "nope")
    assert code == 404 and body["error"]["code"] == "run_not_found"
    code, run = await call(jp_fetch, "api", "runs", method="POST", body={"graph": SMALL})
    await wait_status(jp_fetch, run["id"], {"succeeded"})
    code, body = await call(jp_fetch, "api", "runs", run["id"], "events", cursor=999)
    assert code == 400 and body["error"]["code"] == "cursor_past_end"


async def test_events_long_poll_returns_as_soon_as_events_arrive(jp_fetch):
    code, run = await call(jp_fetch, "api", "runs", method="POST", body={"graph": sleepy(0.3)})
    done = await wait_status(jp_fetch, run["id"], {"succeeded"})
    code, page = await call(jp_fetch, "api", "runs", run["id"], "events", cursor=done["last_seq"], wait=1)
    assert code == 200 and page["events"] == [] and page["status"] == "succeeded"


async def test_metrics_json_and_csv_and_nodes(jp_fetch):
    graph = {"nodes": [{"id": "l", "type": "List", "params": {"values": [1, 2, 3]}}, {"id": "m", "type": "Mean"}],
             "edges": [edge("l", "values", "m", "values")]}
    code, run = await call(jp_fetch, "api", "runs", method="POST", body={"graph": graph})
    await wait_status(jp_fetch, run["id"], {"succeeded"})
    code, body = await call(jp_fetch, "api", "runs", run["id"], "metrics")
    assert code == 200 and [(m["node_id"], m["name"], m["value"]) for m in body["metrics"]] == [("m", "mean", 2.0)]
    code, text = await call(jp_fetch, "api", "runs", run["id"], "metrics", format="csv")
    assert code == 200 and text.decode().splitlines()[1].startswith("m,mean,,2.0")
    code, body = await call(jp_fetch, "api", "nodes")
    assert code == 200 and "Scale" in {n["type"] for n in body["nodes"]} and len(body["catalog"]["hash"]) == 64


async def test_secret_params_never_reach_the_database(jp_fetch, jp_serverapp):
    from codefy_jupyter.engine import default_registry, param

    reg = default_registry()
    if reg.get("NeedsKey") is None:
        @reg.node("NeedsKey", outputs={"ok": "bool"}, params={"key": param.secret("")})
        def needs_key(ctx, key):
            return {"ok": key == "s3cr3t"}
    graph = {"nodes": [{"id": "n", "type": "NeedsKey", "params": {"key": "s3cr3t"}}]}
    code, run = await call(jp_fetch, "api", "runs", method="POST", body={"graph": graph})
    assert code == 201
    await wait_status(jp_fetch, run["id"], {"succeeded"})
    app = jp_serverapp.extension_manager.extension_points["codefy"].app
    row = await app.store.get_run(run["id"])
    assert row["graph"]["nodes"][0]["params"]["key"] == ""
    raw = (app.codefy_settings.resolved_data_dir() / "codefy.sqlite").read_bytes()
    assert b"s3cr3t" not in raw


async def test_execution_socket_replays_then_follows(jp_fetch, jp_ws_fetch):
    code, run = await call(jp_fetch, "api", "runs", method="POST", body={"graph": sleepy(0.5)})
    ws = await jp_ws_fetch("codefy", "ws", "execution")
    await ws.write_message(json.dumps({"type": "subscribe", "run_id": run["id"], "cursor": 0}))
    seqs, last_type = [], None
    while last_type != "execution_complete":
        frame = json.loads(await asyncio.wait_for(ws.read_message(), 60))
        assert frame["type"] == "events", frame
        seqs += [e["seq"] for e in frame["events"]]
        last_type = frame["events"][-1]["type"]
    assert seqs == list(range(1, len(seqs) + 1))
    await ws.write_message(json.dumps({"type": "subscribe", "run_id": "nope"}))
    frame = json.loads(await asyncio.wait_for(ws.read_message(), 60))
    assert frame["type"] == "error" and frame["error"]["code"] == "run_not_found"
    ws.close()


async def test_the_openapi_description_is_served(jp_fetch):
    import yaml

    response = await jp_fetch("codefy", "api", "openapi.yaml")
    spec = yaml.safe_load(response.body)
    assert "/runs/{run_id}/events" in spec["paths"]


async def test_socket_submits_interactive_runs_and_follows_all_runs(jp_fetch, jp_ws_fetch):
    watcher = await jp_ws_fetch("codefy", "ws", "execution")
    await watcher.write_message(json.dumps({"type": "subscribe", "all": True}))
    canvas = await jp_ws_fetch("codefy", "ws", "execution", params={"session": "doc-1"})
    await canvas.write_message(json.dumps({"type": "submit", "request_id": 7, "body": {"graph": SMALL}}))
    frame = json.loads(await asyncio.wait_for(canvas.read_message(), 60))
    assert frame["type"] == "submitted" and frame["request_id"] == 7
    run = frame["run"]
    assert run["lane"] == "interactive" and run["session"] == "doc-1"

    async def frames_until_complete(ws, run_id):
        seen = []
        while True:
            got = json.loads(await asyncio.wait_for(ws.read_message(), 60))
            if got.get("run_id") == run_id and got["type"] == "events":
                seen += got["events"]
                if seen[-1]["type"] == "execution_complete":
                    return seen

    # The watcher, subscribed before the run existed, gets its whole log.
    watched = await frames_until_complete(watcher, run["id"])
    assert [e["seq"] for e in watched] == list(range(1, len(watched) + 1))
    await watcher.write_message(json.dumps({"type": "subscribe", "cursor": 0}))
    error = json.loads(await asyncio.wait_for(watcher.read_message(), 60))
    while error["type"] != "error":
        error = json.loads(await asyncio.wait_for(watcher.read_message(), 60))
    assert error["error"]["code"] == "invalid_request" and error["error"]["params"]["field"] == "run_id"
    watcher.close()
    canvas.close()


async def test_a_shared_token_records_no_owner(jp_fetch):
    # jupyter-server invents an anonymous user per token request; that identifies nobody.
    code, run = await call(jp_fetch, "api", "runs", method="POST", body={"graph": SMALL})
    assert code == 201 and run["owner"] is None


async def test_each_run_records_the_environment_fingerprint_stored_once(jp_fetch, jp_serverapp):
    ids = [(await call(jp_fetch, "api", "runs", method="POST", body={"graph": SMALL}))[1]["id"] for _ in range(2)]
    runs = [await wait_status(jp_fetch, i, {"succeeded"}) for i in ids]
    digests = {r["fingerprint_digest"] for r in runs}
    assert len(digests) == 1 and len(next(iter(digests))) == 64
    app = jp_serverapp.extension_manager.extension_points["codefy"].app
    document = await app.store.get_fingerprint(next(iter(digests)))
    assert document["python"] and document["torch"]["version"] and document["node_catalog"]
    assert any(p.startswith("codefy-jupyter==") for p in document["packages"])


async def test_a_reconnecting_reader_resumes_from_its_cursor_without_gaps(jp_fetch, jp_ws_fetch):
    # 3 s: still running when the first connection drops, however busy the machine.
    code, run = await call(jp_fetch, "api", "runs", method="POST", body={"graph": sleepy(3)})
    first = await jp_ws_fetch("codefy", "ws", "execution")
    await first.write_message(json.dumps({"type": "subscribe", "run_id": run["id"], "cursor": 0}))
    frame = json.loads(await asyncio.wait_for(first.read_message(), 60))
    seen = [e["seq"] for e in frame["events"]]
    first.close()  # the connection drops mid-run
    await wait_status(jp_fetch, run["id"], {"succeeded"})
    second = await jp_ws_fetch("codefy", "ws", "execution")
    await second.write_message(json.dumps({"type": "subscribe", "run_id": run["id"], "cursor": seen[-1]}))
    while True:
        frame = json.loads(await asyncio.wait_for(second.read_message(), 60))
        seen += [e["seq"] for e in frame["events"]]
        if frame["events"][-1]["type"] == "execution_complete":
            break
    assert seen == list(range(1, len(seen) + 1))
    second.close()


async def test_follow_all_replays_named_runs_from_their_cursors(jp_fetch, jp_ws_fetch):
    code, run = await call(jp_fetch, "api", "runs", method="POST", body={"graph": SMALL})
    done = await wait_status(jp_fetch, run["id"], {"succeeded"})
    ws = await jp_ws_fetch("codefy", "ws", "execution")
    await ws.write_message(json.dumps({"type": "subscribe", "all": True, "cursors": {run["id"]: 2}}))
    frame = json.loads(await asyncio.wait_for(ws.read_message(), 60))
    assert frame["type"] == "events" and frame["run_id"] == run["id"]
    assert [e["seq"] for e in frame["events"]] == list(range(3, done["last_seq"] + 1))
    ws.close()


async def test_pages_go_on_after_a_run_as_the_previous_page_says(jp_fetch):
    ids = []
    for i in range(7):
        code, run = await call(jp_fetch, "api", "runs", method="POST",
                               body={"graph": SMALL, "name": f"page {i}", "options": {"device": "cpu"}})
        assert code == 201, run
        ids.append(run["id"])
    newest_first = ids[::-1]
    code, first = await call(jp_fetch, "api", "runs", limit=3)
    assert code == 200 and [r["id"] for r in first["runs"]] == newest_first[:3] and first["next"] == newest_first[2]
    code, second = await call(jp_fetch, "api", "runs", limit=3, after=first["next"])
    assert code == 200 and [r["id"] for r in second["runs"]] == newest_first[3:6] and second["total"] == 7
    code, last = await call(jp_fetch, "api", "runs", limit=3, after=second["next"])
    assert [r["id"] for r in last["runs"]] == newest_first[6:] and "next" not in last
    code, body = await call(jp_fetch, "api", "runs", after="not-a-run")
    assert code == 400 and body["error"]["code"] == "invalid_after" and body["error"]["params"]["field"] == "after"


async def test_a_failed_runs_error_event_says_what_ran_and_which_outputs_exist(jp_fetch):
    # Seed (dynamic scheduling, error path): the structured error tells the client how far the run got.
    graph = {"nodes": [{"id": "a", "type": "Float", "params": {"value": 1}}, {"id": "zero", "type": "Float"},
                       {"id": "div", "type": "Divide"}, {"id": "after", "type": "Scale"}],
             "edges": [edge("a", "value", "div", "a"), edge("zero", "value", "div", "b"),
                       edge("div", "result", "after", "x")]}
    code, run = await call(jp_fetch, "api", "runs", method="POST", body={"graph": graph})
    assert code == 201, run
    done = await wait_status(jp_fetch, run["id"], {"succeeded", "failed"})
    assert done["status"] == "failed"
    events = await all_events(jp_fetch, run["id"])
    assert events[-1]["type"] == "execution_error"
    error = events[-1]["payload"]["error"]
    assert (error["node_id"], error["node_type"], error["exception_type"]) == ("div", "Divide", "ValueError")
    assert "is zero" in error["message"] and "Traceback" in error["traceback"]
    assert sorted(error["executed"]) == ["a", "zero"] and sorted(error["outputs_present"]) == ["a", "zero"]
    ran = {e["payload"]["node_id"] for e in events if e["type"] == "node_status"}
    assert "after" not in ran  # nothing downstream of the failure ran
