"""Studies on a real jupyter-server with a real SQLite file: submit, schedule, rank, cancel, resume,
idempotency, budgets, the audit log, retention, and every refusal the seed names."""

from __future__ import annotations

import asyncio
import json

import pytest
from pg_server import stored_bytes


@pytest.fixture
def jp_server_config(tmp_path):
    return {"ServerApp": {"jpserver_extensions": {"codefy_jupyter": True}},
            "CodefyApp": {"data_dir": str(tmp_path / "codefy")}}


def edge(s, sp, t, tp):
    return {"source": s, "source_port": sp, "target": t, "target_port": tp}


def mean_graph(values, nap=0.0):
    """Logs `mean` from node m (the mean of `values`); a Sleep of `nap` seconds first."""
    return {"nodes": [{"id": "nap", "type": "Sleep", "params": {"seconds": nap}},
                      {"id": "vals", "type": "List", "params": {"values": values}},
                      {"id": "m", "type": "Mean"}],
            "edges": [edge("vals", "values", "nap", "value"), edge("nap", "value", "m", "values")]}


OBJECTIVE = {"node_id": "m", "metric": "mean", "direction": "minimize"}


def spec(**extra):
    body = {"name": "tiny", "objective": OBJECTIVE, "base_graph": mean_graph([2, 4]),
            "variants": [{"label": "base", "ops": []},
                         {"label": "low", "graph": mean_graph([1, 2])},
                         {"label": "high", "graph": mean_graph([5, 7])}],
            "repetitions": 2, "seed": 7}
    body.update(extra)
    return body


async def call(jp_fetch, *path, method="GET", body=None, headers=None, **params):
    kwargs = {"method": method, "raise_error": False}
    if headers:
        kwargs["headers"] = headers
    if body is not None:
        kwargs["body"] = json.dumps(body)
    elif method == "POST":
        kwargs["body"] = b""
    if params:
        kwargs["params"] = params
    response = await jp_fetch("codefy", *path, **kwargs)
    ctype = response.headers.get("Content-Type", "")
    return response.code, (json.loads(response.body) if response.body and ctype.startswith("application/json")
                           else response.body)


async def post_study(jp_fetch, body, headers=None):
    return await call(jp_fetch, "api", "studies", method="POST", body=body, headers=headers)


async def wait_study(jp_fetch, study_id, statuses, timeout=120.0):
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        code, study = await call(jp_fetch, "api", "studies", study_id)
        assert code == 200, study
        if study["status"] in statuses:
            return study
        assert asyncio.get_running_loop().time() < deadline, f"study stayed {study['status']}"
        await asyncio.sleep(0.05)


async def all_events(jp_fetch, study_id):
    code, page = await call(jp_fetch, "api", "studies", study_id, "events", cursor=0)
    assert code == 200
    return page["events"]


async def test_a_study_runs_every_repetition_once_and_ranks_its_variants(jp_fetch):
    code, study = await post_study(jp_fetch, spec())
    assert code == 201, study
    assert study["created"] is True and study["seed"] == 7 and study["revision"] >= 1
    done = await wait_study(jp_fetch, study["id"], {"succeeded", "failed", "halted", "interrupted"})
    assert done["status"] == "succeeded", done
    assert [r["label"] for r in done["rankings"]] == ["low", "base", "high"], done["variants"]
    assert [r["rank"] for r in done["rankings"]] == [1, 2, 3]
    by_label = {v["label"]: v for v in done["variants"]}
    assert by_label["low"]["aggregate"] == {"count": 2, "mean": 1.5, "std": 0.0, "values": [1.5, 1.5]}
    assert all(v["eligible"] and v["ineligible_reasons"] == [] for v in done["variants"])
    assert [rep["seed"] for rep in by_label["base"]["repetitions"]] == [7, 8]
    assert by_label["low"]["comparison"] is None and by_label["high"]["comparison"]["against"] == "low"
    assert done["counts"]["succeeded"] == 6
    code, runs = await call(jp_fetch, "api", "runs", limit=50)
    children = [r for r in runs["runs"] if r.get("study_id") == study["id"]]
    assert len(children) == 6 and len({r["study_attempt_id"] for r in children}) == 6
    assert {r["name"] for r in children} == {f"tiny / {label} / r{r}" for label in ("base", "low", "high")
                                             for r in (0, 1)}
    # repetition-major: every variant's r0 before any r1
    events = await all_events(jp_fetch, study["id"])
    assert [e["cursor"] for e in events] == list(range(1, len(events) + 1))
    submits = [(e["payload"]["repetition"], e["payload"]["variant"]) for e in events
               if e["type"] == "attempt_submitting"]
    assert submits == sorted(submits)
    assert events[0]["type"] == "study_created" and events[-1]["type"] == "study_finished"
    assert [r["label"] for r in events[-1]["payload"]["ranking"]] == ["low", "base", "high"]
    revisions = [e["payload"]["revision"] for e in events]
    assert revisions == sorted(revisions) and revisions[-1] == done["revision"]


def register_probe_node():
    """Test-only nodes in the server's registry: one with a SECRET parameter that logs a value
    depending on its seed, and a slow one that checks for cancels."""
    from codefy_jupyter.engine import default_registry, param

    reg = default_registry()
    if reg.get("StudyProbe") is None:
        @reg.node("StudyProbe", params={"value": param.float(1.0, min=-100, max=100), "key": param.secret(""),
                                        "seconds": param.float(0.0, min=0, max=60)})
        def study_probe(ctx, value, key, seconds):
            import time as _time
            deadline = _time.monotonic() + seconds
            while _time.monotonic() < deadline:
                ctx.check_cancelled()
                _time.sleep(0.02)
            ctx.log_metric("score", value + (ctx.seed or 0) % 3, step=1)
            ctx.log_metric("key_len", len(key), step=1)  # the child saw its SECRET value
            return {}


def probe(value=1.0, key="", seconds=0.0):
    return {"nodes": [{"id": "p", "type": "StudyProbe", "params": {"value": value, "key": key, "seconds": seconds}}],
            "edges": []}


PROBE_OBJECTIVE = {"node_id": "p", "metric": "score", "direction": "minimize"}


def probe_spec(**extra):
    body = {"name": "probe", "objective": PROBE_OBJECTIVE, "base_graph": probe(),
            "variants": [{"label": "one", "ops": []}, {"label": "three", "ops": [{"node_id": "p", "param": "value",
                                                                                 "value": 3}]}],
            "repetitions": 2, "seed": 0}
    body.update(extra)
    return body


async def runs_of(jp_fetch, study_id):
    code, page = await call(jp_fetch, "api", "runs", limit=50)
    assert code == 200
    return [r for r in page["runs"] if r.get("study_id") == study_id]


async def test_idempotency_by_header_or_body_and_secrets_blanked(jp_fetch, tmp_path):
    register_probe_node()
    body = probe_spec(base_graph=probe(key="first-secret"))
    code, first = await post_study(jp_fetch, body, headers={"Idempotency-Key": "k-1"})
    assert code == 201 and first["created"] and first["idempotency_key"] == "k-1"
    done = await wait_study(jp_fetch, first["id"], {"succeeded"})
    # The same request again (only its secret differs), by header and by body: the same study, no runs.
    again = probe_spec(base_graph=probe(key="another-secret"))
    code, second = await post_study(jp_fetch, again, headers={"Idempotency-Key": "k-1"})
    assert code == 200 and second["created"] is False and second["id"] == first["id"]
    code, third = await post_study(jp_fetch, {**again, "idempotency_key": "k-1"})
    assert code == 200 and third["id"] == first["id"]
    assert len(await runs_of(jp_fetch, first["id"])) == 4
    # A different request with the key: 409 naming the study, even when its target could not run.
    code, err = await post_study(jp_fetch, probe_spec(repetitions=3), headers={"Idempotency-Key": "k-1"})
    assert code == 409 and err["error"]["code"] == "idempotency_conflict"
    assert err["error"]["params"]["study_id"] == first["id"]
    code, err = await post_study(jp_fetch, probe_spec(options={"target": {"worker": "ghost"}}),
                                 headers={"Idempotency-Key": "k-1"})
    assert code == 409, err
    code, err = await post_study(jp_fetch, {**body, "idempotency_key": "a"}, headers={"Idempotency-Key": "b"})
    assert code == 400 and err["error"]["code"] == "idempotency_key_mismatch"
    # The children ran with the secret; the database never saw it.
    assert all(v["eligible"] for v in done["variants"])
    assert {rep["current"]["final_metrics"]["key_len"] for v in done["variants"] for rep in v["repetitions"]} == {
        len("first-secret")}
    stored = stored_bytes(tmp_path / "codefy")
    assert first["id"].encode() in stored  # the search reads what the store holds
    assert b"first-secret" not in stored


@pytest.mark.parametrize("change, status, code_, field", [
    ({"objective": {"node_id": "p", "metric": "score"}}, 422, "invalid_request", "objective.direction"),
    ({"repetitions": 33}, 422, "invalid_request", "repetitions"),
    ({"seed": 2**32}, 422, "invalid_request", "seed"),
    ({"budget": {"max_parallel_runs": 33}}, 422, "invalid_request", "budget.max_parallel_runs"),
    ({"variants": [{"label": "a", "ops": []}, {"label": "b", "ops": []},
                   {"label": "c", "ops": [{"node_id": "p", "param": "value", "value": 500}]}]},
     400, "param_value_invalid", "variants[2].ops[0]"),
    ({"variants": [{"label": "a", "ops": [{"node_id": "p", "param": "key", "value": "x"}]}]},
     400, "param_secret", "variants[0].ops[0]"),
    ({"variants": [{"label": "a", "ops": []}, {"label": "a", "ops": []}]}, 400, "duplicate_label", "variants[1].label"),
    ({"variants": [{"label": str(i), "ops": []} for i in range(33)]}, 400, "too_many_variants", "variants"),
    ({"budget": {"max_runs": 3}}, 400, "max_runs_too_low", "budget.max_runs"),
    ({"options": {"seed": 3}}, 400, "seed_owned", "options.seed"),
    ({"options": {"lane": "interactive", "session": "s"}}, 400, "lane_interactive", "options.lane"),
    ({"options": {"target": {"worker": "ghost"}}}, 400, None, None),
    ({"variants": [{"label": "bad", "graph": {"nodes": [{"id": "x", "type": "Nope"}]}}]}, 400, "invalid_graph",
     "variants[0].graph"),
])
async def test_every_refusal_leaves_nothing_behind(jp_fetch, change, status, code_, field):
    register_probe_node()
    code, err = await post_study(jp_fetch, probe_spec(**change))
    assert code == status, err
    if code_ is not None:
        assert err["error"]["code"] == code_
    if field is not None:
        assert err["error"]["params"]["field"] == field
    code, listing = await call(jp_fetch, "api", "studies")
    assert code == 200 and listing["studies"] == []
    code, page = await call(jp_fetch, "api", "runs")
    assert page["runs"] == []


async def test_cancel_then_resume_keeps_results_and_retries_with_the_same_seed(jp_fetch):
    register_probe_node()
    code, study = await post_study(jp_fetch, probe_spec(base_graph=probe(seconds=30)))
    assert code == 201
    sid = study["id"]
    running = await wait_study(jp_fetch, sid, {"running"})
    code, err = await call(jp_fetch, "api", "studies", sid, "cancel", method="POST",
                           body={"expected_revision": running["revision"] - 1})
    assert code == 409 and err["error"]["code"] == "revision_moved"
    code, reply = await call(jp_fetch, "api", "studies", sid, "cancel", method="POST")
    assert code == 200 and reply["status"] in ("cancel_requested", "cancelled") and len(reply["cancelled_runs"]) == 1
    cancelled = await wait_study(jp_fetch, sid, {"cancelled"})
    assert cancelled["counts"]["cancelled"] == 1 and cancelled["counts"]["pending"] == 3
    code, again = await call(jp_fetch, "api", "studies", sid, "cancel", method="POST")
    assert code == 200 and again["cancelled_runs"] == [] and again["revision"] == cancelled["revision"]
    code, err = await call(jp_fetch, "api", "studies", sid, "resume", method="POST",
                           body={"budget": {"max_runs": 3}})
    assert code == 400 and err["error"]["code"] == "max_runs_too_low"
    code, resumed = await call(jp_fetch, "api", "studies", sid, "resume", method="POST",
                               body={"budget": {"max_runs": 5, "max_parallel_runs": 2}})
    assert code == 200, resumed
    code, err = await call(jp_fetch, "api", "studies", sid, "resume", method="POST")
    assert code == 409 and err["error"]["code"] == "study_not_resumable"
    first = resumed["variants"][0]
    assert [a["attempt"] for a in first["attempts"] if a["repetition"] == 0] == [1, 2]
    assert {a["seed"] for a in first["attempts"] if a["repetition"] == 0} == {0}
    code, reply = await call(jp_fetch, "api", "studies", sid, "cancel", method="POST")
    assert code == 200
    await wait_study(jp_fetch, sid, {"cancelled"})
    code, page = await call(jp_fetch, "api", "studies", sid, "events")
    resumed_events = [e for e in page["events"] if e["type"] == "study_resumed"]
    assert resumed_events[0]["payload"]["old_budget"]["max_runs"] is None
    assert resumed_events[0]["payload"]["new_budget"]["max_runs"] == 5


async def test_a_succeeded_study_cannot_be_cancelled_and_csv_and_list(jp_fetch):
    register_probe_node()
    code, study = await post_study(jp_fetch, probe_spec())
    done = await wait_study(jp_fetch, study["id"], {"succeeded"})
    code, err = await call(jp_fetch, "api", "studies", study["id"], "cancel", method="POST")
    assert code == 409 and err["error"]["code"] == "study_succeeded"
    # Both variants of a repetition share its seed, so their noise cancels in the paired differences.
    assert [r["label"] for r in done["rankings"]] == ["one", "three"]
    one, three = (v["aggregate"]["values"] for v in done["variants"])
    assert [b - a for a, b in zip(one, three)] == [2.0, 2.0]
    comparison = done["variants"][1]["comparison"]
    assert comparison["against"] == "one" and comparison["differences"] == [2.0, 2.0]
    code, text = await call(jp_fetch, "api", "studies", study["id"], format="csv")
    lines = text.decode().strip().splitlines()
    assert len(lines) == 5 and lines[0].startswith("study_id,objective_node_id")
    code, second = await post_study(jp_fetch, probe_spec(base_graph=probe(seconds=30), name="later"))
    code, listing = await call(jp_fetch, "api", "studies")
    assert [s["id"] for s in listing["studies"]] == [second["id"], study["id"]]
    code, active = await call(jp_fetch, "api", "studies", status="queued,running,cancel_requested")
    assert [s["id"] for s in active["studies"]] == [second["id"]]
    code, err = await call(jp_fetch, "api", "studies", status="nope")
    assert code == 400
    await call(jp_fetch, "api", "studies", second["id"], "cancel", method="POST")
    await wait_study(jp_fetch, second["id"], {"cancelled"})


async def test_a_child_cancelled_directly_interrupts_its_study(jp_fetch):
    register_probe_node()
    code, study = await post_study(jp_fetch, probe_spec(base_graph=probe(seconds=30)))
    sid = study["id"]
    deadline = asyncio.get_running_loop().time() + 90
    while not (children := [r for r in await runs_of(jp_fetch, sid) if r["status"] == "running"]):
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.05)
    code, _ = await call(jp_fetch, "api", "runs", children[0]["id"], "cancel", method="POST")
    assert code == 200
    interrupted = await wait_study(jp_fetch, sid, {"interrupted"})
    assert interrupted["counts"]["cancelled"] == 1 and interrupted["counts"]["pending"] == 3
    assert len(await runs_of(jp_fetch, sid)) == 1  # not retried on its own
    code, page = await call(jp_fetch, "api", "studies", sid, "events")
    assert page["events"][-1]["type"] == "study_interrupted"
    assert page["events"][-1]["payload"]["reason"] == "child_cancelled"
    await call(jp_fetch, "api", "studies", sid, "cancel", method="POST")


async def test_budgets_time_out_a_child_and_halt_a_study_that_a_raised_budget_resumes(jp_fetch):
    register_probe_node()
    # max_run_seconds: the slow variant's repetitions end timed_out, the study goes on.
    code, study = await post_study(jp_fetch, probe_spec(
        variants=[{"label": "fast", "ops": []},
                  {"label": "slow", "ops": [{"node_id": "p", "param": "seconds", "value": 30}]}],
        repetitions=1, budget={"max_run_seconds": 0.3}))
    assert code == 201, study
    done = await wait_study(jp_fetch, study["id"], {"succeeded"})
    slow = done["variants"][1]["repetitions"][0]["current"]
    assert slow["status"] == "timed_out" and slow["stop_reason"] == "max_run_seconds"
    assert not done["variants"][1]["eligible"] and [r["label"] for r in done["rankings"]] == ["fast"]
    code, page = await call(jp_fetch, "api", "studies", study["id"], "events")
    assert "attempt_stop_requested" in [e["type"] for e in page["events"]]
    # max_active_seconds: halted with what was used; a resume with a raised budget finishes it.
    code, study = await post_study(jp_fetch, probe_spec(base_graph=probe(seconds=0.4), repetitions=2,
                                                        variants=[{"label": "only", "ops": []}],
                                                        budget={"max_active_seconds": 0.3}))
    halted = await wait_study(jp_fetch, study["id"], {"halted"})
    assert halted["halt"]["budget"] == "max_active_seconds" and halted["halt"]["limit"] == 0.3
    assert halted["halt"]["used"] >= 0.3 and halted["counts"]["pending"] == 1
    assert halted["budget_usage"]["exhausted"] == "max_active_seconds"
    code, page = await call(jp_fetch, "api", "studies", study["id"], "events")
    assert page["events"][-1]["type"] == "study_halted" and page["events"][-1]["payload"]["halt"] == halted["halt"]
    code, err = await call(jp_fetch, "api", "studies", study["id"], "resume", method="POST")
    assert code == 409 and err["error"]["code"] == "budget_used_up"
    code, _ = await call(jp_fetch, "api", "studies", study["id"], "resume", method="POST",
                         body={"budget": {"max_active_seconds": 60}})
    assert code == 200
    done = await wait_study(jp_fetch, study["id"], {"succeeded"})
    assert done["halt"] is None and done["counts"]["succeeded"] == 2


async def test_events_long_poll_while_the_study_is_active(jp_fetch):
    register_probe_node()
    code, study = await post_study(jp_fetch, probe_spec(base_graph=probe(seconds=0.5), repetitions=1,
                                                        variants=[{"label": "only", "ops": []}]))
    code, page = await call(jp_fetch, "api", "studies", study["id"], "events")
    cursor = page["cursor"]
    started = asyncio.get_running_loop().time()
    code, later = await call(jp_fetch, "api", "studies", study["id"], "events", cursor=cursor, wait=20)
    assert code == 200 and later["events"] and later["events"][0]["cursor"] == cursor + 1
    assert asyncio.get_running_loop().time() - started < 15
    done = await wait_study(jp_fetch, study["id"], {"succeeded"})
    code, page = await call(jp_fetch, "api", "studies", study["id"], "events", cursor=10**6, wait=20)
    assert code == 200 and page["events"] == [] and page["revision"] == done["revision"]
    for bad in ({"wait": 61}, {"cursor": -1}):
        code, err = await call(jp_fetch, "api", "studies", study["id"], "events", **bad)
        assert code == 400
    code, err = await call(jp_fetch, "api", "studies", "nope", "events")
    assert code == 404 and err["error"]["code"] == "study_not_found"


async def test_max_runs_counts_retries_and_a_used_up_budget_cannot_resume(jp_fetch):
    register_probe_node()
    code, study = await post_study(jp_fetch, probe_spec(
        variants=[{"label": "fast", "ops": []},
                  {"label": "slow", "ops": [{"node_id": "p", "param": "seconds", "value": 30}]}],
        repetitions=1, budget={"max_runs": 2, "max_parallel_runs": 2}))
    sid = study["id"]
    deadline = asyncio.get_running_loop().time() + 90
    while not (slow := [r for r in await runs_of(jp_fetch, sid) if r["status"] == "running" and "slow" in r["name"]]):
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.05)
    await call(jp_fetch, "api", "runs", slow[0]["id"], "cancel", method="POST")
    interrupted = await wait_study(jp_fetch, sid, {"interrupted"})
    assert interrupted["budget_usage"]["max_runs"] == {"limit": 2, "used": 2}
    code, err = await call(jp_fetch, "api", "studies", sid, "resume", method="POST")
    assert code == 409 and err["error"]["code"] == "budget_used_up"
    assert err["error"]["params"]["halt"] == {"budget": "max_runs", "limit": 2, "used": 2}
    code, resumed = await call(jp_fetch, "api", "studies", sid, "resume", method="POST",
                               body={"budget": {"max_runs": 3, "max_run_seconds": 0.2},
                                     "expected_revision": interrupted["revision"]})
    assert code == 200, resumed
    done = await wait_study(jp_fetch, sid, {"succeeded"})
    assert done["variants"][1]["repetitions"][0]["current"]["status"] == "timed_out"
    assert [a["status"] for a in done["variants"][1]["attempts"]] == ["cancelled", "timed_out"]


async def test_max_active_seconds_stops_running_children_and_halts(jp_fetch):
    register_probe_node()
    code, study = await post_study(jp_fetch, probe_spec(base_graph=probe(seconds=30), repetitions=2,
                                                        variants=[{"label": "only", "ops": []}],
                                                        budget={"max_active_seconds": 0.4}))
    halted = await wait_study(jp_fetch, study["id"], {"halted"}, timeout=90)
    stopped = halted["variants"][0]["repetitions"][0]["current"]
    assert stopped["status"] == "cancelled" and stopped["stop_reason"] == "max_active_seconds"
    assert halted["halt"]["budget"] == "max_active_seconds" and halted["counts"]["pending"] == 1
    code, page = await call(jp_fetch, "api", "studies", study["id"], "events")
    types = [e["type"] for e in page["events"]]
    assert "attempt_stop_requested" in types and types[-1] == "study_halted"
    code, cancelled = await call(jp_fetch, "api", "studies", study["id"], "cancel", method="POST")
    assert code == 200 and cancelled["status"] == "cancelled" and cancelled["cancelled_runs"] == []


async def test_cancelling_an_interrupted_study_waits_for_its_children_still_running(jp_fetch):
    register_probe_node()
    code, study = await post_study(jp_fetch, probe_spec(base_graph=probe(seconds=30),
                                                        budget={"max_parallel_runs": 2}))
    sid = study["id"]
    deadline = asyncio.get_running_loop().time() + 90
    # Seeded children on this server run one at a time: one runs, the next waits in the queue.
    while True:
        children = await runs_of(jp_fetch, sid)
        if sorted(r["status"] for r in children) == ["queued", "running"]:
            break
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.05)
    running = next(r for r in children if r["status"] == "running")
    waiting = next(r for r in children if r["status"] == "queued")
    await call(jp_fetch, "api", "runs", running["id"], "cancel", method="POST")
    interrupted = await wait_study(jp_fetch, sid, {"interrupted"})
    assert interrupted["counts"]["queued"] + interrupted["counts"]["running"] == 1
    code, reply = await call(jp_fetch, "api", "studies", sid, "cancel", method="POST")
    assert code == 200 and reply["cancelled_runs"] == [waiting["id"]]
    done = await wait_study(jp_fetch, sid, {"cancelled"})
    assert done["counts"]["cancelled"] == 2 and done["counts"]["pending"] == 2
