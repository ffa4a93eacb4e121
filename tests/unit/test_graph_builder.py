"""The graph builder: what `to_dict()` gives, refusals that name their field, checks against a
catalog (the engine's own definitions, the same list `GET codefy/api/nodes` serves), and that a
built graph runs in the real engine."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from codefy_jupyter.engine import run_graph
from codefy_jupyter.engine.registry import default_registry
from codefy_jupyter.client import CodefyError, load_graph
from codefy_jupyter.client.graph_builder import Graph, NodeRef, Port, check_graph

EXAMPLE = Path(__file__).parents[2] / "examples" / "train_mlp.json"


@pytest.fixture(scope="module")
def catalog():
    reg = default_registry()
    return {"nodes": reg.definitions(), "catalog": reg.catalog()}


def test_add_connect_and_settings_give_the_engines_graph_json():
    g = Graph(seed=7, device="cpu")
    k = g.add("Float", value=2)
    s = g.add("Scale", x=k["value"], factor=3, label="triple")
    s2 = g.add("Scale", id="again")
    g.connect(s["y"], s2["x"])
    assert (k.id, s.id, s2.id) == ("float", "scale", "again")
    assert g.to_dict() == {
        "nodes": [{"id": "float", "type": "Float", "params": {"value": 2}},
                  {"id": "scale", "type": "Scale", "params": {"factor": 3}, "label": "triple"},
                  {"id": "again", "type": "Scale", "params": {}}],
        "edges": [{"source": "float", "source_port": "value", "target": "scale", "target_port": "x"},
                  {"source": "scale", "source_port": "y", "target": "again", "target_port": "x"}],
        "settings": {"device": "cpu", "seed": 7},
    }
    assert "settings" not in Graph().to_dict()


def test_generated_ids_do_not_collide_and_refs_find_nodes():
    g = Graph()
    ids = [g.add("Scale").id for _ in range(3)]
    g.add("Float", id="scale_4")
    assert ids == ["scale", "scale_2", "scale_3"] and g.add("Scale").id == "scale_5"
    assert g["scale_2"] == NodeRef(g, "scale_2") and g["scale_2"].type == "Scale"
    assert "scale" in g and len(g) == 5 and [n.id for n in g][-1] == "scale_5"
    assert repr(g["scale"]["y"]) == "scale['y']" and isinstance(g["scale"]["y"], Port)


def test_set_changes_params_and_reconnecting_an_input_replaces_its_edge():
    g = Graph()
    a, b = g.add("Float", value=1), g.add("Float", value=2)
    s = g.add("Scale", x=a["value"])
    s.set(factor=5, x=b["value"])
    assert s.params == {"factor": 5}
    assert g.to_dict()["edges"] == [{"source": "float_2", "source_port": "value", "target": "scale", "target_port": "x"}]
    g.remove(b)
    assert g.to_dict()["edges"] == [] and "float_2" not in g


def test_params_that_clash_with_adds_own_keywords_go_in_params():
    g = Graph()
    n = g.add("Thing", "n1", label="shown", params={"id": 3, "label": "a param"})
    assert g.to_dict()["nodes"][0] == {"id": "n1", "type": "Thing", "params": {"id": 3, "label": "a param"},
                                       "label": "shown"}
    assert n.params == {"id": 3, "label": "a param"}


@pytest.mark.parametrize("call, error, words", [
    (lambda g: g.add(""), TypeError, "type:"),
    (lambda g: g.add("Float", id=""), TypeError, "id:"),
    (lambda g: g.add("Float", id="a/b"), ValueError, "id: 'a/b' contains '/'"),
    (lambda g: g.add("Float", id="k"), ValueError, "id: this graph already has a node 'k'"),
    (lambda g: g.add("Scale", x=g["k"]), TypeError, "x: pass one of node 'k''s ports"),
    (lambda g: g.connect(g["k"], g["k"]["value"]), TypeError, "source: expected a port"),
    (lambda g: g.connect(g["k"]["value"], "s.x"), TypeError, "target: expected a port"),
    (lambda g: g.connect(g["k"]["value"], g["k"]["x"]), ValueError, "cannot feed itself"),
    (lambda g: g.connect(Graph().add("Float")["value"], g["k"]["x"]), ValueError, "source: node 'float' belongs to another Graph"),
    (lambda g: g["k"][""], TypeError, "a port name is a non-empty string"),
    (lambda g: g["nope"], KeyError, "no node 'nope' in this graph (nodes: k)"),
    (lambda g: g.remove("nope"), KeyError, "no node 'nope'"),
])
def test_refusals_name_the_field(call, error, words):
    g = Graph()
    g.add("Float", id="k")
    with pytest.raises(error) as info:
        call(g)
    assert words in str(info.value)
    assert [n.id for n in g] == ["k"]  # a refused add leaves nothing behind


def test_a_refused_add_leaves_the_graph_as_it_was():
    g = Graph()
    k = g.add("Float")
    with pytest.raises(ValueError):
        g.add("Scale", id="s", x=Graph().add("Float")["value"])
    assert "s" not in g and g.to_dict()["edges"] == []
    with pytest.raises(ValueError, match="removed from this graph"):
        g.remove(k).connect(k["value"], g.add("Scale")["x"])


def test_from_dict_round_trips_the_example_and_refuses_malformed_json():
    data = json.loads(EXAMPLE.read_text())
    g = Graph.from_dict(data)
    assert g.to_dict() == {**data, "nodes": [{k: v for k, v in n.items()} for n in data["nodes"]]}
    g["train"].set(epochs=1)
    assert g.to_dict()["nodes"][6]["params"] == {"epochs": 1} and data["nodes"][6]["params"] == {"epochs": 10}
    with pytest.raises(ValueError, match="nodes: a graph is an object"):
        Graph.from_dict({"edges": []})
    with pytest.raises(ValueError, match=r"nodes\[0\]"):
        Graph.from_dict({"nodes": [{"id": "a"}]})
    with pytest.raises(ValueError, match=r"edges\[0\]: .*no node 'b'"):
        Graph.from_dict({"nodes": [{"id": "a", "type": "Float"}],
                         "edges": [{"source": "a", "source_port": "value", "target": "b", "target_port": "x"}]})


def test_validate_accepts_a_good_graph_in_every_catalog_form(catalog):
    g = Graph.from_dict(json.loads(EXAMPLE.read_text()))
    assert g.validate(catalog) is g
    assert g.validate(catalog["nodes"]) is g
    with pytest.raises(TypeError, match="catalog:"):
        g.validate(42)


def test_validate_lists_every_unknown_name_with_its_node_and_field(catalog):
    g = Graph()
    k = g.add("Float", value=1, vaule=2)
    g.add("Scael", x=k["value"])
    g.add("Scale", x=k["valeu"], id="s")
    g.connect(k["value"], g.add("Preset", preset="mlp_member")["anything"])  # dynamic ports: the server's call
    with pytest.raises(CodefyError) as info:
        g.validate(catalog)
    err = info.value
    assert err.code == "invalid_graph" and err.field == "nodes.float.params.vaule"
    assert [(p["node_id"], p["field"], p["code"]) for p in err.params["problems"]] == [
        ("float", "params.vaule", "unknown_param"),
        ("scael", "type", "unknown_node_type"),
        ("float", "outputs.valeu", "unknown_output"),
    ]
    text = str(err)
    assert text.startswith("graph has 3 problems:")
    assert "unknown node type 'Scael'; did you mean 'Scale'?" in text
    assert "Float has no output 'valeu' (outputs: value)" in text


def test_check_graph_names_unknown_inputs(catalog):
    defs = {d["type"]: d for d in catalog["nodes"]}
    g = Graph()
    g.add("Scale", y=g.add("Float")["value"])
    assert [(p["node_id"], p["field"]) for p in check_graph(g.to_dict(), defs)] == [("scale", "inputs.y")]


def test_a_built_graph_runs_in_the_engine_and_the_client_takes_it():
    g = Graph(seed=3)
    s = g.add("Scale", x=g.add("Float", value=2)["value"], factor=3)
    assert load_graph(g) == g.to_dict()
    result = run_graph(g.to_dict(), seed=g.seed)
    assert result.status == "succeeded" and result.outputs[s.id]["y"] == 6


def test_importing_the_package_stays_light():
    code = ("import sys, codefy_jupyter\n"
            "assert 'IPython' not in sys.modules and 'tornado' not in sys.modules, sorted(sys.modules)\n"
            "from codefy_jupyter import Graph\n"
            "assert Graph().add('Float').id == 'float'\n"
            "assert callable(codefy_jupyter.load_ipython_extension)\n"
            "assert 'IPython' not in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
