"""A worker's credentials crossing the network unencrypted are logged (seed: execution architecture,
enrollment): an enrollment token or a worker token sent over plain HTTP from another machine.

A real `codefy start` server whose Jupyter config trusts a proxy's X-Real-Ip / X-Scheme headers
(`ServerApp.trust_xheaders`, as a server behind a reverse proxy is set up): that is how a test on one
machine presents a peer that is not loopback, and a proxy that ended TLS."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request

import pytest
import test_headless as headless
from tornado.httpclient import HTTPRequest
from tornado.websocket import websocket_connect

from codefy_jupyter.server.headless import LOG_FILE

pytestmark = pytest.mark.slow

FAR = {"X-Real-Ip": "10.1.2.3"}
ADVICE = "put the control plane behind TLS on untrusted networks"


@pytest.fixture
def servers(tmp_path, request) -> headless.Servers:
    s = headless.Servers(tmp_path)
    request.addfinalizer(s.kill_leftovers)
    config = tmp_path / "jupyter" / "config"
    config.mkdir(parents=True)
    (config / "jupyter_server_config.json").write_text(json.dumps({"ServerApp": {"trust_xheaders": True}}))
    return s


def exchange(state: dict, headers: dict[str, str], name: str) -> str:
    """A one-time token (issued with the server's token), exchanged for a worker token from `headers`' peer."""
    code, issued = headless.api(state, "POST", "workers/enrollments", {})
    assert code == 201, issued
    req = urllib.request.Request(f"{state['url']}codefy/api/workers/enroll", method="POST",
                                 data=json.dumps({"token": issued["token"], "name": name}).encode(),
                                 headers={"Content-Type": "application/json", **headers})
    with urllib.request.urlopen(req, timeout=15) as response:
        assert response.status == 201
        return json.loads(response.read())["worker_token"]


def said(servers: headless.Servers, what: str) -> list[str]:
    log = (servers.data_dir / LOG_FILE).read_text(errors="replace")
    return [line for line in log.splitlines() if f"{what} arrived over plain HTTP" in line]


def test_an_enrollment_or_a_worker_token_over_plain_http_from_another_machine_is_logged(servers):
    state = servers.start()
    exchange(state, {}, "near")  # loopback: nothing to say
    exchange(state, {**FAR, "X-Scheme": "https"}, "behind-tls")  # TLS ended at a proxy: fine
    token = exchange(state, FAR, "far")

    async def dial(headers: dict[str, str]) -> None:
        url = f"ws://127.0.0.1:{state['port']}/codefy/ws/worker"
        conn = await websocket_connect(HTTPRequest(url, headers={"Authorization": f"token {token}", **headers}))
        conn.close()  # the check is made before the hello: accepted is enough

    asyncio.run(dial({**FAR, "X-Scheme": "https"}))
    asyncio.run(dial(FAR))

    deadline = time.monotonic() + 60
    while not said(servers, "a worker token"):  # the log is written by another process
        assert time.monotonic() < deadline, (servers.data_dir / LOG_FILE).read_text()[-3000:]
        time.sleep(0.1)
    enrollments, tokens = said(servers, "an enrollment token"), said(servers, "a worker token")
    assert len(enrollments) == 1 and len(tokens) == 1, enrollments + tokens
    assert all("from 10.1.2.3" in line and ADVICE in line for line in enrollments + tokens)
    assert servers.stop().returncode == 0
