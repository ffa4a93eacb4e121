"""Nothing is served before restart recovery has finished (issue: the seams).

Real processes throughout: a headless control plane (`codefy start`), a real agent (`codefy agent
start`) whose runs execute in their own subprocesses, and the server killed with SIGKILL again and
again while runs stream events. Before each restart thousands of waiting runs are put into the
database, so recovery (retiring them, then retention) takes seconds, and the agent, which redials at
once, knocks while it is under way. Every run must be adopted, end succeeded, and keep a gapless log
in which every node's events appear exactly once: no frame lost, none duplicated.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pg_server import connect_raw, store_target

from test_headless import Servers, all_events, api, free_port, wait_gone, wait_status
from test_workers_e2e import AgentProcess, naps

pytestmark = pytest.mark.slow

RESTARTS = 20
WAITING_ROWS = 3000  # waiting runs put in before each restart: recovery retires each one
NODES_PER_RUN = 80
NAP_S = 0.05
TOKEN = "restart-recovery-token"


@pytest.fixture
def servers(tmp_path, request) -> Servers:
    s = Servers(tmp_path)
    s.env["JUPYTER_TOKEN"] = TOKEN  # the agent's token stays valid across restarts
    s.env["CODEFY_RUN_QUEUE_MAX_CONCURRENT"] = "box/cpu=3"
    request.addfinalizer(s.kill_leftovers)
    return s


def add_waiting_runs(data_dir: Path, count: int) -> None:
    """`count` queued runs written straight into the stopped server's database (as a previous
    process would have left them): the next start retires each one."""
    conn = connect_raw(store_target(data_dir))  # the SQLite file, or the PostgreSQL pass's database
    try:
        # The write lock first, waited for (connect_raw's timeout): a deferred BEGIN whose read comes
        # first is refused at once ("database is locked") if a writer holds the file when it upgrades.
        conn.execute("BEGIN IMMEDIATE")
        # Older than every real run, so retention prunes them first (more work for recovery too).
        (bottom,) = conn.execute("SELECT COALESCE(MIN(submit_order), 0) FROM runs").fetchone()
        now = time.time()
        conn.executemany(
            "INSERT INTO runs (id, submit_order, name, status, device, devices, queue_key, lane, options, graph,"
            " submitted_at, last_seq) VALUES (?, ?, 'filler', 'queued', 'cpu', '[\"cpu\"]', 'cpu', 'batch', '{}',"
            " '{\"nodes\": [], \"edges\": []}', ?, 0)",
            [(uuid.uuid4().hex[:12], bottom - i - 1, now) for i in range(count)])
        conn.execute("COMMIT")
    finally:
        conn.close()


def submit(state: dict[str, Any]) -> str:
    code, run = api(state, "POST", "runs", {"graph": naps(NODES_PER_RUN, NAP_S), "name": "long",
                                            "options": {"target": {"worker": "box"}}})
    assert code == 201, run
    return run["id"]


def running_with_events(state: dict[str, Any], run_id: str) -> bool:
    code, run = api(state, "GET", f"runs/{run_id}")
    return code == 200 and run["status"] == "running" and run["last_seq"] > 3


class Knocker(threading.Thread):
    """Asks for a run over and over while the server (re)starts: no answer may show a status that
    recovery is about to change (a dead server's run `running` before it is adopted)."""

    def __init__(self, port: int, run_id: str) -> None:
        super().__init__(daemon=True)
        self.url = f"http://127.0.0.1:{port}/codefy/api/runs/{run_id}"
        self.stop = threading.Event()
        self.answers: list[str] = []

    def run(self) -> None:
        while not self.stop.is_set():
            request = urllib.request.Request(self.url, headers={"Authorization": f"token {TOKEN}"})
            try:
                with urllib.request.urlopen(request, timeout=15) as response:
                    answer = json.loads(response.read())["status"]
            except urllib.error.HTTPError as err:
                body = json.loads(err.read())
                answer = f"{err.code} {body['error']['code']} retry-after={err.headers.get('Retry-After')}"
            except OSError:
                time.sleep(0.02)  # nothing listens yet
                continue
            self.answers.append(answer)


@pytest.mark.timeout(1200)  # twenty server starts: about 90 s on an idle 2-core machine
async def test_runs_on_a_real_agent_survive_twenty_hard_restarts_with_slow_recovery(servers, tmp_path):
    port = free_port()
    state = servers.start(port)
    control = state["url"]
    agent = AgentProcess(tmp_path, control, name="box", token=TOKEN,
                         env={"CODEFY_DEVICE_INVENTORY": ""})
    try:
        deadline = time.monotonic() + 120
        while True:
            code, listing = api(state, "GET", "workers")
            if any(w["name"] == "box" and w["state"] == "connected" for w in listing["workers"]):
                break
            assert time.monotonic() < deadline, agent.output()
            await asyncio.sleep(0.1)

        runs: list[str] = []
        adopted_runs: set[str] = set()
        for restart in range(RESTARTS):
            deadline = time.monotonic() + 120
            while True:  # two runs streaming events on the agent (a run may end while we look)
                rows = {r: api(state, "GET", f"runs/{r}")[1] for r in runs}
                live = [r for r in runs if rows[r]["status"] in ("queued", "running", "disconnected")]
                if len(live) >= 2 and all(rows[r]["status"] == "running" and rows[r]["last_seq"] > 3 for r in live):
                    break
                while len(live) < 2:
                    rid = submit(state)
                    runs.append(rid)
                    live.append(rid)
                assert time.monotonic() < deadline, f"restart {restart}: runs did not start:\n{agent.output()}"
                await asyncio.sleep(0.05)

            os.kill(state["pid"], signal.SIGKILL)
            wait_gone(state["pid"])
            add_waiting_runs(servers.data_dir, WAITING_ROWS)
            knocker = Knocker(port, live[0])
            knocker.start()
            try:
                state = servers.start(port)
            finally:
                knocker.stop.set()
                knocker.join(30)
            # While the server came back, a reader saw the run adopted (`disconnected`, or `running`
            # once its worker was back) or was told to retry: never anything recovery had not settled.
            assert set(knocker.answers) <= {"disconnected", "running", "succeeded", "503 recovering retry-after=2"}, \
                (restart, Counter(knocker.answers))
            adopted_runs.update(live)

        for rid in runs:
            wait_status(state, rid, {"succeeded", "failed", "cancelled", "interrupted"}, timeout=120)
        assert agent.proc.poll() is None, agent.output()
        for rid in runs:
            code, run = api(state, "GET", f"runs/{rid}")
            assert run["status"] == "succeeded", (rid, run.get("error"), run.get("execution_facts"))
            events = all_events(state, rid)
            assert [e["seq"] for e in events] == list(range(1, len(events) + 1)), rid
            warnings = [e["payload"]["code"] for e in events if e["type"] == "run_warning"]
            assert "worker_frames_lost" not in warnings, (rid, warnings)
            done = Counter(e["payload"]["node_id"] for e in events
                           if e["type"] == "node_status" and e["payload"].get("status") == "done")
            expected = {"k", *(f"nap{i}" for i in range(NODES_PER_RUN))}
            assert set(done) == expected and set(done.values()) == {1}, (rid, done)
            assert [e["type"] for e in events].count("execution_start") == 1
            assert events[-1]["type"] == "execution_complete"
            if rid in adopted_runs:
                assert "worker_adopted" in warnings, (rid, warnings)
        assert len(adopted_runs) >= 2
    finally:
        agent.cleanup()


def during_recovery(port: int, method: str, path: str) -> tuple[int, dict[str, Any], str | None]:
    """A request to a server that may not listen yet: retried until it answers."""
    deadline = time.monotonic() + 120
    while True:
        request = urllib.request.Request(f"http://127.0.0.1:{port}/codefy/api/{path}", method=method,
                                         data=b"" if method == "POST" else None,
                                         headers={"Authorization": f"token {TOKEN}"})
        try:
            with urllib.request.urlopen(request, timeout=15) as response:
                return response.status, json.loads(response.read()), response.headers.get("Retry-After")
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read()), err.headers.get("Retry-After")
        except OSError:
            assert time.monotonic() < deadline, "the server never listened"
            time.sleep(0.01)


async def test_while_recovery_runs_every_route_says_recovering_and_nothing_acts_on_stale_state(servers, tmp_path):
    from tornado.httpclient import HTTPClientError, HTTPRequest
    from tornado.websocket import websocket_connect

    port = free_port()
    state = servers.start(port)
    code, run = api(state, "POST", "runs", {"graph": naps(1, 60), "name": "caught"})
    assert code == 201
    wait_status(state, run["id"], {"running"})
    os.kill(state["pid"], signal.SIGKILL)
    wait_gone(state["pid"])
    add_waiting_runs(servers.data_dir, 2 * WAITING_ROWS)

    env = {**servers.env, "CODEFY_READY_WAIT_S": "0"}  # answer at once instead of waiting
    log = open(tmp_path / "foreground.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "codefy_jupyter.cli", "start", "--foreground", "--data-dir",
                             str(servers.data_dir), "--port", str(port)], cwd=tmp_path, env=env, stdout=log,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    servers.pids.add(proc.pid)
    try:
        code, body, retry = during_recovery(port, "GET", f"runs/{run['id']}")
        assert (code, body["error"]["code"], retry) == (503, "recovering", "2"), (code, body)
        assert body["error"]["params"] == {"retry_after_s": 2}
        code, body, retry = during_recovery(port, "POST", f"runs/{run['id']}/cancel")
        assert (code, body["error"]["code"], retry) == (503, "recovering", "2"), (code, body)

        base = f"ws://127.0.0.1:{port}/codefy/ws/"
        auth = {"Authorization": f"token {TOKEN}"}
        with pytest.raises(HTTPClientError) as refused:
            await websocket_connect(HTTPRequest(base + "execution", headers=auth))
        assert refused.value.code == 503
        assert json.loads(refused.value.response.body)["error"]["code"] == "recovering"
        assert refused.value.response.headers["Retry-After"] == "2"
        worker = await websocket_connect(HTTPRequest(base + "worker", headers=auth))
        assert await worker.read_message() is None  # closed before any frame: try again later
        worker.close()
        assert worker.close_code == 1013 and "recovering" in worker.close_reason

        # Once recovered, the run the dead process left is what recovery made of it.
        deadline = time.monotonic() + 120
        while True:
            code, body, _ = during_recovery(port, "GET", f"runs/{run['id']}")
            if code == 200:
                break
            assert code == 503 and time.monotonic() < deadline, (code, body)
            time.sleep(0.1)
        assert body["status"] == "interrupted", body["status"]
        events = all_events({"url": f"http://127.0.0.1:{port}/", "token": TOKEN}, run["id"])
        assert events[-1]["payload"]["reason"]["code"] == "server_restart"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        log.close()
