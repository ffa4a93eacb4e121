"""The request body of a study built from a `Graph` (`Graph.study`), checked against the server's
node catalog before it is sent, so a notebook names nodes and params once, in the graph.

    g = Graph.from_dict(json.load(open("examples/train_mlp.json")))
    body = g.study({"adam 3e-3": {}, "adam 1e-2": {("opt", "lr"): 0.01}, "sgd": {"opt.kind": "sgd"}},
                   node="train", metric="val_loss", repetitions=3, seed=7, budget={"max_parallel_runs": 2})
    Client().study(body, idempotency_key="lr-study-1")

A variant is a mapping of ops (`(node, "param")` or `"node_id.param"` to a value; `{}` is the
graph itself) or a whole graph (a `Graph` or a graph dict). Only what the catalog can tell is
checked here; the server checks everything again and has the last word.
"""

from __future__ import annotations

from typing import Any, Mapping

from .errors import CodefyError
from .sweep_spec import _address, _value_problem, catalog_param

DIRECTIONS = ("minimize", "maximize")


def _refuse(field: str, message: str) -> CodefyError:
    return CodefyError(f"{field}: {message}", code="invalid_study", params={"field": field})


def check_ops(graph: Mapping[str, Any], ops: list[dict[str, Any]], where: str,
              definitions: Mapping[str, Mapping[str, Any]]) -> None:
    """Raise CodefyError("invalid_study") naming the first op the catalog says cannot be set."""
    nodes = {n["id"]: n for n in graph["nodes"]}
    for j, op in enumerate(ops):
        field = f"{where}.ops[{j}]"
        spec = catalog_param(nodes, definitions, op["node_id"], op["param"], field, _refuse)
        problem = _value_problem(spec, op["value"])
        if problem:
            raise _refuse(f"{field}.value", f"{op['node_id']}.{op['param']}: {problem}")


def _variant(label: Any, given: Any) -> tuple[dict[str, Any], bool]:
    """(the request's variant entry, whether it applies ops to the base graph)."""
    if not isinstance(label, str) or not label:
        raise TypeError(f"variants: a label is a non-empty string, got {label!r}")
    if callable(getattr(given, "to_dict", None)):
        return {"label": label, "graph": given.to_dict()}, False
    if isinstance(given, Mapping) and "nodes" in given:
        return {"label": label, "graph": dict(given)}, False
    if isinstance(given, Mapping):
        ops = []
        for key, value in given.items():
            node_id, param = _address(key)
            ops.append({"node_id": node_id, "param": param, "value": value})
        return {"label": label, "ops": ops}, True
    raise TypeError(f"variants[{label!r}]: a mapping of ops, a Graph or a graph dict, got {given!r}")


def study_body(graph: dict[str, Any], variants: Mapping[str, Any], *, metric: str, node: Any,
               direction: str = "minimize", repetitions: int = 3, seed: int | None = None,
               budget: Mapping[str, Any] | None = None, name: str | None = None,
               options: Mapping[str, Any] | None = None, resume_policy: str | None = None,
               definitions: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """POST codefy/api/studies's body over `graph` (the base of every ops variant)."""
    if not variants:
        raise TypeError("variants: give at least one variant")
    if direction not in DIRECTIONS:
        raise TypeError(f"direction: one of {', '.join(DIRECTIONS)}, got {direction!r}")
    node_id = getattr(node, "id", node)
    if not isinstance(node_id, str) or not node_id:
        raise TypeError(f"node: the objective's node (a node or its id), got {node!r}")
    if definitions is not None and node_id not in {n["id"] for n in graph["nodes"]}:
        raise _refuse("objective.node_id", f"the graph has no node {node_id!r}")
    entries = []
    for i, (label, given) in enumerate(variants.items()):
        entry, has_ops = _variant(label, given)
        if definitions is not None and has_ops:
            check_ops(graph, entry["ops"], f"variants[{i}]", definitions)
        entries.append(entry)
    body: dict[str, Any] = {"objective": {"node_id": node_id, "metric": metric, "direction": direction},
                            "base_graph": graph, "variants": entries, "repetitions": repetitions}
    for key, value in (("seed", seed), ("name", name), ("resume_policy", resume_policy)):
        if value is not None:
            body[key] = value
    if budget:
        body["budget"] = dict(budget)
    if options:
        body["options"] = dict(options)
    return body
