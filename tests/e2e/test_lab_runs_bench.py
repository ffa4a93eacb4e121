"""benchmarks/lab_runs.py keeps working with `--generated` (runs written straight into the store
the Lab serves, as for the million-run figure): the Runs panel lists them, the server counts them
all, and the panel's figures come back; its refusals name the flag. The speed itself is the
benchmark's, never a test's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from lab_server import NEEDS_CHROMIUM

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "lab_runs.py", *args], cwd=ROOT / "benchmarks", capture_output=True,
                          text=True, timeout=500)


@NEEDS_CHROMIUM
def test_the_lab_runs_benchmark_serves_generated_runs(tmp_path):
    out = tmp_path / "lab_runs.json"
    done = bench("--generated", "300", "--panel-only", "--repeat", "1", "--out", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(out.read_text())
    assert report["fill"] == "generated" and report["runs_in_db"] == 300
    assert report["runs_panel_open"]["refresh_to_painted_ms"]["median"] > 0
    assert "streaming" not in report and "event_to_dom_ms" not in report


@pytest.mark.parametrize(("args", "message"), [
    (("--generated", "0"), "--generated must be >= 1"),
    (("--runs", "0"), "--runs must be >= 1"),
    (("--runs", "5", "--generated", "5"), "not allowed with argument"),
])
def test_the_lab_runs_benchmark_refuses_bad_sizes(args, message):
    done = bench(*args)
    assert done.returncode == 2 and message in done.stderr, done.stderr
