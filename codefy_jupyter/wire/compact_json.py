"""Compact JSON text (`separators=(",", ":")`, `ensure_ascii=False`), encoded the fast way.

`json.dumps(obj, separators=..., ensure_ascii=False)` builds a JSONEncoder and then a C encoder on
every call, which costs as much as encoding a small object (a protocol frame, an event payload).
Worker frames go through this once on the agent (spool + socket) and their payloads once more on
the control plane (the run's log), tens of thousands of times a second, so the C encoder is built
once here and reused. The text is exactly `json.dumps`'s (checked at import; without the C encoder,
or if it ever behaves differently, `json.dumps` is used).

Without circular-reference markers (a reused marker table could hold stale ids after an error):
a cyclic structure raises RecursionError or ValueError instead of ValueError alone; nothing that
is encoded here (JSON that was parsed, events built by run_events) can be cyclic.
"""

from __future__ import annotations

import json
from typing import Any, Callable

try:
    from json.encoder import c_make_encoder, encode_basestring
except ImportError:  # pragma: no cover - CPython always has _json
    c_make_encoder = None


def _not_serializable(o: Any) -> Any:
    raise TypeError(f"Object of type {o.__class__.__name__} is not JSON serializable")


def _reference(allow_nan: bool) -> Callable[[Any], str]:
    return json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=allow_nan).encode


def _fast(allow_nan: bool) -> Callable[[Any], str]:
    reference = _reference(allow_nan)
    if c_make_encoder is None:
        return reference
    try:
        chunks = c_make_encoder(None, _not_serializable, encode_basestring, None, ":", ",", False, False, allow_nan)
    except Exception:  # pragma: no cover - another Python's private signature
        return reference

    def dumps(obj: Any) -> str:
        if isinstance(obj, str):  # as JSONEncoder.encode: a bare string is not a container
            return reference(obj)
        return "".join(chunks(obj, 0))

    sample = {"a": [1, 2.5, None, True, "é\n\"x\""], "b": {"c": -0.0, "d": 10**20}, "": []}
    try:
        if dumps(sample) != reference(sample):  # pragma: no cover
            return reference
    except Exception:  # pragma: no cover
        return reference
    return dumps


# `dumps(obj) -> str`: compact, non-ASCII kept; NaN/Infinity written as JavaScript does.
dumps = _fast(allow_nan=True)
# The same, refusing NaN and Infinity (ValueError): strict JSON, as stored payloads must be.
dumps_strict = _fast(allow_nan=False)

__all__ = ["dumps", "dumps_strict"]
