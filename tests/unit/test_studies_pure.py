"""The pure parts of studies, without a server: request parsing and its refusals, the lifecycle
table, the repetition-major plan with its budgets, seeds, eligibility and ranks, the store's
one-transaction writes and gapless audit log."""

from __future__ import annotations

import sqlite3

import pytest

from codefy_jupyter.core.errors import BadRequest, Conflict, SchemaError
from codefy_jupyter.core.experiments.studies import plan, state as st
from codefy_jupyter.core.experiments.studies.request import Budget, parse_study, seed_of
from codefy_jupyter.core.experiments.studies.results import study_results
from codefy_jupyter.core.store import studies as db
from codefy_jupyter.core.store.migrations import migrate
from codefy_jupyter.engine import NodeRegistry, param


@pytest.fixture(scope="module")
def registry():
    r = NodeRegistry()

    @r.node("Num", outputs={"value": "float"}, params={"value": param.float(0.0, min=-10, max=10),
                                                       "mode": param.select("a", ["a", "b"]),
                                                       "key": param.secret("")})
    def num(ctx, value, mode, key):
        return {"value": value}

    @r.node("Sub", outputs={"value": "float"}, params={"graph": param.json({})})
    def sub(ctx, graph):
        return {"value": 0.0}

    return r


BASE = {"nodes": [{"id": "n", "type": "Num", "params": {"value": 1, "key": "s3cret"}},
                  {"id": "twin", "type": "Num"}, {"id": "twin", "type": "Num"}, {"id": "x", "type": "Nope"}],
        "edges": []}
OBJECTIVE = {"node_id": "n", "metric": "loss", "direction": "minimize"}


def body(**extra):
    b = {"objective": OBJECTIVE, "base_graph": BASE,
         "variants": [{"label": "a", "ops": []},
                      {"label": "b", "ops": [{"node_id": "n", "param": "value", "value": 2}]}],
         "repetitions": 2, "seed": 5}
    b.update(extra)
    return b


def parse(registry, b, **kw):
    return parse_study(b, registry=registry, max_variants=kw.pop("max_variants", 32), **kw)


# -- request -------------------------------------------------------------------------------------

def test_a_valid_request_expands_ops_into_graphs_and_keeps_secrets_in_memory(registry):
    req = parse(registry, body())
    assert [v.label for v in req.variants] == ["a", "b"]
    assert req.variants[0].graph is BASE
    assert req.variants[1].graph["nodes"][0]["params"] == {"value": 2, "key": "s3cret"}
    assert req.budget == Budget() and req.resume_policy == "explicit" and req.seed == 5


@pytest.mark.parametrize("change, field", [
    ({"objective": None}, "objective"),
    ({"objective": {"metric": "loss", "direction": "minimize"}}, "objective.node_id"),
    ({"objective": {"node_id": "n", "direction": "minimize"}}, "objective.metric"),
    ({"objective": {"node_id": "n", "metric": "loss"}}, "objective.direction"),
    ({"objective": {**OBJECTIVE, "direction": "up"}}, "objective.direction"),
    ({"variants": []}, "variants"),
    ({"variants": [{"ops": []}]}, "variants[0].label"),
    ({"variants": [{"label": "a"}]}, "variants[0]"),
    ({"variants": [{"label": "a", "ops": [], "graph": BASE}]}, "variants[0]"),
    ({"variants": [{"label": "a", "ops": [{"node_id": "n", "value": 1}]}]}, "variants[0].ops[0].param"),
    ({"repetitions": 0}, "repetitions"),
    ({"repetitions": 33}, "repetitions"),
    ({"seed": -1}, "seed"),
    ({"seed": 2**32}, "seed"),
    ({"budget": {"max_parallel_runs": 33}}, "budget.max_parallel_runs"),
    ({"budget": {"max_parallel_runs": 0}}, "budget.max_parallel_runs"),
    ({"budget": {"max_run_seconds": 0}}, "budget.max_run_seconds"),
    ({"budget": {"max_active_seconds": -1}}, "budget.max_active_seconds"),
    ({"budget": {"max_gpus": 1}}, "budget.max_gpus"),
    ({"resume_policy": "sometimes"}, "resume_policy"),
    ({"surprise": 1}, "surprise"),
])
def test_schema_refusals_are_422_naming_the_field(registry, change, field):
    with pytest.raises(SchemaError) as err:
        parse(registry, body(**change))
    assert err.value.status == 422 and err.value.field == field


def test_ops_without_a_base_graph_are_refused(registry):
    b = body()
    del b["base_graph"]
    with pytest.raises(BadRequest) as err:
        parse(registry, b)
    assert err.value.code == "base_graph_required" and err.value.params["field"] == "base_graph"


@pytest.mark.parametrize("ops, code", [
    ([{"node_id": "ghost", "param": "value", "value": 1}], "param_node_unknown"),
    ([{"node_id": "twin", "param": "value", "value": 1}], "param_node_ambiguous"),
    ([{"node_id": "x", "param": "value", "value": 1}], "param_node_unregistered"),
    ([{"node_id": "n", "param": "nope", "value": 1}], "param_unknown"),
    ([{"node_id": "n", "param": "key", "value": "x"}], "param_secret"),
    ([{"node_id": "n", "param": "value", "value": 99}], "param_value_invalid"),
    ([{"node_id": "n", "param": "mode", "value": "c"}], "param_value_invalid"),
])
def test_ops_are_checked_like_sweep_params_with_a_400_naming_the_op(registry, ops, code):
    b = body(variants=[{"label": "a", "ops": []}, {"label": "b", "ops": []},
                       {"label": "c", "ops": [{"node_id": "n", "param": "value", "value": 1}, *ops]}])
    with pytest.raises(BadRequest) as err:
        parse(registry, b)
    assert err.value.status == 400 and err.value.code == code
    assert err.value.params["field"] == "variants[2].ops[1]"


def test_labels_are_unique(registry):
    with pytest.raises(BadRequest) as err:
        parse(registry, body(variants=[{"label": "a", "ops": []}, {"label": "a", "graph": BASE}]))
    assert err.value.code == "duplicate_label" and err.value.params["field"] == "variants[1].label"


def test_variants_are_capped_by_the_sweep_runs_setting(registry):
    variants = [{"label": str(i), "ops": []} for i in range(4)]
    with pytest.raises(BadRequest) as err:
        parse(registry, body(variants=variants), max_variants=3)
    assert err.value.code == "too_many_variants" and err.value.params["setting"] == "CODEFY_MAX_SWEEP_RUNS"


def test_max_runs_must_cover_every_repetition(registry):
    with pytest.raises(BadRequest) as err:
        parse(registry, body(budget={"max_runs": 3}))  # 2 variants x 2 repetitions
    assert err.value.code == "max_runs_too_low" and err.value.params["needed"] == 4
    assert parse(registry, body(budget={"max_runs": 4})).budget.max_runs == 4


@pytest.mark.parametrize("options, code, field", [
    ({"seed": 1}, "seed_owned", "options.seed"),
    ({"lane": "interactive"}, "lane_interactive", "options.lane"),
    ({"device": 3}, "invalid_options", "options.device"),
])
def test_options_the_study_owns_are_refused(registry, options, code, field):
    with pytest.raises(BadRequest) as err:
        parse(registry, body(options=options))
    assert err.value.code == code and err.value.params["field"] == field


def test_the_idempotency_key_comes_from_the_header_or_the_body_and_both_must_agree(registry):
    assert parse(registry, body(), header_key="k").idempotency_key == "k"
    assert parse(registry, body(idempotency_key="k"), header_key="k").idempotency_key == "k"
    with pytest.raises(BadRequest) as err:
        parse(registry, body(idempotency_key="k"), header_key="other")
    assert err.value.code == "idempotency_key_mismatch"


def test_the_digest_ignores_secret_values_and_the_key_but_not_anything_else(registry):
    def with_secret(value):
        g = {**BASE, "nodes": [{**BASE["nodes"][0], "params": {"value": 1, "key": value}}, *BASE["nodes"][1:]]}
        return body(base_graph=g, variants=[{"label": "a", "ops": []}, {"label": "w", "graph": g}])
    one = parse(registry, {**with_secret("s1"), "idempotency_key": "k1"}).digest
    assert one == parse(registry, with_secret("s2"), header_key="k2").digest
    assert one != parse(registry, {**with_secret("s1"), "repetitions": 3}).digest


def test_seeds_are_shared_by_a_repetition_and_wrap_at_two_to_the_32():
    assert [seed_of(7, r) for r in range(3)] == [7, 8, 9]
    assert seed_of(2**32 - 1, 1) == 0 and seed_of(2**32 - 2, 3) == 1


# -- lifecycle -----------------------------------------------------------------------------------

@pytest.mark.parametrize("status, event, after", [
    ("queued", "start", "running"), ("running", "finish", "succeeded"), ("running", "halt", "halted"),
    ("running", "fail", "failed"), ("running", "interrupt", "interrupted"), ("running", "cancel", "cancel_requested"),
    ("cancel_requested", "settle", "cancelled"), ("cancel_requested", "interrupt", "cancelled"),
    ("halted", "cancel_now", "cancelled"), ("interrupted", "cancel", "cancel_requested"), ("interrupted", "resume", "running"), ("cancelled", "resume", "running"),
    ("failed", "resume", "running"), ("halted", "resume", "running"),
])
def test_the_lifecycle_table(status, event, after):
    assert st.next_status(status, event) == after


@pytest.mark.parametrize("status, event", [
    ("succeeded", "resume"), ("running", "resume"), ("queued", "resume"), ("cancel_requested", "resume"),
    ("succeeded", "cancel"), ("succeeded", "cancel_now"), ("cancelled", "finish"), ("halted", "finish"),
])
def test_illegal_transitions_are_409_naming_status_and_event(status, event):
    with pytest.raises(Conflict) as err:
        st.next_status(status, event)
    assert err.value.params == {"status": status, "event": event}


@pytest.mark.parametrize("run_status, reason, attempt", [
    ("succeeded", None, "succeeded"), ("failed", None, "failed"), ("cancelled", None, "cancelled"),
    ("cancelled", "max_run_seconds", "timed_out"), ("cancelled", "max_active_seconds", "cancelled"),
    ("interrupted", None, "interrupted"),
])
def test_an_attempt_takes_its_childs_ending(run_status, reason, attempt):
    assert st.attempt_status_of_run(run_status, reason) == attempt


# -- plan ----------------------------------------------------------------------------------------

def attempts_for(variants, repetitions, **statuses):
    out = []
    for r in range(repetitions):
        for v in range(variants):
            out.append({"id": f"{v}-{r}", "variant": v, "repetition": r, "attempt": 1,
                        "status": statuses.get(f"v{v}r{r}", "pending"), "started_at": None, "finished_at": None})
    return out


def test_submission_is_repetition_major_and_capped_by_max_parallel_runs():
    attempts = attempts_for(3, 2)
    assert plan.decide(Budget(max_parallel_runs=4), attempts, 0).submit == [(0, 0), (1, 0), (2, 0), (0, 1)]
    assert plan.decide(Budget(), attempts, 0).submit == [(0, 0)]
    busy = attempts_for(3, 2, v0r0="running", v1r0="queued")
    assert plan.decide(Budget(max_parallel_runs=3), busy, 0).submit == [(2, 0)]
    assert plan.decide(Budget(max_parallel_runs=2), busy, 0).submit == []


def test_a_study_is_done_when_every_current_attempt_is_a_result():
    done = attempts_for(2, 1, v0r0="succeeded", v1r0="timed_out")
    assert plan.decide(Budget(), done, 0).done
    assert not plan.decide(Budget(), attempts_for(2, 1, v0r0="succeeded", v1r0="running"), 0).done
    assert not plan.decide(Budget(), attempts_for(2, 1, v0r0="succeeded", v1r0="interrupted"), 0).done


def test_max_runs_counts_retries_and_halts_once_nothing_is_in_flight():
    attempts = attempts_for(2, 1, v0r0="lost")
    attempts.append({**attempts[0], "id": "retry", "attempt": 2, "status": "pending"})
    # the lost attempt spent one run: one more fits, the first in repetition-major order
    assert plan.decide(Budget(max_runs=2, max_parallel_runs=4), attempts, 0).submit == [(0, 0)]
    attempts[1]["status"] = "running"
    assert plan.decide(Budget(max_runs=2), attempts, 0) == plan.Decision()  # waits for the child
    attempts[1]["status"] = "succeeded"
    assert plan.decide(Budget(max_runs=2), attempts, 0).halt == {"budget": "max_runs", "limit": 2, "used": 2}


def test_max_active_seconds_sums_the_childrens_execution_time():
    attempts = attempts_for(2, 1, v0r0="succeeded")
    attempts[0].update(started_at=10.0, finished_at=16.0)
    assert plan.decide(Budget(max_active_seconds=5), attempts, 20).halt == {
        "budget": "max_active_seconds", "limit": 5, "used": 6.0}
    assert plan.decide(Budget(max_active_seconds=7), attempts, 20).submit == [(1, 0)]
    attempts[1].update(status="running", started_at=16.0)
    usage = plan.budget_usage(Budget(max_active_seconds=7), attempts, 18.0)
    assert usage["max_active_seconds"] == {"limit": 7, "used": 8.0} and usage["exhausted"] == "max_active_seconds"
    assert usage["max_parallel_runs"] == {"limit": 1, "used": 1}


def test_a_resume_retries_cancelled_interrupted_and_lost_attempts_only():
    attempts = attempts_for(3, 2, v0r0="succeeded", v1r0="failed", v2r0="timed_out", v0r1="cancelled",
                            v1r1="interrupted", v2r1="lost")
    assert [(a["variant"], a["repetition"]) for a in plan.to_retry(attempts)] == [(0, 1), (1, 1), (2, 1)]
    assert plan.would_halt_at_once(Budget(max_runs=6), attempts, 0, 3)["budget"] == "max_runs"
    assert plan.would_halt_at_once(Budget(max_runs=9), attempts, 0, 3) is None


# -- results -------------------------------------------------------------------------------------

def finished(variant, repetition, status, value):
    return {"variant": variant, "repetition": repetition, "attempt": 1, "status": status, "objective_value": value}


def test_ranks_are_competition_ranks_over_eligible_means_with_ties():
    attempts = [finished(0, 0, "succeeded", 1.0), finished(0, 1, "succeeded", 3.0),
                finished(1, 0, "succeeded", 2.0), finished(1, 1, "succeeded", 2.0),
                finished(2, 0, "succeeded", 5.0), finished(2, 1, "succeeded", 5.0),
                finished(3, 0, "failed", 0.5), finished(3, 1, "succeeded", 0.5)]
    out = study_results(["a", "b", "c", "d"], 2, attempts, "minimize")
    assert [(r["label"], r["rank"], r["tie"]) for r in out["rankings"]] == [("a", 1, True), ("b", 1, True),
                                                                             ("c", 3, False)]
    assert out["variants"]["a"]["tied_with"] == ["b"]
    d = out["variants"]["d"]
    assert not d["eligible"] and d["rank"] is None and d["aggregate"]["values"] == [0.5, 0.5]
    assert d["ineligible_reasons"] == [{"repetition": 0, "reason": "not_succeeded", "status": "failed"}]
    assert out["best"] == "a" and out["variants"]["c"]["comparison"]["differences"] == [4.0, 2.0]
    assert out["variants"]["c"]["average_rank"] == 3.0
    # listing order does not matter
    again = study_results(["d", "c", "b", "a"], 2, [{**a, "variant": 3 - a["variant"]} for a in attempts], "minimize")
    assert [(r["label"], r["rank"]) for r in again["rankings"]] == [("a", 1), ("b", 1), ("c", 3)]


def test_a_missing_or_non_finite_value_makes_a_variant_ineligible():
    attempts = [finished(0, 0, "succeeded", None), finished(1, 0, "succeeded", float("nan")),
                finished(2, 0, "succeeded", 1.0)]
    out = study_results(["a", "b", "c"], 2, attempts, "maximize")
    assert out["variants"]["a"]["ineligible_reasons"][0]["reason"] == "no_objective_value"
    assert out["variants"]["c"]["ineligible_reasons"] == [{"repetition": 1, "reason": "not_succeeded", "status": None}]
    assert out["rankings"] == [] and out["best"] is None


# -- store ---------------------------------------------------------------------------------------

@pytest.fixture
def conn():
    c = sqlite3.connect(":memory:", isolation_level=None)
    migrate(c)
    yield c
    c.close()


def make(conn, study_id="s1", key=None):
    row = {"id": study_id, "name": "n", "owner": None, "status": "queued", "request_digest": "d",
           "idempotency_key": key, "objective": OBJECTIVE, "seed": 1, "repetitions": 1, "options": {},
           "budget": Budget().to_json(), "resume_policy": "explicit", "halt": None, "error": None,
           "created_at": 1.0, "updated_at": 1.0}
    attempts = [{"id": f"{study_id}-a", "study_id": study_id, "variant": 0, "repetition": 0, "attempt": 1, "seed": 1,
                 "run_id": f"{study_id}-r", "status": "pending", "created_at": 1.0}]
    conn.execute("BEGIN")
    try:
        result = db.insert_study(conn, row, [{"variant": 0, "label": "a", "graph": {}, "ops": None}], attempts,
                                 ("study_created", {}))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return result


def test_every_change_bumps_the_revision_and_appends_gapless_events_carrying_it(conn):
    assert make(conn) is None
    rev = db.change(conn, "s1", db.Change(study={"status": "running"}, events=[("study_started", {})]), 2.0)
    rev2 = db.change(conn, "s1", db.Change(attempts={"s1-a": {"status": "submitting"}},
                                           events=[("attempt_submitting", {}), ("x", {})]), 3.0)
    assert (rev, rev2) == (2, 3)
    events = db.events_after(conn, "s1", 0, 100)
    assert [e["cursor"] for e in events] == [1, 2, 3, 4]
    assert [e["payload"]["revision"] for e in events] == [1, 2, 3, 3]
    assert db.events_after(conn, "s1", 2, 100)[0]["type"] == "attempt_submitting"
    assert db.change(conn, "s1", db.Change(study={"status": "halted"}), 4.0, expected_revision=2) is None
    assert db.get_study(conn, "s1")["status"] == "running"


def test_an_idempotency_key_holds_one_study_and_a_refused_insert_leaves_nothing(conn):
    assert make(conn, "s1", key="k") is None
    assert make(conn, "s2", key="k") == "s1"
    assert db.get_study(conn, "s2") is None
    with pytest.raises(sqlite3.IntegrityError):
        make(conn, "s1")  # the same id again: the whole insert rolls back
    assert [r[0] for r in conn.execute("SELECT id FROM study_attempts")] == ["s1-a"]
    assert len(db.events_after(conn, "s1", 0, 10)) == 1


def test_a_repetition_a_budget_stopped_halts_the_study_when_nothing_else_is_left():
    attempts = attempts_for(1, 1, v0r0="cancelled")
    attempts[0].update(started_at=0.0, finished_at=5.0)
    assert plan.decide(Budget(max_active_seconds=4), attempts, 9).halt == {
        "budget": "max_active_seconds", "limit": 4, "used": 5.0}
