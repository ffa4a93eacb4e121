"""Whole ML runs through run_graph: cancel mid-training, seeded runs, OOM, deterministic mode."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from codefy_jupyter.engine import CancelToken, NodeRegistry, SessionCache, default_registry, run_graph

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def example(name: str, **params: dict) -> dict:
    graph = json.loads((EXAMPLES / name).read_text())
    for node in graph["nodes"]:
        node.setdefault("params", {}).update(params.get(node["id"], {}))
    return graph


def test_cancel_stops_a_training_loop_within_one_batch(tmp_path):
    token = CancelToken()
    batches_after_cancel = []
    batches = []

    def on_event(event):
        if event["event"] == "progress" and event["node_id"] == "train":
            batches.append(event["value"])
            if token.cancelled:
                batches_after_cancel.append(event["value"])
            elif event["value"] == 5:
                token.cancel("test")

    result = run_graph(example("train_mlp.json", train={"epochs": 200}), cancel=token, on_event=on_event,
                       data_dir=tmp_path)
    assert result.status == "cancelled"
    assert batches_after_cancel == []  # the loop checked before the next batch and stopped
    assert batches[-1] == 5
    assert "train" not in result.executed and "eval" not in result.executed


def test_seeded_training_run_is_sequential_and_bit_for_bit_reproducible(tmp_path):
    graph = example("train_mlp.json", train={"epochs": 2})

    def seeded_run(seed, folder):
        running, peak, order = set(), [0], []

        def on_event(event):
            if event["event"] == "node_status":
                if event["status"] == "running":
                    running.add(event["node_id"])
                    order.append(event["node_id"])
                    peak[0] = max(peak[0], len(running))
                elif event["status"] in ("done", "failed"):
                    running.discard(event["node_id"])

        result = run_graph(graph, seed=seed, max_parallel_nodes=4, on_event=on_event, keep_outputs="all",
                           data_dir=tmp_path / folder)
        assert result.ok, result.error
        return result, peak[0], order

    first, peak, order1 = seeded_run(3, "a")
    second, _, order2 = seeded_run(3, "b")
    assert peak == 1
    assert order1 == order2
    w1 = first.outputs["train"]["model"].state_dict()
    w2 = second.outputs["train"]["model"].state_dict()
    assert w1.keys() == w2.keys()
    assert all(torch.equal(w1[k], w2[k]) for k in w1)
    assert first.metrics == second.metrics


def test_out_of_memory_frees_the_cache_and_adds_a_hint(tmp_path):
    reg = default_registry().copy()

    @reg.node("Greedy", inputs={"x": "float"}, outputs={"y": "float"})
    def greedy(ctx, x):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB")

    cache = SessionCache()
    graph = {"nodes": [{"id": "k", "type": "Float", "params": {"value": 1}}, {"id": "g", "type": "Greedy"}],
             "edges": [{"source": "k", "source_port": "value", "target": "g", "target_port": "x"}]}
    result = run_graph(graph, registry=reg, cache=cache)
    assert result.status == "failed"
    assert result.error.code == "out_of_memory" and result.error.node_id == "g"
    assert "smaller batch" in result.error.hint
    assert len(cache) == 0  # released what it could


def test_deterministic_mode_is_on_during_the_run_and_restored_after():
    reg = NodeRegistry()
    seen = []

    @reg.node("Look", outputs={"on": "bool"})
    def look(ctx):
        seen.append((torch.are_deterministic_algorithms_enabled(), ctx.deterministic))
        return {"on": seen[-1][0]}

    assert not torch.are_deterministic_algorithms_enabled()
    run_graph({"nodes": [{"id": "l", "type": "Look"}]}, registry=reg, deterministic=True)
    run_graph({"nodes": [{"id": "l", "type": "Look"}]}, registry=reg)
    assert seen == [(True, True), (False, False)]
    assert not torch.are_deterministic_algorithms_enabled()


@pytest.mark.parametrize("name", ["lazy_switch.json", "ensemble_map.json"])
def test_examples_succeed(tmp_path, name):
    graph = example(name)
    result = run_graph(graph, seed=graph.get("settings", {}).get("seed"), data_dir=tmp_path, keep_outputs="all")
    assert result.ok, result.error
    if name == "ensemble_map.json":
        accuracies = result.outputs["ensemble"]["results"]
        assert len(accuracies) == 3 and min(accuracies) > 0.8
        assert result.outputs["summary"]["mean"] == pytest.approx(sum(accuracies) / 3)
