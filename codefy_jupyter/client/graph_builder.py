"""A small builder for graph JSON, for notebooks and scripts.

    from codefy_jupyter import Graph

    g = Graph(seed=42)
    k = g.add("Float", value=2)                 # id "float"
    s = g.add("Scale", x=k["value"], factor=3)  # a Port as a keyword: an edge into input "x"
    g.connect(k["value"], g.add("Scale", id="s2")["x"])
    g.to_dict()                                 # the engine's graph JSON; Client.submit(g) takes g itself

Keywords of `add` whose value is a `Port` (`node["port"]`) become edges into the input of that
name; every other keyword is a param. A param whose name clashes with `add`'s own keywords (`id`,
`label`, `params`) goes in `params={...}`. Nothing is checked against node definitions until
`validate()`, which reads the server's catalog (`GET codefy/api/nodes`): the server, not this
kernel, decides which node types exist.
"""

from __future__ import annotations

import copy
import difflib
from dataclasses import dataclass
from typing import Any, Iterator

from .errors import CodefyError

_SETTINGS = ("device", "seed")


@dataclass(frozen=True)
class Port:
    """One port of one node: `node["port"]`. Used as an edge's source or target."""

    node: NodeRef
    name: str

    def __repr__(self) -> str:
        return f"{self.node.id}[{self.name!r}]"


class NodeRef:
    """A node added to a `Graph`. `ref["port"]` names one of its ports; `ref.set(...)` changes params."""

    def __init__(self, graph: Graph, node_id: str) -> None:
        self._graph, self.id = graph, node_id

    @property
    def graph(self) -> Graph:
        return self._graph

    @property
    def type(self) -> str:
        return self._graph._nodes[self.id]["type"]

    @property
    def params(self) -> dict[str, Any]:
        """The node's params (a copy; change them with `set`)."""
        return dict(self._graph._nodes[self.id]["params"])

    def __getitem__(self, port: str) -> Port:
        if not isinstance(port, str) or not port:
            raise TypeError(f"node {self.id!r}: a port name is a non-empty string, got {port!r}")
        return Port(self, port)

    def set(self, **params: Any) -> NodeRef:
        """Set params (a Port here is an edge into that input, as in `add`). Returns the node."""
        self._graph._apply(self.id, params)
        return self

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NodeRef) and other._graph is self._graph and other.id == self.id

    def __hash__(self) -> int:
        return hash((id(self._graph), self.id))

    def __repr__(self) -> str:
        return f"<node {self.id!r} ({self.type})>"


class Graph:
    """Nodes, edges and settings; `to_dict()` is the graph JSON a run is submitted with."""

    def __init__(self, *, device: str | None = None, seed: int | None = None) -> None:
        self.device, self.seed = device, seed
        self._nodes: dict[str, dict[str, Any]] = {}
        self._edges: list[dict[str, str]] = []

    # -- building -------------------------------------------------------------------------------
    def add(self, type: str, id: str | None = None, *, label: str | None = None,  # noqa: A002 - the JSON's names
            params: dict[str, Any] | None = None, **kwargs: Any) -> NodeRef:
        """Add a node of `type`. Keywords are params, or edges when the value is a Port."""
        if not isinstance(type, str) or not type:
            raise TypeError(f"type: a node type is a non-empty string, got {type!r}")
        node_id = self._new_id(type) if id is None else self._check_id(id)
        node: dict[str, Any] = {"id": node_id, "type": type, "params": {}}
        if label is not None:
            node["label"] = str(label)
        self._nodes[node_id] = node
        try:
            self._apply(node_id, {**(params or {}), **kwargs})
        except (TypeError, ValueError):
            del self._nodes[node_id]  # a refused add leaves the graph as it was
            raise
        return NodeRef(self, node_id)

    def connect(self, source: Port, target: Port) -> Graph:
        """An edge from an output port to an input port. An input takes one edge: connecting it
        again replaces the old one."""
        for name, port in (("source", source), ("target", target)):
            if not isinstance(port, Port):
                raise TypeError(f"{name}: expected a port such as node['out'], got {port!r}")
            self._own(port.node, name)
        if source.node.id == target.node.id:
            raise ValueError(f"target: node {target.node.id!r} cannot feed itself")
        self._edges = [e for e in self._edges
                       if (e["target"], e["target_port"]) != (target.node.id, target.name)]
        self._edges.append({"source": source.node.id, "source_port": source.name,
                            "target": target.node.id, "target_port": target.name})
        return self

    def remove(self, node: NodeRef | str) -> Graph:
        """Take a node out, with every edge that touches it."""
        node_id = node.id if isinstance(node, NodeRef) else node
        if node_id not in self._nodes:
            raise KeyError(f"no node {node_id!r} in this graph")
        del self._nodes[node_id]
        self._edges = [e for e in self._edges if node_id not in (e["source"], e["target"])]
        return self

    def __getitem__(self, node_id: str) -> NodeRef:
        if node_id not in self._nodes:
            raise KeyError(f"no node {node_id!r} in this graph (nodes: {', '.join(self._nodes) or 'none'})")
        return NodeRef(self, node_id)

    def __contains__(self, node_id: object) -> bool:
        return node_id in self._nodes

    def __iter__(self) -> Iterator[NodeRef]:
        return (NodeRef(self, nid) for nid in list(self._nodes))

    def __len__(self) -> int:
        return len(self._nodes)

    def __repr__(self) -> str:
        return f"<Graph: {len(self._nodes)} nodes, {len(self._edges)} edges>"

    # -- JSON -----------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        graph: dict[str, Any] = {"nodes": copy.deepcopy(list(self._nodes.values())),
                                 "edges": [dict(e) for e in self._edges]}
        settings = {k: getattr(self, k) for k in _SETTINGS if getattr(self, k) is not None}
        if settings:
            graph["settings"] = settings
        return graph

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Graph:
        """A builder holding an existing graph JSON (a file loaded with `json.load`), to change it."""
        if not isinstance(data, dict) or not isinstance(data.get("nodes"), list):
            raise ValueError("nodes: a graph is an object with a 'nodes' list")
        settings = data.get("settings") or {}
        graph = cls(device=settings.get("device"), seed=settings.get("seed"))
        for i, node in enumerate(data["nodes"]):
            if not isinstance(node, dict) or "type" not in node or "id" not in node:
                raise ValueError(f"nodes[{i}]: a node is an object with 'id' and 'type'")
            graph.add(node["type"], node["id"], label=node.get("label"), params=dict(node.get("params") or {}))
        for i, edge in enumerate(data.get("edges") or []):
            try:
                graph.connect(graph[edge["source"]][edge["source_port"]], graph[edge["target"]][edge["target_port"]])
            except (KeyError, TypeError) as err:
                raise ValueError(f"edges[{i}]: {err}") from None
        return graph

    # -- checking against the server's catalog --------------------------------------------------
    def validate(self, catalog: Any = None) -> Graph:
        """Check node types, params and port names against a catalog: the answer of
        `GET codefy/api/nodes` (a dict, or its "nodes" list), or a `Client` to read it from;
        None reads it from the server `Client()` finds. Raises CodefyError("invalid_graph")
        listing every problem, each with its node id and field, like the server's refusal."""
        definitions = _definitions(catalog)
        problems = check_graph(self.to_dict(), definitions)
        if problems:
            lines = "\n".join(f"  - node {p['node_id']!r}, {p['field']}: {p['message']}" for p in problems)
            noun = "problem" if len(problems) == 1 else "problems"
            raise CodefyError(f"graph has {len(problems)} {noun}:\n{lines}", code="invalid_graph",
                              params={"field": f"nodes.{problems[0]['node_id']}.{problems[0]['field']}",
                                      "problems": problems})
        return self

    def sweep(self, params: dict[Any, Any], *, metric: str, direction: str = "minimize", node: Any = None,
              catalog: Any = None, check: bool = True, **spec: Any) -> dict[str, Any]:
        """The body of POST codefy/api/sweeps over this graph (`Client.sweep` sends it). `params` maps
        `(node, "param")` or `"node_id.param"` to a list of values or a range dict; `node` is the
        objective's node. Keywords: method, samples, seed, seed_variants, name, options. With
        `check` (the default), the graph and every entry are checked against the server's catalog
        first (`catalog` as in `validate`), raising CodefyError naming the field."""
        from .sweep_spec import sweep_body

        definitions = None
        if check:
            definitions = _definitions(catalog)
            self.validate(list(definitions.values()))
        return sweep_body(self.to_dict(), params, metric=metric, direction=direction, node=node,
                          definitions=definitions, **spec)

    def study(self, variants: dict[str, Any], *, metric: str, node: Any, direction: str = "minimize",
              catalog: Any = None, check: bool = True, **spec: Any) -> dict[str, Any]:
        """The body of POST codefy/api/studies over this graph (`Client.study` sends it). `variants`
        maps each label to its ops (`{(node, "param"): value}` or `{"node_id.param": value}`; `{}` is
        this graph) or to a whole graph; `node`/`metric`/`direction` are the objective. Keywords:
        repetitions, seed, budget, name, options, resume_policy. With `check` (the default), the
        graph, the objective's node and every op are checked against the server's catalog first
        (`catalog` as in `validate`), raising CodefyError naming the field."""
        from .study_spec import study_body

        definitions = None
        if check:
            definitions = _definitions(catalog)
            self.validate(list(definitions.values()))
        return study_body(self.to_dict(), variants, metric=metric, node=node, direction=direction,
                          definitions=definitions, **spec)

    # -- internals ------------------------------------------------------------------------------
    def _new_id(self, type_: str) -> str:
        base = type_.lower()
        if base not in self._nodes:
            return base
        n = 2
        while f"{base}_{n}" in self._nodes:
            n += 1
        return f"{base}_{n}"

    def _check_id(self, node_id: Any) -> str:
        if not isinstance(node_id, str) or not node_id:
            raise TypeError(f"id: a node id is a non-empty string, got {node_id!r}")
        if "/" in node_id:  # the engine reserves "/" for the flattened ids of nodes inside blocks
            raise ValueError(f"id: {node_id!r} contains '/', which names nodes inside blocks")
        if node_id in self._nodes:
            raise ValueError(f"id: this graph already has a node {node_id!r}")
        return node_id

    def _own(self, ref: NodeRef, what: str) -> None:
        if ref._graph is not self:
            raise ValueError(f"{what}: node {ref.id!r} belongs to another Graph")
        if ref.id not in self._nodes:
            raise ValueError(f"{what}: node {ref.id!r} was removed from this graph")

    def _apply(self, node_id: str, values: dict[str, Any]) -> None:
        node = self._nodes[node_id]
        target = NodeRef(self, node_id)
        for name, value in values.items():
            if isinstance(value, NodeRef):
                raise TypeError(f"{name}: pass one of node {value.id!r}'s ports, e.g. {value.id}['out'], "
                                "not the node itself")
            if isinstance(value, Port):
                self.connect(value, target[name])
            else:
                node["params"][name] = value


def _definitions(catalog: Any) -> dict[str, dict[str, Any]]:
    if catalog is None:
        from .client import Client

        with Client() as client:
            catalog = client.nodes()
    elif hasattr(catalog, "nodes") and callable(catalog.nodes):
        catalog = catalog.nodes()
    if isinstance(catalog, dict):
        catalog = catalog.get("nodes")
    if not isinstance(catalog, list):
        raise TypeError("catalog: expected the answer of GET codefy/api/nodes, its 'nodes' list, or a Client")
    return {d["type"]: d for d in catalog if isinstance(d, dict) and "type" in d}


def check_graph(graph: dict[str, Any], definitions: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Every type, param and port name of `graph` that the catalog does not know (pure).

    Only names: value ranges and edge types are the server's to check at submit."""
    problems: list[dict[str, Any]] = []

    def problem(node_id: str, field: str, message: str, code: str) -> None:
        problems.append({"code": code, "message": message, "node_id": node_id, "field": field})

    types = {}
    for node in graph["nodes"]:
        definition = definitions.get(node["type"])
        types[node["id"]] = definition
        if definition is None:
            close = difflib.get_close_matches(node["type"], list(definitions), n=3)
            hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""  # as the server says it
            problem(node["id"], "type", f"unknown node type {node['type']!r}{hint}", "unknown_node_type")
            continue
        for name in node["params"]:
            if name not in definition.get("params", {}):
                known = ", ".join(definition.get("params", {})) or "none"
                problem(node["id"], f"params.{name}", f"{node['type']} has no param {name!r} (params: {known})",
                        "unknown_param")
    for edge in graph["edges"]:
        for end, key, ports in (("source", "source_port", "outputs"), ("target", "target_port", "inputs")):
            definition = types.get(edge[end])
            # A type with dynamic ports (Subgraph, Preset, Map) gets them from its params: only the
            # server, which resolves them, can say whether a name exists.
            if definition is None or definition.get("dynamic_ports"):
                continue
            if edge[key] not in definition.get(ports, {}):
                kind = "output" if ports == "outputs" else "input"
                known = ", ".join(definition.get(ports, {})) or "none"
                problem(edge[end], f"{ports}.{edge[key]}",
                        f"{definition['type']} has no {kind} {edge[key]!r} ({ports}: {known})", f"unknown_{kind}")
    return problems
