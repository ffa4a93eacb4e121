"""Submit bodies: 422 with the failing field path for anything that does not fit the schema."""

from __future__ import annotations

import pytest

from codefy_jupyter.core.runs.requests import SchemaError, Target, parse_submit

GRAPH = {"nodes": [], "edges": []}


def test_a_minimal_body():
    req = parse_submit({"graph": GRAPH})
    assert req.graph == GRAPH and req.name is None
    assert req.options.lane == "queued" and req.options.seed is None and not req.options.seed_given


def test_every_option():
    req = parse_submit({"graph": GRAPH, "name": "n", "options": {
        "device": "cuda", "seed": 7, "deterministic": True, "record_outputs": True, "lane": "interactive",
        "session": "s1", "target": {"worker": "local", "devices": ["cuda:0", "cuda:1"]}}})
    o = req.options
    assert (o.device, o.seed, o.seed_given, o.deterministic, o.record_outputs, o.lane, o.session) == (
        "cuda", 7, True, True, True, "interactive", "s1")
    assert o.target == Target("local", ("cuda:0", "cuda:1"))


def test_null_seed_is_an_explicit_unseeded_run():
    o = parse_submit({"graph": GRAPH, "options": {"seed": None}}).options
    assert o.seed is None and o.seed_given


def test_an_integer_written_with_a_zero_fraction_is_that_integer():
    # JSON Schema's `integer` admits 2009.0 (schemathesis sends it): it is 2009, not a refusal.
    o = parse_submit({"graph": GRAPH, "options": {"seed": 2009.0, "cpu_threads": 2.0}}).options
    assert (o.seed, o.cpu_threads) == (2009, 2) and type(o.seed) is int and type(o.cpu_threads) is int


@pytest.mark.parametrize("body,field", [
    ([], ""),
    ({}, "graph"),
    ({"graph": []}, "graph"),
    ({"graph": GRAPH, "extra": 1}, "extra"),
    ({"graph": GRAPH, "name": 3}, "name"),
    ({"graph": GRAPH, "name": "x" * 201}, "name"),
    ({"graph": GRAPH, "options": []}, "options"),
    ({"graph": GRAPH, "options": {"colour": "red"}}, "options.colour"),
    ({"graph": GRAPH, "options": {"device": 0}}, "options.device"),
    ({"graph": GRAPH, "options": {"seed": "1"}}, "options.seed"),
    ({"graph": GRAPH, "options": {"seed": True}}, "options.seed"),
    ({"graph": GRAPH, "options": {"seed": -1}}, "options.seed"),
    ({"graph": GRAPH, "options": {"seed": 2**32}}, "options.seed"),
    ({"graph": GRAPH, "options": {"seed": 7.5}}, "options.seed"),
    ({"graph": GRAPH, "options": {"deterministic": "yes"}}, "options.deterministic"),
    ({"graph": GRAPH, "options": {"lane": "fast"}}, "options.lane"),
    ({"graph": GRAPH, "options": {"session": 5}}, "options.session"),
    ({"graph": GRAPH, "options": {"target": "gpu-box"}}, "options.target"),
    ({"graph": GRAPH, "options": {"target": {"where": 1}}}, "options.target.where"),
    ({"graph": GRAPH, "options": {"target": {"devices": "cuda:0"}}}, "options.target.devices"),
    ({"graph": GRAPH, "options": {"target": {"devices": ["cuda:0", 1]}}}, "options.target.devices[1]"),
])
def test_refusals_name_the_field(body, field):
    with pytest.raises(SchemaError) as info:
        parse_submit(body)
    assert info.value.field == field
    assert info.value.to_dict()["params"] == {"field": field}
    assert info.value.status == 422
