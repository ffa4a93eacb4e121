"""One server per run database, with real processes: a `jupyter server` with the extension (as in
Lab) and `codefy start` on one data dir, in both orders. The second one never opens the database:
`codefy start` refuses naming the holder, the extension stays loaded and answers 503 `store_locked`.
A holder killed with -9 blocks nobody; a stopped one hands the database over."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from test_headless import SMALL, Servers, alive, api, free_port, submit, wait_gone, wait_status

pytestmark = pytest.mark.slow


class JupyterServer:
    """`python -m jupyter_server` with the codefy extension and `c.CodefyApp.data_dir`, from a config
    file in an isolated Jupyter config dir, as a user's Lab would have it."""

    def __init__(self, tmp_path: Path, env: dict[str, str], data_dir: Path) -> None:
        config_dir = tmp_path / "lab-config"
        config_dir.mkdir()
        (config_dir / "jupyter_server_config.json").write_text(json.dumps({
            "ServerApp": {"jpserver_extensions": {"codefy_jupyter": True}},
            "CodefyApp": {"data_dir": str(data_dir)}}))
        self.port = free_port()
        self.token = secrets.token_hex(12)
        self.url = f"http://127.0.0.1:{self.port}/"
        self.state = {"url": self.url, "token": self.token}  # what test_headless.api takes
        self.log_path = tmp_path / f"jupyter-server-{self.port}.log"
        self.log = open(self.log_path, "wb")
        cmd = [sys.executable, "-m", "jupyter_server", "--no-browser", "--allow-root", "--ip=127.0.0.1",
               f"--port={self.port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={self.token}",
               f"--ServerApp.root_dir={tmp_path}"]
        self.proc = subprocess.Popen(cmd, env={**env, "JUPYTER_CONFIG_DIR": str(config_dir)}, cwd=tmp_path,
                                     stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def first_answer(self, timeout: float = 90.0) -> tuple[int, Any]:
        """The codefy route's first answer once the server listens."""
        deadline = time.monotonic() + timeout
        while True:
            assert self.proc.poll() is None, self.output()
            with contextlib.suppress(OSError):
                return api(self.state, "GET", "runs")
            assert time.monotonic() < deadline, self.output()
            time.sleep(0.1)

    def database_files_open(self, data_dir: Path) -> list[str]:
        return [f.path for f in psutil.Process(self.pid).open_files()
                if Path(f.path).name.startswith("codefy.sqlite") and Path(f.path).parent == data_dir]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
        self.log.close()


@pytest.fixture
def servers(tmp_path, request) -> Servers:
    s = Servers(tmp_path)
    request.addfinalizer(s.kill_leftovers)
    return s


@pytest.fixture
def lab(tmp_path, servers, request):
    made: list[JupyterServer] = []

    def start() -> JupyterServer:
        server = JupyterServer(tmp_path, servers.env, servers.data_dir)
        made.append(server)
        return server

    yield start
    for server in made:
        server.stop()


def test_codefy_start_refuses_a_database_a_lab_holds(servers, lab):
    first = lab()
    code, page = first.first_answer()
    assert code == 200, (page, first.output())
    holder = json.loads((servers.data_dir / "codefy.sqlite.lock").read_text())
    assert holder["pid"] == first.pid and holder["url"] == first.url

    port = free_port()
    refused = servers.codefy("start", "--data-dir", str(servers.data_dir), "--port", str(port))
    assert refused.returncode == 1, refused.stdout + refused.stderr
    for part in (f"{servers.data_dir / 'codefy.sqlite'} is in use by another codefy server",
                 f"pid {first.pid}", first.url, "--data-dir", "CODEFY_DATA_DIR", "c.CodefyApp.data_dir"):
        assert part in refused.stderr, (part, refused.stderr)
    assert not servers.state_file.exists()  # nothing was started
    assert not (servers.data_dir / "server.log").exists()

    # The Lab's queue goes on as if nothing had happened.
    run = submit(first.state, SMALL, name="in lab")
    assert wait_status(first.state, run["id"], {"succeeded", "failed"})["status"] == "succeeded"

    # kill -9: the lock file stays behind, and blocks nobody.
    os.kill(first.pid, signal.SIGKILL)
    wait_gone(first.pid)
    assert (servers.data_dir / "codefy.sqlite.lock").exists()
    state = servers.start(port)
    code, seen = api(state, "GET", f"runs/{run['id']}")
    assert code == 200 and seen["status"] == "succeeded"
    assert json.loads((servers.data_dir / "codefy.sqlite.lock").read_text())["pid"] == state["pid"]
    assert servers.stop().returncode == 0


def test_a_lab_beside_codefy_start_answers_503_and_never_opens_the_database(servers, lab):
    state = servers.start()
    run = submit(state, SMALL, name="headless")
    assert wait_status(state, run["id"], {"succeeded", "failed"})["status"] == "succeeded"

    second = lab()
    code, body = second.first_answer()
    assert code == 503, (body, second.output())
    error = body["error"]
    database = servers.data_dir / "codefy.sqlite"
    assert error["code"] == "store_locked"
    assert error["params"] == {"path": str(database), "holder_pid": state["pid"], "holder_url": state["url"]}
    assert f"pid {state['pid']}" in error["message"] and state["url"] in error["message"]
    assert "c.CodefyApp.data_dir" in error["message"]
    assert second.database_files_open(servers.data_dir) == []
    assert api(second.state, "POST", "runs", {"graph": SMALL})[0] == 503  # every route, writes too
    assert alive(second.pid)  # the server (and any other extension in it) stays up

    # The headless server still owns the queue; its run was never touched by the refused Lab.
    code, seen = api(state, "GET", f"runs/{run['id']}")
    assert code == 200 and seen["status"] == "succeeded"
    assert alive(state["pid"])

    # Once `codefy stop` lets go, the Lab takes the database over on its next request.
    assert servers.stop().returncode == 0
    wait_gone(state["pid"])
    code, page = api(second.state, "GET", "runs")
    assert code == 200, page
    assert [r["id"] for r in page["runs"]] == [run["id"]]
    assert json.loads(database.with_name("codefy.sqlite.lock").read_text())["pid"] == second.pid
