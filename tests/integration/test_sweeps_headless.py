"""Sweeps against a real `codefy start` subprocess: a sweep survives a kill -9 of the control
plane (its children are retired by recovery and the sweep settles on the next read), and
`codefy sweep SPEC.json` submits, follows and prints the ranked table."""

from __future__ import annotations

import json
import os
import signal
import sqlite3

import pytest

from test_headless import Servers, api, edge, wait_gone

pytestmark = pytest.mark.slow


@pytest.fixture
def servers(tmp_path, request) -> Servers:
    s = Servers(tmp_path)
    request.addfinalizer(s.kill_leftovers)
    return s


def mean_graph(nap: float) -> dict:
    """`mean` logs the mean of [1, 2, 3] (2.0) after a nap; the swept `k.value` changes nothing."""
    return {"nodes": [{"id": "k", "type": "Float", "params": {"value": 1}},
                      {"id": "nap", "type": "Sleep", "params": {"seconds": nap}},
                      {"id": "xs", "type": "List", "params": {"values": [1, 2, 3]}},
                      {"id": "m", "type": "Mean"}],
            "edges": [edge("k", "value", "nap", "value"), edge("xs", "values", "m", "values")]}


def spec(nap: float, values=(1.0, 2.0, 3.0)) -> dict:
    return {"base_graph": mean_graph(nap), "name": "means",
            "sweep_spec": {"params": [{"node_id": "k", "param": "value", "values": list(values)}]},
            "objective": {"metric": "mean", "direction": "minimize"}}


def test_a_sweep_survives_a_kill_9_and_settles_on_the_next_read(servers):
    state = servers.start()
    code, created = api(state, "POST", "sweeps", spec(30.0))
    assert code == 201, created
    code, cancelling = api(state, "POST", "sweeps", spec(30.0, values=(5.0,)))
    assert code == 201
    pid = servers.state()["pid"]
    os.kill(pid, signal.SIGKILL)
    wait_gone(pid)
    # The second sweep was being cancelled when the process died (its child still running).
    conn = sqlite3.connect(servers.data_dir / "codefy.sqlite")
    with conn:
        conn.execute("UPDATE sweeps SET state = 'cancelling' WHERE id = ?", (cancelling["sweep_id"],))
    conn.close()

    restarted = servers.start()
    code, doc = api(restarted, "GET", f"sweeps/{created['sweep_id']}")
    assert code == 200, doc
    assert doc["state"] == "finished" and doc["counts"] == {"interrupted": 3}
    assert sorted(v["index"] for v in doc["variants"]) == [0, 1, 2]
    assert {v["run_id"] for v in doc["variants"]} == {v["run_id"] for v in created["variants"]}
    code, other = api(restarted, "GET", f"sweeps/{cancelling['sweep_id']}")
    assert other["state"] == "finished" and other["counts"] == {"interrupted": 1}
    code, page = api(restarted, "GET", "sweeps")
    assert page["total"] == 2 and page["sweeps"][0]["sweep_id"] == cancelling["sweep_id"]
    # The queue works again: a new sweep runs to the end.
    code, fresh = api(restarted, "POST", "sweeps", spec(0.0))
    assert code == 201
    assert servers.stop().returncode == 0
    wait_gone(restarted["pid"])


def test_codefy_sweep_submits_follows_and_prints_the_ranked_table(servers, tmp_path):
    state = servers.start()
    graph_file = tmp_path / "means.json"
    graph_file.write_text(json.dumps(mean_graph(0.05)))
    spec_file = tmp_path / "sweep.json"
    spec_file.write_text(json.dumps({**spec(0.05), "base_graph": "means.json"}))  # a path, next to the spec
    where = ["--url", state["url"], "--token", state["token"]]

    proc = servers.codefy("sweep", str(spec_file), *where, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert any(line.startswith("[3/3] finished") for line in lines), proc.stdout
    header = next(i for i, line in enumerate(lines) if line.split()[:4] == ["rank", "#", "status", "mean"])
    table = [line.split() for line in lines[header + 1:header + 4]]
    assert [(r[0], r[2], r[3]) for r in table] == [("1", "succeeded", "2")] * 3  # a three-way tie at rank 1
    assert [r[1] for r in table] == ["1", "2", "3"] and "best: #1 (k.value=1) mean = 2" in proc.stdout

    proc = servers.codefy("sweep", str(spec_file), "--json", "--name", "named", *where, timeout=120)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["state"] == "finished" and doc["name"] == "named" and len(doc["variants"]) == 3
    assert all(v["rank"] == 1 and v["objective"] == 2.0 for v in doc["variants"])

    proc = servers.codefy("sweep", str(spec_file), "--detach", "--json", *where)
    assert proc.returncode == 0
    detached = json.loads(proc.stdout)
    assert detached["state"] == "running" and [v["index"] for v in detached["variants"]] == [0, 1, 2]

    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**spec(0.0), "objective": {"metric": "mean", "direction": "up"}}))
    proc = servers.codefy("sweep", str(bad), "--json", *where)
    assert proc.returncode == 1
    refusal = json.loads(proc.stdout)["error"]
    assert refusal["status"] == 422 and refusal["params"]["field"] == "objective.direction"
    proc = servers.codefy("sweep", str(tmp_path / "missing.json"), *where)
    assert proc.returncode == 1 and "missing.json" in proc.stderr
    assert servers.stop().returncode == 0
    wait_gone(state["pid"])
