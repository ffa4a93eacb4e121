"""Graph JSON → a validated `Graph`, or a `GraphError` listing every problem.

Graph JSON: `{"nodes": [{"id", "type", "params", "label"?}], "edges": [{"source", "source_port",
"target", "target_port"}], "settings": {"device"?, "seed"?}}`. A graph used as a subgraph or preset
also declares its interface: `"inputs"/"outputs": {name: {"node", "port"}}`.

Validation never stops at the first problem: a user fixing a graph sees everything at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from .errors import MAX_PROBLEMS_LISTED, GraphError, Problem, Problems, unknown_type
from .registry import NodeDef, NodeRegistry, PortSpec, types_compatible

MAX_NESTING = 16
SEED_MAX = 2**32 - 1


# slots: a big graph has one per node, and a smaller object is fewer cache lines to touch per step.
@dataclass(slots=True)
class NodeSpec:
    id: str
    type: str
    params: dict[str, Any]
    definition: NodeDef
    inputs: dict[str, PortSpec]
    outputs: dict[str, str]
    label: str | None = None
    has_lazy: bool = False


class Graph:
    """A validated graph.

    nodes:     id -> NodeSpec
    inputs:    target id -> input port -> (source id, source port)
    consumers: source id -> consumer ids, in edge order, one entry per edge
    settings, interface_inputs/outputs (subgraphs, presets: name -> (node id, port)),
    interface_params (interface inputs that set an inner param: name -> (node id, param)),
    order:     a topological order (inputs before consumers), when the graph is acyclic.

    parse_graph builds a graph by handle (a node's position in `nodes`): `index` (id -> handle),
    and per handle `specs`, `inputs_h` and `consumers_h` (the very objects `inputs` and
    `consumers` hold) and `deps` (its inputs' sources' handles, in `inputs` order). A run works
    on those, and the three maps by id are made when first asked for: filling a 100k-entry map
    touches memory far apart, a few tenths of a microsecond per node each, and a plain run never
    needs them. A Graph built by hand from maps has no handles (`index` is None).
    """

    def __init__(
        self, nodes: dict[str, NodeSpec] | None, inputs: dict[str, dict[str, tuple[str, str]]] | None,
        consumers: dict[str, list[str]] | None, settings: dict[str, Any] | None = None,
        interface_inputs: dict[str, tuple[str, str]] | None = None,
        interface_outputs: dict[str, tuple[str, str]] | None = None,
        interface_params: dict[str, tuple[str, str]] | None = None, order: list[str] | None = None,
    ) -> None:
        self._nodes, self._inputs, self._consumers = nodes, inputs, consumers
        self.settings = settings if settings is not None else {}
        self.interface_inputs = interface_inputs if interface_inputs is not None else {}
        self.interface_outputs = interface_outputs if interface_outputs is not None else {}
        self.interface_params = interface_params if interface_params is not None else {}
        self.order = order
        self.index: dict[str, int] | None = None
        self.specs: list[NodeSpec] = []
        self.inputs_h: list[dict[str, tuple[str, str]]] = []
        self.consumers_h: list[list[str]] = []
        self.deps: list[Sequence[int]] = []

    @classmethod
    def _by_handle(cls, index: dict[str, int], specs: list[NodeSpec], inputs_h: list[dict[str, tuple[str, str]]],
                   consumers_h: list[list[str]], deps: list[Sequence[int]], **rest: Any) -> Graph:
        graph = cls(None, None, None, **rest)
        graph.index, graph.specs, graph.inputs_h, graph.consumers_h, graph.deps = (
            index, specs, inputs_h, consumers_h, deps)
        return graph

    @property
    def nodes(self) -> dict[str, NodeSpec]:
        if self._nodes is None:
            self._nodes = dict(zip(self.index or (), self.specs))
        return self._nodes

    @nodes.setter
    def nodes(self, value: dict[str, NodeSpec]) -> None:
        self._drop_handles()
        self._nodes = value

    @property
    def inputs(self) -> dict[str, dict[str, tuple[str, str]]]:
        if self._inputs is None:
            self._inputs = dict(zip(self.index or (), self.inputs_h))
        return self._inputs

    @inputs.setter
    def inputs(self, value: dict[str, dict[str, tuple[str, str]]]) -> None:
        self._drop_handles()
        self._inputs = value

    @property
    def consumers(self) -> dict[str, list[str]]:
        if self._consumers is None:
            self._consumers = dict(zip(self.index or (), self.consumers_h))
        return self._consumers

    @consumers.setter
    def consumers(self, value: dict[str, list[str]]) -> None:
        self._drop_handles()
        self._consumers = value

    def _drop_handles(self) -> None:
        """A map replaced by hand: the handles may no longer match it, so keep the maps alone."""
        if self.index is not None:
            self._nodes, self._inputs, self._consumers = self.nodes, self.inputs, self.consumers
            self.index, self.specs, self.inputs_h, self.consumers_h, self.deps = None, [], [], [], []

    def __repr__(self) -> str:
        return f"Graph({len(self.index) if self.index is not None else len(self.nodes)} nodes)"

    def output_nodes(self) -> list[str]:
        """Nodes a run targets: declared output nodes and every node nobody consumes."""
        if self.index is not None:
            return [spec.id for spec, used in zip(self.specs, self.consumers_h)
                    if spec.definition.output_node or not used]
        return [nid for nid, spec in self.nodes.items() if spec.definition.output_node or not self.consumers[nid]]

    def node_types(self) -> set[str]:
        if self.index is not None:
            return {spec.type for spec in self.specs}
        return {spec.type for spec in self.nodes.values()}


class PortResolver:
    """Given to nodes whose ports depend on params (Subgraph, Preset, Map) during validation."""

    def __init__(self, registry: NodeRegistry, presets: Any, depth: int = 0) -> None:
        self.registry = registry
        self.presets = presets
        self.depth = depth

    def interface(
        self, data: Any, node_id: str, field_name: str
    ) -> tuple[dict[str, PortSpec], dict[str, str], list[Problem]]:
        """Validate an inner graph and return its interface ports (with inner problems, flattened)."""
        if self.depth >= MAX_NESTING:
            return {}, {}, [Problem("nesting_too_deep", f"subgraphs nest deeper than {MAX_NESTING} levels "
                                    "(does a preset contain itself?)", node_id, field_name)]
        try:
            inner = parse_graph(data, self.registry, self.presets, prefix=f"{node_id}/",
                                bound=_interface_bindings(data), _depth=self.depth + 1)
        except GraphError as err:
            return {}, {}, [_in_field(p, field_name) if p.node_id is None else p for p in err.problems]
        ins = {}
        for name, (nid, port) in inner.interface_inputs.items():
            ins[name] = PortSpec(inner.nodes[nid].inputs[port].type, optional=inner.nodes[nid].inputs[port].optional)
        for name, (nid, pname) in inner.interface_params.items():
            ins[name] = PortSpec(_PARAM_PORT_TYPES[inner.nodes[nid].definition.params[pname].type], optional=True)
        outs = {name: inner.nodes[nid].outputs[port] for name, (nid, port) in inner.interface_outputs.items()}
        return ins, outs, []


# The port type of an interface input that sets a param.
_PARAM_PORT_TYPES = {"int": "int", "float": "float", "bool": "bool", "string": "string", "select": "any",
                     "json": "any"}


def _in_field(p: Problem, field_name: str) -> Problem:
    return Problem(p.code, p.message, p.node_id, f"{field_name}.{p.field}" if p.field else field_name, p.params)


def _interface_bindings(data: Any) -> set[tuple[str, str]]:
    """Inner ports fed through the interface count as connected."""
    out: set[tuple[str, str]] = set()
    if isinstance(data, dict) and isinstance(data.get("inputs"), dict):
        for ref in data["inputs"].values():
            if isinstance(ref, dict) and isinstance(ref.get("node"), str) and isinstance(ref.get("port"), str):
                out.add((ref["node"], ref["port"]))
    return out


def validate_graph(data: Any, registry: NodeRegistry | None = None, presets: Any = None) -> list[Problem]:
    """Every problem of a graph, or [] when it can run."""
    try:
        parse_graph(data, registry, presets)
    except GraphError as err:
        return err.problems
    return []


def parse_graph(
    data: Any,
    registry: NodeRegistry | None = None,
    presets: Any = None,
    *,
    prefix: str = "",
    bound: set[tuple[str, str]] | None = None,
    _depth: int = 0,
) -> Graph:
    """Validate graph JSON and build a `Graph`. Node ids get `prefix` (expansions: `parent/`).

    `bound` lists (local id, port) inputs that receive values from outside (an expansion's
    inputs), so they count as connected.
    """
    if registry is None:
        from .registry import default_registry

        registry = default_registry()
    if presets is None:
        from .presets import PresetLibrary

        presets = PresetLibrary.default()
    problems = Problems()
    if not isinstance(data, dict):
        raise GraphError([Problem("invalid_graph", f"a graph is a JSON object, got {type(data).__name__}")])
    raw_nodes = data.get("nodes")
    raw_edges = data.get("edges", [])
    settings = data.get("settings")
    if settings is None:  # absent or null; `false` or `[]` are not settings
        settings = {}
    if not isinstance(raw_nodes, list):
        problems.append(Problem("invalid_field", "'nodes' must be a list", field="nodes"))
        raw_nodes = []
    if not isinstance(raw_edges, list):
        problems.append(Problem("invalid_field", "'edges' must be a list", field="edges"))
        raw_edges = []
    if not isinstance(settings, dict):
        problems.append(Problem("invalid_field", "'settings' must be an object", field="settings"))
        settings = {}
    problems.extend(_check_settings(settings))

    resolver = PortResolver(registry, presets, _depth)
    # Built by handle (a node's position among those that parsed): an edge finds its two ends with
    # one probe of `index` each and reaches their input maps, consumer lists and dependency lists
    # in lists; the Graph makes its maps by id only if asked. Probes of 100k-entry maps touch
    # memory far apart, which is what made big graphs cost more per node.
    index: dict[str, int] = {}
    specs: list[NodeSpec] = []
    # Ids of nodes that failed to parse: edges to them are not reported again. (Those that parsed
    # are `index`; one set of every id would be another big table to fill and probe per node.)
    rejected: set[str] = set()
    for i, raw in enumerate(raw_nodes):
        if type(raw) is not dict:  # inline: a list of a million non-objects must cost little
            if len(problems) < problems.limit:
                problems.append(Problem("invalid_field", "a node is a JSON object", field=f"nodes[{i}]"))
            else:
                problems.more += 1
            continue
        spec = _parse_node(raw, i, prefix, registry, resolver, index, len(specs), rejected, problems)
        if spec is not None:
            specs.append(spec)
    ins_h: list[dict[str, tuple[str, str]]] = [{} for _ in specs]
    cons_h: list[list[str]] = [[] for _ in specs]
    # A node without inputs shares one empty tuple: sources are often most of a graph.
    deps_h: list[list[int] | tuple[()]] = [()] * len(specs)

    aimed: set[tuple[str, str]] = set()  # inputs some edge points at, even a rejected one
    for i, raw in enumerate(raw_edges):
        if type(raw) is not dict:
            if len(problems) < problems.limit:
                problems.append(Problem("invalid_field", "an edge is a JSON object", field=f"edges[{i}]"))
            else:
                problems.more += 1
            continue
        _parse_edge(raw, i, prefix, index, specs, rejected, ins_h, cons_h, deps_h, problems, aimed)

    bound_full = {(prefix + n, p) for n, p in (bound or ())} | aimed
    for spec, connected in zip(specs, ins_h):
        # An edge only ever fills a declared input, so a node with as many as it declares is done.
        if len(connected) == len(spec.inputs):
            continue
        nid = spec.id
        for port, pspec in spec.inputs.items():
            if not pspec.optional and port not in connected and (nid, port) not in bound_full:
                problems.append(Problem("missing_input", f"required input {port!r} ({pspec.type}) is not connected",
                                        nid, f"inputs.{port}"))

    graph = Graph._by_handle(index, specs, ins_h, cons_h, deps_h, settings=dict(settings))
    # Only a graph with an interface (a subgraph, a preset) needs its nodes by id here.
    nodes = graph.nodes if data.get("inputs") is not None or data.get("outputs") is not None else {}
    iface_params: dict[str, tuple[str, str]] = {}
    iface_in = _parse_interface(data.get("inputs"), "inputs", prefix, nodes, rejected, problems, is_input=True,
                                params_out=iface_params)
    iface_out = _parse_interface(data.get("outputs"), "outputs", prefix, nodes, rejected, problems,
                                 is_input=False)

    order = _order_by_handle(list(index), deps_h, cons_h)
    if order is None:
        nodes, inputs = graph.nodes, graph.inputs
        order = topological_order(nodes, inputs, graph.consumers)
        # Kahn's pass leaves exactly the nodes on or behind a cycle; name only those on one.
        placed = set(order)
        left = [n for n in nodes if n not in placed]
        for cycle in find_cycles(left, lambda n: (src for src, _ in inputs[n].values() if src not in placed)):
            problems.append(Problem("cycle", f"cycle through {', '.join(repr(n) for n in cycle)}",
                                    cycle[0], None, {"cycle": cycle}))
    if problems:
        raise GraphError(problems)
    graph.interface_inputs, graph.interface_outputs, graph.interface_params = iface_in, iface_out, iface_params
    graph.order = order
    return graph


def _order_by_handle(ids: list[str], deps_h: list[Any], cons_h: list[list[str]]) -> list[str] | None:
    """A topological order from the handle lists (Kahn's pass backwards, from the nodes nobody
    consumes), with no probe by id; None when a cycle leaves nodes out."""
    left = [len(c) for c in cons_h]  # consumers not yet placed, one per edge as in deps_h
    backwards = [h for h, n in enumerate(left) if n == 0]
    i = 0
    while i < len(backwards):
        for dep in deps_h[backwards[i]]:
            n = left[dep] - 1
            left[dep] = n
            if n == 0:
                backwards.append(dep)
        i += 1
    if len(backwards) < len(ids):
        return None
    return [ids[h] for h in reversed(backwards)]


def topological_order(nodes: Any, inputs: dict[str, dict[str, tuple[str, str]]],
                      consumers: dict[str, list[str]]) -> list[str]:
    """Kahn's algorithm: inputs before consumers; nodes on or behind a cycle are left out."""
    indegree = {nid: len(ins) for nid, ins in inputs.items()}  # a parsed graph's: in node order
    if len(indegree) != len(nodes):
        indegree = {nid: len(inputs[nid]) for nid in nodes}
    order = [nid for nid, d in indegree.items() if d == 0]
    i = 0
    while i < len(order):
        for dst in consumers[order[i]]:
            left = indegree[dst] - 1
            indegree[dst] = left
            if left == 0:
                order.append(dst)
        i += 1
    return order


def _check_settings(settings: dict[str, Any]) -> list[Problem]:
    out = []
    device = settings.get("device")
    if device is not None and (not isinstance(device, str) or not device):
        out.append(Problem("invalid_field", "must be a device name such as 'cpu' or 'cuda:0'", field="settings.device"))
    seed = settings.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= SEED_MAX):
        out.append(Problem("invalid_field", f"must be an integer from 0 to {SEED_MAX}", field="settings.seed"))
    return out


def _parse_node(
    raw: Any, i: int, prefix: str, registry: NodeRegistry, resolver: PortResolver, index: dict[str, int],
    handle: int, rejected: set[str], problems: list[Problem],
) -> NodeSpec | None:
    """The node's spec, entered in `index` as `handle`; None (and not entered) when it has problems."""
    if not isinstance(raw, dict):
        problems.append(Problem("invalid_field", "a node is a JSON object", field=f"nodes[{i}]"))
        return None
    local = raw.get("id")
    if not isinstance(local, str) or not local:
        problems.append(Problem("invalid_field", "node id must be a non-empty string", field=f"nodes[{i}].id"))
        return None
    nid = prefix + local
    if "/" in local:
        problems.append(Problem("invalid_id", "node ids may not contain '/' (it joins flattened ids)", nid, "id"))
        return None
    # One probe of a table that grows to every node both finds a duplicate and enters the node.
    if nid in rejected or index.setdefault(nid, handle) != handle:
        problems.append(Problem("duplicate_id", f"node id {local!r} is used more than once", nid, "id"))
        return None
    spec = _node_spec(raw, nid, registry, resolver, problems)
    if spec is None:
        del index[nid]
        rejected.add(nid)
    return spec


def _node_spec(raw: dict[str, Any], nid: str, registry: NodeRegistry, resolver: PortResolver,
               problems: list[Problem]) -> NodeSpec | None:
    type_ = raw.get("type")
    nd = registry._defs.get(type_) if isinstance(type_, str) else None
    if nd is None:
        listed = isinstance(type_, str) and len(problems) < MAX_PROBLEMS_LISTED  # suggest where it is read
        problems.append(unknown_type(type_, nid, registry.close_types(type_) if listed else []))
        return None
    raw_params = raw.get("params")
    if raw_params is None:
        raw_params = {}
    if not isinstance(raw_params, dict):
        problems.append(Problem("invalid_field", "params must be an object", nid, "params"))
        return None
    params: dict[str, Any] = {}
    bad = False
    if not raw_params:  # the common case of all defaults
        params = dict(nd.default_params)
    for name in raw_params:
        if name not in nd.params:
            problems.append(Problem("unknown_param", f"{type_} has no param {name!r}", nid, f"params.{name}",
                                    {"known": sorted(nd.params)}))
            bad = True
    for name, pspec in nd.params.items() if raw_params else ():
        if name in raw_params:
            value, reason = pspec.check(raw_params[name])
            if reason:
                problems.append(Problem("invalid_param", reason, nid, f"params.{name}"))
                bad = True
                continue
            params[name] = value
        else:
            params[name] = pspec.default
    if bad:
        return None
    if nd.dynamic_ports is not None:
        ins, outs, port_problems = nd.dynamic_ports(params, resolver, nid)
        if port_problems:
            problems.extend(port_problems)
            return None
        has_lazy = any(p.lazy for p in ins.values())
    else:
        ins, outs, has_lazy = nd.inputs, nd.outputs, nd.has_lazy
    label = raw.get("label")
    return NodeSpec(nid, type_, params, nd, ins, outs, label if isinstance(label, str) else None, has_lazy)


def _parse_edge(
    raw: Any, i: int, prefix: str, index: dict[str, int], specs: list[NodeSpec], rejected: set[str],
    ins_h: list[dict[str, tuple[str, str]]], cons_h: list[list[str]], deps_h: list[Any],
    problems: list[Problem], aimed: set[tuple[str, str]],
) -> None:
    # Hot for big graphs: the valid path does no formatting; messages are built only on failure.
    try:
        source, s_port, target, t_port = raw["source"], raw["source_port"], raw["target"], raw["target_port"]
    except (KeyError, TypeError):
        source = s_port = target = t_port = None
    if not (type(source) is str and type(s_port) is str and type(target) is str and type(t_port) is str
            and source and s_port and target and t_port):
        if not isinstance(raw, dict):
            problems.append(Problem("invalid_field", "an edge is a JSON object", field=f"edges[{i}]"))
            return
        for key in ("source", "source_port", "target", "target_port"):
            value = raw.get(key)
            if not isinstance(value, str) or not value:
                problems.append(Problem("invalid_field", f"{key} must be a non-empty string",
                                        field=f"edges[{i}].{key}"))
                if isinstance(raw.get("target"), str) and isinstance(raw.get("target_port"), str):
                    aimed.add((prefix + raw["target"], raw["target_port"]))
                return
    src, dst = prefix + source, prefix + target
    sh, dh = index.get(src), index.get(dst)
    src_spec = specs[sh] if sh is not None else None
    dst_spec = specs[dh] if dh is not None else None
    s_type = src_spec.outputs.get(s_port) if src_spec is not None else None
    t_spec = dst_spec.inputs.get(t_port) if dst_spec is not None else None
    if s_type is not None and t_spec is not None and (s_type == t_spec.type or types_compatible(s_type, t_spec.type)):
        # The nodes' own id objects, not the concatenated copies: every later dict lookup on
        # these ids then matches by identity, without comparing string contents.
        pair = (src_spec.id, s_port)
        # One probe both finds a second edge into this input and records the first.
        if ins_h[dh].setdefault(t_port, pair) is pair:
            cons_h[sh].append(dst_spec.id)
            deps = deps_h[dh]
            if deps:
                deps.append(sh)
            else:
                deps_h[dh] = [sh]
            return
    aimed.add((dst, t_port))
    for key, nid, spec in (("source", src, src_spec), ("target", dst, dst_spec)):
        if spec is None and nid not in rejected:  # nodes that failed to parse were reported already
            problems.append(Problem("missing_node", f"edge {key} {(source, target)[key == 'target']!r} is not a "
                                    "node of this graph", field=f"edges[{i}].{key}"))
    if src_spec is None or dst_spec is None:
        return
    if s_type is None:
        problems.append(Problem("unknown_port", f"{src_spec.type} has no output {s_port!r}", src,
                                f"outputs.{s_port}", {"known": sorted(src_spec.outputs)}))
    if t_spec is None:
        problems.append(Problem("unknown_port", f"{dst_spec.type} has no input {t_port!r}", dst,
                                f"inputs.{t_port}", {"known": sorted(dst_spec.inputs)}))
    if s_type is None or t_spec is None:
        return
    if not types_compatible(s_type, t_spec.type):
        problems.append(Problem("type_mismatch", f"input {t_port!r} takes {t_spec.type}, but {source!r}."
                                f"{s_port} gives {s_type}", dst, f"inputs.{t_port}",
                                {"expected": t_spec.type, "got": s_type}))
        return
    problems.append(Problem("duplicate_edge", f"input {t_port!r} has more than one incoming edge", dst,
                            f"inputs.{t_port}"))


def _parse_interface(
    raw: Any, key: str, prefix: str, nodes: dict[str, NodeSpec], rejected: set[str], problems: list[Problem], *,
    is_input: bool, params_out: dict[str, tuple[str, str]] | None = None,
) -> dict[str, tuple[str, str]]:
    """Interface entries are `{"node", "port"}`; an input may instead be `{"node", "param"}`, which
    sets that inner param from the block's input (a preset's knob, e.g. a hidden size to Map over)."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        problems.append(Problem("invalid_field", f"'{key}' must be an object of name -> {{node, port}}", field=key))
        return {}
    out = {}
    for name, ref in raw.items():
        where = f"{key}.{name}"
        if is_input and params_out is not None and isinstance(ref, dict) and isinstance(ref.get("param"), str) \
                and isinstance(ref.get("node"), str) and "port" not in ref:
            nid = prefix + ref["node"]
            if nid not in nodes:
                if nid not in rejected:
                    problems.append(Problem("missing_node", f"{ref['node']!r} is not a node of this graph",
                                            field=where))
                continue
            pspec = nodes[nid].definition.params.get(ref["param"])
            if pspec is None or pspec.type not in _PARAM_PORT_TYPES:
                problems.append(Problem("unknown_param", f"{nodes[nid].type} has no settable param "
                                        f"{ref['param']!r}", nid, where))
                continue
            params_out[name] = (nid, ref["param"])
            continue
        if not isinstance(ref, dict) or not isinstance(ref.get("node"), str) or not isinstance(ref.get("port"), str):
            problems.append(Problem("invalid_field", "must be {\"node\": id, \"port\": name}"
                                    + (" or {\"node\": id, \"param\": name}" if is_input else ""), field=where))
            continue
        nid = prefix + ref["node"]
        if nid not in nodes:
            if nid in rejected:  # the node itself failed to parse and was reported
                continue
            problems.append(Problem("missing_node", f"{ref['node']!r} is not a node of this graph", field=where))
            continue
        ports = nodes[nid].inputs if is_input else nodes[nid].outputs
        if ref["port"] not in ports:
            problems.append(Problem("unknown_port", f"{nodes[nid].type} has no {key[:-1]} {ref['port']!r}", nid,
                                    where))
            continue
        out[name] = (nid, ref["port"])
    return out


def find_cycles(node_ids: list[str], deps: Any) -> list[list[str]]:
    """Strongly connected components that contain a cycle (iterative Tarjan, linear time).

    `deps(n)` yields the nodes n depends on. Each returned cycle lists only nodes on a cycle,
    never the nodes merely downstream of one; components come in a stable order.
    """
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    cycles: list[list[str]] = []
    order: dict[str, int] = {}
    counter = 0
    for root in node_ids:
        if root in index:
            continue
        work = [(root, iter(deps(root)))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(deps(w))))
                    advanced = True
                    break
                if w in on_stack and index[w] < low[v]:
                    low[v] = index[w]
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                if low[v] < low[parent]:
                    low[parent] = low[v]
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1 or v in set(deps(v)):
                    if not order:
                        order = {n: i for i, n in enumerate(node_ids)}
                    cycles.append(sorted(comp, key=lambda n: order.get(n, len(order))))
    return cycles
