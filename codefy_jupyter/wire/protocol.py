"""The /codefy/ws/worker protocol: frames, encode/decode/validate, and the reliable-delivery
state machines. Sans-IO and shared by both ends (the agent imports this module, so it must never
import torch, tornado or anything of `server/`).

A frame is one JSON object per WebSocket text message with a `type` and that type's fields.

    agent -> control plane   hello, heartbeat, run_alive, and per run: run_started, event, metrics,
                             artifact, warning, run_facts, run_finished
    control plane -> agent   welcome, reject, assign, cancel, drain, ack

Per-run frames carry `run_id` and `seq`: a gapless counter per run starting at 1, assigned by the
agent's `Outbox`. The control plane records them through a `RunInbox`, which drops duplicates by
seq, records gaps, and says when to send `ack` (every `ACK_EVERY_FRAMES` frames or
`ACK_AFTER_S` seconds after the first unacked one). The agent drops acked frames and, after a
reconnect, replays the rest (`Outbox.unacked()`).

Evolution (seed: protocol evolution): every frame ignores fields it does not know; optional
features are negotiated through `capabilities` (the agent offers in `hello`, the control plane
answers the intersection in `welcome`, see `negotiate`); `PROTOCOL_VERSION` changes only for a
change the other side would misread.

Batches (capability `batch`, ours, not the seed's): once both sides list it, the agent may send
several per-run frames in one WebSocket message, `{"type": "batch", "frames": [frame, ...]}`, each
item exactly the object it would send alone (`encode_batch` joins already encoded frames, so nothing
is encoded twice). The control plane reads them in order as if they had come one by one (`unpack`);
one malformed item is refused alone, with its index in the path (`batch.frames[3].seq`). A peer
without the capability never sees a batch, so it still works frame by frame. Why: one message per
frame costs both ends more (WebSocket framing, a callback and a task per message) than the frame.

Errors: `ProtocolError` is "the peer sent something wrong" (a malformed frame), with a `code` and
the `path` of the offending field, e.g. `ProtocolError("bad_field", ..., path="hello.devices[1]")`.
Mistakes of our own side (encoding a frame with a wrong field type, acking past what was sent to us)
raise `ValueError`/`TypeError`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Iterable, Sequence, Union

from . import compact_json

# 3: as the seed (ack came with 2, mount fields with 3). Bump only for a change the other side
# would misread; new optional features are capabilities instead.
PROTOCOL_VERSION = 3

# One frame's encoded size limit (UTF-8 bytes). Generous: an assign carries a whole graph, and an
# event payload is capped by the control plane's own payload cap (128 KB by default) anyway.
MAX_FRAME_BYTES = 16 * 1024 * 1024

# Reliable delivery (seed: "ack every 64 frames or 1 s"; "pause reading past 10,000 frames").
ACK_EVERY_FRAMES = 64
ACK_AFTER_S = 1.0
INBOX_MAX_FRAMES = 10_000

# Heartbeats: the default interval the control plane puts in `welcome.heartbeat_s`, and how many
# consecutive missed ones make a worker `disconnected`.
DEFAULT_HEARTBEAT_S = 10.0
HEARTBEAT_MISSES = 3
# Seconds the first frame (`hello`) must arrive within after the socket is accepted.
HELLO_TIMEOUT_S = 10.0
# Default cooperative-cancel grace before the agent terminates a run's process (then kills 5 s later).
DEFAULT_GRACE_S = 30.0
KILL_AFTER_TERMINATE_S = 5.0

# Every capability the seed names. A capability is used only when both sides list it.
KNOWN_CAPABILITIES: frozenset[str] = frozenset({
    "ack", "mounts", "transfer", "memory_budget", "one_shot", "s3", "record_outputs", "instances",
    "run_facts", "batch",
})
# What this version of the code implements (storage, recorded outputs, memory sharing and ddp come
# later and add themselves here).
SUPPORTED_CAPABILITIES: frozenset[str] = frozenset({"ack", "one_shot", "instances", "run_facts", "batch"})

# A batch's bounds (the sender's; the receiver takes any batch under MAX_FRAME_BYTES). Small enough
# that one batch never gets near the inbox bound (INBOX_MAX_FRAMES) nor holds the loop for long.
BATCH_MAX_FRAMES = 512
BATCH_MAX_BYTES = 1024 * 1024


def negotiate(offered: Iterable[str], supported: Iterable[str] = SUPPORTED_CAPABILITIES) -> list[str]:
    """The capabilities both sides list, sorted. Unknown names are simply not in the answer."""
    return sorted(set(offered) & set(supported))


class ProtocolError(Exception):
    """The peer sent a frame we cannot use.

    code: `not_json`, `too_deep`, `not_object`, `missing_type`, `unknown_type`, `wrong_direction`,
          `missing_field`, `bad_field`, `bad_value`, `frame_too_large`, `ack_ahead`.
    path: the offending field (`assign.devices[0]`), or None for the frame as a whole.
    """

    def __init__(self, code: str, message: str, *, path: str | None = None) -> None:
        super().__init__(message if path is None else f"{path}: {message}")
        self.code = code
        self.path = path
        self.reason = message

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": str(self), "params": {"path": self.path}}


# -- frames -----------------------------------------------------------------------------------------
# Every frame is a frozen, keyword-only dataclass with a class-level `type`. Field annotations are
# the wire schema: `decode` validates against them (see `_checker`).

@dataclass(frozen=True, kw_only=True)
class Frame:
    type: ClassVar[str] = ""
    sender: ClassVar[str] = ""  # "agent" or "server"


@dataclass(frozen=True, kw_only=True)
class RunFrame(Frame):
    """A frame about one run. `seq` is 0 until the agent's `Outbox` assigns it (>= 1 on the wire)."""

    sender: ClassVar[str] = "agent"
    run_id: str
    seq: int = 0


# agent -> control plane ----------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class Hello(Frame):
    """First frame of a connection. `name` is the worker's base name; with `instance` it registers as
    `<name>.<instance>`. `node_types` maps each node type to the sha256 of its definition (as
    `NodeRegistry.catalog()["types"]`); `catalog_hash`/`node_types` None means "no catalog reported".
    `devices`: `[{"device": "cuda:0", "name"?, "uuid"?, "total_memory"?, "free_memory"?}, ...]`.
    `machine_id`: sha256 digest of the machine id, for same-machine detection. `cpu_count`: the
    cores the agent may run on, for its runs' automatic CPU thread budget (absent from older agents)."""

    type: ClassVar[str] = "hello"
    sender: ClassVar[str] = "agent"
    name: str
    version: str
    protocol_version: int
    fingerprint: dict[str, Any] = field(default_factory=dict)
    catalog_hash: str | None = None
    node_types: dict[str, str] | None = None
    capabilities: list[str] = field(default_factory=list)
    machine_id: str | None = None
    devices: list[dict[str, Any]] = field(default_factory=list)
    mounts: dict[str, str] = field(default_factory=dict)
    platform: str = ""
    one_shot: bool = False
    one_shot_run_id: str | None = None
    instance_id: str | None = None
    instance: str | None = None
    cpu_count: int | None = None


@dataclass(frozen=True, kw_only=True)
class Heartbeat(Frame):
    """Devices with their free memory now, and the run ids executing on the agent."""

    type: ClassVar[str] = "heartbeat"
    sender: ClassVar[str] = "agent"
    devices: list[dict[str, Any]] = field(default_factory=list)
    running: list[str] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class RunAlive(Frame):
    """After a reconnect: the runs still going (or finished but unacked) on the agent, each with the
    last seq the agent assigned. The agent then replays every unacked frame of them."""

    type: ClassVar[str] = "run_alive"
    sender: ClassVar[str] = "agent"
    runs: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class RunStarted(RunFrame):
    """The run's process started. `visible_devices`: the machine's cards the run sees, in order
    (CUDA_VISIBLE_DEVICES); `device_aliases`: the run's device name -> the machine's
    (`{"cuda:0": "cuda:2"}`)."""

    type: ClassVar[str] = "run_started"
    pid: int | None = None
    visible_devices: list[str] = field(default_factory=list)
    device_aliases: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class Event(RunFrame):
    """One engine event (the dict the engine callbacks give, node-level vocabulary only)."""

    type: ClassVar[str] = "event"
    event: dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class Metrics(RunFrame):
    """Metric points: `[{"name", "value", "step"?, "node_id"?}, ...]`."""

    type: ClassVar[str] = "metrics"
    points: list[dict[str, Any]]


@dataclass(frozen=True, kw_only=True)
class Artifact(RunFrame):
    type: ClassVar[str] = "artifact"
    kind: str
    path: str
    meta: dict[str, Any] = field(default_factory=dict)
    node_id: str | None = None


@dataclass(frozen=True, kw_only=True)
class RunWarning(RunFrame):
    """A warning of the run (`code`/`params` for the panel's language, `message` in English)."""

    type: ClassVar[str] = "warning"
    message: str
    code: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    node_id: str | None = None


@dataclass(frozen=True, kw_only=True)
class RunFacts(RunFrame):
    """Facts the run's process gathered itself: `kind` is `fingerprint` (document and numeric
    settings) or `provenance` (one node's source record); sent only when `run_facts` is negotiated."""

    type: ClassVar[str] = "run_facts"
    kind: str
    facts: dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class RunFinished(RunFrame):
    """The run ended: `status` is `succeeded`, `failed` or `cancelled`. `error`:
    `{"node_id"?, "type", "message", "traceback"?, "code"?}`. `output_tail`: the last 4 KB of the
    run's output.log when its process crashed. `exit_code`: the process's exit status when known;
    `signal`: the signal that ended it. `executed`/`cached`: how many nodes ran or came from cache,
    `metrics`: the last value of each metric series, `duration_s`: the run's own duration (the
    control plane's closing event reports them as for an in-process run)."""

    type: ClassVar[str] = "run_finished"
    status: str
    error: dict[str, Any] | None = None
    peak_memory: dict[str, Any] | None = None
    output_tail: str | None = None
    exit_code: int | None = None
    signal: int | None = None
    executed: int = 0
    cached: int = 0
    metrics: dict[str, Any] = field(default_factory=dict)
    duration_s: float | None = None


# control plane -> agent ----------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class Welcome(Frame):
    """The hello was accepted. `name`: the registered name (`<name>.<instance>` for an instance).
    `capabilities`: the negotiated intersection. `status`: `online` or `degraded` (the node catalog
    differs; `missing_types` the worker lacks, `extra_types` the server lacks)."""

    type: ClassVar[str] = "welcome"
    sender: ClassVar[str] = "server"
    worker_id: str
    name: str = ""
    heartbeat_s: float = DEFAULT_HEARTBEAT_S
    grace_s: float = DEFAULT_GRACE_S
    capabilities: list[str] = field(default_factory=list)
    resume_grace_s: float | None = None
    status: str = "online"
    missing_types: list[str] = field(default_factory=list)
    extra_types: list[str] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class Reject(Frame):
    """The hello was refused; the control plane closes the socket after sending it."""

    type: ClassVar[str] = "reject"
    sender: ClassVar[str] = "server"
    code: str
    message: str
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class Assign(Frame):
    """Run this graph. `devices`: the run's cards in order (the child's CUDA_VISIBLE_DEVICES);
    `device`: the run's device as the run names it. The graph has its SECRET values restored.
    `cpu_threads`: the run's CPU thread budget (OMP_NUM_THREADS, MKL_NUM_THREADS and torch's
    threads in its process); absent: no budget. Older agents ignore it, as every unknown field."""

    type: ClassVar[str] = "assign"
    sender: ClassVar[str] = "server"
    run_id: str
    graph: dict[str, Any]
    options: dict[str, Any] = field(default_factory=dict)
    device: str
    devices: list[str] = field(default_factory=list)
    grace_s: float | None = None
    cpu_threads: int | None = None


@dataclass(frozen=True, kw_only=True)
class Cancel(Frame):
    type: ClassVar[str] = "cancel"
    sender: ClassVar[str] = "server"
    run_id: str
    grace_s: float | None = None
    reason: str | None = None


@dataclass(frozen=True, kw_only=True)
class Drain(Frame):
    """Take no new runs (`draining: false` undoes it); runs already executing go on."""

    type: ClassVar[str] = "drain"
    sender: ClassVar[str] = "server"
    draining: bool = True


@dataclass(frozen=True, kw_only=True)
class Ack(Frame):
    """Every frame of `run_id` up to and including `seq` is recorded; the agent may drop them."""

    type: ClassVar[str] = "ack"
    sender: ClassVar[str] = "server"
    run_id: str
    seq: int


@dataclass(frozen=True, kw_only=True)
class Batch(Frame):
    """Several per-run frames in one message (capability `batch`; see the module's docstring). Each
    item is a frame object as it would be sent alone; `unpack` validates them one by one."""

    type: ClassVar[str] = "batch"
    sender: ClassVar[str] = "agent"
    frames: list[Any]


AGENT_FRAMES: tuple[type[Frame], ...] = (Hello, Heartbeat, RunAlive, RunStarted, Event, Metrics, Artifact,
                                         RunWarning, RunFacts, RunFinished)
SERVER_FRAMES: tuple[type[Frame], ...] = (Welcome, Reject, Assign, Cancel, Drain, Ack)
# Frames of negotiated capabilities (not in the seed's table).
CAPABILITY_FRAMES: tuple[type[Frame], ...] = (Batch,)
FRAME_TYPES: dict[str, type[Frame]] = {cls.type: cls for cls in AGENT_FRAMES + SERVER_FRAMES + CAPABILITY_FRAMES}
RUN_FINISHED_STATUSES = frozenset({"succeeded", "failed", "cancelled"})
# The `error.code` of a `cancelled` run_finished whose run the agent stopped because the agent itself
# was stopped (not because the run was cancelled): the control plane records the run as interrupted.
# A control plane that does not know the code records it as cancelled, as before.
AGENT_STOPPED = "agent_stopped"


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
    """A validator for one annotation (str, int, float, bool, Any, X | None, list[X], dict[str, X])."""
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


def _raise(err: Exception) -> Any:
    raise err


@dataclass(frozen=True)
class _FieldSpec:
    name: str
    check: Checker
    required: bool
    default_none: bool  # omitted from the wire when None


_SPECS: dict[type[Frame], tuple[_FieldSpec, ...]] = {}


def _specs(cls: type[Frame]) -> tuple[_FieldSpec, ...]:
    specs = _SPECS.get(cls)
    if specs is None:
        hints = typing.get_type_hints(cls)
        specs = tuple(
            _FieldSpec(f.name, _checker(hints[f.name]),
                       f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING,
                       f.default is None)
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
        out[spec.name] = value
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
    return ProtocolError(err.code, err.reason, path=where)


# -- reliable delivery: the agent's side ------------------------------------------------------------

class Outbox:
    """The agent's unacked frames of one run (pure; `agent/spool.py` makes it durable).

    `add` numbers a frame (seq 1, 2, ...) and keeps it until `ack` covers it; `unacked()` is exactly
    what to replay after a reconnect, in order.
    """

    def __init__(self, run_id: str, *, last_seq: int = 0, acked_seq: int = 0,
                 unacked: Iterable[RunFrame] = ()) -> None:
        self.run_id = run_id
        self.acked_seq = acked_seq
        self._frames: deque[RunFrame] = deque()
        self.last_seq = max(last_seq, acked_seq)
        for frame in unacked:  # reloaded from a spool: already numbered, in order
            if frame.seq <= self.acked_seq:
                continue
            if self._frames and frame.seq <= self._frames[-1].seq:
                raise ValueError(f"run {run_id}: reloaded frames out of order at seq {frame.seq}")
            self._frames.append(frame)
            self.last_seq = max(self.last_seq, frame.seq)

    def __len__(self) -> int:
        return len(self._frames)

    def add(self, frame: RunFrame) -> RunFrame:
        """The frame numbered with this run's next seq (kept until acked)."""
        if frame.run_id != self.run_id:
            raise ValueError(f"frame for run {frame.run_id!r} added to the outbox of run {self.run_id!r}")
        self.last_seq += 1
        copy = numbered(frame, self.last_seq)
        self._frames.append(copy)
        return copy

    def add_numbered(self, frame: RunFrame) -> RunFrame:
        """Keep a frame the caller already numbered with this run's next seq (`last_seq + 1`), e.g.
        to encode it before it takes the seq."""
        if frame.run_id != self.run_id:
            raise ValueError(f"frame for run {frame.run_id!r} added to the outbox of run {self.run_id!r}")
        if frame.seq != self.last_seq + 1:
            raise ValueError(f"run {self.run_id}: frame numbered {frame.seq}, the next seq is {self.last_seq + 1}")
        self.last_seq = frame.seq
        self._frames.append(frame)
        return frame

    def ack(self, seq: int) -> int:
        """Drop every frame up to `seq`; returns how many were dropped. A stale ack (at or below an
        earlier one) drops nothing; an ack past the last assigned seq is the peer's error."""
        if seq > self.last_seq:
            raise ProtocolError("ack_ahead", f"ack of seq {seq} for run {self.run_id}, but only "
                                f"{self.last_seq} frames were sent", path="ack.seq")
        dropped = 0
        while self._frames and self._frames[0].seq <= seq:
            self._frames.popleft()
            dropped += 1
        self.acked_seq = max(self.acked_seq, seq)
        return dropped

    def unacked(self) -> list[RunFrame]:
        """The frames to replay after a reconnect, in seq order."""
        return list(self._frames)


# -- reliable delivery: the control plane's side ----------------------------------------------------

class Clock(typing.Protocol):
    def __call__(self) -> float: ...


@dataclass(frozen=True)
class Received:
    """What `RunInbox.accept` decided. `new`: record the frame; otherwise it was a duplicate and is
    dropped. `gap`: `(first, last)` seqs that never arrived before this frame, or None."""

    new: bool
    gap: tuple[int, int] | None = None


# The usual answers, shared (Received is frozen): one allocation less per frame.
_NEW = Received(True)
_DUPLICATE = Received(False)


class RunInbox:
    """The control plane's receiving state of one run (pure; the clock is injected).

    Call `accept(frame)` for each per-run frame as it arrives; record the new ones; call
    `persisted(seq)` once frames up to `seq` are durably written; then `take_ack()` returns the `Ack`
    to send when one is due (every `ack_every` frames, or `ack_after_s` after the first frame not
    yet covered by an ack; `next_ack_at()` says when to look again). Only persisted frames count
    toward the 64 and are acked: an ack promises the frames are recorded. `unprocessed` counts accepted
    frames not yet persisted, for `should_pause_reading`.

    `last_seq`/`acked_seq` start from a stored resume point after a control-plane restart, so a
    replay of frames recorded before it is dropped as duplicates.
    """

    def __init__(self, run_id: str, *, clock: Clock, last_seq: int = 0, ack_every: int = ACK_EVERY_FRAMES,
                 ack_after_s: float = ACK_AFTER_S) -> None:
        self.run_id = run_id
        self.clock = clock
        self.ack_every = ack_every
        self.ack_after_s = ack_after_s
        self.last_seq = last_seq  # highest seq accepted
        self.persisted_seq = last_seq
        self.acked_seq = last_seq
        self.gaps: list[tuple[int, int]] = []
        self.duplicates = 0
        self._pending: deque[int] = deque()  # accepted, not yet persisted
        self._since: float | None = None  # when the first frame not covered by an ack arrived
        self._count = 0  # frames persisted (or duplicates seen) since the last ack
        self._reack = False  # a duplicate arrived: the agent missed an ack and needs it again

    @property
    def unprocessed(self) -> int:
        return len(self._pending)

    def accept(self, frame: RunFrame) -> Received:
        if frame.run_id != self.run_id:
            raise ValueError(f"frame for run {frame.run_id!r} given to the inbox of run {self.run_id!r}")
        seq = frame.seq
        if self._since is None:
            self._since = self.clock()
        if seq <= self.last_seq:
            self.duplicates += 1
            self._count += 1
            if seq <= self.acked_seq:  # the agent replays what we acked: it missed that ack
                self._reack = True
            return _DUPLICATE
        gap = (self.last_seq + 1, seq - 1) if seq > self.last_seq + 1 else None
        if gap is not None:
            self.gaps.append(gap)
        self.last_seq = seq
        self._pending.append(seq)
        return _NEW if gap is None else Received(True, gap)

    def persisted(self, seq: int) -> None:
        """Frames up to `seq` are durably recorded (monotonic; a lower seq is a no-op)."""
        if seq > self.last_seq:
            raise ValueError(f"run {self.run_id}: persisted seq {seq} was never accepted (last {self.last_seq})")
        if seq <= self.persisted_seq:
            return
        self.persisted_seq = seq
        pending = self._pending
        while pending and pending[0] <= seq:
            pending.popleft()
            self._count += 1

    def _owed(self) -> bool:
        return self.persisted_seq > self.acked_seq or self._reack

    def ack_due(self) -> bool:
        if not self._owed() or self._since is None:
            return False
        return self._count >= self.ack_every or self.clock() - self._since >= self.ack_after_s

    def next_ack_at(self) -> float | None:
        """Clock time at which an ack becomes due by time, if something is waiting for one."""
        if self._since is None or not (self._owed() or self._pending):
            return None
        return self._since + self.ack_after_s

    def take_ack(self, *, force: bool = False) -> Ack | None:
        """The Ack to send now (and mark it sent), or None when none is due. `force`: send whatever
        is persisted and not acked yet regardless of cadence (at a reconnect or a finish)."""
        if not (self.ack_due() or (force and self._owed())):
            return None
        self.acked_seq = self.persisted_seq
        self._count = 0
        self._reack = False
        # Frames accepted but not persisted keep the timer running from now.
        self._since = self.clock() if self._pending else None
        return Ack(run_id=self.run_id, seq=self.acked_seq)


def should_pause_reading(unprocessed: int, *, paused: bool, limit: int = INBOX_MAX_FRAMES) -> bool:
    """Whether to stop reading the worker's socket (so TCP paces a replay): pause once a run's
    inbox holds more than `limit` unprocessed frames, resume once it is down to half of it (the gap
    keeps the reader from flapping on every frame)."""
    if paused:
        return unprocessed > limit // 2
    return unprocessed > limit
