"""Encoding, decoding and validating worker protocol frames (wire/frames.py), batches included.
Pure: a frame's dataclass annotations are its schema, checked the same way on both ends."""

from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from dataclasses import dataclass
from typing import Any, Callable, Sequence, Union

from . import compact_json, hello_limits
from .frames import (
    FRAME_TYPES, RUN_FINISHED_STATUSES, Ack, Batch, Event, Frame, Heartbeat, Hello, Metrics, ProtocolError, RunAlive,
    RunFinished, RunFrame, Welcome,
)

# One frame's encoded size limit (UTF-8 bytes). Generous: an assign carries a whole graph, and an
# event payload is capped by the control plane's own payload cap (128 KB by default) anyway.
MAX_FRAME_BYTES = 16 * 1024 * 1024

# A batch's bounds (the sender's; the receiver takes any batch under MAX_FRAME_BYTES). Small enough
# that one batch never gets near the inbox bound (INBOX_MAX_FRAMES) nor holds the loop for long.
BATCH_MAX_FRAMES = 512
BATCH_MAX_BYTES = 1024 * 1024


# -- validation -------------------------------------------------------------------------------------

Checker = Callable[[Any, str], Any]


def _bad(path: str, expected: str, value: Any) -> ProtocolError:
    return ProtocolError("bad_field", f"expected {expected}, got {_kind(value)}", path=path)


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "boolean", int: "integer", float: "number", str: "string", list: "array",
            dict: "object"}.get(type(value), type(value).__name__)


def _check_str(v: Any, path: str) -> Any:
    if type(v) is not str:
        raise _bad(path, "a string", v)
    return v


def _check_int(v: Any, path: str) -> Any:
    if type(v) is not int:
        raise _bad(path, "an integer", v)
    return v


def _check_float(v: Any, path: str) -> Any:
    if type(v) is float or type(v) is int:
        return float(v)
    raise _bad(path, "a number", v)


def _check_bool(v: Any, path: str) -> Any:
    if type(v) is not bool:
        raise _bad(path, "a boolean", v)
    return v


def _check_any(v: Any, path: str) -> Any:
    return v


def _checker(hint: Any) -> Checker:
    """A validator for one annotation (str, int, float, bool, Any, X | None, list[X], dict[str, X], or
    a typed value with from_json/to_json)."""
    if hint is str:
        return _check_str
    if hint is int:
        return _check_int
    if hint is float:
        return _check_float
    if hint is bool:
        return _check_bool
    if hint is Any:
        return _check_any
    if isinstance(hint, type) and hasattr(hint, "from_json"):
        return _typed_checker(hint)
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (Union, types.UnionType) and type(None) in args:
        (inner,) = [a for a in args if a is not type(None)]
        check = _checker(inner)
        return lambda v, path: None if v is None else check(v, path)
    if origin is list:
        item = _checker(args[0])
        if item is _check_any:
            return lambda v, path: v if type(v) is list else _raise(_bad(path, "an array", v))
        return lambda v, path: ([item(x, f"{path}[{i}]") for i, x in enumerate(v)] if type(v) is list
                                else _raise(_bad(path, "an array", v)))
    if origin is dict:
        value = _checker(args[1])
        if value is _check_any:  # JSON object keys are always strings
            return lambda v, path: v if type(v) is dict else _raise(_bad(path, "an object", v))
        return lambda v, path: ({k: value(x, f"{path}.{k}") for k, x in v.items()} if type(v) is dict
                                else _raise(_bad(path, "an object", v)))
    raise TypeError(f"no wire checker for annotation {hint!r}")


def _typed_checker(hint: type) -> Checker:
    """A typed field (a class with `from_json`/`to_json`, such as wire/run_options.py
    `ExecutionOptions`): the JSON value read into it; its refusal (a ValueError with `field`) is
    `bad_field` at the field's path."""
    def check(v: Any, path: str) -> Any:
        if isinstance(v, hint):
            return v
        try:
            return hint.from_json(v)  # type: ignore[attr-defined]
        except ValueError as err:
            inner = getattr(err, "field", "")
            raise ProtocolError("bad_field", getattr(err, "reason", str(err)),
                                path=f"{path}.{inner}" if inner else path) from None
    return check


def _raise(err: Exception) -> Any:
    raise err


@dataclass(frozen=True)
class _FieldSpec:
    name: str
    check: Checker
    required: bool
    default_none: bool  # omitted from the wire when None
    typed: bool = False  # a typed field: its `to_json()` goes on the wire


_SPECS: dict[type[Frame], tuple[_FieldSpec, ...]] = {}


def _specs(cls: type[Frame]) -> tuple[_FieldSpec, ...]:
    specs = _SPECS.get(cls)
    if specs is None:
        hints = typing.get_type_hints(cls)
        specs = tuple(
            _FieldSpec(f.name, _checker(hints[f.name]),
                       f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING,
                       f.default is None, isinstance(hints[f.name], type) and hasattr(hints[f.name], "to_json"))
            for f in dataclasses.fields(cls))
        _SPECS[cls] = specs
    return specs


def _check_values(frame: Frame) -> None:
    """Semantic checks beyond types, shared by encode and decode (raise ProtocolError)."""
    t = frame.type
    if isinstance(frame, RunFrame) or t in ("assign", "cancel", "ack"):
        if not frame.run_id:  # type: ignore[attr-defined]
            raise ProtocolError("bad_value", "must not be empty", path=f"{t}.run_id")
    if isinstance(frame, RunFrame) and frame.seq < 1:
        raise ProtocolError("bad_value", f"must be at least 1, got {frame.seq}", path=f"{t}.seq")
    if isinstance(frame, Ack) and frame.seq < 0:
        raise ProtocolError("bad_value", f"must not be negative, got {frame.seq}", path="ack.seq")
    if isinstance(frame, RunFinished) and frame.status not in RUN_FINISHED_STATUSES:
        raise ProtocolError("bad_value", f"must be one of {sorted(RUN_FINISHED_STATUSES)}, got {frame.status!r}",
                            path="run_finished.status")
    if isinstance(frame, RunAlive):
        for run_id, seq in frame.runs.items():
            if seq < 0:
                raise ProtocolError("bad_value", f"must not be negative, got {seq}", path=f"run_alive.runs.{run_id}")
    for name in ("heartbeat_s", "grace_s", "resume_grace_s"):
        value = getattr(frame, name, None)
        if value is not None and not (math.isfinite(value) and value >= 0):
            raise ProtocolError("bad_value", f"must be a finite number >= 0, got {value}", path=f"{t}.{name}")
    for name in ("cpu_threads", "cpu_count"):
        value = getattr(frame, name, None)
        if value is not None and value < 1:
            raise ProtocolError("bad_value", f"must be at least 1, got {value}", path=f"{t}.{name}")
    if isinstance(frame, Welcome) and frame.heartbeat_s <= 0:
        raise ProtocolError("bad_value", "must be above 0", path="welcome.heartbeat_s")
    if isinstance(frame, Batch) and not frame.frames:
        raise ProtocolError("bad_value", "must hold at least one frame", path="batch.frames")
    if isinstance(frame, Hello):
        hello_limits.check_hello(frame)
    elif isinstance(frame, Heartbeat):
        hello_limits.check_heartbeat(frame)


def check_frame_size(data: str | bytes) -> None:
    """Refuse a frame over `MAX_FRAME_BYTES` (UTF-8 bytes) before parsing it."""
    if isinstance(data, str):
        # A str of n characters is n..4n UTF-8 bytes: encode only when the bounds do not decide.
        if len(data) * 4 <= MAX_FRAME_BYTES:
            return
        size = len(data) if len(data) > MAX_FRAME_BYTES else len(data.encode("utf-8"))
    else:
        size = len(data)
    if size > MAX_FRAME_BYTES:
        raise ProtocolError("frame_too_large", f"frame of {size} bytes is over the limit of {MAX_FRAME_BYTES}")


def decode(data: str | bytes, *, sender: str | None = None) -> Frame:
    """Parse and validate one frame. `sender` ("agent" or "server"), when given, is who must have
    sent it: a server frame arriving from an agent is `wrong_direction`. Unknown fields are ignored.
    Raises ProtocolError (code + field path) for anything malformed."""
    check_frame_size(data)
    try:
        raw = json.loads(data)
    except (ValueError, UnicodeDecodeError) as err:
        raise ProtocolError("not_json", f"frame is not JSON: {err}") from None
    except RecursionError:  # nested ~1000 levels: a clean refusal, not a dropped connection
        raise ProtocolError("too_deep", "frame is nested too deeply to read") from None
    if type(raw) is not dict:
        raise ProtocolError("not_object", f"frame must be a JSON object, got {_kind(raw)}")
    return from_dict(raw, sender=sender)


def _built(cls: type[Frame], values: dict[str, Any]) -> Any:
    """`cls(**values)` for values that were checked and name every field: a frozen dataclass's
    __init__ sets each field through object.__setattr__, which costs more than the checks."""
    frame = object.__new__(cls)
    frame.__dict__.update(values)
    return frame


def numbered(frame: RunFrame, seq: int) -> RunFrame:
    """A copy of a per-run frame with `seq` (`dataclasses.replace(frame, seq=seq)` without its
    per-call cost: frames have plain fields and no __post_init__)."""
    copy = object.__new__(type(frame))
    fields = copy.__dict__
    fields.update(frame.__dict__)
    fields["seq"] = seq
    return copy


def _fast_event(raw: dict[str, Any]) -> Frame | None:
    # The frame of nearly every message: the generic checks below, spelled out. Anything they would
    # refuse (or just not a plain case) returns None and goes the generic way, for its error.
    run_id, seq, event = raw.get("run_id"), raw.get("seq"), raw.get("event")
    if type(run_id) is str and run_id and type(seq) is int and seq >= 1 and type(event) is dict:
        return _built(Event, {"run_id": run_id, "seq": seq, "event": event})
    return None


def _fast_metrics(raw: dict[str, Any]) -> Frame | None:
    run_id, seq, points = raw.get("run_id"), raw.get("seq"), raw.get("points")
    if (type(run_id) is str and run_id and type(seq) is int and seq >= 1 and type(points) is list
            and all(type(p) is dict for p in points)):
        return _built(Metrics, {"run_id": run_id, "seq": seq, "points": points})
    return None


_FAST_AGENT_FRAMES: dict[str, Callable[[dict[str, Any]], Frame | None]] = {
    "event": _fast_event, "metrics": _fast_metrics}


def from_dict(raw: dict[str, Any], *, sender: str | None = None) -> Frame:
    """Validate an already-parsed frame object (see `decode`)."""
    t = raw.get("type")
    fast = _FAST_AGENT_FRAMES.get(t) if sender != "server" else None  # type: ignore[arg-type]
    if fast is not None:
        frame = fast(raw)
        if frame is not None:
            return frame
    if t is None:
        raise ProtocolError("missing_type", "frame has no type", path="type")
    if type(t) is not str:
        raise _bad("type", "a string", t)
    cls = FRAME_TYPES.get(t)
    if cls is None:
        raise ProtocolError("unknown_type", f"unknown frame type {t!r} (known: {', '.join(sorted(FRAME_TYPES))})",
                            path="type")
    if sender is not None and cls.sender != sender:
        raise ProtocolError("wrong_direction", f"a {t!r} frame is sent by the {cls.sender}, not the {sender}",
                            path="type")
    values: dict[str, Any] = {}
    for spec in _specs(cls):
        if spec.name in raw:
            values[spec.name] = spec.check(raw[spec.name], f"{t}.{spec.name}")
        elif spec.required:
            raise ProtocolError("missing_field", "is required", path=f"{t}.{spec.name}")
    frame = cls(**values)
    _check_values(frame)
    return frame


def to_dict(frame: Frame) -> dict[str, Any]:
    """The frame as a JSON object; optional fields that are None are left out."""
    out: dict[str, Any] = {"type": frame.type}
    for spec in _specs(type(frame)):
        value = getattr(frame, spec.name)
        if value is None and spec.default_none:
            continue
        out[spec.name] = value.to_json() if spec.typed and value is not None else value
    return out


# json.dumps(obj, separators=(",", ":"), ensure_ascii=False), without building an encoder per call.
_dumps = compact_json.dumps


def encode(frame: Frame) -> str:
    """One frame as a single-line JSON text (safe to append to a JSONL spool). Checks the frame the
    way `decode` will (a wrong field type is our bug: ValueError) and its size (ProtocolError
    `frame_too_large`, so an oversized event can be turned into a warning by the caller)."""
    if type(frame) is Event:  # the hot frame: the generic checks spelled out, the same text
        run_id, seq, event = frame.run_id, frame.seq, frame.event
        if type(run_id) is str and run_id and type(seq) is int and seq >= 1 and type(event) is dict:
            text = _dumps({"type": "event", "run_id": run_id, "seq": seq, "event": event})
            check_frame_size(text)
            return text
    if not isinstance(frame, Frame) or not frame.type:
        raise TypeError(f"not a frame: {frame!r}")
    obj = to_dict(frame)
    try:
        for spec in _specs(type(frame)):
            if spec.name in obj:
                spec.check(obj[spec.name], f"{frame.type}.{spec.name}")
        _check_values(frame)
    except ProtocolError as err:
        raise ValueError(f"cannot encode {frame.type}: {err}") from None
    text = _dumps(obj)
    check_frame_size(text)
    return text


def encode_batch(texts: Sequence[str]) -> str:
    """A `batch` message of frames already encoded with `encode` (joined, not encoded again). The
    caller keeps it within BATCH_MAX_FRAMES / BATCH_MAX_BYTES."""
    if not texts:
        raise ValueError("a batch holds at least one frame")
    return '{"type":"batch","frames":[' + ",".join(texts) + "]}"


def unpack(batch: Batch) -> list[Frame | ProtocolError]:
    """A batch's frames in order, each validated as if it had come alone (sender: the agent), or
    the ProtocolError that refuses it, its path inside the batch (`batch.frames[3].seq`). A batch
    holds per-run frames only."""
    out: list[Frame | ProtocolError] = []
    for i, raw in enumerate(batch.frames):
        try:
            if type(raw) is not dict:
                raise ProtocolError("bad_field", f"expected an object, got {_kind(raw)}", path="")
            frame = from_dict(raw, sender="agent")
            if not isinstance(frame, RunFrame):
                raise ProtocolError("bad_value", f"a batch holds per-run frames only, not {frame.type!r}",
                                    path="type")
            out.append(frame)
        except ProtocolError as err:
            out.append(_within_batch(err, i))
    return out


def _within_batch(err: ProtocolError, index: int) -> ProtocolError:
    # An item's own path starts with its type (`event.seq`) or is `type`; inside a batch it is named
    # by its index instead: `batch.frames[3].seq`, `batch.frames[3].type`, `batch.frames[3]`.
    prefix = f"batch.frames[{index}]"
    path = err.path
    if path in (None, ""):
        where = prefix
    elif path == "type":
        where = f"{prefix}.type"
    else:
        head, dot, rest = path.partition(".")
        where = f"{prefix}.{rest}" if dot else f"{prefix}{path[len(head):]}"
    return ProtocolError(err.code, err.reason, path=where, params=err.params)
