"""The sweep and study views' pure rules and the study report `codefy study` prints: rows, sorting
with empty values last, curves, action checks, progress and the ranking table, on plain API
documents; `Graph.study`'s body and its catalog checks; the CLI's submit retried with one key."""

from __future__ import annotations

import asyncio

import pytest

from codefy_jupyter.cli.study import submit
from codefy_jupyter.client import CodefyError
from codefy_jupyter.client.study_report import (
    p_floor_note, progress, progress_line, ranking_rows, smallest_p, table_lines,
)
from codefy_jupyter.client.study_spec import study_body
from codefy_jupyter.kernel.widgets.experiment_rows import (check_action, curve, sort_rows, study_rows, study_series,
                                                          sweep_rows)
from codefy_jupyter.kernel.widgets.runs_rows import ActionError


def attempt(status, value=None):
    return {"status": status, "objective_value": value}


def variant(index, label, values, statuses, *, rank=None, tie=False, tied_with=(), comparison=None, reasons=()):
    finite = [v for v in values if v is not None]
    mean = sum(finite) / len(finite) if finite else None
    return {"index": index, "label": label, "rank": rank, "tie": tie, "tied_with": list(tied_with),
            "aggregate": {"count": len(finite), "mean": mean, "std": 0.5 if len(finite) > 1 else None,
                          "values": list(values)},
            "eligible": not reasons, "ineligible_reasons": list(reasons), "average_rank": rank,
            "comparison": comparison,
            "repetitions": [{"repetition": r, "seed": 7 + r, "current": attempt(s, v)}
                            for r, (s, v) in enumerate(zip(statuses, values))]}


STUDY = {
    "id": "s" * 32, "status": "running", "revision": 12, "repetitions": 2, "seed": 7, "best": "b",
    "objective": {"node_id": "m", "metric": "loss", "direction": "minimize"},
    "budget_usage": {"max_parallel_runs": {"limit": 2, "used": 1}, "max_runs": {"limit": None, "used": 5},
                     "max_run_seconds": {"limit": None}, "max_active_seconds": {"limit": 60, "used": 4.25},
                     "exhausted": None},
    "variants": [
        variant(0, "a", [2.0, 3.0], ["succeeded", "succeeded"], rank=2, tie=True, tied_with=["c"],
                comparison={"mean_difference": 1.0, "ci95": [0.5, 1.5], "p_value": 0.5, "against": "b"}),
        variant(1, "b", [1.0, 2.0], ["succeeded", "succeeded"], rank=1),
        variant(2, "c", [2.5, 2.5], ["succeeded", "succeeded"], rank=2, tie=True, tied_with=["a"],
                comparison={"mean_difference": 1.0, "ci95": [1.0, 1.0], "p_value": 0.5, "against": "b"}),
        variant(3, "d", [4.0, None], ["succeeded", "running"],
                reasons=[{"repetition": 1, "reason": "not_succeeded", "status": "running"}]),
    ],
}


def test_progress_counts_done_repetitions_and_the_one_under_way():
    p = progress(STUDY)
    assert (p["done"], p["total"], p["repetition"], p["runs"]) == (7, 8, 1, 5)
    assert progress_line(STUDY) == ("[7/8] running (rev 12): repetition 2/2 · runs 5/∞ · parallel 1/2 · "
                                    "active 4.25/60 s")
    halted = {**STUDY, "status": "halted", "halt": {"budget": "max_runs", "limit": 5, "used": 5}}
    assert progress_line(halted).endswith("halted: max_runs 5/5")


def test_ranking_rows_best_first_with_ties_reasons_and_the_paired_difference():
    rows = ranking_rows(STUDY)
    assert [(r["label"], r["rank_text"]) for r in rows] == [("b", "1"), ("a", "2="), ("c", "2="), ("d", "-")]
    assert rows[0]["best"] and rows[0]["diff_text"] == "" and rows[1]["diff_text"] == "+1 [0.5, 1.5]"
    assert rows[1]["mean_text"] == "2.5 ± 0.5" and rows[3]["mean_text"] == "4" and rows[3]["n"] == 1
    assert rows[3]["reason"] == "r1 running" and rows[3]["statuses"] == ["succeeded", "running"]
    lines = table_lines(STUDY)
    header = lines.index(next(line for line in lines if line.startswith("rank")))
    assert lines[header].split()[:2] == ["rank", "label"] and "loss mean ± std" in lines[header]
    assert lines[header + 1].split()[:2] == ["1", "b"] and "best" in lines[header + 1]
    assert lines[header + 4].split()[:5] == ["-", "d", "4", "1", "no:"]
    assert "= a rank shared with a: c; c: a" in lines and "best: b" in lines


def test_the_smallest_p_value_n_repetitions_can_reach():
    assert smallest_p(1) is None and smallest_p(3) == 0.25 and smallest_p(6) == 0.03125
    assert p_floor_note(3) == "with 3 repetitions no p-value goes below 0.25: 0.05 needs 6 or more"
    assert p_floor_note(5) == "with 5 repetitions no p-value goes below 0.0625: 0.05 needs 6 or more"
    assert p_floor_note(8) == "with 8 repetitions the smallest p-value is 0.007812"
    assert p_floor_note(1) == ""
    # `codefy study` prints it under the table: a warning when 0.05 is out of reach.
    assert "warning: with 2 repetitions no p-value goes below 0.5: 0.05 needs 6 or more" in table_lines(STUDY)
    assert "p: with 6 repetitions the smallest p-value is 0.03125" in table_lines({**STUDY, "repetitions": 6})


def test_sort_keeps_empty_values_last_either_way_and_ties_in_index_order():
    rows = study_rows(STUDY)
    assert [r["label"] for r in sort_rows(rows, "rank")] == ["b", "a", "c", "d"]
    assert [r["label"] for r in sort_rows(rows, "rank", descending=True)] == ["a", "c", "b", "d"]
    assert [r["label"] for r in sort_rows(rows, "p_value", descending=True)] == ["a", "c", "b", "d"]
    assert [r["label"] for r in sort_rows(rows, "mean")] == ["b", "a", "c", "d"]
    sweep = {"variants": [
        {"index": 0, "run_id": "r0", "status": "failed", "objective": None, "rank": None, "params": []},
        {"index": 1, "run_id": "r1", "status": "succeeded", "objective": 0.5, "rank": 1, "params": [],
         "final_metrics": {"loss": 0.5, "acc": 0.9}, "worker_id": "gpu", "devices": ["cuda:0"]},
        {"index": 2, "run_id": "r2", "status": "running", "objective": None, "rank": None, "params": []},
        {"index": 3, "run_id": None, "status": "not_submitted", "objective": float("nan"), "rank": None,
         "params": [{"node_id": "opt", "param": "lr", "value": 0.001}]}]}
    rows = sweep_rows(sweep)
    assert [r["number"] for r in sort_rows(rows, "objective", True)] == [2, 1, 3, 4]
    assert [r["number"] for r in sort_rows(rows, "status")] == [3, 2, 1, 4]
    assert rows[1]["final_metrics"] == "acc 0.9, loss 0.5" and rows[1]["devices"] == "cuda:0"
    assert rows[1]["worker"] == "gpu" and rows[0]["worker"] == rows[0]["devices"] == ""  # where each variant ran
    assert rows[3]["params"] == ["opt.lr=0.001"] and not rows[3]["can_open"] and rows[1]["rank_text"] == "1"


def test_curves_and_series():
    points = [{"name": "loss", "node_id": "t", "step": 1, "value": 3.0}, {"name": "acc", "node_id": "t", "value": 1},
              {"name": "loss", "node_id": "other", "step": 1, "value": 9.0},
              {"name": "loss", "node_id": "t", "step": 2, "value": float("inf")},
              {"name": "loss", "node_id": "t", "step": None, "value": 2.0}]
    assert curve(points, "loss", "t") == [[1, 3.0], [1, 2.0]]
    assert curve(points, "loss", None) == [[1, 3.0], [1, 9.0], [2, 2.0]]
    many = [{"name": "x", "step": i, "value": float(i)} for i in range(1001)]
    thinned = curve(many, "x", None)
    assert len(thinned) <= 201 and thinned[0] == [0, 0.0] and thinned[-1] == [1000, 1000.0]
    assert study_series(STUDY)["d"] == [[0, 4.0]] and study_series(STUDY)["b"] == [[0, 1.0], [1, 2.0]]


def test_action_messages_are_checked():
    assert check_action({"action": "sort", "key": "rank"}, ("csv",), ("rank",)) == ("sort", "rank")
    assert check_action({"action": "open", "run_id": "r1"}, (), (), ["r1"]) == ("open", "r1")
    assert check_action({"action": "csv"}, ("csv",), ()) == ("csv", None)
    for bad, field in (([], "action"), ({"action": "sort", "key": "x"}, "key"), ({"action": "open"}, "run_id"),
                       ({"action": "open", "run_id": "r9"}, "run_id"), ({"action": "drop"}, "action")):
        with pytest.raises(ActionError) as err:
            check_action(bad, ("csv",), ("rank",), ["r1"])
        assert err.value.field == field


GRAPH = {"nodes": [{"id": "opt", "type": "Optimizer", "params": {"lr": 0.01}}, {"id": "t", "type": "Train"}],
         "edges": []}
CATALOG = {"Optimizer": {"params": {"lr": {"type": "float", "min": 0}, "kind": {"type": "select",
                                                                              "options": ["adam", "sgd"]},
                                    "blob": {"type": "json"}}},
           "Train": {"params": {}}}


def test_study_body_from_ops_and_graphs_checked_against_the_catalog():
    body = study_body(GRAPH, {"base": {}, "lr": {("opt", "lr"): 0.1}, "sgd": {"opt.kind": "sgd"},
                              "whole": {"nodes": [], "edges": []}},
                      node="t", metric="loss", repetitions=2, seed=3, budget={"max_runs": 8}, definitions=CATALOG)
    assert body["variants"] == [{"label": "base", "ops": []},
                                {"label": "lr", "ops": [{"node_id": "opt", "param": "lr", "value": 0.1}]},
                                {"label": "sgd", "ops": [{"node_id": "opt", "param": "kind", "value": "sgd"}]},
                                {"label": "whole", "graph": {"nodes": [], "edges": []}}]
    assert body["objective"] == {"node_id": "t", "metric": "loss", "direction": "minimize"}
    assert (body["repetitions"], body["seed"], body["budget"]) == (2, 3, {"max_runs": 8})
    for ops, field in (({"opt.lr": -1}, "variants[0].ops[0].value"),
                       ({"opt.kind": "rmsprop"}, "variants[0].ops[0].value"),
                       ({"opt.blob": {}}, "variants[0].ops[0]"), ({"nope.lr": 1}, "variants[0].ops[0]")):
        with pytest.raises(CodefyError) as err:
            study_body(GRAPH, {"x": ops}, node="t", metric="loss", definitions=CATALOG)
        assert err.value.field == field and err.value.code == "invalid_study"
    with pytest.raises(TypeError):
        study_body(GRAPH, {}, node="t", metric="loss")
    with pytest.raises(TypeError):
        study_body(GRAPH, {"x": {}}, node="t", metric="loss", direction="up")


class _LosingClient:
    """Answers nothing to the first `lose` submits (a reply lost on the way), then the study."""

    def __init__(self, lose: int) -> None:
        self.lose, self.keys = lose, []

    async def study(self, spec, *, idempotency_key):
        self.keys.append(idempotency_key)
        if len(self.keys) <= self.lose:
            raise CodefyError("no answer", code="unreachable")
        return {"id": "s1", "created": len(self.keys) == 1}


def test_the_cli_retries_a_lost_submit_with_the_same_key():
    client = _LosingClient(lose=2)
    doc = asyncio.run(submit(client, {}, "k-1", delay=0))
    assert doc["id"] == "s1" and client.keys == ["k-1"] * 3
    with pytest.raises(CodefyError):
        asyncio.run(submit(_LosingClient(lose=99), {}, "k-2", delay=0))
