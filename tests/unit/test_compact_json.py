"""compact_json writes exactly what json.dumps writes with the same options."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codefy_jupyter.wire import compact_json

_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4), max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(value=_values)
def test_the_same_text_as_json_dumps(value):
    assert compact_json.dumps(value) == json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    try:
        expected = json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except ValueError:
        with pytest.raises(ValueError):
            compact_json.dumps_strict(value)
    else:
        assert compact_json.dumps_strict(value) == expected


def test_what_json_cannot_hold_is_refused_as_json_dumps_does():
    with pytest.raises(TypeError, match="not JSON serializable"):
        compact_json.dumps({"a": object()})
    with pytest.raises(ValueError, match="Out of range float"):
        compact_json.dumps_strict([float("nan")])
    assert compact_json.dumps({1: "x", None: 2}) == '{"1":"x","null":2}'
