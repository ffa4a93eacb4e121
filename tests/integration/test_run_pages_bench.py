"""benchmarks/run_pages.py keeps working: a small database filled as the million-run one is, served
by a real `codefy start`, every request kind answered 200 with the stored total (the speed itself is
the benchmark's, never a test's)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("store", ["sqlite", "postgresql"])
def test_the_run_pages_benchmark_runs_on_either_backend(tmp_path, store):
    if store == "postgresql":
        sys.path.insert(0, str(ROOT / "tests"))
        from pg_server import find_bindir

        if find_bindir() is None:
            pytest.skip("no PostgreSQL server binaries (Debian's postgresql; .ci/run installs it)")
    out = tmp_path / "pages.json"
    done = subprocess.run([sys.executable, "run_pages.py", "--runs", "500", "--requests", "2", "--store", store,
                           "--out", str(out)], cwd=ROOT / "benchmarks", capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(out.read_text())
    assert report["parameters"]["runs"] == 500 and report["parameters"]["store"] == store
    assert set(report["results"]) == {"first_page", "chip_succeeded", "chip_running", "deep_page", "deep_keyset", "one_run_prefix"}
    assert all(r["p50_ms"] > 0 for r in report["results"].values())
