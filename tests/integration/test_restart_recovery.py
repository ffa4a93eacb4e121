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
import sqlite3
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


def add_waiting_runs(db: Path, count: int) -> None:
    """`count` queued runs written straight into the stopped server's database (as a previous
    process would have left them): the next start retires each one."""
    conn = sqlite3.connect(db)
    try:
        with conn:
            # Older than every real run, so retention prunes them first (more work for recovery too).
            (bottom,) = conn.execute("SELECT COALESCE(MIN(submit_order), 0) FROM runs").fetchone()
            now = time.time()
            conn.executemany(
                "INSERT INTO runs (id, submit_order, name, status, device, devices, queue_key, lane, options, graph,"
                " submitted_at, last_seq) VALUES (?, ?, 'filler', 'queued', 'cpu', '[\"cpu\"]', 'cpu', 'batch', '{}',"
                " '{\"nodes\": [], \"edges\": []}', ?, 0)",
                [(uuid.uuid4().hex[:12], bottom - i - 1, now) for i in range(count)])
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


async def test_runs_on_a_real_agent_survive_twenty_hard_restarts_with_slow_recovery(servers, tmp_path):
    port = free_port()
    state = servers.start(port)
    control = state["url"]
    agent = AgentProcess(tmp_path, control, name="box", token=TOKEN,
                         env={"CODEFY_DEVICE_INVENTORY": ""})
    try:
        deadline = time.monotonic() + 60
        while True:
            code, listing = api(state, "GET", "workers")
            if any(w["name"] == "box" and w["state"] == "connected" for w in listing["workers"]):
                break
            assert time.monotonic() < deadline, agent.output()
            await asyncio.sleep(0.1)

        runs: list[str] = []
        adopted_runs: set[str] = set()
        db = servers.data_dir / "codefy.sqlite"
        for restart in range(RESTARTS):
            deadline = time.monotonic() + 60
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
            add_waiting_runs(db, WAITING_ROWS)
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
