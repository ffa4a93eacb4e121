"""Graph validation: every problem is listed, each with its node id and field."""

from __future__ import annotations

import pytest

from codefy_jupyter.engine import GraphError, NodeRegistry, lazy, optional, param, parse_graph, validate_graph
from codefy_jupyter.engine.presets import PresetLibrary


@pytest.fixture
def reg() -> NodeRegistry:
    r = NodeRegistry()

    @r.node("Num", outputs={"value": "float"}, params={"value": param.float(0.0)})
    def num(ctx, value):
        return {"value": value}

    @r.node("Count", outputs={"n": "int"}, params={"n": param.int(1, min=0, max=10)})
    def count(ctx, n):
        return {"n": n}

    @r.node("Text", outputs={"s": "string"}, params={"s": param.string("")})
    def text(ctx, s):
        return {"s": s}

    @r.node("Scale", inputs={"x": "float"}, outputs={"y": "float"},
            params={"factor": param.float(1.0, min=0, max=100),
                    "mode": param.select("mul", ["mul", "div"]),
                    "on": param.bool(True), "key": param.secret("")})
    def scale(ctx, x, factor, mode, on, key):
        return {"y": x * factor}

    @r.node("Maybe", inputs={"x": optional("float"), "y": lazy("float")}, outputs={"z": "float"})
    def maybe(ctx, x, y):
        return {"z": x or 0.0}

    return r


def edge(s, sp, t, tp):
    return {"source": s, "source_port": sp, "target": t, "target_port": tp}


def problems_of(data, reg):
    with pytest.raises(GraphError) as info:
        parse_graph(data, reg, PresetLibrary(include_env=False))
    return [(p.code, p.node_id, p.field) for p in info.value.problems]


def test_valid_graph_parses_with_defaults_filled(reg):
    g = parse_graph({"nodes": [{"id": "a", "type": "Num", "params": {"value": 2}}, {"id": "s", "type": "Scale"}],
                     "edges": [edge("a", "value", "s", "x")]}, reg)
    assert g.nodes["a"].params == {"value": 2.0}
    assert g.nodes["s"].params == {"factor": 1.0, "mode": "mul", "on": True, "key": ""}
    assert g.inputs["s"] == {"x": ("a", "value")}
    assert g.output_nodes() == ["s"]


def test_every_problem_is_reported_at_once(reg):
    data = {
        "nodes": [
            {"id": "a", "type": "Num", "params": {"value": "high"}},     # wrong param type
            {"id": "a", "type": "Num"},                                # duplicate id
            {"id": "u", "type": "Unknown"},                            # unknown type
            {"id": "s", "type": "Scale", "params": {"factor": 1000, "mode": "pow", "colour": 1}},
            {"id": "t", "type": "Scale"},
            {"id": "lonely", "type": "Scale"},                         # x never connected
            {"id": "w", "type": "Text"},
            {"id": "v", "type": "Scale"},
        ],
        "edges": [
            edge("ghost", "value", "t", "x"),                          # missing source node
            edge("w", "nope", "v", "x"),                               # unknown source port
            edge("w", "s", "v", "missing"),                            # unknown target port
            edge("w", "s", "v", "x"),                                  # string into float
        ],
    }
    found = problems_of(data, reg)
    assert ("invalid_param", "a", "params.value") in found
    assert ("duplicate_id", "a", "id") in found
    assert ("unknown_type", "u", "type") in found
    assert ("invalid_param", "s", "params.factor") in found
    assert ("invalid_param", "s", "params.mode") in found
    assert ("unknown_param", "s", "params.colour") in found
    assert ("missing_node", None, "edges[0].source") in found
    assert ("unknown_port", "w", "outputs.nope") in found
    assert ("unknown_port", "v", "inputs.missing") in found
    assert ("type_mismatch", "v", "inputs.x") in found
    assert ("missing_input", "lonely", "inputs.x") in found
    assert len(found) == 11  # a rejected edge is not also reported as a missing input


@pytest.mark.parametrize("params,field,needle", [
    ({"n": 11}, "params.n", "at most 10"),
    ({"n": -1}, "params.n", "at least 0"),
    ({"n": 1.5}, "params.n", "integer"),
    ({"n": True}, "params.n", "integer"),
])
def test_int_param_bounds_and_type(reg, params, field, needle):
    with pytest.raises(GraphError) as info:
        parse_graph({"nodes": [{"id": "c", "type": "Count", "params": params}]}, reg)
    (p,) = info.value.problems
    assert (p.node_id, p.field) == ("c", field) and needle in p.message


def test_int_into_float_is_allowed_but_float_into_int_is_not(reg):
    @reg.node("NeedsInt", inputs={"n": "int"}, outputs={"n": "int"})
    def needs_int(ctx, n):
        return {"n": n}

    parse_graph({"nodes": [{"id": "c", "type": "Count"}, {"id": "s", "type": "Scale"}],
                 "edges": [edge("c", "n", "s", "x")]}, reg)
    found = problems_of({"nodes": [{"id": "a", "type": "Num"}, {"id": "i", "type": "NeedsInt"}],
                         "edges": [edge("a", "value", "i", "n")]}, reg)
    assert found == [("type_mismatch", "i", "inputs.n")]


def test_two_edges_into_one_input_are_refused(reg):
    found = problems_of({"nodes": [{"id": "a", "type": "Num"}, {"id": "b", "type": "Num"}, {"id": "s", "type": "Scale"}],
                         "edges": [edge("a", "value", "s", "x"), edge("b", "value", "s", "x")]}, reg)
    assert found == [("duplicate_edge", "s", "inputs.x")]


def test_optional_and_lazy_inputs_may_stay_unconnected(reg):
    assert validate_graph({"nodes": [{"id": "m", "type": "Maybe"}]}, reg) == []


def test_cycle_names_only_the_cycle_not_what_is_downstream(reg):
    data = {"nodes": [{"id": n, "type": "Scale"} for n in ["a", "b", "c", "down1", "down2"]],
            "edges": [edge("a", "y", "b", "x"), edge("b", "y", "c", "x"), edge("c", "y", "a", "x"),
                      edge("c", "y", "down1", "x"), edge("down1", "y", "down2", "x")]}
    with pytest.raises(GraphError) as info:
        parse_graph(data, reg)
    (p,) = info.value.problems
    assert p.code == "cycle"
    assert p.params["cycle"] == ["a", "b", "c"]
    assert "down1" not in p.message and "down2" not in p.message


def test_two_separate_cycles_are_two_problems(reg):
    data = {"nodes": [{"id": n, "type": "Scale"} for n in ["a", "b", "c", "d"]],
            "edges": [edge("a", "y", "b", "x"), edge("b", "y", "a", "x"),
                      edge("c", "y", "d", "x"), edge("d", "y", "c", "x")]}
    with pytest.raises(GraphError) as info:
        parse_graph(data, reg)
    assert [p.params["cycle"] for p in info.value.problems] == [["a", "b"], ["c", "d"]]


@pytest.mark.parametrize("data,code,field", [
    ([], "invalid_graph", None),
    ({"nodes": {}}, "invalid_field", "nodes"),
    ({"nodes": [], "edges": {}}, "invalid_field", "edges"),
    ({"nodes": ["x"]}, "invalid_field", "nodes[0]"),
    ({"nodes": [{"type": "Num"}]}, "invalid_field", "nodes[0].id"),
    ({"nodes": [{"id": "a/b", "type": "Num"}]}, "invalid_id", "id"),
    ({"nodes": [], "settings": {"seed": -1}}, "invalid_field", "settings.seed"),
    ({"nodes": [], "settings": {"seed": 2**32}}, "invalid_field", "settings.seed"),
    ({"nodes": [], "settings": {"device": 3}}, "invalid_field", "settings.device"),
    ({"nodes": [], "edges": [{"source": "a"}]}, "invalid_field", "edges[0].source_port"),
])
def test_malformed_structure_names_the_field(reg, data, code, field):
    with pytest.raises(GraphError) as info:
        parse_graph(data, reg)
    assert [(p.code, p.field) for p in info.value.problems][0] == (code, field)


def test_graph_error_renders_every_problem_and_serialises(reg):
    with pytest.raises(GraphError) as info:
        parse_graph({"nodes": [{"id": "u", "type": "Nope"}, {"id": "v", "type": "Nada"}]}, reg)
    text = str(info.value)
    assert "2 problems" in text and "'Nope'" in text and "'Nada'" in text
    body = info.value.to_dict()
    assert body["code"] == "invalid_graph"
    assert [p["node_id"] for p in body["params"]["problems"]] == ["u", "v"]


def test_subgraph_problems_use_flattened_ids():
    from codefy_jupyter.engine import default_registry

    inner = {"nodes": [{"id": "k", "type": "Float", "params": {"value": "x"}}], "edges": [],
             "outputs": {"out": {"node": "k", "port": "value"}}}
    with pytest.raises(GraphError) as info:
        parse_graph({"nodes": [{"id": "block", "type": "Subgraph", "params": {"graph": inner}}]}, default_registry())
    (p,) = info.value.problems
    assert (p.node_id, p.field) == ("block/k", "params.value")
