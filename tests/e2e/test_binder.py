"""binder/: what a Binder launch does, run here without Binder. binder/start wraps a real `jupyter
lab` (the e2e harness's, lab_server.py) as repo2docker wraps the notebook server; its local agent
finds the server, enrolls over loopback and comes up connected, and a run aimed at it succeeds on
it. postBuild is checked for syntax only (it installs packages)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from lab_server import QUICK, running_lab

pytestmark = [pytest.mark.slow, pytest.mark.timeout(480)]
BINDER = Path(__file__).resolve().parents[2] / "binder"


def test_binder_start_runs_lab_with_a_connected_local_agent(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    log = tmp_path / "binder-agent.log"
    family: list[psutil.Process] = []
    try:
        # As in the Binder image, `python` on PATH is the environment's.
        path = f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ.get('PATH', '')}"
        with running_lab(tmp_path, env={"HOME": str(home), "CODEFY_BINDER_AGENT_LOG": str(log), "PATH": path},
                         wrap=("bash", str(BINDER / "start"))) as lab:
            deadline = time.monotonic() + 120
            while True:
                family = psutil.Process(lab.pid).children(recursive=True)
                workers = lab.api("GET", "workers")["workers"]
                if any(w["name"] == "binder" and w["state"] == "connected" for w in workers):
                    break
                assert time.monotonic() < deadline, (workers, log.read_text() if log.exists() else "no log")
                time.sleep(0.5)
            assert f"local agent binder for {lab.url}" in log.read_text()
            assert (home / ".codefy-agent" / "credentials" / "binder.json").is_file()

            run = lab.api("POST", "runs", {"graph": QUICK, "name": "on the binder agent",
                                           "options": {"target": {"worker": "binder"}}})
            done = lab.wait_status(run["id"], "succeeded", "failed", timeout=90)
            assert done["status"] == "succeeded" and done["worker_id"] == "binder", done
            family = psutil.Process(lab.pid).children(recursive=True)
    finally:
        # The agent outlives the server it was started beside (it waits to reconnect): end it here.
        for proc in family:
            try:
                proc.kill()
            except psutil.NoSuchProcess:
                pass


def test_binder_files_are_in_place() -> None:
    assert subprocess.run(["bash", "-n", str(BINDER / "postBuild")]).returncode == 0
    assert subprocess.run(["bash", "-n", str(BINDER / "start")]).returncode == 0
    assert "nodejs" in (BINDER / "environment.yml").read_text()
    # The Binder link in docs/getting-started.md (On Binder) opens this notebook.
    assert (BINDER.parent / "kernels" / "example.ipynb").is_file()
