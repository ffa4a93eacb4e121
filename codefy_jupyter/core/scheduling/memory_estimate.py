"""A static estimate of a graph's memory per card: the suggested budget of seed #794. Pure, no I/O.

The Queue on… dialog offers it as `options.target.memory_gib` with `memory_source: "estimate"`
(marked est. in the Runs panel), and the control plane checks an accepted estimate again at submit
(`raise_estimate`: a budget below the server's own estimate is raised to it, queue reason
`budget_raised` while it waits).

What it counts, from node definitions and params only (float32 everywhere, as the built-in nodes):
- parameters: every MLP node's weights and biases on the device (exact: the same layer sizes
  `engine/nodes/models.py` builds), sizes taken from the params or from the dataset it is wired to;
- per TrainingLoop: its trained copy of the model, one gradient per parameter, the optimizer's state
  (Adam: two moments; SGD: one buffer with momentum, none without), and the activations autograd
  keeps for one batch (the batch of its DataLoader; a DDP rank holds its share of the global batch);
- data: each dataset a loop or a metrics node moves to the device (BatchLoader moves it whole).

A graph part the estimate cannot size (a CSV file's shape, a node type it does not know that a loop
depends on) is listed in `unknown` and left out; the dialog says so next to the figure.
The suggestion adds `MARGIN` for the caching allocator's rounding and the kernels' workspaces, and
rounds up to `STEP_GIB`; the CUDA context is not in it (the ledger adds CODEFY_EXECUTION_CUDA_CONTEXT_MIB).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

FLOAT = 4  # bytes of a float32
LONG = 8  # bytes of an int64 class label
MARGIN = 1.25
WORKSPACE_BYTES = 64 * 1024 * 1024
STEP_GIB = 0.25
GIB = 1024 ** 3
EXPANDING = ("Subgraph", "Preset", "Map")  # their nodes exist only once the run expands them


@dataclass(frozen=True)
class Shape:
    """A dataset as the estimate sees it: rows, feature width, model output width, label bytes per row."""

    rows: int
    features: int
    outputs: int
    target_bytes: int

    def bytes(self) -> int:
        return self.rows * (self.features * FLOAT + self.target_bytes)


@dataclass
class Estimate:
    parameters: int = 0
    parts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(
        ("parameters", "gradients", "optimizer_state", "activations", "data"), 0))
    nodes: dict[str, dict[str, int]] = field(default_factory=dict)
    unknown: list[dict[str, str]] = field(default_factory=list)
    world: int = 1

    @property
    def bytes(self) -> int:
        return sum(self.parts.values())

    @property
    def memory_gib(self) -> float:
        return suggested_gib(self.bytes)

    def to_dict(self) -> dict[str, Any]:
        return {"memory_gib": self.memory_gib, "bytes": self.bytes, "parameters": self.parameters,
                "parts": dict(self.parts), "nodes": {k: dict(v) for k, v in self.nodes.items()},
                "unknown": list(self.unknown), "world": self.world, "margin": MARGIN}


def suggested_gib(total_bytes: int) -> float:
    """The budget offered for `total_bytes`: margin and workspace added, rounded up to STEP_GIB."""
    need = (total_bytes * MARGIN + WORKSPACE_BYTES) / GIB
    return max(STEP_GIB, math.ceil(need / STEP_GIB - 1e-9) * STEP_GIB)


def mlp_parameters(in_features: int, out_features: int, hidden: int, layers: int) -> int:
    """Weights and biases of the MLP node's Sequential (Linear layers only carry parameters)."""
    count, width = 0, in_features
    for _ in range(layers):
        count += width * hidden + hidden
        width = hidden
    return count + width * out_features + out_features


def mlp_activation_floats(in_features: int, out_features: int, hidden: int, layers: int,
                          activation: str = "relu", dropout: float = 0.0) -> int:
    """Floats per sample that one training step holds at its peak: what autograd keeps (the input,
    each hidden activation's output, which the next Linear reads too; gelu's input as well; dropout's
    output and mask; the logits and the loss's log-probabilities), plus the two gradient buffers of
    the widest layer that backward holds at once."""
    floats, widest = in_features, max(in_features, out_features)
    for _ in range(layers):
        floats += hidden * (2 if activation == "gelu" else 1) + (2 * hidden if dropout > 0 else 0)
        widest = max(widest, hidden)
    return floats + 2 * out_features + 2 * widest


class _Graph:
    def __init__(self, graph: Mapping[str, Any], definitions: Mapping[str, Mapping[str, Any]]) -> None:
        self.nodes = {str(n.get("id")): n for n in graph.get("nodes") or () if isinstance(n, Mapping)}
        self.into: dict[tuple[str, str], tuple[str, str]] = {}
        for e in graph.get("edges") or ():
            if isinstance(e, Mapping):
                self.into[(str(e.get("target")), str(e.get("target_port")))] = (str(e.get("source")),
                                                                                str(e.get("source_port")))
        self.definitions = definitions

    def params(self, node_id: str) -> dict[str, Any]:
        node = self.nodes[node_id]
        spec = (self.definitions.get(str(node.get("type"))) or {}).get("params") or {}
        out = {k: v.get("default") for k, v in spec.items() if isinstance(v, Mapping)}
        out.update(node.get("params") or {})
        return out

    def source(self, node_id: str, port: str) -> tuple[str, str] | None:
        found = self.into.get((node_id, port))
        return found if found is not None and found[0] in self.nodes else None

    def type(self, node_id: str) -> str:
        return str(self.nodes[node_id].get("type"))


def _int(value: Any, default: int = 0) -> int:
    return value if type(value) is int else default


def _dataset(g: _Graph, at: tuple[str, str] | None, seen: frozenset[str] = frozenset()) -> Shape | str:
    """The shape of the dataset an output carries, or why it is unknown."""
    if at is None:
        return "not connected"
    node_id, port = at
    if node_id in seen:
        return "a cycle"
    kind, p = g.type(node_id), g.params(node_id)
    if kind == "SyntheticClassification":
        return Shape(_int(p.get("n_samples")), _int(p.get("n_features")), _int(p.get("n_classes")), LONG)
    if kind == "SyntheticRegression":
        return Shape(_int(p.get("n_samples")), _int(p.get("n_features")), 1, FLOAT)
    if kind in ("TrainTestSplit", "KFoldSplit"):
        parent = _dataset(g, g.source(node_id, "dataset"), seen | {node_id})
        if isinstance(parent, str):
            return parent
        n = parent.rows
        if kind == "TrainTestSplit":
            test = round(n * float(p.get("test_fraction") or 0))
        else:
            folds, fold = max(1, _int(p.get("n_folds"), 5)), _int(p.get("fold"))
            base, extra = divmod(n, folds)
            test = base + (1 if fold < extra else 0)
        rows = test if port == "test" else n - test
        return Shape(rows, parent.features, parent.outputs, parent.target_bytes)
    if kind == "CSVDataset":
        return f"{node_id} (CSVDataset): its shape is known only once the file is read"
    return f"{node_id} ({kind}): not a dataset the estimate knows"


def _model(g: _Graph, at: tuple[str, str] | None) -> tuple[str, dict[str, int]] | str:
    """(the MLP node, its sizes) behind a model output, through LoadModel copies."""
    seen: set[str] = set()
    while at is not None and at[0] not in seen:
        node_id = at[0]
        seen.add(node_id)
        kind = g.type(node_id)
        if kind == "LoadModel":
            at = g.source(node_id, "model")
            continue
        if kind != "MLP":
            return f"{node_id} ({kind}): not a model the estimate knows"
        p = g.params(node_id)
        sizes = {"in": _int(p.get("in_features")), "out": _int(p.get("out_features")),
                 "hidden": _int(p.get("hidden"), 64), "layers": _int(p.get("layers"), 2)}
        if not sizes["in"] or not sizes["out"]:
            ds = _dataset(g, g.source(node_id, "dataset"))
            if isinstance(ds, str):
                return f"{node_id} (MLP): its sizes come from a dataset: {ds}"
            sizes["in"] = sizes["in"] or ds.features
            sizes["out"] = sizes["out"] or ds.outputs
        sizes["dropout"] = 1 if float(p.get("dropout") or 0) > 0 else 0
        sizes["gelu"] = 1 if p.get("activation") == "gelu" else 0
        return node_id, sizes
    return "not connected"


def estimate(graph: Mapping[str, Any], definitions: Mapping[str, Mapping[str, Any]] | Iterable[Mapping[str, Any]],
             *, world: int = 1) -> Estimate:
    """The memory one card holds for `graph` (`world`: ranks of a DDP loop, each on its own card).
    `definitions`: node definitions as GET /api/nodes lists them (by type, or a list)."""
    if not isinstance(definitions, Mapping):
        definitions = {str(d.get("type")): d for d in definitions}
    g = _Graph(graph, definitions)
    out = Estimate(world=max(1, world))
    counted_models: set[str] = set()
    counted_data: set[tuple[str, str]] = set()

    def add(node_id: str, part: str, n: int) -> None:
        out.parts[part] += n
        row = out.nodes.setdefault(node_id, {})
        row[part] = row.get(part, 0) + n

    def model_params(node_id: str, sizes: dict[str, int]) -> int:
        count = mlp_parameters(sizes["in"], sizes["out"], sizes["hidden"], sizes["layers"])
        if node_id not in counted_models:
            counted_models.add(node_id)
            out.parameters += count
            add(node_id, "parameters", count * FLOAT)
        return count

    def data(owner: str, at: tuple[str, str] | None) -> Shape | None:
        ds = _dataset(g, at)
        if isinstance(ds, str):
            out.unknown.append({"node_id": owner, "why": ds})
            return None
        if at is not None and at not in counted_data:
            counted_data.add(at)
            add(owner, "data", ds.bytes())
        return ds

    for node_id in g.nodes:
        kind = g.type(node_id)
        if kind == "MLP":
            found = _model(g, (node_id, "model"))
            if isinstance(found, str):
                out.unknown.append({"node_id": node_id, "why": found})
            else:
                model_params(*found)
        elif kind in ("ClassificationMetrics", "RegressionMetrics"):
            data(node_id, g.source(node_id, "dataset"))
        elif kind in EXPANDING:
            out.unknown.append({"node_id": node_id, "why": f"{node_id} ({kind}): its inner graph is not estimated"})

    for node_id in g.nodes:
        if g.type(node_id) != "TrainingLoop":
            continue
        found = _model(g, g.source(node_id, "model"))
        if isinstance(found, str):
            out.unknown.append({"node_id": node_id, "why": found})
            continue
        mlp_id, sizes = found
        count = model_params(mlp_id, sizes)
        add(node_id, "parameters", count * FLOAT)  # the loop trains a copy
        add(node_id, "gradients", count * FLOAT)
        add(node_id, "optimizer_state", count * FLOAT * _optimizer_slots(g, g.source(node_id, "optimizer")))
        loader = g.source(node_id, "train")
        batch = 0
        if loader is not None and g.type(loader[0]) == "DataLoader":
            batch = _int(g.params(loader[0]).get("batch_size"), 32)
            data(node_id, g.source(loader[0], "dataset"))
        else:
            out.unknown.append({"node_id": node_id, "why": "input 'train' is not a DataLoader node"})
        for port in ("val",):
            if g.source(node_id, port) is not None:
                data(node_id, g.source(node_id, port))
        if batch:
            ddp = (g.params(node_id).get("strategy") == "ddp")
            share = -(-batch // out.world) if ddp else batch
            floats = mlp_activation_floats(sizes["in"], sizes["out"], sizes["hidden"], sizes["layers"],
                                           "gelu" if sizes["gelu"] else "relu", 1.0 if sizes["dropout"] else 0.0)
            add(node_id, "activations", share * floats * FLOAT)
    return out


def _optimizer_slots(g: _Graph, at: tuple[str, str] | None) -> int:
    """Floats of optimizer state per parameter."""
    if at is None or g.type(at[0]) != "Optimizer":
        return 2  # unknown optimizer: as much as Adam, the most the built-in one keeps
    p = g.params(at[0])
    if p.get("kind") == "sgd":
        return 1 if float(p.get("momentum") or 0) > 0 else 0
    return 2


def raise_estimate(memory_gib: float, estimate_gib: float) -> float | None:
    """An accepted estimate (`memory_source: "estimate"`) below what the server estimates for the
    same graph now (the graph changed after the dialog asked, or a client computed its own) is
    raised to the server's figure: the new budget, or None when it stands."""
    return estimate_gib if estimate_gib > memory_gib else None


__all__ = ["Estimate", "Shape", "estimate", "mlp_activation_floats", "mlp_parameters", "raise_estimate",
           "suggested_gib"]
