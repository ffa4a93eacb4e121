"""Graph-structure nodes: `Subgraph` (an inner graph in a param), `Preset` (a named subgraph from
the presets folders) and `Map` (a preset once per item of a list). All three expand at run time;
their inner nodes get flattened ids `block/inner` (`map/0/inner` for Map)."""

from __future__ import annotations

from typing import Any

from codefy_jupyter.engine.errors import Problem
from codefy_jupyter.engine.expansion import Expand
from codefy_jupyter.engine.presets import PresetError
from codefy_jupyter.engine.registry import PortSpec, node, optional, param

_RESERVED = {"subgraph": {"graph"}, "preset": {"preset"}}


def _expand_interface(graph: dict[str, Any], inputs: dict[str, Any]) -> Expand:
    """Bind the block's inputs to the inner ports (or params) its interface names; map its outputs back."""
    bound: dict[str, dict[str, Any]] = {}
    param_values: dict[str, dict[str, Any]] = {}
    for name, ref in (graph.get("inputs") or {}).items():
        if "param" in ref:
            if inputs.get(name) is not None:  # unconnected: the inner param keeps its value
                param_values.setdefault(ref["node"], {})[ref["param"]] = inputs[name]
        else:
            bound.setdefault(ref["node"], {})[ref["port"]] = inputs.get(name)
    if param_values:
        nodes = []
        for raw in graph.get("nodes", []):
            values = param_values.get(raw.get("id"))
            nodes.append({**raw, "params": {**(raw.get("params") or {}), **values}} if values else raw)
        graph = {**graph, "nodes": nodes}
    outputs = {name: (ref["node"], ref["port"]) for name, ref in (graph.get("outputs") or {}).items()}
    return Expand(graph, outputs=outputs, inputs=bound)


def _interface_ports(data: Any, resolver: Any, node_id: str, field: str, reserved: set[str]):
    ins, outs, problems = resolver.interface(data, node_id, field)
    for name in sorted(set(ins) & reserved):
        problems.append(Problem("reserved_name", f"interface input {name!r} clashes with the block's own param",
                                node_id, f"{field}.inputs.{name}"))
    return ins, outs, problems


def _subgraph_ports(params: dict[str, Any], resolver: Any, node_id: str):
    return _interface_ports(params["graph"], resolver, node_id, "params.graph", _RESERVED["subgraph"])


@node("Subgraph", params={"graph": param.json({"nodes": [], "edges": []},
                                                description="the inner graph, with its inputs/outputs interface")},
      dynamic_ports=_subgraph_ports, category="structure")
def subgraph(ctx: Any, graph: dict[str, Any], **inputs: Any) -> Expand:
    """A block whose inner graph runs in place, its nodes named `block/inner`."""
    return _expand_interface(graph, inputs)


def _load_preset(resolver_or_library: Any, name: str, node_id: str, field: str):
    library = getattr(resolver_or_library, "presets", resolver_or_library)
    try:
        return library.get(name), None
    except PresetError as err:
        return None, Problem("unknown_preset", str(err), node_id, field, {"preset": name})


def _preset_ports(params: dict[str, Any], resolver: Any, node_id: str):
    data, problem = _load_preset(resolver, params["preset"], node_id, "params.preset")
    if problem is not None:
        return {}, {}, [problem]
    return _interface_ports(data, resolver, node_id, "params.preset", _RESERVED["preset"])


@node("Preset", params={"preset": param.string("", description="name of a preset in the presets folders")},
      dynamic_ports=_preset_ports, category="structure")
def preset(ctx: Any, preset: str, **inputs: Any) -> Expand:
    """A named subgraph from the presets folders."""
    return _expand_interface(ctx.presets.get(preset), inputs)


_MAP_INPUTS = {"items": PortSpec("list"), "shared": optional("any")}
_MAP_OUTPUTS = {"results": "list"}


def _map_ports(params: dict[str, Any], resolver: Any, node_id: str):
    data, problem = _load_preset(resolver, params["preset"], node_id, "params.preset")
    if problem is not None:
        return {}, {}, [problem]
    ins, outs, problems = resolver.interface(data, node_id, "params.preset")
    if problems:
        return {}, {}, problems
    checks = [("item_input", ins, "input"), ("output", outs, "output")]
    if params["shared_input"]:
        checks.append(("shared_input", ins, "input"))
    for key, ports, kind in checks:
        if params[key] not in ports:
            problems.append(Problem("unknown_port", f"preset {params['preset']!r} has no {kind} "
                                    f"{params[key]!r} (it has {sorted(ports)})", node_id, f"params.{key}"))
    return _MAP_INPUTS, _MAP_OUTPUTS, problems


@node("Map", inputs=_MAP_INPUTS, outputs=_MAP_OUTPUTS, params={
    "preset": param.string("", description="the preset to run once per item"),
    "item_input": param.string("item", description="preset input that receives the item"),
    "output": param.string("result", description="preset output collected into results"),
    "shared_input": param.string("", description="preset input that receives `shared` (optional)"),
}, dynamic_ports=_map_ports, category="structure")
def map_preset(ctx: Any, items: Any, shared: Any, preset: str, item_input: str, output: str,
               shared_input: str) -> dict[str, Any] | Expand:
    """Run a preset once per item of a list; `results` lists each run's output in item order."""
    if not isinstance(items, (list, tuple)):
        raise TypeError(f"input 'items' must be a list, got {type(items).__name__}")
    if not items:
        return {"results": []}
    nodes = [{"id": str(i), "type": "Preset", "params": {"preset": preset}} for i in range(len(items))]
    bound: dict[str, dict[str, Any]] = {}
    for i, item in enumerate(items):
        values = {item_input: item}
        if shared_input:
            values[shared_input] = shared
        bound[str(i)] = values
    return Expand({"nodes": nodes, "edges": []},
                  outputs={"results": [(str(i), output) for i in range(len(items))]}, inputs=bound)
