"""The running `jupyter lab` the lab-extension e2e tests drive: a temp Jupyter environment, a
token, the cpu queue capped at 1 run, the codefy data in the test's tmp dir, notebooks in
`tmp_path / "notebooks"` (Lab's root). The `lab` fixture (conftest.py) yields a `Lab`. A second
`running_lab(tmp_path)` after the first has stopped is the same server restarted: same data, new port.

Screenshots go under $CODEFY_E2E_SCREENSHOTS when it is set, else the repository's tmp/artifacts/
(ignored by git), one folder per test file."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import pytest

CHROMIUM = "/usr/bin/chromium"
NEEDS_CHROMIUM = pytest.mark.skipif(
    not os.path.exists(CHROMIUM), reason=f"no {CHROMIUM}: install Debian's package (apt-get install -y chromium); "
                                         ".ci/run installs it when missing")
ARTIFACTS_ROOT = Path(os.environ.get("CODEFY_E2E_SCREENSHOTS") or Path(__file__).resolve().parents[2] / "tmp" / "artifacts")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]
TOKEN = "codefy-lab-e2e-token"
QUICK = {"nodes": [{"id": "k", "type": "Float", "params": {"value": 2}},
                   {"id": "s", "type": "Scale", "params": {"factor": 3}}],
         "edges": [{"source": "k", "source_port": "value", "target": "s", "target_port": "x"}]}


def nap(seconds: float) -> dict[str, Any]:
    return {"nodes": [{"id": "nap", "type": "Sleep", "params": {"seconds": seconds}}], "edges": []}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Lab:
    def __init__(self, url: str, root: Path) -> None:
        self.url = url
        self.root = root
        self.pid = 0

    def api(self, method: str, path: str, body: Any = None) -> Any:
        request = urllib.request.Request(
            f"{self.url}codefy/api/{path}", method=method, data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"token {TOKEN}", "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            text = response.read()
            return json.loads(text) if text else None

    def submit(self, graph: dict[str, Any], name: str) -> str:
        return self.api("POST", "runs", {"graph": graph, "name": name})["id"]

    def wait_status(self, run_id: str, *statuses: str, timeout: float = 120.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            run = self.api("GET", f"runs/{run_id}")
            if run["status"] in statuses:
                return run
            assert time.monotonic() < deadline, f"run {run_id} is {run['status']}, not {statuses}"
            time.sleep(0.2)


def data_dir(tmp_path: Path) -> Path:
    """The codefy data dir `running_lab(tmp_path)` serves: a store put there before it starts (a
    benchmark's generated runs) is the one it opens."""
    return tmp_path / "codefy"


@contextlib.contextmanager
def running_lab(tmp_path: Path, env: dict[str, str] | None = None, wrap: tuple[str, ...] = ()) -> Iterator[Lab]:
    """`env`: more environment for the server (a benchmark's caps), over the defaults here; `wrap`: a
    command that runs the server's command line as its arguments (binder/start)."""
    if not shutil.which("jupyter", path=os.path.dirname(sys.executable)) and not shutil.which("jupyter"):
        pytest.skip("jupyter is not installed")
    port = free_port()
    jupyter = tmp_path / "jupyter"
    config = jupyter / "config"
    # No news toast in the screenshots (the announcements plugin asks on first start).
    (config / "labconfig").mkdir(parents=True, exist_ok=True)
    (config / "labconfig" / "page_config.json").write_text(json.dumps(
        {"disabledExtensions": {"@jupyterlab/apputils-extension:announcements": True}}))
    # Lab loads the extension of this checkout, not the copy installed in the environment (another
    # checkout's build, e.g. a worktree's venv shared with main): a link in the data dir, which
    # JUPYTER_PREFER_ENV_PATH=0 (below) puts first on Lab's labextensions path, so it wins. Skipped
    # when the checkout has no build.
    built = Path(__file__).resolve().parents[2] / "codefy_jupyter" / "labextension"
    link = jupyter / "data" / "labextensions" / "codefy-jupyter"
    if (built / "package.json").exists() and not link.is_symlink():  # a restart keeps the link
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(built, target_is_directory=True)
    extra = env or {}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CODEFY_", "JUPYTER_"))}
    env.update(JUPYTER_CONFIG_DIR=str(config), JUPYTER_DATA_DIR=str(jupyter / "data"),
               JUPYTER_RUNTIME_DIR=str(jupyter / "runtime"), JUPYTER_PLATFORM_DIRS="0",
               JUPYTER_PREFER_ENV_PATH="0", CODEFY_RUN_QUEUE_MAX_CONCURRENT_CPU="1")
    env.update(extra)
    root = tmp_path / "notebooks"
    root.mkdir(exist_ok=True)
    log = (tmp_path / "lab.log").open("a")
    proc = subprocess.Popen(
        [*wrap, sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}", "--ServerApp.ip=127.0.0.1",
         f"--IdentityProvider.token={TOKEN}", "--ServerApp.allow_root=True", f"--ServerApp.root_dir={root}",
         f"--CodefyApp.data_dir={data_dir(tmp_path)}", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
         f"--LabApp.workspaces_dir={jupyter / 'workspaces'}"],
        env=env, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT)
    server = Lab(f"http://127.0.0.1:{port}/", root)
    server.pid = proc.pid
    try:
        deadline = time.monotonic() + 90
        while True:
            assert proc.poll() is None, (tmp_path / "lab.log").read_text()[-4000:]
            with contextlib.suppress(OSError):
                server.api("GET", "runs?limit=1")
                break
            assert time.monotonic() < deadline, (tmp_path / "lab.log").read_text()[-4000:]
            time.sleep(0.3)
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
