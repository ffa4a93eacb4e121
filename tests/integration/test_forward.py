"""A server with `service_url` set passes its codefy routes on to that control plane: here a real
`codefy start` on loopback that accepts the same token (off a Hub, the request's own token is what
goes on; under a Hub it is the user's Hub credential: tests/hub/test_hub_service.py). Its answers
come back unchanged, refusals included, and the forwarding server opens no database of its own."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest
from test_server_runs import SMALL, call, sleepy, wait_status

from tornado.httpclient import AsyncHTTPClient, HTTPClientError

from codefy_jupyter.server.headless import read_state

TOKEN = "forward-tests-" + "0" * 32
pytestmark = pytest.mark.timeout(300)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def upstream(tmp_path):
    data_dir = tmp_path / "team"
    cli = [sys.executable, "-m", "codefy_jupyter.cli"]
    done = subprocess.run([*cli, "start", "--data-dir", str(data_dir), "--port", str(free_port()), "--token", TOKEN],
                          capture_output=True, text=True, timeout=100)
    assert done.returncode == 0, done.stdout + done.stderr
    try:
        yield read_state(data_dir)
    finally:
        subprocess.run([*cli, "stop", "--data-dir", str(data_dir)], capture_output=True, timeout=30)


@pytest.fixture
def jp_server_config(tmp_path, request):
    service_url = request.getfixturevalue("upstream")["url"] if "upstream" in request.fixturenames \
        else f"http://127.0.0.1:{free_port()}/"  # nothing listens there
    return {"ServerApp": {"jpserver_extensions": {"codefy_jupyter": True}},
            "IdentityProvider": {"token": TOKEN},
            "CodefyApp": {"data_dir": str(tmp_path / "local"), "service_url": service_url}}


async def test_runs_and_their_events_come_from_the_service(upstream, jp_fetch, tmp_path):
    code, run = await call(jp_fetch, "api", "runs", method="POST", body={"graph": SMALL})
    assert code == 201, run
    done = await wait_status(jp_fetch, run["id"], {"succeeded"})
    code, page = await call(jp_fetch, "api", "runs", run["id"], "events", cursor=0)
    assert code == 200 and page["events"][-1]["type"] == "execution_complete", page
    code, listing = await call(jp_fetch, "api", "runs")
    assert [r["id"] for r in listing["runs"]] == [run["id"]] and done["status"] == "succeeded"
    # The service's refusals, unchanged: the one error shape and its status.
    code, body = await call(jp_fetch, "api", "runs", "nope")
    assert code == 404 and body["error"]["code"] == "run_not_found", body
    code, body = await call(jp_fetch, "api", "runs", method="POST", body={"graph": {"nodes": "x"}})
    assert code == 400 and body["error"]["code"] == "invalid_graph", body
    code, listing = await call(jp_fetch, "api", "runs")
    assert listing["total"] == 1, listing  # the refused graph left nothing
    # One database, the service's.
    assert (tmp_path / "team" / "codefy.sqlite").exists()
    assert not (tmp_path / "local" / "codefy.sqlite").exists()


async def test_the_execution_socket_is_relayed(upstream, jp_fetch, jp_ws_fetch):
    code, run = await call(jp_fetch, "api", "runs", method="POST", body={"graph": sleepy(0.3)})
    assert code == 201, run
    ws = await jp_ws_fetch("codefy", "ws", "execution")
    try:
        await ws.write_message(json.dumps({"type": "subscribe", "run_id": run["id"], "cursor": 0}))
        types: list[str] = []
        while "execution_complete" not in types:
            message = await ws.read_message()
            assert message is not None, (ws.close_code, types)
            frame = json.loads(message)
            assert frame["type"] == "events", frame
            types += [e["type"] for e in frame["events"]]
        await ws.write_message(json.dumps({"type": "subscribe"}))  # malformed: the service says so
        frame = json.loads(await ws.read_message())
        assert frame["type"] == "error", frame
    finally:
        ws.close()


async def test_a_service_that_does_not_answer_is_a_503_and_nothing_is_written(jp_fetch, jp_ws_fetch, tmp_path):
    code, body = await call(jp_fetch, "api", "runs", method="POST", body={"graph": SMALL})
    assert code == 503 and body["error"]["code"] == "service_unreachable", body
    assert body["error"]["params"]["service_url"].startswith("http://127.0.0.1:")
    with pytest.raises(HTTPClientError) as refused:
        await jp_ws_fetch("codefy", "ws", "execution")
    assert refused.value.code == 503
    assert not (tmp_path / "local").exists() or not any((tmp_path / "local").iterdir())


async def test_a_large_body_goes_on_whole_and_a_large_answer_streams_back(upstream, jp_fetch, monkeypatch):
    """A 1.5 MB graph (twelve 20,000-value lists) goes on whole; its events page, over the size
    from which an answer streams (lowered here: this server runs in the test's process), comes back
    byte for byte as the service answers it directly."""
    from codefy_jupyter.server import forward

    monkeypatch.setattr(forward, "STREAM_AFTER_BYTES", 1024)
    lists = [{"id": f"v{i}", "type": "List", "params": {"values": [j + i for j in range(20_000)]}} for i in range(12)]
    naps = [{"id": f"s{i}", "type": "Sleep", "params": {"seconds": 0}} for i in range(12)]
    graph = {"nodes": lists + naps,
             "edges": [{"source": f"v{i}", "source_port": "values", "target": f"s{i}", "target_port": "value"}
                       for i in range(12)]}
    assert len(json.dumps(graph)) > 1_000_000
    code, run = await call(jp_fetch, "api", "runs", method="POST", body={"graph": graph})
    assert code == 201, run
    done = await wait_status(jp_fetch, run["id"], {"succeeded"})
    through = await jp_fetch("codefy", "api", "runs", run["id"], "events", params={"cursor": 0})
    assert len(through.body) > 4 * 1024, len(through.body)
    direct = await AsyncHTTPClient().fetch(f"{upstream['url']}codefy/api/runs/{run['id']}/events?cursor=0",
                                           headers={"Authorization": f"token {TOKEN}"})
    assert through.body == direct.body
    assert through.headers["Content-Type"] == direct.headers["Content-Type"]
    assert json.loads(through.body)["events"][-1]["payload"]["executed"] == 24 and done["status"] == "succeeded"
