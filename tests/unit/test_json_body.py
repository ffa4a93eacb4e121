"""server/json_body.py: the sliced parser reads exactly what json.loads reads, holds the GIL only in
short calls (the pause that gives other threads: benchmarks/request_cost.py), and refuses what
later code could not handle, naming the field."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codefy_jupyter.server import json_body
from codefy_jupyter.server.json_body import BadJSON, loads
from codefy_jupyter.core.runs.requests import SchemaError

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
documents = st.recursive(scalars, lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner), max_leaves=60)


@settings(max_examples=150, deadline=None)
@given(documents)
def test_the_sliced_parser_reads_what_json_loads_reads(doc):
    text = json.dumps(doc)
    parser = json_body._Slices(text, json_body.MAX_DEPTH)
    parser.chunk = 8  # tiny windows: every path of the descent is taken
    value, end = parser.value(0, 0, "")
    assert end == len(text) and value == json.loads(text)
    assert loads(text) == json.loads(text)


def test_a_large_document_is_sliced_and_equal(monkeypatch):
    monkeypatch.setattr(json_body, "INLINE_CHARS", 1000)
    doc = {"graph": {"nodes": [{"id": f"n{i}", "type": "T", "params": {"s": "a,]},\"x", "v": [i, {"k": [1, 2]}]}}
                               for i in range(3000)], "edges": [1, "x,y", None] * 500}}
    assert loads(json.dumps(doc).encode()) == doc


@pytest.mark.parametrize("raw, position", [(b"[1, 2", 5), (b'{"a": 1} x', 9), (b"", 0), (b"[1,]", 3)])
def test_syntax_errors_are_400_with_their_position(raw, position):
    with pytest.raises(BadJSON) as refused:
        loads(raw)
    assert refused.value.status == 400 and refused.value.to_dict()["params"]["position"] == position


def test_nan_infinity_and_invalid_utf8_are_not_json():
    for raw in (b"[NaN]", b'{"x": Infinity}', b"[-Infinity]", b'"\xed\xa0\x80"', b"\xff"):
        with pytest.raises(BadJSON):
            loads(raw)


@pytest.mark.parametrize("raw, field", [
    (b'{"name": "\\ud800"}', "name"),
    (b'{"graph": {"nodes": [{"id": "a\\udc00b"}]}}', "graph.nodes[0].id"),
    (b'{"graph": {"nodes": [{"id": "a", "params": {"text": ["ok", "\\udbff"]}}]}}', "graph.nodes[0].params.text[1]"),
])
def test_a_lone_surrogate_is_refused_naming_its_field(raw, field):
    with pytest.raises(SchemaError) as refused:
        loads(raw)
    assert refused.value.status == 422 and refused.value.field == field


def test_paired_surrogates_and_an_escaped_backslash_are_fine():
    assert loads(b'{"e": "\\ud83d\\ude00", "s": "\\\\ud800"}') == {"e": "\U0001F600", "s": "\\ud800"}


@pytest.mark.parametrize("levels", [257, 990, 5000, 100_000])
def test_deep_nesting_is_refused_with_the_path(levels):
    raw = '{"graph": {"nodes": ' + "[" * levels + "]" * levels + "}}"
    with pytest.raises(SchemaError) as refused:
        loads(raw)
    assert refused.value.field.startswith("graph.nodes[0][0]") and "nested deeper than 256" in str(refused.value)
    loads('{"graph": {"nodes": ' + "[" * 200 + "]" * 200 + "}}")  # deep enough for any real graph


def test_parsing_a_large_body_hands_the_c_scanner_only_short_pieces(monkeypatch):
    """The issue's body (10 MB of `[1, 1, ...]`): the GIL is held only inside C scanner calls, so
    the longest hold is the most text one call reads. Each reads at most a window (json.loads
    reads all 10 MB in one). The pause this gives other threads is measured in
    benchmarks/request_cost.py, not here."""
    raw = ('{"graph": {"nodes": [' + ",".join(["1"] * 5_000_000) + "]}}").encode()
    real = json_body._scan_once
    read: list[int] = []

    def counting(text: str, i: int):
        try:
            value, end = real(text, i)
        except StopIteration as err:
            read.append(err.value - i)
            raise
        except json.JSONDecodeError as err:
            read.append(err.pos - i)
            raise
        read.append(end - i)
        return value, end

    monkeypatch.setattr(json_body, "_scan_once", counting)
    value = loads(raw)
    assert value["graph"]["nodes"] == [1] * 5_000_000
    assert len(read) > len(raw) // json_body.WINDOW  # sliced: many calls, not one
    # A chunk candidate is the window's text plus the opener and the closer put around it.
    assert max(read) <= json_body.WINDOW + 2, f"one C call read {max(read)} characters"
    assert sum(read) >= len(raw) - 100  # and together they read the whole document


def test_a_window_past_the_end_of_a_nested_array_loses_nothing():
    """Twelve nodes of 20,000-value lists (1.5 MB): a chunk window inside one node's list reached
    past that list's end into the next node's, and the cut parsed as the list's tail alone, so the
    nodes between were dropped."""
    nodes = [{"id": f"v{i}", "type": "List", "params": {"values": [j + i for j in range(20_000)]}} for i in range(12)]
    raw = json.dumps({"graph": {"nodes": nodes, "edges": []}})
    assert len(raw) > 1_000_000
    assert loads(raw) == json.loads(raw)
