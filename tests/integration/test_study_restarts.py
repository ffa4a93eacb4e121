"""Study rules across a hard kill of a real `codefy start` (SIGKILL) that the crash tests leave out:
SECRET values of a study's variants (kept in memory only, blank after a restart, still equal for
idempotency), and a `resume_policy: auto` study whose budget is used up by the restart (halted,
not resumed) next to one with budget left (it resumes itself).

The restarted server must know the test's node, so the node comes as an installed pack: a
dist-info folder with an entry point, on the server's PYTHONPATH.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pg_server import connect_raw, store_target, stored_bytes

from test_headless import Servers, api, wait_gone
from test_study_crash import study, wait_for

pytestmark = pytest.mark.slow

SECRET = "base-secret-value"
VARIANT_SECRET = "variant-secret-longer"

PACK = '''
import time

from codefy_jupyter.engine import node, param


@node("RestartProbe", params={"value": param.float(1.0, min=-100, max=100), "key": param.secret(""),
                              "seconds": param.float(0.0, min=0, max=60)})
def restart_probe(ctx, value, key, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        ctx.check_cancelled()
        time.sleep(0.02)
    ctx.log_metric("score", value + (ctx.seed or 0) % 3, step=1)
    ctx.log_metric("key_len", len(key), step=1)  # what the child saw of its SECRET value
    return {}
'''


def probe(value: float = 1.0, key: str = "", seconds: float = 0.8) -> dict[str, Any]:
    return {"nodes": [{"id": "p", "type": "RestartProbe", "params": {"value": value, "key": key,
                                                                     "seconds": seconds}}], "edges": []}


def spec(key: str, base_secret: str = SECRET, variant_secret: str = VARIANT_SECRET, seconds: float = 0.8,
         **extra: Any) -> dict[str, Any]:
    return {"name": "restarts", "objective": {"node_id": "p", "metric": "score", "direction": "minimize"},
            "base_graph": probe(key=base_secret, seconds=seconds),
            "variants": [{"label": "base", "ops": []},
                         {"label": "keyed", "graph": probe(value=3.0, key=variant_secret, seconds=seconds)}],
            "repetitions": 2, "seed": 5, "idempotency_key": key, **extra}


@pytest.fixture
def servers(tmp_path, request) -> Servers:
    site = tmp_path / "pack-site"
    info = site / "codefy_restart_probe-0.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: codefy-restart-probe\nVersion: 0.0\n")
    (info / "entry_points.txt").write_text("[codefy_jupyter.nodes]\nrestart_probe = restart_probe_nodes\n")
    (site / "restart_probe_nodes.py").write_text(PACK)
    s = Servers(tmp_path)
    s.env["JUPYTER_TOKEN"] = "study-restarts-token"
    s.env["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), s.env.get("PYTHONPATH", "")) if p)
    request.addfinalizer(s.kill_leftovers)
    return s


def events(state, study_id) -> list[dict[str, Any]]:
    code, page = api(state, "GET", f"studies/{study_id}/events?cursor=0")
    assert code == 200, page
    return page["events"]


def children(state, study_id) -> list[dict[str, Any]]:
    code, listing = api(state, "GET", "runs?limit=50")
    assert code == 200, listing
    return [r for r in listing["runs"] if r.get("study_id") == study_id]


def kill_and_restart(servers: Servers, state: dict[str, Any]) -> dict[str, Any]:
    os.kill(state["pid"], signal.SIGKILL)
    wait_gone(state["pid"])
    return servers.start()


def database_bytes(data_dir: Path) -> bytes:
    return stored_bytes(data_dir)


def stored_graphs(data_dir: Path, study_id: str) -> list[dict[str, Any]]:
    conn = connect_raw(store_target(data_dir))
    try:
        rows = conn.execute("SELECT graph FROM study_variants WHERE study_id = ? ORDER BY variant",
                            (study_id,)).fetchall()
    finally:
        conn.close()
    return [json.loads(g) for (g,) in rows]


def succeeded_once_each(final: dict[str, Any]) -> None:
    done = Counter((v["label"], a["repetition"]) for v in final["variants"] for a in v["attempts"]
                   if a["status"] == "succeeded")
    assert done == {(label, r): 1 for label in ("base", "keyed") for r in (0, 1)}, done


@pytest.mark.timeout(300)
def test_secret_values_are_blank_after_a_hard_kill_and_a_retry_with_other_secrets_is_the_same_study(servers):
    state = servers.start()
    code, created = api(state, "POST", "studies", spec("secret-restart"))
    assert code == 201, created
    study_id = created["id"]
    wait_for(state, study_id, lambda s: s["counts"]["succeeded"] >= 1 and s["counts"]["running"] == 1)
    state = kill_and_restart(servers, state)

    after = study(state, study_id)
    assert after["status"] == "interrupted", after
    before_kill = {a["id"] for v in after["variants"] for a in v["attempts"] if a["status"] == "succeeded"}
    assert before_kill
    # What the database keeps of the plan: every SECRET blank, the values nowhere in the file.
    graphs = stored_graphs(servers.data_dir, study_id)
    assert [g["nodes"][0]["params"]["key"] for g in graphs] == ["", ""]
    assert [g["nodes"][0]["params"]["value"] for g in graphs] == [1.0, 3.0]
    stored = database_bytes(servers.data_dir)
    assert SECRET.encode() not in stored and VARIANT_SECRET.encode() not in stored

    # The restarted server compares requests with secrets blanked: other secrets, or the same ones,
    # are the same request; it answers the existing study and creates nothing.
    runs_before = len(children(state, study_id))
    for base_secret, variant_secret in (("another", "yet-another"), (SECRET, VARIANT_SECRET)):
        code, again = api(state, "POST", "studies", spec("secret-restart", base_secret, variant_secret))
        assert code == 200 and again["created"] is False and again["id"] == study_id, again
    # A different request under the key is refused, and writes nothing.
    code, err = api(state, "POST", "studies", spec("secret-restart", repetitions=3))
    assert code == 409 and err["error"]["code"] == "idempotency_conflict", err
    assert len(children(state, study_id)) == runs_before
    assert study(state, study_id)["revision"] == after["revision"]
    code, listing = api(state, "GET", "studies")
    assert code == 200 and [s["id"] for s in listing["studies"]] == [study_id], listing

    # Resumed by the new process, the remaining children run with the secrets blank (seed: "A
    # study resumed after a restart runs with those values blank").
    code, body = api(state, "POST", f"studies/{study_id}/resume", {"expected_revision": after["revision"]})
    assert code == 200, body
    final = wait_for(state, study_id, lambda s: s["status"] not in ("running", "queued"))
    assert final["status"] == "succeeded", final
    succeeded_once_each(final)
    secret_len = {"base": len(SECRET), "keyed": len(VARIANT_SECRET)}
    for v in final["variants"]:
        for a in v["attempts"]:
            if a["status"] != "succeeded":
                continue
            seen = a["final_metrics"]["key_len"]
            assert seen == (secret_len[v["label"]] if a["id"] in before_kill else 0), (v["label"], a)
    assert any(a["status"] == "succeeded" and a["id"] not in before_kill
               for v in final["variants"] for a in v["attempts"])
    stored = database_bytes(servers.data_dir)
    assert SECRET.encode() not in stored and VARIANT_SECRET.encode() not in stored
    assert servers.stop().returncode == 0


@pytest.mark.timeout(300)
def test_an_auto_study_whose_budget_the_restart_finds_used_up_halts_instead_of_resuming(servers):
    state = servers.start()
    # Every attempt max_runs allows is submitted at once; the kill interrupts the ones not yet done,
    # so the restart finds repetitions to retry and no run left to retry them with. 3 s children: the
    # one seen running may be the last, and the kill must land before it ends.
    body = spec("auto-used-up", seconds=3.0, resume_policy="auto", budget={"max_parallel_runs": 4, "max_runs": 4})
    code, created = api(state, "POST", "studies", body)
    assert code == 201, created
    study_id = created["id"]
    wait_for(state, study_id, lambda s: s["counts"]["running"] == 1
             and s["counts"]["succeeded"] + s["counts"]["running"] + s["counts"]["queued"] == 4)
    state = kill_and_restart(servers, state)

    halted = wait_for(state, study_id, lambda s: s["status"] not in ("running", "queued", "interrupted"))
    assert halted["status"] == "halted", halted
    assert halted["halt"] == {"budget": "max_runs", "limit": 4, "used": 4}
    assert halted["budget_usage"]["exhausted"] == "max_runs"
    assert halted["budget_usage"]["max_runs"] == {"limit": 4, "used": 4}
    log = events(state, study_id)
    types = [e["type"] for e in log]
    assert "study_resumed" not in types and types[-2:] == ["study_interrupted", "study_halted"], types
    payload = log[-1]["payload"]
    assert payload["halt"] == halted["halt"] and payload["revision"] == halted["revision"]
    assert [r["label"] for r in payload["ranking"]] == [r["label"] for r in halted["rankings"]]
    runs = children(state, study_id)
    assert len(runs) == 4 and all(r["status"] != "queued" for r in runs), runs
    # Still halted a moment later: nothing was submitted behind the halt.
    time.sleep(1.0)
    assert study(state, study_id)["revision"] == halted["revision"] and len(children(state, study_id)) == 4

    # A resume with the same budget would halt at once: refused, nothing written.
    code, err = api(state, "POST", f"studies/{study_id}/resume", {})
    assert code == 409 and err["error"]["code"] == "budget_used_up", err
    assert study(state, study_id)["revision"] == halted["revision"] and len(children(state, study_id)) == 4
    # A raised budget continues it; only the interrupted repetitions run again.
    retried = 4 - halted["counts"]["succeeded"]
    code, resumed = api(state, "POST", f"studies/{study_id}/resume",
                        {"budget": {"max_parallel_runs": 4, "max_runs": 8}})
    assert code == 200, resumed
    final = wait_for(state, study_id, lambda s: s["status"] not in ("running", "queued"))
    assert final["status"] == "succeeded", final
    succeeded_once_each(final)
    assert final["budget_usage"]["max_runs"] == {"limit": 8, "used": 4 + retried}
    assert len(children(state, study_id)) == 4 + retried
    assert servers.stop().returncode == 0


@pytest.mark.timeout(300)
def test_an_auto_study_with_budget_left_resumes_itself_and_may_use_its_last_run(servers):
    state = servers.start()
    # One child at a time: the kill interrupts exactly one attempt, and max_runs has room for
    # exactly one retry. Long children, so the kill lands inside the one seen running.
    body = spec("auto-room", seconds=2.0, resume_policy="auto", budget={"max_parallel_runs": 1, "max_runs": 5})
    code, created = api(state, "POST", "studies", body)
    assert code == 201, created
    study_id = created["id"]
    wait_for(state, study_id, lambda s: s["counts"]["succeeded"] >= 1 and s["counts"]["running"] == 1)
    state = kill_and_restart(servers, state)

    final = wait_for(state, study_id, lambda s: s["status"] not in ("running", "queued", "interrupted"))
    assert final["status"] == "succeeded", final
    assert final["halt"] is None
    types = [e["type"] for e in events(state, study_id)]
    assert "study_interrupted" in types and "study_resumed" in types and "study_halted" not in types, types
    assert types.index("study_interrupted") < types.index("study_resumed")
    succeeded_once_each(final)
    assert final["budget_usage"]["max_runs"] == {"limit": 5, "used": 5}
    assert final["budget_usage"]["exhausted"] == "max_runs"  # used to the last run, with nothing left to run
    interrupted = [a for v in final["variants"] for a in v["attempts"] if a["status"] == "interrupted"]
    assert len(interrupted) == 1
    assert len(children(state, study_id)) == 5
    assert servers.stop().returncode == 0
