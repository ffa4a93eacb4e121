"""Two real `codefy start` processes on one real PostgreSQL database (tests/pg_server.py): the first
leads, the second is a standby naming it; `kill -9` of the leader, and the standby takes the lease
over within its TTL, recovers what the leader left (its in-process run ends interrupted, as after a
restart) and serves. Waits are on conditions, with generous deadlines."""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.error
import urllib.request
from typing import Any

import pytest

pytest.importorskip("psycopg", reason="psycopg is not installed (pip install -e '.[test]')")

from pg_server import connect_raw  # noqa: E402

from test_headless import Servers, alive  # noqa: E402
from test_server_runs import SMALL, sleepy  # noqa: E402

DEADLINE_S = 90.0


def request(state: dict[str, Any], path: str, body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"{state['url']}codefy/api/{path}", data=data, method="POST" if data else "GET",
                                 headers={"Authorization": f"token {state['token']}",
                                          "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        with err:
            return err.code, json.loads(err.read())


def role(state: dict[str, Any]) -> tuple[str, str | None]:
    try:
        code, body = request(state, "health")
    except OSError:
        return "unreachable", None
    if code == 200:
        return body["role"], body["leader"]
    return body["error"]["params"]["role"], body["error"]["params"].get("leader")


def until(condition, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_kill_9_of_the_leader_and_the_standby_takes_over_recovers_and_serves(tmp_path, pg_url):
    servers = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        s = Servers(tmp_path / name)
        s.env["CODEFY_STORE_URL"] = pg_url
        s.env["CODEFY_RUN_FILES_SHARED"] = "1"  # one machine: each replica reaches the other's data dir
        servers.append(s)
    a, b = servers
    try:
        leader = a.start()
        until(lambda: role(leader)[0] == "leader", "a to lead")
        a_url = role(leader)[1]
        standby = b.start()  # `codefy start` is done once the server answers, as a standby too
        assert role(standby) == ("standby", a_url)
        code, body = request(standby, "runs")
        assert code == 503 and body["error"]["code"] == "standby"
        assert body["error"]["params"]["leader"] == a_url

        code, running = request(leader, "runs", {"graph": sleepy(600), "name": "dies with a"})
        assert code == 201, running
        until(lambda: request(leader, f"runs/{running['id']}")[1]["status"] == "running", "the run to start")

        os.kill(leader["pid"], signal.SIGKILL)
        until(lambda: not alive(leader["pid"]), "a to die")
        until(lambda: role(standby)[0] == "leader", "b to take over")
        assert role(standby)[1] not in (None, a_url)  # b names itself now
        conn = connect_raw(pg_url)
        try:
            epoch = conn.execute("SELECT epoch FROM leader_lease").fetchone()[0]
        finally:
            conn.close()
        assert epoch == 2

        until(lambda: request(standby, f"runs/{running['id']}")[1]["status"] == "interrupted",
              "a's in-process run to end interrupted")
        code, after = request(standby, "runs", {"graph": SMALL, "name": "on b"})
        assert code == 201, after
        until(lambda: request(standby, f"runs/{after['id']}")[1]["status"] in ("succeeded", "failed"),
              "b's run to end")
        assert request(standby, f"runs/{after['id']}")[1]["status"] == "succeeded"
    finally:
        for s in servers:
            s.stop()
            s.kill_leftovers()
