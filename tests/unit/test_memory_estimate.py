"""The static memory estimate (core/scheduling/memory_estimate.py) on the example graphs, checked
against what real torch builds on the CPU: parameter counts, optimizer state and dataset bytes
exactly; one batch's activations bounded by what autograd really keeps."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch

from codefy_jupyter.core.scheduling import memory_estimate as me
from codefy_jupyter.engine import default_registry, run_graph
from codefy_jupyter.engine.nodes.models import _sequential

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
DEFS = default_registry().definitions()


def example(name: str) -> dict:
    return json.loads((EXAMPLES / name).read_text())


def short(graph: dict) -> dict:
    """The graph with one epoch per loop, so running it on the CPU stays quick."""
    graph = copy.deepcopy(graph)
    for n in graph["nodes"]:
        if n["type"] == "TrainingLoop":
            n["params"]["epochs"] = 1
    return graph


def saved_bytes(model: torch.nn.Module, features: torch.Tensor, targets: torch.Tensor, loss) -> int:
    """Bytes of the distinct tensors autograd keeps for one training step's backward."""
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = loss(model(features), targets)
    out.backward()
    return sum(seen.values())


def test_train_mlp_parameters_optimizer_and_data_match_torch_exactly():
    graph = short(example("train_mlp.json"))
    est = me.estimate(graph, DEFS)
    result = run_graph(graph, seed=42, keep_outputs="all")
    assert result.status == "succeeded", result.error
    model = result.outputs["train"]["model"]
    count = sum(p.numel() for p in model.parameters())
    assert est.parameters == count == 20 * 64 + 64 + 64 * 64 + 64 + 64 * 3 + 3
    # The MLP node's weights and the loop's trained copy and its gradients, float32 each.
    assert est.parts["parameters"] == 2 * count * 4 and est.parts["gradients"] == count * 4
    # Adam's two moments per parameter, measured after a real step.
    opt = torch.optim.Adam(model.parameters())
    x = torch.randn(8, 20)
    torch.nn.functional.cross_entropy(model.train()(x), torch.zeros(8, dtype=torch.long)).backward()
    opt.step()
    moments = sum(s[k].nbytes for s in opt.state.values() for k in ("exp_avg", "exp_avg_sq"))
    assert est.parts["optimizer_state"] == moments
    # The train split (moved to the device by the loader) and the test split (validation, metrics).
    split = result.outputs["split"]
    real = sum(d.features.nbytes + d.targets.nbytes for d in (split["train"], split["test"]))
    assert est.parts["data"] == real
    assert est.unknown == []


@pytest.mark.parametrize("activation,dropout", [("relu", 0.0), ("gelu", 0.0), ("tanh", 0.3)])
def test_activations_cover_what_autograd_keeps_for_one_batch(activation, dropout):
    graph = example("train_mlp.json")
    for n in graph["nodes"]:
        if n["id"] == "model":
            n["params"].update(activation=activation, dropout=dropout)
    est = me.estimate(graph, DEFS)
    batch = 64
    model = _sequential(20, 3, 64, 2, activation, dropout).train()
    kept = saved_bytes(model, torch.randn(batch, 20), torch.zeros(batch, dtype=torch.long),
                       torch.nn.CrossEntropyLoss())
    assert kept <= est.parts["activations"] <= 3 * kept


def test_kfold_regression_sizes_come_from_its_split():
    graph = short(example("kfold_regression.json"))
    est = me.estimate(graph, DEFS)
    result = run_graph(graph, seed=0, keep_outputs="all")
    assert result.status == "succeeded", result.error
    model = result.outputs["train"]["model"]
    assert est.parameters == sum(p.numel() for p in model.parameters()) == 10 * 32 + 32 + 32 + 1
    assert est.unknown == []


def test_a_ddp_rank_holds_its_share_of_the_batch():
    graph = example("train_mlp.json")
    for n in graph["nodes"]:
        if n["type"] == "TrainingLoop":
            n["params"]["strategy"] = "ddp"
    one, two = me.estimate(graph, DEFS), me.estimate(graph, DEFS, world=2)
    assert two.parts["activations"] == one.parts["activations"] // 2
    assert two.parts["parameters"] == one.parts["parameters"] and two.world == 2


def test_what_it_cannot_size_is_listed_not_guessed():
    graph = {"nodes": [{"id": "csv", "type": "CSVDataset", "params": {"path": "/x.csv", "target_column": "y"}},
                       {"id": "model", "type": "MLP", "params": {}}],
             "edges": [{"source": "csv", "source_port": "dataset", "target": "model", "target_port": "dataset"}]}
    est = me.estimate(graph, DEFS)
    assert est.parameters == 0 and est.bytes == 0
    assert est.unknown[0]["node_id"] == "model" and "CSVDataset" in est.unknown[0]["why"]
    assert est.memory_gib == me.STEP_GIB


def test_blocks_that_expand_at_run_time_are_listed_as_unknown():
    graph = {"nodes": [{"id": "block", "type": "Subgraph", "params": {}}], "edges": []}
    est = me.estimate(graph, DEFS)
    assert est.unknown == [{"node_id": "block", "why": "block (Subgraph): its inner graph is not estimated"}]


def test_the_suggestion_adds_a_margin_and_rounds_up():
    assert me.suggested_gib(0) == 0.25
    assert me.suggested_gib(int(0.9 * me.GIB)) == 1.25  # 0.9 × 1.25 + 64 MiB = 1.19 GiB
    assert me.suggested_gib(4 * me.GIB) == 5.25


def test_an_accepted_estimate_below_the_servers_is_raised():
    assert me.raise_estimate(1.0, 2.5) == 2.5
    assert me.raise_estimate(3.0, 2.5) is None
    assert me.raise_estimate(2.5, 2.5) is None
