"""Pure builders for the events of a run's log: engine callbacks in, (type, payload) out.

No I/O and no reference to the run service, so a run subprocess on a worker can import this
module and produce byte-for-byte the same events as the control plane. The sink that receives
these assigns the per-run `seq`, persists and fans out.

Vocabulary. Written by the control plane around every run: `execution_start`, then exactly one
closing event, `execution_complete` (succeeded), `execution_error` (failed) or
`execution_stopped` (cancelled or interrupted). Written for what happens inside it:
`node_status`, `inner_node_status` (nodes inside blocks, ids `block/inner`), `progress`,
`inner_progress`, `execution_cached`, `metric`, `artifact`, `run_warning`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .compact_json import dumps_strict

EXECUTION_START = "execution_start"
EXECUTION_COMPLETE = "execution_complete"
EXECUTION_ERROR = "execution_error"
EXECUTION_STOPPED = "execution_stopped"
CLOSING = frozenset({EXECUTION_COMPLETE, EXECUTION_ERROR, EXECUTION_STOPPED})

# Engine event name -> log event type.
_ENGINE_TYPES = {
    "node_status": "node_status",
    "inner_node_status": "inner_node_status",
    "progress": "progress",
    "inner_progress": "inner_progress",
    "execution_cached": "execution_cached",
    "metric": "metric",
    "artifact": "artifact",
    "warning": "run_warning",
}
_MAX_TEXT = 2000  # longest repr kept for a value JSON cannot hold


@dataclass(frozen=True)
class RunEvent:
    type: str
    payload: dict[str, Any]

    @property
    def closing(self) -> bool:
        return self.type in CLOSING


def jsonable(value: Any, _depth: int = 0) -> Any:
    """A JSON-safe copy: numpy scalars become numbers, paths strings, tensors a short description;
    non-finite floats become the strings "NaN", "Infinity", "-Infinity" (strict JSON has no NaN)."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if _depth > 8:
        return "…"
    if isinstance(value, dict):
        return {str(k): jsonable(v, _depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v, _depth + 1) for v in value]
    if hasattr(value, "shape") and hasattr(value, "dtype"):  # tensors and arrays: never the data
        if getattr(value, "shape", None) == () and hasattr(value, "item"):
            return jsonable(value.item(), _depth + 1)
        return {"tensor": True, "shape": list(value.shape), "dtype": str(value.dtype)}
    if hasattr(value, "item") and callable(value.item):  # numpy scalar
        try:
            return jsonable(value.item(), _depth + 1)
        except (TypeError, ValueError):
            pass
    if hasattr(value, "__fspath__"):
        return str(value)
    text = repr(value)
    return text if len(text) <= _MAX_TEXT else text[:_MAX_TEXT] + "…"


def encode(payload: dict[str, Any]) -> str:
    """The stored form of a payload: compact JSON (json.dumps with separators=(",", ":"),
    ensure_ascii=False, allow_nan=False; see compact_json for why not json.dumps itself)."""
    return dumps_strict(payload)


_MAX_STORED_DEPTH = 64  # deeper containers are stored as "…" (a reader's parser has limits too)


def encode_storable(payload: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The payload as it can be stored, and its text: `encode(payload)` when that is strict JSON
    in valid UTF-8 (the usual case, paid once); else a normalised copy (`storable`). A payload
    from a worker frame may hold what JSON parsing admits but storage cannot: NaN, a lone UTF-16
    surrogate, very deep nesting. Normalising it here, before the event takes a seq, is what keeps
    one bad value from failing the run's log."""
    try:
        text = encode(payload)
        if not text.isascii():
            text.encode()
        return payload, text
    except (ValueError, UnicodeEncodeError, RecursionError, TypeError):
        clean = storable(payload)
        return clean, encode(clean)


def storable(value: Any, _depth: int = 0) -> Any:
    """A copy that strict JSON in UTF-8 can hold: non-finite floats become "NaN", "Infinity",
    "-Infinity" (as `jsonable` writes them); lone surrogates in strings and keys become U+FFFD;
    containers nested deeper than 64 become "…"; anything else JSON cannot hold, its repr."""
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, str):
        return _valid_text(value)
    if isinstance(value, float):
        return jsonable(value)
    if isinstance(value, (dict, list, tuple)) and _depth >= _MAX_STORED_DEPTH:
        return "…"
    if isinstance(value, dict):
        return {_valid_text(str(k)): storable(v, _depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [storable(v, _depth + 1) for v in value]
    return _valid_text(str(jsonable(value, 9)))


def _valid_text(text: str) -> str:
    try:
        text.encode()
        return text
    except UnicodeEncodeError:
        return "".join("\ufffd" if "\ud800" <= ch <= "\udfff" else ch for ch in text)


def cap_payload(payload: dict[str, Any], cap_bytes: int) -> dict[str, Any]:
    """Keep a payload under `cap_bytes` (0 or less: no cap).

    Recorded outputs are the usual culprit: the largest `outputs` entries are replaced one by one
    by an elision marker that still names the port. If the rest is still too big, the payload
    keeps only what identifies it (run, node, type of event) and a marker with its size.
    """
    if cap_bytes <= 0:
        return payload
    size = len(encode(payload).encode())
    if size <= cap_bytes:
        return payload
    out = dict(payload)
    outputs = out.get("outputs")
    if isinstance(outputs, dict) and outputs:
        outputs = dict(outputs)
        by_size = sorted(outputs, key=lambda p: len(encode({"v": outputs[p]})), reverse=True)
        for port in by_size:
            outputs[port] = {"elided": True, "port": port, "bytes": len(encode({"v": outputs[port]}).encode())}
            out["outputs"] = outputs
            if len(encode(out).encode()) <= cap_bytes:
                return out
    keep = {k: out[k] for k in ("run_id", "node_id", "node_type", "status", "parent") if k in out}
    keep["elided"] = {"bytes": size, "cap_bytes": cap_bytes}
    return keep


# -- builders ---------------------------------------------------------------------------------


def execution_start(run_id: str, *, name: str | None, device: str, devices: list[str], seed: int | None,
                    deterministic: bool, queue_key: str, started_at: float, worker: str | None = None) -> RunEvent:
    """`worker` names the worker a run executes on; a run on this server has no such key, so its
    log is byte for byte what it was before workers existed."""
    payload = {
        "run_id": run_id, "name": name, "device": device, "devices": list(devices), "seed": seed,
        "deterministic": deterministic, "queue_key": queue_key, "started_at": started_at,
    }
    if worker is not None:
        payload["worker"] = worker
    return RunEvent(EXECUTION_START, payload)


def from_engine(run_id: str, event: dict[str, Any]) -> RunEvent | None:
    """An engine callback event as a log event, or None for kinds the log does not keep."""
    kind = _ENGINE_TYPES.get(event.get("event", ""))
    if kind is None:
        return None
    payload = {"run_id": run_id}
    payload.update((k, jsonable(v)) for k, v in event.items() if k != "event")
    return RunEvent(kind, payload)


def metric(run_id: str, *, node_id: Any, name: Any, value: Any, step: Any) -> RunEvent:
    """A metric point, as `from_engine` makes it of the engine's metric event."""
    return RunEvent("metric", {"run_id": run_id, "node_id": jsonable(node_id), "name": jsonable(name),
                               "value": jsonable(value), "step": jsonable(step)})


def artifact(run_id: str, *, node_id: Any, kind: Any, path: Any, meta: Any) -> RunEvent:
    """An artifact, as `from_engine` makes it of the engine's artifact event."""
    return RunEvent("artifact", {"run_id": run_id, "node_id": jsonable(node_id), "kind": jsonable(kind),
                                 "path": jsonable(path), "meta": jsonable(meta)})


def run_warning(run_id: str, code: str, message: str, params: dict[str, Any] | None = None,
                node_id: str | None = None) -> RunEvent:
    return RunEvent("run_warning", {"run_id": run_id, "node_id": node_id, "code": code, "message": message,
                                    "params": jsonable(params or {})})


def execution_complete(run_id: str, *, duration_s: float, metrics: dict[str, Any], executed: int,
                       cached: int) -> RunEvent:
    return RunEvent(EXECUTION_COMPLETE, {"run_id": run_id, "status": "succeeded", "duration_s": duration_s,
                                         "metrics": jsonable(metrics), "executed": executed, "cached": cached})


def execution_error(run_id: str, error: dict[str, Any], *, duration_s: float | None = None) -> RunEvent:
    """`error` is the engine's NodeFailure as a dict, or {code, message, params} for errors
    outside any node (a graph that became invalid, a worker that went away)."""
    return RunEvent(EXECUTION_ERROR, {"run_id": run_id, "status": "failed", "duration_s": duration_s,
                                      "error": jsonable(error)})


def execution_stopped(run_id: str, *, status: str, code: str, message: str,
                      params: dict[str, Any] | None = None, duration_s: float | None = None) -> RunEvent:
    """A run that ended without finishing: `cancelled` (someone asked) or `interrupted` (the
    server stopped, or its worker did not come back)."""
    if status not in ("cancelled", "interrupted"):
        raise ValueError(f"execution_stopped is for cancelled or interrupted runs, not {status!r}")
    return RunEvent(EXECUTION_STOPPED, {"run_id": run_id, "status": status, "duration_s": duration_s,
                                        "reason": {"code": code, "message": message, "params": jsonable(params or {})}})


def closing_status(event_type: str, payload: dict[str, Any]) -> str | None:
    """The final status a closing event records (None for any other event)."""
    if event_type not in CLOSING:
        return None
    return payload.get("status")
