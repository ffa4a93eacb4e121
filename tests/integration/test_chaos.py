"""The loss-checker's short form (`benchmarks/chaos.py --faults 6`): a real `codefy start`, two real
agents behind the checker's forwarder, a small study and sweep, every kind of fault at least once
(SIGKILL of the control plane, SIGKILL and SIGSTOP of an agent, the agents' sockets cut). Nothing
lost, duplicated or missing in any run's log, and exactly one succeeded run per repetition."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(600)
def test_six_faults_lose_nothing_duplicate_nothing_and_run_each_repetition_once(tmp_path):
    out = tmp_path / "chaos.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "chaos.py"), "--faults", "6", "--seed", "3",
                           "--variants", "2", "--repetitions", "2", "--sweep-variants", "2", "--naps", "5",
                           "--nap-s", "0.4", "--gap", "1,3", "--timeout", "300", "--out", str(out)],
                          env=env, capture_output=True, text=True, timeout=580)
    assert out.exists(), done.stderr[-6000:]
    report = json.loads(out.read_text())
    summary = report["summary"]
    context = json.dumps({"summary": summary, "bad_runs": report["bad_runs"], "faults": report["faults"]},
                         indent=1)[:6000]
    assert summary["faults"] == 6 and set(summary["fault_kinds"].values()) >= {1}, context
    assert all(n >= 1 for n in summary["fault_kinds"].values()), context  # every kind at least once
    assert (summary["lost"], summary["duplicated"], summary["gaps"]) == (0, 0, 0), context
    assert summary["not_terminal"] == 0 and report["bad_runs"] == [], context
    assert summary["repetitions"] >= 4 and summary["repetitions_with_exactly_one_run"] == summary["repetitions"], context
    assert summary["problems"] == [], context
    assert summary["runs"] >= summary["repetitions"] + 2 and summary["events"] > 0, context
    assert report["met"] is True and done.returncode == 0, context
