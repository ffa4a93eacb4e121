"""The request body of a sweep built from a `Graph` (`Graph.sweep`), checked against the server's
node catalog before it is sent, so a notebook names nodes and params once, in the graph.

    g = Graph.from_dict(json.load(open("examples/train_mlp.json")))
    body = g.sweep({("opt", "lr"): {"min": 1e-4, "max": 1e-1, "count": 4, "scale": "log"},
                    "loader.batch_size": [32, 64, 128]}, metric="val_loss")
    Client().sweep(body)

Only what the catalog can tell: the node is in the graph, its type has the param, the param can
be swept (int, float, bool, string, select), and every listed value fits its type, options and
bounds. The server checks everything again (ranges after expansion, the caps) and has the last word.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from .errors import CodefyError

SWEEPABLE = ("int", "float", "bool", "string", "select")


def _refuse(field: str, message: str) -> CodefyError:
    return CodefyError(f"{field}: {message}", code="invalid_sweep", params={"field": field})


def _address(key: Any) -> tuple[str, str]:
    """(node id, param) from `(node or id, "param")` or `"node_id.param"` (split at the last dot)."""
    if isinstance(key, tuple) and len(key) == 2:
        node, name = key
        return getattr(node, "id", node), name
    if isinstance(key, str) and "." in key:
        node, _, name = key.rpartition(".")
        return node, name
    raise TypeError(f"params: a key is (node, 'param') or 'node_id.param', got {key!r}")


def _value_problem(spec: Mapping[str, Any], value: Any) -> str | None:
    kind = spec.get("type")
    if kind == "select":
        return None if value in (spec.get("options") or ()) else f"expected one of {spec.get('options')}, got {value!r}"
    if kind == "bool":
        return None if isinstance(value, bool) else f"expected true or false, got {value!r}"
    if kind == "string":
        return None if isinstance(value, str) else f"expected a string, got {value!r}"
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return f"expected a number, got {value!r}"
    if kind == "int" and not float(value).is_integer():
        return f"expected an integer, got {value!r}"
    if spec.get("min") is not None and value < spec["min"]:
        return f"must be at least {spec['min']}, got {value!r}"
    if spec.get("max") is not None and value > spec["max"]:
        return f"must be at most {spec['max']}, got {value!r}"
    return None


def catalog_param(nodes: Mapping[str, Mapping[str, Any]], definitions: Mapping[str, Mapping[str, Any]],
                  node_id: Any, param: Any, field: str, refuse: Any) -> Mapping[str, Any]:
    """The catalog's definition of `node_id`'s `param` when it can be set by a sweep or a study,
    else `refuse(field, why)` raised: the one lookup both request builders make."""
    node = nodes.get(node_id)
    if node is None:
        raise refuse(field, f"the graph has no node {node_id!r}")
    params = (definitions.get(node["type"]) or {}).get("params") or {}
    spec = params.get(param)
    if spec is None:
        raise refuse(field, f"{node['type']} has no param {param!r} (params: {', '.join(params) or 'none'})")
    if spec.get("type") not in SWEEPABLE:
        raise refuse(field, f"{node_id}.{param} is a {spec.get('type')} param; only {', '.join(SWEEPABLE)} "
                     "params can be set")
    return spec


def check_entries(graph: Mapping[str, Any], entries: list[dict[str, Any]],
                  definitions: Mapping[str, Mapping[str, Any]]) -> None:
    """Raise CodefyError("invalid_sweep") naming the first entry the catalog says cannot run."""
    nodes = {n["id"]: n for n in graph["nodes"]}
    for i, entry in enumerate(entries):
        where = f"sweep_spec.params[{i}]"
        spec = catalog_param(nodes, definitions, entry["node_id"], entry["param"], where, _refuse)
        if "range" in entry and spec.get("type") not in ("int", "float"):
            raise _refuse(f"{where}.range", f"a range needs an int or float param, not {spec.get('type')}")
        for j, value in enumerate(entry.get("values") or ()):
            problem = _value_problem(spec, value)
            if problem:
                raise _refuse(f"{where}.values[{j}]", f"{entry['node_id']}.{entry['param']}: {problem}")


def sweep_body(graph: dict[str, Any], params: Mapping[Any, Any], *, metric: str, direction: str = "minimize",
               node: Any = None, method: str = "grid", samples: int | None = None, seed: int | None = None,
               seed_variants: bool = False, name: str | None = None, options: dict[str, Any] | None = None,
               definitions: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """POST codefy/api/sweeps's body. `params` maps (node, "param") or "node_id.param" to a list of
    values or a range dict ({"min", "max", "count", "scale"?, "type"?})."""
    if not params:
        raise TypeError("params: name at least one parameter to sweep")
    entries = []
    for key, domain in params.items():
        node_id, param = _address(key)
        entry: dict[str, Any] = {"node_id": node_id, "param": param}
        if isinstance(domain, Mapping):
            entry["range"] = dict(domain)
        elif isinstance(domain, (list, tuple, range)):
            entry["values"] = list(domain)
        else:
            raise TypeError(f"params[{key!r}]: a list of values or a range dict, got {domain!r}")
        entries.append(entry)
    if definitions is not None:
        check_entries(graph, entries, definitions)
    spec: dict[str, Any] = {"method": method, "params": entries}
    if samples is not None:
        spec["samples"] = samples
    if seed is not None:
        spec["seed"] = seed
    objective: dict[str, Any] = {"metric": metric, "direction": direction}
    if node is not None:
        objective["node_id"] = getattr(node, "id", node)
    body: dict[str, Any] = {"base_graph": graph, "sweep_spec": spec, "objective": objective}
    if name is not None:
        body["name"] = name
    if seed_variants:
        body["seed_variants"] = True
    if options:
        body["options"] = dict(options)
    return body
