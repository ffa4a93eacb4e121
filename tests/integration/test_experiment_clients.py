"""The client side of sweeps and studies against a real `codefy start` subprocess: `codefy study`
(submit with an idempotency key, follow the audit log, the ranking table, --json, show, ls,
cancel, resume), the Client's study methods, `Graph.study` checked against the server's catalog,
the example study spec, and the SweepView / StudyView widgets driven by the messages their ESM
sends (no browser; tests/e2e/test_experiment_esm.py renders the ESM)."""

from __future__ import annotations

import copy
import csv
import io
import json
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from test_headless import Servers, edge

from codefy_jupyter.client import Client, CodefyError, Graph
from codefy_jupyter.client.client import load_study_spec
from codefy_jupyter.kernel.widgets import StudyView, SweepView

pytestmark = pytest.mark.slow
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
WAIT_S = 100


def mean_graph(values, nap=0.0):
    """Logs `mean` from node m (the mean of `values`) after a Sleep of `nap` seconds."""
    return {"nodes": [{"id": "nap", "type": "Sleep", "params": {"seconds": nap}},
                      {"id": "vals", "type": "List", "params": {"values": values}},
                      {"id": "m", "type": "Mean"}],
            "edges": [edge("vals", "values", "nap", "value"), edge("nap", "value", "m", "values")]}


def study_spec(nap=0.0, **extra):
    """2 variants x 2 repetitions: `low` (mean 1.5) beats `base` (mean 3)."""
    body = {"name": "tiny", "objective": {"node_id": "m", "metric": "mean", "direction": "minimize"},
            "base_graph": mean_graph([2, 4], nap),
            "variants": [{"label": "base", "ops": []}, {"label": "low", "graph": mean_graph([1, 2], nap)}],
            "repetitions": 2, "seed": 7}
    body.update(extra)
    return body


@pytest.fixture(scope="module")
def servers(tmp_path_factory, request):
    s = Servers(tmp_path_factory.mktemp("experiments"))
    request.addfinalizer(s.kill_leftovers)
    s.start()
    yield s
    s.stop()


@pytest.fixture
def server(servers):
    return servers.state()


@pytest.fixture
def client(server):
    with Client(url=server["url"], token=server["token"]) as c:
        yield c


def where(server):
    return ["--url", server["url"], "--token", server["token"]]


def message(widget, content):
    """What the browser's `model.send(content)` delivers to the Python side."""
    widget._handle_custom_msg(content, [])


# -- codefy study ------------------------------------------------------------------------------
def test_codefy_study_submits_follows_and_prints_the_ranking(servers, server, tmp_path):
    (tmp_path / "base.json").write_text(json.dumps(mean_graph([2, 4])))
    (tmp_path / "low.json").write_text(json.dumps(mean_graph([1, 2])))
    spec = study_spec(base_graph="base.json")  # paths, relative to the spec
    spec["variants"][1]["graph"] = "low.json"
    spec_file = tmp_path / "study.json"
    spec_file.write_text(json.dumps(spec))

    proc = servers.codefy("study", str(spec_file), *where(server), timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("study ") and "2 variants x 2 repetitions, seed 7" in lines[0]
    assert any(line.startswith("[4/4] succeeded") and "all repetitions" in line for line in lines), proc.stdout
    header = next(i for i, line in enumerate(lines) if line.startswith("rank  label"))
    assert "mean mean ± std" in lines[header] and "vs best [95% CI]" in lines[header]
    table = [line.split() for line in lines[header + 1:header + 3]]
    assert [(r[0], r[1], r[2], r[3], r[4], r[5]) for r in table] == [("1", "low", "1.5", "±", "0", "2"),
                                                                      ("2", "base", "3", "±", "0", "2")]
    assert lines[header + 1].split()[6:8] == ["yes", "best"]
    assert "+1.5 [1.5, 1.5]" in lines[header + 2]  # base - low on both seeds
    assert "best: low" in proc.stdout

    proc = servers.codefy("study", str(spec_file), "--json", "--name", "named", *where(server), timeout=120)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["status"] == "succeeded" and doc["name"] == "named" and doc["best"] == "low"
    assert [r["label"] for r in doc["rankings"]] == ["low", "base"]

    proc = servers.codefy("study", "show", doc["id"], *where(server))
    assert proc.returncode == 0 and proc.stdout.startswith("[4/4] succeeded") and "best: low" in proc.stdout
    proc = servers.codefy("study", "ls", "--json", *where(server))
    assert proc.returncode == 0 and doc["id"] in [s["id"] for s in json.loads(proc.stdout)["studies"]]

    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(study_spec(repetitions=0)))
    proc = servers.codefy("study", str(bad), "--json", *where(server))
    assert proc.returncode == 1
    refusal = json.loads(proc.stdout)["error"]
    assert refusal["status"] == 422 and refusal["params"]["field"] == "repetitions"
    proc = servers.codefy("study", str(tmp_path / "missing.json"), *where(server))
    assert proc.returncode == 1 and "missing.json" in proc.stderr
    proc = servers.codefy("study", "cancel", *where(server))
    assert proc.returncode == 2 and "needs the study's ID" in proc.stderr


def test_a_retried_submit_with_the_same_key_is_the_same_study(servers, server, tmp_path):
    spec_file = tmp_path / "study.json"
    spec_file.write_text(json.dumps(study_spec(nap=30.0)))
    key = ["--idempotency-key", "retry-1", "--detach", "--json"]
    first = servers.codefy("study", str(spec_file), *key, *where(server))
    again = servers.codefy("study", str(spec_file), *key, *where(server))
    assert first.returncode == 0 and again.returncode == 0, first.stderr + again.stderr
    a, b = json.loads(first.stdout), json.loads(again.stdout)
    assert a["id"] == b["id"] and a["created"] is True and b["created"] is False
    assert a["idempotency_key"] == "retry-1"
    # Without --idempotency-key, each invocation makes its own key: a second study.
    other = json.loads(servers.codefy("study", str(spec_file), "--detach", "--json", *where(server)).stdout)
    assert other["id"] != a["id"] and other["idempotency_key"] not in (None, "retry-1")

    # cancel, resume with a new budget, and the revision guard
    for sid in (a["id"], other["id"]):
        proc = servers.codefy("study", "cancel", sid, *where(server))
        assert proc.returncode == 0 and f"study {sid} " in proc.stdout, proc.stderr
    with Client(url=server["url"], token=server["token"]) as client:
        cancelled = client.wait_study(a["id"], wait=5)
    assert cancelled["status"] == "cancelled"
    proc = servers.codefy("study", "resume", a["id"], "--expected-revision", "1", "--json", *where(server))
    assert proc.returncode == 1 and json.loads(proc.stdout)["error"]["code"] == "revision_moved"
    proc = servers.codefy("study", "resume", a["id"], "--budget", '{"max_parallel_runs": 2}', "--json",
                          *where(server))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    resumed = json.loads(proc.stdout)
    assert resumed["status"] == "running" and resumed["budget"]["max_parallel_runs"] == 2
    proc = servers.codefy("study", "resume", a["id"], "--budget", "[1]", *where(server))
    assert proc.returncode == 2
    assert servers.codefy("study", "cancel", a["id"], *where(server)).returncode == 0


# -- Client and Graph.study ----------------------------------------------------------------------
def test_client_study_methods_follow_the_audit_log(client):
    created = client.study(study_spec(), idempotency_key="client-1")
    assert created["created"] is True
    events = list(client.follow_study(created["id"], wait=5))
    assert [e["cursor"] for e in events] == list(range(1, len(events) + 1))
    assert events[0]["type"] == "study_created" and events[-1]["type"] == "study_finished"
    done = client.get_study(created["id"])
    assert done["status"] == "succeeded" and done["best"] == "low"
    assert client.wait_study(created["id"])["revision"] == done["revision"]
    again = client.study(study_spec(), idempotency_key="client-1")
    assert again["id"] == created["id"] and again["created"] is False
    with pytest.raises(CodefyError) as err:
        client.study(study_spec(seed=8), idempotency_key="client-1")
    assert err.value.status == 409 and err.value.code == "idempotency_conflict"
    page = client.study_events(created["id"], cursor=len(events) - 1)
    assert [e["type"] for e in page["events"]] == ["study_finished"]
    rows = list(csv.DictReader(io.StringIO(client.study_csv(created["id"]))))
    assert len(rows) == 4 and {r["label"] for r in rows} == {"base", "low"}
    assert created["id"] in [s["id"] for s in client.list_studies(status="succeeded")["studies"]]
    with pytest.raises(CodefyError) as err:
        client.cancel_study(created["id"])
    assert err.value.code == "study_succeeded"


def test_client_watch_study_yields_each_change_then_the_stopped_study_in_full(client):
    created = client.study(study_spec(nap=0.2))
    docs = list(client.watch_study(created["id"], wait=5))
    revisions = [d["revision"] for d in docs]
    assert revisions == sorted(set(revisions)) and len(docs) >= 2, revisions
    following, final = docs[:-1], docs[-1]
    assert following[0]["status"] in ("queued", "running")
    assert all("attempts" not in v for d in following for v in d["variants"])  # the summary form
    assert final["status"] == "succeeded" and all(len(v["attempts"]) == 2 for v in final["variants"])
    assert final == client.get_study(created["id"])


def test_graph_study_is_checked_against_the_catalog_and_runs(client):
    g = Graph.from_dict(mean_graph([2, 4]))
    body = g.study({"base": {}, "low": Graph.from_dict(mean_graph([1, 2]))}, node="m", metric="mean",
                   repetitions=2, seed=3, budget={"max_parallel_runs": 2}, catalog=client)
    assert body["variants"][0] == {"label": "base", "ops": []} and "graph" in body["variants"][1]
    with pytest.raises(CodefyError) as err:
        g.study({"x": {"nap.seconds": -1}}, node="m", metric="mean", catalog=client)
    assert err.value.field == "variants[0].ops[0].value"
    with pytest.raises(CodefyError) as err:
        g.study({"x": {("vals", "nope"): 1}}, node="m", metric="mean", catalog=client)
    assert err.value.field == "variants[0].ops[0]" and "no param 'nope'" in str(err.value)
    with pytest.raises(CodefyError) as err:
        g.study({"x": {}}, node="missing", metric="mean", catalog=client)
    assert err.value.field == "objective.node_id"
    done = client.wait_study(client.study(body)["id"])
    assert done["status"] == "succeeded" and [r["label"] for r in done["rankings"]] == ["low", "base"]


def test_the_example_study_spec_runs(client):
    body = load_study_spec(EXAMPLES / "study_lr.json")
    assert body["base_graph"]["nodes"][0]["id"] == "data" and len(body["variants"]) == 3
    body = copy.deepcopy(body)
    for node in body["base_graph"]["nodes"]:  # a short training keeps the test quick
        if node["id"] == "train":
            node["params"]["epochs"] = 1
        if node["id"] == "data":
            node["params"]["n_samples"] = 200
    done = client.wait_study(client.study({**body, "repetitions": 1})["id"])
    assert done["status"] == "succeeded", done
    assert sorted(r["rank"] for r in done["rankings"]) in ([1, 2, 3], [1, 1, 3], [1, 2, 2], [1, 1, 1])


# -- widgets ---------------------------------------------------------------------------------------
def test_sweep_view_follows_a_sweep_sorts_opens_and_downloads(client):
    sweep = client.sweep({"base_graph": mean_graph([1, 2, 3]), "name": "means",
                          "sweep_spec": {"params": [{"node_id": "nap", "param": "seconds",
                                                     "values": [0.0, 0.05, 0.1]}]},
                          "objective": {"metric": "mean", "direction": "minimize", "node_id": "m"}})
    view = SweepView(sweep["sweep_id"], client)
    try:
        view.wait(WAIT_S)
        assert view.follow_error == "" and view.state == "finished" and view.counts_text == "succeeded 3"
        assert view.objective == "minimize mean of m"
        # The naps change nothing: a three-way tie at rank 1, in variant order.
        assert [r["number"] for r in view.rows] == [1, 2, 3] and [r["objective"] for r in view.rows] == [2.0] * 3
        assert [r["rank_text"] for r in view.rows] == ["1="] * 3
        assert view.rows[1]["params"] == ["nap.seconds=0.05"] and view.rows[0]["status"] == "succeeded"
        assert view.rows[0]["final_metrics"] == "mean 2" and view.rows[0]["can_open"]
        assert view.curves == {"#1": [[0, 2.0]], "#2": [[0, 2.0]], "#3": [[0, 2.0]]}
        message(view, {"action": "sort", "key": "rank"})  # the same header again: descending
        assert view.descending and [r["number"] for r in view.rows] == [1, 2, 3]
        message(view, {"action": "sort", "key": "status"})
        assert not view.descending and view.sort_key == "status"
        message(view, {"action": "sort", "key": "bogus"})
        assert view.error["field"] == "key"
        sent = []
        view.send = sent.append  # what the browser would receive
        message(view, {"action": "csv"})
        assert sent[0]["type"] == "csv" and sent[0]["filename"] == f"sweep-{sweep['sweep_id'][:12]}.csv"
        assert sent[0]["text"].count("\n") >= 4
        run_id = view.rows[0]["run_id"]
        message(view, {"action": "open", "run_id": run_id})
        assert view.watched is not None and view.watched.run_id == run_id
        assert view.watched.wait(WAIT_S) == "succeeded"
        message(view, {"action": "open", "run_id": "f" * 32})
        assert view.error["field"] == "run_id"
        message(view, {"action": "stop"})  # a finished sweep: the server's answer, shown
        assert view.error is None or view.error["status"] in (409, None)
    finally:
        view.close()


def test_study_view_follows_cancels_and_resumes(client):
    study = client.study(study_spec(nap=30.0))
    view = StudyView(study["id"], client)
    try:
        for _ in range(200):  # the first read lands within the follow thread's first request
            if view.rows:
                break
            threading.Event().wait(0.05)
        assert sorted(r["label"] for r in view.rows) == ["base", "low"]
        message(view, {"action": "cancel"})
        assert view.error is None, view.error
        view.wait(WAIT_S)
        assert view.status == "cancelled" and not view.following
        assert view.progress["done"] == 0 and view.progress["total"] == 4 and view.progress["repetition"] == 0
        assert "parallel" in view.budget_text
        assert all(not r["eligible"] and r["reason"].startswith("r0 ") for r in view.rows)
        message(view, {"action": "resume"})
        assert view.error is None, view.error
        assert view.status == "running" and view.following
        with pytest.raises(CodefyError) as err:  # the Python side can guard on the revision it saw
            view.cancel(expected_revision=1)
        assert err.value.code == "revision_moved"
        message(view, {"action": "cancel"})
        assert view.error is None, view.error
        view.wait(WAIT_S)
        assert view.status == "cancelled"
        sent = []
        view.send = sent.append
        message(view, {"action": "csv"})
        assert sent[0]["filename"] == f"study-{study['id'][:12]}.csv"
    finally:
        view.close()
    done = client.wait_study(client.study(study_spec())["id"])
    view = StudyView(done["id"], client)
    try:
        view.wait(WAIT_S)
        assert view.status == "succeeded" and [r["label"] for r in view.rows] == ["low", "base"]
        assert view.rows[0]["rank_text"] == "1" and view.rows[1]["diff_text"] == "+1.5 [1.5, 1.5]"
        assert view.series == {"base": [[0, 3.0], [1, 3.0]], "low": [[0, 1.5], [1, 1.5]]}
        message(view, {"action": "sort", "key": "label"})
        assert [r["label"] for r in view.rows] == ["base", "low"]
        message(view, {"action": "sort", "key": "p_value"})  # the best has no p: it sinks
        assert [r["label"] for r in view.rows] == ["base", "low"]
    finally:
        view.close()


def test_ctrl_c_leaves_the_study_running_and_says_how_to_re_attach(servers, server, tmp_path):
    spec_file = tmp_path / "slow.json"
    spec_file.write_text(json.dumps(study_spec(nap=30.0)))
    proc = subprocess.Popen([sys.executable, "-m", "codefy_jupyter.cli", "study", str(spec_file), *where(server)],
                            cwd=servers.cwd, env=servers.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = proc.stdout.readline()
        assert first.startswith("study "), first
        study_id = first.split()[1].rstrip(":")
        assert proc.stdout.readline().startswith(f"following study {study_id}")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, out + err
    assert f"`codefy study show {study_id} --follow` follows it again" in err
    with Client(url=server["url"], token=server["token"]) as client:
        assert client.get_study(study_id)["status"] in ("queued", "running")
        client.cancel_study(study_id)
        assert client.wait_study(study_id, wait=5)["status"] == "cancelled"
