"""Exactly-once repetitions across crashes, on a real control plane (`codefy start`) killed hard.
A study whose child runs on a real worker agent is taken over, not settled, across a kill.

The process dies at several points of a study of tiny seeded graphs that log a metric: between a
child's submit and its record (the test-only CODEFY_TEST_CRASH_AFTER_SUBMIT hook exits the process
there), between the stamp and the submit (CODEFY_TEST_CRASH_BEFORE_SUBMIT), and by SIGKILL while a
child executes. After each restart the study is resumed. In the end every repetition has exactly
one succeeded attempt, no attempt ever had two runs, and the ranking equals the one an
uninterrupted study with the same seeds reaches. On both backends: the SQLite file, and a database
on a real PostgreSQL server (`store_at`).
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from typing import Any

import pytest

from test_headless import Servers, api, wait_gone

pytestmark = pytest.mark.slow


def edge(s, sp, t, tp):
    return {"source": s, "source_port": sp, "target": t, "target_port": tp}


def mean_graph(values, nap):
    return {"nodes": [{"id": "nap", "type": "Sleep", "params": {"seconds": nap}},
                      {"id": "vals", "type": "List", "params": {"values": values}},
                      {"id": "m", "type": "Mean"}],
            "edges": [edge("vals", "values", "nap", "value"), edge("nap", "value", "m", "values")]}


def spec(key: str, nap: float = 0.3, **extra: Any) -> dict[str, Any]:
    return {"name": "crash", "objective": {"node_id": "m", "metric": "mean", "direction": "minimize"},
            "base_graph": mean_graph([2, 4], nap),
            "variants": [{"label": "base", "ops": []},
                         {"label": "low", "graph": mean_graph([1, 2], nap)},
                         {"label": "slow", "ops": [{"node_id": "nap", "param": "seconds", "value": nap * 2}]}],
            "repetitions": 2, "seed": 11, "idempotency_key": key, **extra}


@pytest.fixture
def servers(tmp_path, request, store_at) -> Servers:
    s = Servers(tmp_path)
    target = store_at("codefy.sqlite")  # the SQLite file, or a PostgreSQL database (CODEFY_STORE_URL)
    if isinstance(target, str):
        s.env["CODEFY_STORE_URL"] = target
        s.env["CODEFY_RUN_FILES_SHARED"] = "1"  # the one replica's run files count as shared
    s.env["JUPYTER_TOKEN"] = "study-crash-token"
    request.addfinalizer(s.kill_leftovers)
    return s


def study(state, study_id) -> dict[str, Any]:
    code, body = api(state, "GET", f"studies/{study_id}")
    assert code == 200, body
    return body


def wait_for(state, study_id, check, timeout=120.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        current = study(state, study_id)
        if check(current):
            return current
        assert time.monotonic() < deadline, current
        time.sleep(0.05)


def wait_exit(servers: Servers, pid: int) -> None:
    """The crash hook ends the process by itself."""
    wait_gone(pid, 60)


def events(state, study_id) -> list[dict[str, Any]]:
    code, page = api(state, "GET", f"studies/{study_id}/events?cursor=0")
    assert code == 200, page
    assert [e["cursor"] for e in page["events"]] == list(range(1, len(page["events"]) + 1))
    return page["events"]


def children(state, study_id) -> list[dict[str, Any]]:
    code, listing = api(state, "GET", "runs?limit=50")
    assert code == 200, listing
    return [r for r in listing["runs"] if r.get("study_id") == study_id]


def assert_exactly_once(state, final: dict[str, Any]) -> None:
    runs = children(state, final["id"])
    per_attempt = Counter(r["study_attempt_id"] for r in runs)
    assert all(n == 1 for n in per_attempt.values()), per_attempt  # no attempt ever had two children
    succeeded = Counter()
    for v in final["variants"]:
        ids = {a["id"] for a in v["attempts"]}
        assert set(per_attempt) >= {a["id"] for a in v["attempts"] if a["status"] not in ("pending", "lost")}
        for a in v["attempts"]:
            assert a["id"] in ids
            if a["status"] == "succeeded":
                succeeded[(v["label"], a["repetition"])] += 1
    assert succeeded == {(label, r): 1 for label in ("base", "low", "slow") for r in (0, 1)}, succeeded
    succeeded_runs = Counter((r["name"]) for r in runs if r["status"] == "succeeded")
    assert all(n == 1 for n in succeeded_runs.values()) and len(succeeded_runs) == 6, succeeded_runs


def ranking(final: dict[str, Any]) -> list[tuple]:
    return [(r["label"], r["rank"], r["mean"]) for r in final["rankings"]]


def resume(state, study_id) -> dict[str, Any]:
    code, body = api(state, "POST", f"studies/{study_id}/resume", {})
    assert code == 200, body
    return body


@pytest.mark.timeout(600)
def test_crashes_between_submit_and_record_then_resume_run_every_repetition_exactly_once(servers):
    # 1. The process dies after the 2nd child's submit returned, before attempt_submitted.
    servers.env["CODEFY_TEST_CRASH_AFTER_SUBMIT"] = "2"
    state = servers.start()
    # 1 s children: the SIGKILL of step 5 must land while the child it saw running still runs.
    code, created = api(state, "POST", "studies", spec("crash-1", nap=1.0))
    assert code == 201, created
    study_id = created["id"]
    wait_exit(servers, state["pid"])
    del servers.env["CODEFY_TEST_CRASH_AFTER_SUBMIT"]

    # 2. Restart: the stuck attempt is relinked by its stamp, not submitted again; the study waits.
    servers.env["CODEFY_TEST_CRASH_BEFORE_SUBMIT"] = "1"  # and the next crash comes before a submit
    state = servers.start()
    after = study(state, study_id)
    assert after["status"] == "interrupted", after
    log = events(state, study_id)
    relinked = [e for e in log if e["type"] == "attempt_relinked"]
    assert len(relinked) == 1 and relinked[0]["payload"]["repetition"] == 0, log
    assert [e["type"] for e in log].count("attempt_submitted") == 1  # the 2nd record never happened
    assert log[-1]["type"] == "study_interrupted"
    assert len(children(state, study_id)) == 2

    # 3. Resume; the process dies after the stamp of the next child is durable, before its submit.
    try:  # the process may die before it answers
        api(state, "POST", f"studies/{study_id}/resume", {"expected_revision": after["revision"]})
    except OSError:
        pass
    wait_exit(servers, state["pid"])
    del servers.env["CODEFY_TEST_CRASH_BEFORE_SUBMIT"]

    # 4. Restart: no run carries that stamp, so the attempt is lost and its repetition gets a new one.
    state = servers.start()
    log = events(state, study_id)
    lost = [e for e in log if e["type"] == "attempt_lost"]
    added = [e for e in log if e["type"] == "attempt_added"]
    assert len(lost) == 1 and any(e["payload"].get("replaces") == lost[0]["payload"]["attempt_id"] for e in added)
    assert study(state, study_id)["status"] == "interrupted"

    # 5. A SIGKILL while a child executes, then a last resume that runs to the end.
    resume(state, study_id)
    wait_for(state, study_id, lambda s: s["counts"]["running"] >= 1 and s["counts"]["succeeded"] >= 3)
    os.kill(state["pid"], signal.SIGKILL)
    wait_gone(state["pid"])
    state = servers.start()
    assert study(state, study_id)["status"] == "interrupted"
    resume(state, study_id)
    final = wait_for(state, study_id, lambda s: s["status"] not in ("running", "queued"))
    assert final["status"] == "succeeded", final
    assert_exactly_once(state, final)
    retried = [v for v in final["variants"] if len(v["attempts"]) > 2]
    assert retried  # some repetitions needed a second attempt, with the same seed
    for v in retried:
        for r in range(2):
            seeds = {a["seed"] for a in v["attempts"] if a["repetition"] == r}
            assert seeds == {11 + r}

    # The same study, uninterrupted, reaches the same ranking.
    code, fresh = api(state, "POST", "studies", spec("uninterrupted"))
    assert code == 201, fresh
    reference = wait_for(state, fresh["id"], lambda s: s["status"] not in ("running", "queued"))
    assert reference["status"] == "succeeded"
    assert ranking(final) == ranking(reference) and [r[0] for r in ranking(final)] == ["low", "base", "slow"]
    assert servers.stop().returncode == 0


@pytest.mark.timeout(400)
def test_an_auto_study_resumes_itself_after_a_hard_kill(servers):
    state = servers.start()
    code, created = api(state, "POST", "studies", spec("auto", nap=0.5, resume_policy="auto",
                                                       budget={"max_parallel_runs": 2}))
    assert code == 201, created
    study_id = created["id"]
    wait_for(state, study_id, lambda s: s["counts"]["running"] >= 1 and s["counts"]["succeeded"] >= 1)
    os.kill(state["pid"], signal.SIGKILL)
    wait_gone(state["pid"])
    state = servers.start()
    final = wait_for(state, study_id, lambda s: s["status"] not in ("running", "queued"))
    assert final["status"] == "succeeded", final
    types = [e["type"] for e in events(state, study_id)]
    assert "study_interrupted" in types and "study_resumed" in types
    assert_exactly_once(state, final)
    assert [r[0] for r in ranking(final)] == ["low", "base", "slow"]
    assert servers.stop().returncode == 0


@pytest.mark.timeout(600)
def test_a_child_taken_over_from_a_worker_keeps_its_study_running_through_a_hard_kill(servers, tmp_path):
    from test_headless import free_port
    from test_workers_e2e import AgentProcess

    port = free_port()
    state = servers.start(port)
    agent = AgentProcess(tmp_path, state["url"], name="box", token="study-crash-token",
                         env={"CODEFY_DEVICE_INVENTORY": ""})
    try:
        deadline = time.monotonic() + 120
        while not any(w["name"] == "box" and w["state"] == "connected"
                      for w in api(state, "GET", "workers")[1]["workers"]):
            assert time.monotonic() < deadline, agent.output()
            time.sleep(0.1)
        body = spec("worker", nap=2.0, options={"target": {"worker": "box"}})
        body["variants"] = body["variants"][:2]
        body["repetitions"] = 1
        code, created = api(state, "POST", "studies", body)
        assert code == 201, created
        study_id = created["id"]
        wait_for(state, study_id, lambda s: s["counts"]["running"] == 1)
        os.kill(state["pid"], signal.SIGKILL)
        wait_gone(state["pid"])
        state = servers.start(port)
        after = study(state, study_id)
        assert after["status"] == "running", after  # not interrupted: its child runs on
        final = wait_for(state, study_id, lambda s: s["status"] not in ("running", "queued"), timeout=120)
        assert final["status"] == "succeeded", final
        types = [e["type"] for e in events(state, study_id)]
        assert "study_interrupted" not in types and "study_resumed" not in types
        runs = children(state, study_id)
        assert len(runs) == 2 and all(r["status"] == "succeeded" for r in runs)
        assert [r["label"] for r in final["rankings"]] == ["low", "base"]
    finally:
        agent.cleanup()


@pytest.mark.timeout(400)
def test_a_graceful_stop_mid_study_then_resume_runs_every_repetition_once(servers):
    state = servers.start()
    code, created = api(state, "POST", "studies", spec("graceful", nap=0.5))
    assert code == 201, created
    study_id = created["id"]
    wait_for(state, study_id, lambda s: s["counts"]["running"] == 1 and s["counts"]["succeeded"] >= 1)
    assert servers.stop().returncode == 0
    wait_gone(state["pid"])
    state = servers.start()
    assert study(state, study_id)["status"] == "interrupted"
    resume(state, study_id)
    final = wait_for(state, study_id, lambda s: s["status"] not in ("running", "queued"))
    assert final["status"] == "succeeded", final
    assert_exactly_once(state, final)
    assert servers.stop().returncode == 0
