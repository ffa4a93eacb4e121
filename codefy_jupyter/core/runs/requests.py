"""Request bodies: shape checks that answer 422 with the failing field path.

Shape only (types, required keys, unknown keys, enums). Whether a well-formed request can be
honoured (a device this server lacks, a busy session) is a semantic question, answered with 400
by the run service.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...wire.run_options import OptionError, RunOptions, Target, parse_options
from ..errors import SchemaError  # noqa: F401  (re-exported: the schema's refusal)

# The options of a submit are wire/run_options.py `RunOptions` (one typed value from here to the
# run's process); the names below stay for the code that imports them from here.
SubmitOptions = RunOptions
__all__ = ["RunOptions", "SchemaError", "SubmitOptions", "SubmitRequest", "Target", "options_doc", "parse_submit", "strip_secrets"]


@dataclass(frozen=True)
class SubmitRequest:
    graph: dict[str, Any]
    name: str | None = None
    options: RunOptions = field(default_factory=RunOptions)


def _type(value: Any, kinds: tuple[type, ...], path: str, what: str) -> None:
    if isinstance(value, bool) and bool not in kinds:
        raise SchemaError(path, f"expected {what}, got a boolean")
    if not isinstance(value, kinds):
        raise SchemaError(path, f"expected {what}, got {type(value).__name__ if value is not None else 'null'}")


def parse_submit(body: Any) -> SubmitRequest:
    """`{"graph": {...}, "name"?: str, "options"?: {...}}` or SchemaError."""
    _type(body, (dict,), "", "a JSON object")
    for key in body:
        if key not in ("graph", "name", "options"):
            raise SchemaError(key, "unknown key (allowed: graph, name, options)")
    if "graph" not in body:
        raise SchemaError("graph", "required")
    _type(body["graph"], (dict,), "graph", "a graph object")
    name = body.get("name")
    if name is not None:
        _type(name, (str,), "name", "a string")
        if len(name) > 200:
            raise SchemaError("name", "at most 200 characters")
    try:
        options = parse_options(body.get("options"))
    except OptionError as err:
        raise SchemaError(err.field, err.reason) from None
    return SubmitRequest(graph=body["graph"], name=name, options=options)


def options_doc(req: SubmitRequest, resolved: Any) -> dict[str, Any]:
    """The run row's `options` document of a request (`RunOptions.to_row`)."""
    return req.options.to_row(resolved.requested)["options"]


def strip_secrets(graph: dict[str, Any], registry: Any) -> dict[str, Any]:
    """A copy of the graph with SECRET values blanked, for the database (the run keeps the graph as
    submitted in memory until it starts)."""
    nodes = []
    for node in graph.get("nodes", []):
        nd = registry.get(node.get("type"))
        params = node.get("params") or {}
        hidden = {k: v for k, v in params.items() if nd and k in nd.params and nd.params[k].type == "secret"}
        if hidden:
            node = {**node, "params": {**params, **{k: "" for k in hidden}}}
        nodes.append(node)
    return {**graph, "nodes": nodes}


def secret_fields(graph: dict[str, Any], registry: Any) -> list[str]:
    """`node.param` of every SECRET value the graph sets: what `strip_secrets` blanks in its row."""
    found = []
    for node in graph.get("nodes") or []:
        nd = registry.get(node.get("type")) if isinstance(node, dict) else None
        for key in (node.get("params") or {}) if nd else ():
            if key in nd.params and nd.params[key].type == "secret":
                found.append(f"{node.get('id')}.{key}")
    return found
