"""`codefy exec` as a real subprocess: output lines and exit codes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def codefy(*args: str, cwd: Path, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "codefy_jupyter.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


def write(path: Path, graph: object) -> Path:
    path.write_text(json.dumps(graph))
    return path


def edge(s, sp, t, tp):
    return {"source": s, "source_port": sp, "target": t, "target_port": tp}


def test_train_mlp_example_trains_and_prints_accuracy(tmp_path):
    proc = codefy("exec", str(EXAMPLES / "train_mlp.json"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "✓ train (TrainingLoop)" in proc.stderr
    assert "✓ eval (ClassificationMetrics)" in proc.stderr
    accuracy = float(next(line.split()[-1] for line in proc.stdout.splitlines() if line.strip().startswith("accuracy")))
    assert accuracy > 0.8
    assert "✓ run complete" in proc.stdout


@pytest.mark.parametrize("name", ["kfold_regression.json", "lazy_switch.json", "ensemble_map.json"])
def test_every_example_runs(tmp_path, name):
    proc = codefy("exec", str(EXAMPLES / name), "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["status"] == "succeeded" and summary["error"] is None


def test_json_output_carries_metrics_seed_and_executed(tmp_path):
    graph = write(tmp_path / "g.json", {
        "nodes": [{"id": "a", "type": "Float", "params": {"value": 4}}, {"id": "m", "type": "Mean"},
                  {"id": "l", "type": "List", "params": {"values": [1, 2, 3]}}],
        "edges": [edge("l", "values", "m", "values")]})
    proc = codefy("exec", str(graph), "--json", "--seed", "5", cwd=tmp_path)
    assert proc.returncode == 0
    summary = json.loads(proc.stdout)
    assert summary["seed"] == 5 and summary["metrics"] == {"mean": 2.0}
    assert sorted(summary["executed"]) == ["a", "l", "m"]


def test_a_failing_node_exits_1_with_the_structured_error(tmp_path):
    graph = write(tmp_path / "g.json", {
        "nodes": [{"id": "a", "type": "Float", "params": {"value": 1}}, {"id": "zero", "type": "Float"},
                  {"id": "div", "type": "Divide"}, {"id": "after", "type": "Scale"}],
        "edges": [edge("a", "value", "div", "a"), edge("zero", "value", "div", "b"),
                  edge("div", "result", "after", "x")]})
    proc = codefy("exec", str(graph), cwd=tmp_path)
    assert proc.returncode == 1
    assert "✗ run failed: node 'div' (Divide): ValueError: input 'b' is zero" in proc.stderr
    assert "after (Scale)" not in proc.stderr
    proc = codefy("exec", str(graph), "--json", cwd=tmp_path)
    assert proc.returncode == 1
    error = json.loads(proc.stdout)["error"]
    assert (error["node_id"], error["node_type"], error["exception_type"]) == ("div", "Divide", "ValueError")
    assert sorted(error["executed"]) == ["a", "zero"]


def test_invalid_graph_exits_1_listing_every_problem(tmp_path):
    graph = write(tmp_path / "g.json", {"nodes": [{"id": "a", "type": "Nope"},
                                                  {"id": "b", "type": "Scale", "params": {"factor": -1}}]})
    proc = codefy("exec", str(graph), cwd=tmp_path)
    assert proc.returncode == 1
    assert "node 'a', type: unknown node type 'Nope'" in proc.stderr
    assert "node 'b', params.factor: must be at least 0" in proc.stderr
    proc = codefy("exec", str(graph), "--json", cwd=tmp_path)
    problems = json.loads(proc.stdout)["error"]["params"]["problems"]
    assert [(p["node_id"], p["field"]) for p in problems] == [("a", "type"), ("b", "params.factor")]


def test_malformed_json_and_missing_file_exit_1(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"nodes": [')
    proc = codefy("exec", str(bad), cwd=tmp_path)
    assert proc.returncode == 1 and "is not valid JSON" in proc.stderr and "line 1" in proc.stderr
    proc = codefy("exec", str(tmp_path / "missing.json"), cwd=tmp_path)
    assert proc.returncode == 1 and "graph file not found" in proc.stderr


@pytest.mark.parametrize("args,needle", [
    (["exec"], "the following arguments are required: graph"),
    (["exec", "g.json", "--seed", "x"], "seed must be an integer"),
    (["exec", "g.json", "--seed", "-3"], "seed must be from 0"),
    (["exec", "g.json", "--device", "tpu"], "unknown device 'tpu'"),
    (["exec", "g.json", "--seed", "1", "--no-seed"], "not allowed with argument"),
    (["exec", "g.json", "--max-parallel-nodes", "0"], "must be at least 1"),
    ([], "usage: codefy"),
])
def test_bad_arguments_exit_2(tmp_path, args, needle):
    write(tmp_path / "g.json", {"nodes": []})
    proc = codefy(*args, cwd=tmp_path)
    assert proc.returncode == 2
    assert needle in proc.stderr


def test_unavailable_device_in_graph_settings_exits_1(tmp_path):
    graph = write(tmp_path / "g.json", {"nodes": [], "settings": {"device": "cuda:7"}})
    proc = codefy("exec", str(graph), cwd=tmp_path)
    assert proc.returncode == 1 and "settings.device" in proc.stderr and "cuda:7" in proc.stderr


def test_ctrl_c_cancels_cooperatively_and_exits_130(tmp_path):
    graph = write(tmp_path / "g.json", {
        "nodes": [{"id": "nap", "type": "Sleep", "params": {"seconds": 120}}, {"id": "after", "type": "Scale"},
                  {"id": "k", "type": "Float"}],
        "edges": [edge("k", "value", "nap", "value"), edge("nap", "value", "after", "x")]})
    proc = subprocess.Popen([sys.executable, "-m", "codefy_jupyter.cli", "exec", str(graph)], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    # Wait until the run is under way, then interrupt it.
    deadline = time.monotonic() + 120
    seen = ""
    while "✓ k (Float)" not in seen and time.monotonic() < deadline:
        seen += proc.stderr.readline()
    assert "✓ k (Float)" in seen
    started = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=100)
    assert proc.returncode == 130
    assert time.monotonic() - started < 60  # not the 120 s nap
    assert "stopping" in err and "■ run cancelled" in out
    assert "after (Scale)" not in err


def test_version(tmp_path):
    proc = codefy("--version", cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.startswith("codefy-jupyter ")
