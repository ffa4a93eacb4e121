"""The live run view's state, folded from run rows and event logs (widgets/run_state_view.py):
pure, so every rule is checked on plain events, plus one log made by a real engine run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from codefy_jupyter.wire import run_events as ev
from codefy_jupyter.engine import run_graph
from codefy_jupyter.kernel.widgets.run_state_view import (FINISHED, MAX_WARNINGS, RunViewState, apply_row, decimate,
                                                          fold, fold_all, needs_heartbeat, progress_entry, show_command,
                                                          summary, to_traits)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def log(*events: tuple[str, dict]) -> list[dict]:
    """Events as `GET …/events` serves them: gapless seq from 1."""
    return [{"seq": i, "type": kind, "payload": payload, "created_at": 0.0} for i, (kind, payload) in
            enumerate(events, start=1)]


def start(**extra):
    return ("execution_start", {"run_id": "r", "name": "n", "device": "cpu", "devices": ["cpu"], "seed": 7,
                                "deterministic": False, "queue_key": "cpu", "started_at": 100.0, **extra})


def node(node_id, status, node_type="Scale", **extra):
    return ("node_status", {"run_id": "r", "node_id": node_id, "node_type": node_type, "status": status, **extra})


def test_a_real_training_runs_log_folds_into_done_nodes_progress_and_metric_series():
    graph = json.loads((EXAMPLES / "train_mlp.json").read_text())
    for n in graph["nodes"]:  # the example, made small: two short epochs
        if n["id"] == "data":
            n["params"]["n_samples"] = 240
        if n["id"] == "train":
            n["params"]["epochs"] = 2
    raw: list[dict] = []
    result = run_graph(graph, seed=42, on_event=raw.append)
    assert result.status == "succeeded"
    events = [ev.execution_start("r", name="mlp", device="cpu", devices=["cpu"], seed=42, deterministic=False,
                                 queue_key="cpu", started_at=1.0)]
    events += [e for e in (ev.from_engine("r", r) for r in raw) if e is not None]
    events.append(ev.execution_complete("r", duration_s=1.5, metrics={"train_loss": 0.3}, executed=8, cached=0))
    state = fold_all(RunViewState("r"), log(*[(e.type, e.payload) for e in events]))

    assert state.status == "succeeded" and state.closed and state.cursor == len(events)
    assert state.nodes == {n["id"]: "done" for n in graph["nodes"]}
    assert state.node_types["train"] == "TrainingLoop"
    train = state.progress["train"]
    assert (train["epoch"], train["epochs"]) == (2, 2) and train["value"] == train["total"]
    assert [step for step, _ in state.metrics["train_loss"]["train"]] == [1.0, 2.0]
    assert state.result == {"train_loss": 0.3} and state.duration_s == 1.5 and state.seed == 42
    traits = to_traits(state)
    json.dumps(traits)  # what the widget syncs must be plain JSON
    assert traits["metrics"]["train_loss"]["train"][0][0] == 1.0


def test_queued_row_then_start_then_nodes_and_progress():
    state = apply_row(RunViewState("r"), {"id": "r", "status": "queued", "queue_position": 3, "queue_key": "cpu",
                                          "queue_reason": {"code": "x", "message": "waiting for worker gpu-box"},
                                          "device": "cpu", "name": "job"})
    assert (state.status, state.queue_position, state.queue_reason, state.name) == (
        "queued", 3, "waiting for worker gpu-box", "job")
    named = apply_row(RunViewState("r"), {"id": "r", "status": "queued", "queue_key": "cpu", "queue_reason": {
        "code": "seeded_run_executing", "message": "waiting for seeded run 0123456789abcdef to finish",
        "params": {"run_id": "0123456789abcdef", "name": "baseline"}}})
    assert named.queue_reason == ("waiting for seeded run 'baseline' to finish: a seeded run executes alone on this "
                                  "server, one at a time")
    state = fold_all(state, log(start(), node("k", "done", "Float"),
                                ("progress", {"node_id": "s", "node_type": "Scale", "value": 3, "total": 10,
                                              "label": "batches"})))
    assert state.status == "running" and state.queue_position is None and state.queue_reason is None
    assert state.nodes == {"k": "done", "s": "running"}  # progress marks a node running
    assert state.progress["s"] == {"value": 3.0, "total": 10.0, "label": "batches"}
    state = fold(state, {"seq": 4, **dict(zip(("type", "payload"), node("s", "done")))})
    assert state.nodes["s"] == "done"
    # Progress reported after a node finished does not make it running again.
    state = fold(state, {"seq": 5, "type": "progress", "payload": {"node_id": "s", "value": 10, "total": 10}})
    assert state.nodes["s"] == "done"


def test_replayed_events_change_nothing_and_unknown_types_only_move_the_cursor():
    events = log(start(), node("a", "done"), ("metric", {"node_id": "a", "name": "loss", "value": 1.0, "step": 1}),
                 ("some_future_event", {"x": 1}))
    once = fold_all(RunViewState("r"), events)
    twice = fold_all(once, events)  # a page served again after a reconnect
    assert twice is once and once.cursor == 4
    assert once.metrics["loss"]["a"] == ((1.0, 1.0),)


def test_a_stale_row_never_moves_a_finished_view_backwards():
    state = fold_all(RunViewState("r"), log(start(), ("execution_complete", {"status": "succeeded",
                                                                             "duration_s": 2.0, "metrics": {}})))
    state = apply_row(state, {"status": "running", "queue_position": 1})
    assert state.status == "succeeded" and state.queue_position is None
    running = fold_all(RunViewState("r"), log(start()))
    assert apply_row(running, {"status": "queued", "queue_position": 2}).status == "running"
    assert apply_row(running, {"status": "disconnected"}).status == "disconnected"  # a worker run's drop
    assert apply_row(running, {"status": "succeeded", "finished_at": 9.0}).finished_at == 9.0


@pytest.mark.parametrize("closing, status, field, expected", [
    (("execution_error", {"status": "failed", "duration_s": 1.0,
                          "error": {"node_id": "s", "node_type": "Scale", "message": "boom"}}),
     "failed", "error", {"node_id": "s", "node_type": "Scale", "message": "boom"}),
    (("execution_stopped", {"status": "cancelled", "reason": {"code": "cancelled", "message": "cancel requested"}}),
     "cancelled", "stop_reason", "cancel requested"),
    (("execution_stopped", {"status": "interrupted", "reason": {"code": "shutdown", "message": "server stopped"}}),
     "interrupted", "stop_reason", "server stopped"),
])
def test_closing_events_set_the_final_status_and_why(closing, status, field, expected):
    state = fold_all(RunViewState("r"), log(start(), node("s", "failed" if status == "failed" else "cancelled"),
                                            closing))
    assert state.status == status and state.closed and state.terminal
    assert getattr(state, field) == expected
    assert summary(state)["message"] == (expected["message"] if isinstance(expected, dict) else expected)


def test_a_failed_row_carries_its_error_when_the_log_has_none():
    state = apply_row(RunViewState("r"), {"status": "failed", "error": {"code": "worker_removed", "message": "gone"}})
    assert state.error == {"code": "worker_removed", "message": "gone"}


def test_cached_inner_nodes_warnings_and_artifacts():
    events = log(start(), ("execution_cached", {"nodes": ["k", "m"]}),
                 ("inner_node_status", {"node_id": "b/x", "node_type": "Scale", "status": "done", "parent": "b"}),
                 ("inner_progress", {"node_id": "b/y", "value": 1, "total": 2, "parent": "b"}),
                 ("artifact", {"node_id": "t", "kind": "checkpoint", "path": "/tmp/c.pt", "meta": {}}),
                 *[("run_warning", {"node_id": None, "code": "w", "message": f"warn {i}"})
                   for i in range(MAX_WARNINGS + 5)])
    state = fold_all(RunViewState("r"), events)
    assert state.nodes == {"k": "cached", "m": "cached"}
    assert state.inner_nodes == {"b/x": "done", "b/y": "running"} and "b/y" not in state.nodes
    assert state.artifacts == ({"node_id": "t", "kind": "checkpoint", "path": "/tmp/c.pt"},)
    assert len(state.warnings) == MAX_WARNINGS and state.warnings[-1] == f"run: warn {MAX_WARNINGS + 4}"
    # A worker's warning the catalog knows reads in its words, whatever the sender's English was.
    state = fold(state, {"seq": len(events) + 1, "type": "run_warning", "payload": {
        "node_id": None, "code": "worker_reconnected", "message": "box back", "params": {"worker": "box"}}})
    assert state.warnings[-1] == "run: worker box reconnected; the run goes on"


def test_metrics_keep_node_and_step_and_survive_non_finite_values():
    events = log(start(), *[("metric", {"node_id": "t", "name": "loss", "value": v, "step": s})
                            for s, v in ((1, 2.0), (2, "NaN"), (3, 0.5))],
                 ("metric", {"node_id": "e", "name": "loss", "value": 0.7, "step": None}),
                 ("metric", {"node_id": "e", "name": "loss", "value": 0.6, "step": None}))
    state = fold_all(RunViewState("r"), events)
    assert state.metrics["loss"]["t"] == ((1.0, 2.0), (2.0, None), (3.0, 0.5))
    assert state.metrics["loss"]["e"] == ((1.0, 0.7), (2.0, 0.6))  # unstepped: their place in the series
    assert summary(state)["last"] == {"loss": 0.6}


def test_progress_labels_name_the_epoch():
    assert progress_entry({"value": 40, "total": 150, "label": "epoch 3/10"}) == {
        "value": 40.0, "total": 150.0, "label": "epoch 3/10", "epoch": 3, "epochs": 10}
    assert progress_entry({"value": 5, "total": None, "label": None}) == {"value": 5.0, "total": None, "label": ""}
    assert progress_entry({"value": 5, "total": 0})["total"] is None


def test_decimation_keeps_both_ends_and_the_limit():
    points = tuple((float(i), float(i * i)) for i in range(5000))
    out = decimate(points, 100)
    assert len(out) == 100 and out[0] == [0.0, 0.0] and out[-1] == [4999.0, 4999.0 ** 2]
    assert [p[0] for p in out] == sorted(p[0] for p in out)
    assert decimate(points[:3], 100) == [[0.0, 0.0], [1.0, 1.0], [2.0, 4.0]]
    state = fold_all(RunViewState("r"), log(*[("metric", {"node_id": "t", "name": "x", "value": float(i), "step": i})
                                              for i in range(50)]))
    assert len(to_traits(state, max_points=10)["metrics"]["x"]["t"]) == 10
    assert len(state.metrics["x"]["t"]) == 50  # Python keeps every point


def test_summary_names_the_running_node_and_its_progress():
    state = fold_all(RunViewState("r"), log(start(), node("k", "done"),
                                            ("progress", {"node_id": "t", "value": 2, "total": 4, "label": "b"})))
    digest = summary(state)
    assert digest["nodes_done"] == 1 and digest["nodes_seen"] == 2 and digest["node"] == "t"
    assert digest["progress"]["value"] == 2.0 and digest["status"] == "running"


def test_views_need_heartbeats_while_they_follow_a_run_that_is_not_finished():
    for status in ("queued", "running", "disconnected"):
        assert needs_heartbeat(status, True), status
        assert not needs_heartbeat(status, False), status  # stopped early: follow_error says why
    for status in FINISHED:
        assert not needs_heartbeat(status, True), status
    # A run the kernel finished following stops needing them with its last fold.
    state = fold_all(RunViewState("r"), log(start(), ("execution_complete", {"run_id": "r", "outputs": {}})))
    assert not needs_heartbeat(state.status, True)


def test_the_command_a_disconnected_view_offers():
    assert show_command("0123abcd") == "%codefy show 0123abcd"
