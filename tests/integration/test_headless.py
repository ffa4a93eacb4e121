"""`codefy start` / `codefy stop` as real subprocesses: a detached headless server, found through its
state file, driven over real HTTP, stopped gracefully or killed with SIGKILL and started again."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import psutil
import pytest
from pg_server import backend_env

pytestmark = pytest.mark.slow


def edge(s, sp, t, tp):
    return {"source": s, "source_port": sp, "target": t, "target_port": tp}


SMALL = {"nodes": [{"id": "k", "type": "Float", "params": {"value": 2}},
                   {"id": "s", "type": "Scale", "params": {"factor": 3}}],
         "edges": [edge("k", "value", "s", "x")]}

SLEEPY = {"nodes": [{"id": "k", "type": "Float", "params": {"value": 1}},
                    {"id": "nap", "type": "Sleep", "params": {"seconds": 60}}],
          "edges": [edge("k", "value", "nap", "value")]}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def alive(pid: int) -> bool:
    """Not yet gone: running, or a zombie whose other threads are still exiting (the group leader
    turns zombie first; the process's files, and their locks, close when its last thread ends)."""
    try:
        if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
            return True
        return len(os.listdir(f"/proc/{pid}/task")) > 1
    except (psutil.NoSuchProcess, FileNotFoundError):
        return False


def wait_gone(pid: int, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while alive(pid):
        assert time.monotonic() < deadline, f"process {pid} is still there"
        time.sleep(0.05)


class Servers:
    """Runs `codefy` in a subprocess with an isolated Jupyter environment, and remembers every
    server pid it saw so the finalizer can kill what a failing test left behind."""

    def __init__(self, tmp_path: Path) -> None:
        self.data_dir = tmp_path / "codefy"
        jupyter = tmp_path / "jupyter"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("CODEFY_", "JUPYTER_"))}
        self.env.update(JUPYTER_CONFIG_DIR=str(jupyter / "config"), JUPYTER_DATA_DIR=str(jupyter / "data"),
                        JUPYTER_RUNTIME_DIR=str(jupyter / "runtime"), JUPYTER_PLATFORM_DIRS="0")
        self.env.update(backend_env())  # CODEFY_TEST_STORE=postgresql: the test's own database
        self.cwd = tmp_path
        self.pids: set[int] = set()

    def codefy(self, *args: str, timeout: float = 100) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "codefy_jupyter.cli", *args], cwd=self.cwd, env=self.env,
                              capture_output=True, text=True, timeout=timeout)

    @property
    def state_file(self) -> Path:
        return self.data_dir / "server.json"

    def state(self) -> dict[str, Any]:
        return json.loads(self.state_file.read_text())

    def start(self, port: int | None = None) -> dict[str, Any]:
        port = port or free_port()
        proc = self.codefy("start", "--data-dir", str(self.data_dir), "--port", str(port))
        if self.state_file.exists():
            self.pids.add(self.state()["pid"])
        assert proc.returncode == 0, proc.stdout + proc.stderr
        state = self.state()
        assert state["port"] == port and state["url"] == f"http://127.0.0.1:{port}/"
        assert f"codefy server running at {state['url']} (pid {state['pid']})" in proc.stdout
        return state

    def stop(self) -> subprocess.CompletedProcess[str]:
        return self.codefy("stop", "--data-dir", str(self.data_dir))

    def kill_leftovers(self) -> None:
        for pid in self.pids:
            if alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        for pid in self.pids:
            with contextlib.suppress(AssertionError):
                wait_gone(pid, 5)


@pytest.fixture
def servers(tmp_path, request) -> Servers:
    s = Servers(tmp_path)
    request.addfinalizer(s.kill_leftovers)
    return s


def api(state: dict[str, Any], method: str, path: str, body: Any = None, token: str | None = "default"):
    headers = {"Content-Type": "application/json"}
    token = state["token"] if token == "default" else token
    if token is not None:
        headers["Authorization"] = f"token {token}"
    data = json.dumps(body).encode() if body is not None else (b"" if method == "POST" else None)
    req = urllib.request.Request(f"{state['url']}codefy/api/{path}", data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=15) as response:
            raw = response.read()
            return response.status, (json.loads(raw) if raw else None)
    except urllib.error.HTTPError as err:
        with contextlib.closing(err):
            raw = err.read()
        try:
            return err.code, json.loads(raw) if raw else None
        except ValueError:
            return err.code, raw


def submit(state, graph, **extra) -> dict[str, Any]:
    code, run = api(state, "POST", "runs", {"graph": graph, **extra})
    assert code == 201, run
    return run


def wait_status(state, run_id, statuses, timeout=120.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        code, run = api(state, "GET", f"runs/{run_id}")
        assert code == 200, run
        if run["status"] in statuses:
            return run
        assert time.monotonic() < deadline, f"run {run_id} stayed {run['status']}"
        time.sleep(0.05)


def all_events(state, run_id) -> list[dict[str, Any]]:
    events, cursor = [], 0
    while True:
        code, page = api(state, "GET", f"runs/{run_id}/events?cursor={cursor}")
        assert code == 200, page
        events += page["events"]
        cursor = page["cursor"]
        if not page["more"]:
            return events


def assert_retired(state, run_id, code) -> None:
    run = wait_status(state, run_id, {"interrupted", "succeeded", "failed", "cancelled"}, timeout=120)
    assert run["status"] == "interrupted" and run["finished_at"], run
    events = all_events(state, run_id)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1)), events
    last = events[-1]
    assert last["type"] == "execution_stopped", events
    assert last["payload"]["status"] == "interrupted"
    assert last["payload"]["reason"]["code"] == code, last
    assert sum(e["type"] == "execution_stopped" for e in events) == 1


def submit_three_sleepers(state) -> list[dict[str, Any]]:
    """Three sleeping runs on the cpu queue (limit 2): two run, one waits behind them."""
    runs = [submit(state, SLEEPY, name="first"),
            submit(state, SLEEPY, name="second", options={"device": "cpu"}),
            submit(state, SLEEPY, name="third")]
    wait_status(state, runs[0]["id"], {"running"})
    wait_status(state, runs[1]["id"], {"running"})
    third = wait_status(state, runs[2]["id"], {"queued"})
    assert third["queue_position"] is not None
    return runs


def test_start_serves_the_api_and_stop_stops_it(servers):
    state = servers.start()
    pid = state["pid"]
    assert alive(pid)
    assert stat.S_IMODE(servers.state_file.stat().st_mode) == 0o600
    assert state["token"] and state["base_url"] == "/" and state["started_at"] <= time.time()
    assert (servers.data_dir / "codefy.sqlite").exists() and (servers.data_dir / "server.log").exists()

    code, _ = api(state, "GET", "runs", token=None)
    assert code == 403  # the token is required
    run = submit(state, SMALL, name="small")
    done = wait_status(state, run["id"], {"succeeded", "failed"})
    assert done["status"] == "succeeded", done
    events = all_events(state, run["id"])
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert events[-1]["type"] == "execution_complete"
    log = (servers.data_dir / "server.log").read_text()
    assert "codefy: run queue ready" in log  # INFO still logged
    assert "codefy: serving on the uvloop event loop (CODEFY_SERVER_LOOP)" in log

    again = servers.codefy("start", "--data-dir", str(servers.data_dir), "--port", str(free_port()))
    assert again.returncode == 1
    assert "already running" in again.stderr and state["url"] in again.stderr
    assert servers.state()["pid"] == pid  # the refused start left the running server's record alone

    stopped = servers.stop()
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert f"pid {pid}" in stopped.stdout and "killed" not in stopped.stderr
    wait_gone(pid)
    assert not servers.state_file.exists()

    nothing = servers.stop()
    assert nothing.returncode == 1
    assert f"no codefy server is running (no {servers.state_file})" in nothing.stderr


def test_start_refuses_an_unknown_event_loop_before_spawning_anything(servers):
    servers.env["CODEFY_SERVER_LOOP"] = "tokio"
    refused = servers.codefy("start", "--data-dir", str(servers.data_dir), "--port", str(free_port()))
    assert refused.returncode == 1
    assert "CODEFY_SERVER_LOOP='tokio': expected one of auto, uvloop, asyncio" in refused.stderr
    assert not servers.state_file.exists() and not (servers.data_dir / "server.log").exists()
    servers.env["CODEFY_SERVER_LOOP"] = "asyncio"
    state = servers.start()
    assert "serving on the asyncio event loop" in (servers.data_dir / "server.log").read_text()
    assert api(state, "GET", "runs")[0] == 200
    assert servers.stop().returncode == 0


def test_stop_with_nothing_running_says_so(servers):
    proc = servers.stop()
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.strip() == f"error: no codefy server is running (no {servers.state_file})"


def test_stop_clears_a_stale_state_file(servers):
    servers.data_dir.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    servers.state_file.write_text(json.dumps({"pid": dead.pid, "url": "http://127.0.0.1:1/", "token": "x"}))
    proc = servers.stop()
    assert proc.returncode == 1
    assert f"no codefy server is running (pid {dead.pid} from {servers.state_file} is gone" in proc.stderr
    assert not servers.state_file.exists()


def test_start_fails_clearly_when_the_port_is_taken(servers):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = servers.codefy("start", "--data-dir", str(servers.data_dir), "--port", str(port))
    assert proc.returncode == 1
    assert "exited with code 1 while starting" in proc.stderr
    assert f"port {port} is not available" in proc.stderr  # the log's tail
    assert not servers.state_file.exists()


def test_start_fails_fast_when_the_run_queue_cannot_open_its_database(servers):
    servers.data_dir.mkdir()
    junk = b"this is not an SQLite database" * 10
    (servers.data_dir / "codefy.sqlite").write_bytes(junk)
    began = time.monotonic()
    proc = servers.codefy("start", "--data-dir", str(servers.data_dir), "--port", str(free_port()))
    assert proc.returncode == 1
    assert time.monotonic() - began < 80  # it does not wait out the 90 s start timeout
    assert "answered 503" in proc.stderr and "not an SQLite database" in proc.stderr
    assert not servers.state_file.exists()  # the half-started server was stopped
    assert (servers.data_dir / "codefy.sqlite").read_bytes() == junk


def test_kill_9_then_start_retires_every_active_run_as_server_restart(servers):
    state = servers.start()
    runs = submit_three_sleepers(state)

    pid = servers.state()["pid"]
    os.kill(pid, signal.SIGKILL)  # kill -9: no shutdown hook runs
    wait_gone(pid)
    assert servers.state_file.exists()  # left behind; the next start recognises it as stale

    restarted = servers.start()
    assert restarted["pid"] != pid
    for run in runs:
        assert_retired(restarted, run["id"], "server_restart")
    # The queue is usable again after recovery.
    fresh = submit(restarted, SMALL)
    assert wait_status(restarted, fresh["id"], {"succeeded", "failed"})["status"] == "succeeded"

    assert servers.stop().returncode == 0
    wait_gone(restarted["pid"])


def test_graceful_stop_retires_runs_as_server_shutdown(servers):
    state = servers.start()
    runs = submit_three_sleepers(state)

    stopped = servers.stop()
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert "killed" not in stopped.stderr  # it went within the stop timeout, on its own
    wait_gone(state["pid"])
    assert not servers.state_file.exists()

    restarted = servers.start()
    for run in runs:  # the two that ran and the one that waited
        assert_retired(restarted, run["id"], "server_shutdown")
    assert servers.stop().returncode == 0


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_token_survives_a_restart_unless_one_is_given(servers):
    state = servers.start()
    token_file = servers.data_dir / "token"
    assert token_file.read_text().strip() == state["token"] and mode(token_file) == 0o600
    assert servers.stop().returncode == 0

    again = servers.start()
    assert again["token"] == state["token"]
    assert api(again, "GET", "runs")[0] == 200  # a client holding the old token gets in
    assert servers.stop().returncode == 0

    given = servers.codefy("start", "--data-dir", str(servers.data_dir), "--port", str(free_port()),
                           "--token", "given-for-this-start")
    assert given.returncode == 0, given.stderr
    servers.pids.add(servers.state()["pid"])
    assert servers.state()["token"] == "given-for-this-start"
    assert token_file.read_text().strip() == state["token"]  # a given token is not stored
    assert servers.stop().returncode == 0
    assert servers.start()["token"] == state["token"]
    assert servers.stop().returncode == 0


def test_the_server_files_are_private_to_their_owner(servers):
    old = os.umask(0o022)  # what SQLite and open() would otherwise turn into 0644
    try:
        state = servers.start()
    finally:
        os.umask(old)
    run = submit(state, SMALL)
    assert wait_status(state, run["id"], {"succeeded", "failed"})["status"] == "succeeded"
    d = servers.data_dir
    assert mode(d) == 0o700
    present = [p.name for p in d.iterdir()]
    for name in ("codefy.sqlite", "codefy.sqlite-wal", "codefy.sqlite-shm", "codefy.sqlite.lock", "server.log",
                 "server.lock", "server.json", "token"):
        assert name in present, (name, present)
        assert mode(d / name) == 0o600, name
    assert servers.stop().returncode == 0
