"""Which parameter of which node a sweep entry or a study op may set, and whether a value fits it.

Both a sweep's params entries and a study's ops address one parameter of one node by the node's
id and are checked the same way, before anything is queued: the node exists exactly once in the
graph, is a registered node that is not a preset or subgraph instance (their inner params are not
the graph's), and the parameter is an int, float, bool, string or select one that is not SECRET
(the values chosen are stored in the clear on the sweep or study). Each refusal is a 400 naming
the entry (`where`, such as `sweep_spec.params[1]` or `variants[2].ops[0]`).
"""

from __future__ import annotations

from typing import Any

from ...engine import NodeRegistry
from ...engine.registry import ParamSpec
from ..errors import BadRequest

SETTABLE_TYPES = ("int", "float", "bool", "string", "select")


def settable_param(graph: dict[str, Any], registry: NodeRegistry, node_id: Any, param: Any,
                   where: str) -> ParamSpec:
    """The definition of `node_id`'s `param`, or BadRequest naming `where` and why it cannot be set."""
    nodes = [n for n in graph.get("nodes") or () if isinstance(n, dict) and n.get("id") == node_id]
    if not nodes:
        raise _refuse(where, "param_node_unknown", f"{where}: the graph has no node {node_id!r}",
                      node_id=node_id)
    if len(nodes) > 1:
        raise _refuse(where, "param_node_ambiguous",
                      f"{where}: node id {node_id!r} appears {len(nodes)} times in the graph", node_id=node_id)
    node_type = nodes[0].get("type")
    definition = registry.get(node_type) if isinstance(node_type, str) else None
    if definition is None:
        raise _refuse(where, "param_node_unregistered",
                      f"{where}: node {node_id!r} has type {node_type!r}, which is not a registered node",
                      node_id=node_id, type=node_type)
    if definition.dynamic_ports is not None:
        raise _refuse(where, "param_node_instance",
                      f"{where}: node {node_id!r} is a {node_type} instance; its inner parameters are not "
                      "the graph's and cannot be set here", node_id=node_id, type=node_type)
    spec = definition.params.get(param) if isinstance(param, str) else None
    if spec is None:
        raise _refuse(where, "param_unknown",
                      f"{where}: {node_type} has no parameter {param!r} (it has: "
                      f"{', '.join(sorted(definition.params)) or 'none'})", node_id=node_id, param=param)
    if spec.type == "secret":
        raise _refuse(where, "param_secret",
                      f"{where}: {node_id}.{param} is a SECRET parameter; its values would be stored in the clear",
                      node_id=node_id, param=param)
    if spec.type not in SETTABLE_TYPES:
        raise _refuse(where, "param_not_settable",
                      f"{where}: {node_id}.{param} is a {spec.type} parameter; only "
                      f"{', '.join(SETTABLE_TYPES)} parameters can be set", node_id=node_id, param=param)
    return spec


def checked_value(spec: ParamSpec, value: Any, where: str, *, node_id: str, param: str) -> Any:
    """`value` as the parameter takes it (an int-valued float becomes an int), or BadRequest."""
    fitted, reason = spec.check(value)
    if reason is not None:
        raise _refuse(where, "param_value_invalid", f"{where}: {node_id}.{param}: {reason}",
                      node_id=node_id, param=param, value=value if _jsonable(value) else repr(value))
    return fitted


def with_params(graph: dict[str, Any], values: dict[tuple[str, str], Any]) -> dict[str, Any]:
    """A copy of `graph` with `values[(node_id, param)]` set (nodes not named are shared, not copied)."""
    by_node: dict[str, dict[str, Any]] = {}
    for (node_id, param), value in values.items():
        by_node.setdefault(node_id, {})[param] = value
    nodes = []
    for node in graph.get("nodes") or ():
        changes = by_node.get(node.get("id")) if isinstance(node, dict) else None
        nodes.append({**node, "params": {**(node.get("params") or {}), **changes}} if changes else node)
    return {**graph, "nodes": nodes}


def _jsonable(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


def _refuse(where: str, code: str, message: str, **params: Any) -> BadRequest:
    return BadRequest(message, code=code, params={"field": where, **params})
