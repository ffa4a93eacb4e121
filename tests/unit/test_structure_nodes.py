"""Subgraph, Preset and Map: runtime expansion with flattened ids, interfaces, and their refusals."""

from __future__ import annotations

import json

import pytest

from codefy_jupyter.engine import GraphError, PresetLibrary, default_registry, run_graph, validate_graph


def edge(s, sp, t, tp):
    return {"source": s, "source_port": sp, "target": t, "target_port": tp}


TRIPLE = {  # x -> x*3 + 1
    "nodes": [{"id": "times", "type": "Scale", "params": {"factor": 3}},
              {"id": "one", "type": "Float", "params": {"value": 1}},
              {"id": "plus", "type": "Add"}],
    "edges": [edge("times", "y", "plus", "a"), edge("one", "value", "plus", "b")],
    "inputs": {"x": {"node": "times", "port": "x"}, "factor": {"node": "times", "param": "factor"}},
    "outputs": {"y": {"node": "plus", "port": "result"}},
}


@pytest.fixture
def presets(tmp_path):
    (tmp_path / "triple.json").write_text(json.dumps(TRIPLE))
    (tmp_path / "broken.json").write_text("{not json")
    (tmp_path / "loop.json").write_text(json.dumps({"nodes": [{"id": "me", "type": "Preset",
                                                                "params": {"preset": "loop"}}]}))
    return PresetLibrary([tmp_path], include_env=False)


def run(graph, presets, **kw):
    return run_graph(graph, presets=presets, keep_outputs="all", **kw)


def test_subgraph_expands_inline_with_flattened_ids(presets):
    graph = {"nodes": [{"id": "k", "type": "Float", "params": {"value": 2}},
                       {"id": "block", "type": "Subgraph", "params": {"graph": TRIPLE}}],
             "edges": [edge("k", "value", "block", "x")]}
    result = run(graph, presets)
    assert result.ok, result.error
    assert result.outputs["block"] == {"y": 7.0}
    assert result.outputs["block/times"] == {"y": 6.0}
    assert {"block/times", "block/one", "block/plus", "block"} <= set(result.executed)


def test_interface_param_input_sets_the_inner_param(presets):
    graph = {"nodes": [{"id": "k", "type": "Float", "params": {"value": 2}},
                       {"id": "f", "type": "Float", "params": {"value": 10}},
                       {"id": "p", "type": "Preset", "params": {"preset": "triple"}}],
             "edges": [edge("k", "value", "p", "x"), edge("f", "value", "p", "factor")]}
    result = run(graph, presets)
    assert result.outputs["p"] == {"y": 21.0}


def test_map_runs_the_preset_once_per_item_in_order(presets):
    graph = {"nodes": [{"id": "items", "type": "List", "params": {"values": [1, 2, 3, 4]}},
                       {"id": "m", "type": "Map", "params": {"preset": "triple", "item_input": "x", "output": "y"}},
                       {"id": "avg", "type": "Mean"}],
             "edges": [edge("items", "values", "m", "items"), edge("m", "results", "avg", "values")]}
    result = run(graph, presets)
    assert result.ok, result.error
    assert result.outputs["m"] == {"results": [4.0, 7.0, 10.0, 13.0]}
    assert result.outputs["avg"]["mean"] == 8.5
    assert result.outputs["m/2/times"] == {"y": 9.0}  # map/item/inner
    assert "m/0" in result.executed and "m/3/plus" in result.executed


def test_map_shared_input_reaches_every_member(presets):
    graph = {"nodes": [{"id": "items", "type": "List", "params": {"values": [1, 2]}},
                       {"id": "f", "type": "Float", "params": {"value": 5}},
                       {"id": "m", "type": "Map", "params": {"preset": "triple", "item_input": "x", "output": "y",
                                                             "shared_input": "factor"}}],
             "edges": [edge("items", "values", "m", "items"), edge("f", "value", "m", "shared")]}
    assert run(graph, presets).outputs["m"] == {"results": [6.0, 11.0]}


def test_map_over_an_empty_list_gives_an_empty_list(presets):
    graph = {"nodes": [{"id": "items", "type": "List", "params": {"values": []}},
                       {"id": "m", "type": "Map", "params": {"preset": "triple", "item_input": "x", "output": "y"}}],
             "edges": [edge("items", "values", "m", "items")]}
    assert run(graph, presets).outputs["m"] == {"results": []}


def test_a_bad_item_fails_the_member_with_its_flattened_id(presets):
    graph = {"nodes": [{"id": "items", "type": "List", "params": {"values": [1, 1000]}},
                       {"id": "m", "type": "Map", "params": {"preset": "triple", "item_input": "factor",
                                                             "output": "y", "shared_input": "x"}},
                       {"id": "k", "type": "Float", "params": {"value": 1}}],
             "edges": [edge("items", "values", "m", "items"), edge("k", "value", "m", "shared")]}
    result = run(graph, presets)
    assert result.status == "failed"
    assert result.error.node_id == "m/1" and result.error.code == "invalid_expansion"
    assert "m/1/times" in result.error.message and "at most 100" in result.error.message


@pytest.mark.parametrize("node,code,field", [
    ({"id": "p", "type": "Preset", "params": {"preset": "nope"}}, "unknown_preset", "params.preset"),
    ({"id": "p", "type": "Preset", "params": {"preset": "broken"}}, "unknown_preset", "params.preset"),
    ({"id": "p", "type": "Preset", "params": {"preset": "loop"}}, "nesting_too_deep", "params.preset"),
    ({"id": "m", "type": "Map", "params": {"preset": "triple", "item_input": "nope", "output": "y"}},
     "unknown_port", "params.item_input"),
    ({"id": "m", "type": "Map", "params": {"preset": "triple", "item_input": "x", "output": "z"}},
     "unknown_port", "params.output"),
])
def test_structure_refusals_name_the_field(presets, node, code, field):
    problems = validate_graph({"nodes": [node]}, default_registry(), presets)
    assert (problems[0].code, problems[0].field) == (code, field)
    assert problems[0].node_id.startswith(node["id"])


def test_unconnected_required_interface_input_is_reported(presets):
    problems = validate_graph({"nodes": [{"id": "p", "type": "Preset", "params": {"preset": "triple"}}]},
                              default_registry(), presets)
    assert [(p.code, p.node_id, p.field) for p in problems] == [("missing_input", "p", "inputs.x")]


def test_builtin_preset_is_found_without_configuration():
    assert "mlp_member" in PresetLibrary(include_env=False).names()


def test_presets_dir_from_the_environment(tmp_path, monkeypatch):
    (tmp_path / "mine.json").write_text(json.dumps(TRIPLE))
    monkeypatch.setenv("CODEFY_PRESETS_DIR", str(tmp_path))
    assert "mine" in PresetLibrary().names()


def test_graph_error_for_inner_problems_is_raised_before_running(presets):
    inner = {**TRIPLE, "nodes": TRIPLE["nodes"] + [{"id": "bad", "type": "Missing"}]}
    with pytest.raises(GraphError) as info:
        run({"nodes": [{"id": "b", "type": "Subgraph", "params": {"graph": inner}}]}, presets)
    assert [(p.code, p.node_id) for p in info.value.problems] == [("unknown_type", "b/bad")]
