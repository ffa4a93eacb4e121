"""The worker protocol's vocabulary: its version and capabilities, its timing defaults, every frame
type (a frozen dataclass whose annotations are the wire schema) and `ProtocolError`. Pure; the
agent imports it (see wire/protocol.py for how the protocol works as a whole)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Iterable

from .run_options import ExecutionOptions

# 3: as the seed (ack came with 2, mount fields with 3). Bump only for a change the other side
# would misread; new optional features are capabilities instead.
PROTOCOL_VERSION = 3


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
    "run_facts", "batch", "run_released",
})
# What this version of the code implements.
# An agent offers `s3` only when boto3 imports there (agent/s3.py).
SUPPORTED_CAPABILITIES: frozenset[str] = frozenset({"ack", "one_shot", "instances", "run_facts", "batch", "mounts",
                                                    "transfer", "memory_budget", "s3", "record_outputs",
                                                    "run_released"})


def negotiate(offered: Iterable[str], supported: Iterable[str] = SUPPORTED_CAPABILITIES) -> list[str]:
    """The capabilities both sides list, sorted. Unknown names are simply not in the answer."""
    return sorted(set(offered) & set(supported))


class ProtocolError(Exception):
    """The peer sent a frame we cannot use.

    code: `not_json`, `too_deep`, `not_object`, `missing_type`, `unknown_type`, `wrong_direction`,
          `missing_field`, `bad_field`, `bad_value`, `frame_too_large`, `too_large` (a field over
          its bound, wire/hello_limits.py), `ack_ahead`.
    path: the offending field (`assign.devices[0]`), or None for the frame as a whole.
    params: more about it for other languages (`too_large`: `got` and `limit`).
    """

    def __init__(self, code: str, message: str, *, path: str | None = None,
                 params: dict[str, Any] | None = None) -> None:
        super().__init__(message if path is None else f"{path}: {message}")
        self.code = code
        self.path = path
        self.reason = message
        self.params = dict(params or {})

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": str(self), "params": {"path": self.path, **self.params}}


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
    (`{"cuda:0": "cuda:2"}`). For a run with memory budgets it is sent only once the process has
    capped its allocator: `memory_limit` the caps `{card: {bytes, fraction}}`, `memory_cap` why
    there are none otherwise (`no_cuda`, `no_budgeted_card`, `cpu_ranks`) or `applied`; both absent
    for a run without budgets."""

    type: ClassVar[str] = "run_started"
    pid: int | None = None
    visible_devices: list[str] = field(default_factory=list)
    device_aliases: dict[str, str] = field(default_factory=dict)
    memory_limit: dict[str, Any] | None = None
    memory_cap: str | None = None


@dataclass(frozen=True, kw_only=True)
class Event(RunFrame):
    """One event of the run's log, `{"type", "payload"}`, as the run process built it with
    wire/run_events.py (metrics, artifacts and node warnings included); the control plane writes it
    as is. Older agents may send a raw engine event `{"event": kind, ...}` instead."""

    type: ClassVar[str] = "event"
    event: dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class Metrics(RunFrame):
    """Metric points: `[{"name", "value", "step"?, "node_id"?}, ...]`. Sent by older agents (newer
    ones send each metric as an `event`); still accepted and recorded."""

    type: ClassVar[str] = "metrics"
    points: list[dict[str, Any]]


@dataclass(frozen=True, kw_only=True)
class Artifact(RunFrame):
    """Sent by older agents (newer ones send an artifact as an `event`); still accepted and recorded."""

    type: ClassVar[str] = "artifact"
    kind: str
    path: str
    meta: dict[str, Any] = field(default_factory=dict)
    node_id: str | None = None


@dataclass(frozen=True, kw_only=True)
class RunWarning(RunFrame):
    """A warning about the run from the agent itself (`code`/`params` for the panel's language,
    `message` in English). A node's own warning travels as an `event` (older agents: this frame)."""

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
    control plane's closing event reports them as for an in-process run). `memory_limit`: the
    allocator caps the run set on cards shared by memory, `{card: {bytes, fraction}}` (one for
    all of a DDP run's ranks)."""

    type: ClassVar[str] = "run_finished"
    status: str
    error: dict[str, Any] | None = None
    peak_memory: dict[str, Any] | None = None
    memory_limit: dict[str, Any] | None = None
    output_tail: str | None = None
    exit_code: int | None = None
    signal: int | None = None
    executed: int = 0
    cached: int = 0
    metrics: dict[str, Any] = field(default_factory=dict)
    duration_s: float | None = None


@dataclass(frozen=True, kw_only=True)
class RunReleased(RunFrame):
    """The run's process is gone (or, with record_outputs, has reported and only writes its
    outputs) but the run has not ended: its files still upload (transfer and S3 backends). The
    control plane gives the run's device slots and card memory back now and keeps the run
    `running` until its `run_finished` (capability `run_released`; ours, not the seed's). At most
    one per run; a repeat or a late one changes nothing. Per-run, so it is spooled and replayed
    like any other. `upload_bytes`: what is left to upload, when the agent knows it."""

    type: ClassVar[str] = "run_released"
    upload_bytes: int | None = None


@dataclass(frozen=True, kw_only=True)
class OutputAnswer(Frame):
    """The answer to a `fetch_output`: its `http_status` and its JSON body in `chunk`s, in order, the
    last with `final` (wire/output_reads.py computes it, as the control plane does for its own runs)."""

    type: ClassVar[str] = "output_answer"
    sender: ClassVar[str] = "agent"
    request_id: str
    http_status: int
    chunk: str = ""
    final: bool = True


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
    """Run this graph with `options` (wire/run_options.py `ExecutionOptions`: seed, deterministic,
    max_parallel_nodes, record_outputs, provenance; absent: the defaults). `devices`: the run's cards in order (the child's CUDA_VISIBLE_DEVICES);
    `device`: the run's device as the run names it. The graph has its SECRET values restored.
    `cpu_threads`: the run's CPU thread budget (OMP_NUM_THREADS, MKL_NUM_THREADS and torch's
    threads in its process); absent: no budget. Older agents ignore it, as every unknown field.
    `memory_budgets`: on cards shared by memory, the run's budget in MiB per card (the run's device
    names, e.g. `{"cuda:0": 4096}`); the child caps its allocator to it before run_started. Sent to
    agents listing the `memory_budget` capability.
    `storage`: how the run reaches its files (core/storage/plan.py), absent for a run without files:
    `{"backend": "local"|"mount", "run_dir", "label"?}` (the run's folder, the graph already points
    into the mount), or `{"backend": "transfer", "inputs": [{"node_id", "param", "sha256", "size",
    "name"}]}` (download each input from `runs/{run_id}/inputs/{sha256}` with the worker token, point
    the param at it, upload the run's files to `runs/{run_id}/artifacts/upload` before run_finished),
    or `{"backend": "s3", "inputs": [... as transfer, plus "key"], "s3": {"bucket", "prefix",
    "endpoint_url"?, "region"?, "credentials": {"access_key_id", "secret_access_key",
    "session_token"?, "expires_at"?}}}` (the same, with the bucket: inputs from their keys, the run's
    files to `wire/s3_keys.object_key(prefix, path)`; sent to agents listing `s3`)."""

    type: ClassVar[str] = "assign"
    sender: ClassVar[str] = "server"
    run_id: str
    graph: dict[str, Any]
    options: ExecutionOptions = field(default_factory=ExecutionOptions)
    device: str
    devices: list[str] = field(default_factory=list)
    grace_s: float | None = None
    cpu_threads: int | None = None
    storage: dict[str, Any] | None = None
    memory_budgets: dict[str, int] | None = None


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
class FetchOutput(Frame):
    """Read a run's recorded outputs kept on the worker (capability `record_outputs`): `kind` and
    `query` as wire/output_reads.py `answer` takes them; `wait_s`: how long the control plane waits
    (the agent gives up a little earlier, so its own 504 reaches the client)."""

    type: ClassVar[str] = "fetch_output"
    sender: ClassVar[str] = "server"
    request_id: str
    run_id: str
    kind: str
    query: dict[str, Any] = field(default_factory=dict)
    wait_s: float = 60.0


@dataclass(frozen=True, kw_only=True)
class CancelFetch(Frame):
    """The control plane stopped waiting for this read: stop it, free its place."""

    type: ClassVar[str] = "cancel_fetch"
    sender: ClassVar[str] = "server"
    request_id: str


@dataclass(frozen=True, kw_only=True)
class DropOutputs(Frame):
    """The control plane no longer keeps this run's recorded outputs: remove them from the worker."""

    type: ClassVar[str] = "drop_outputs"
    sender: ClassVar[str] = "server"
    run_id: str


@dataclass(frozen=True, kw_only=True)
class Batch(Frame):
    """Several per-run frames in one message (capability `batch`; see the module's docstring). Each
    item is a frame object as it would be sent alone; `unpack` validates them one by one."""

    type: ClassVar[str] = "batch"
    sender: ClassVar[str] = "agent"
    frames: list[Any]


@dataclass(frozen=True, kw_only=True)
class Credentials(Frame):
    """Fresh S3 credentials for a running S3-backend run (capability `s3`), sent before the ones
    in its assign (or the last of these) expire; same shape as `assign.storage.s3.credentials`."""

    type: ClassVar[str] = "credentials"
    sender: ClassVar[str] = "server"
    run_id: str
    credentials: dict[str, Any]


AGENT_FRAMES: tuple[type[Frame], ...] = (Hello, Heartbeat, RunAlive, RunStarted, Event, Metrics, Artifact,
                                         RunWarning, RunFacts, RunFinished, OutputAnswer)
SERVER_FRAMES: tuple[type[Frame], ...] = (Welcome, Reject, Assign, Cancel, Drain, Ack, FetchOutput, CancelFetch,
                                          DropOutputs)
# Frames of negotiated capabilities (not in the seed's table).
CAPABILITY_FRAMES: tuple[type[Frame], ...] = (Batch, Credentials, RunReleased)
FRAME_TYPES: dict[str, type[Frame]] = {cls.type: cls for cls in AGENT_FRAMES + SERVER_FRAMES + CAPABILITY_FRAMES}
RUN_FINISHED_STATUSES = frozenset({"succeeded", "failed", "cancelled"})
# The `error.code` of a `cancelled` run_finished whose run the agent stopped because the agent itself
# was stopped (not because the run was cancelled): the control plane records the run as interrupted.
# A control plane that does not know the code records it as cancelled, as before.
AGENT_STOPPED = "agent_stopped"
# The `error.code` of the `failed` run_finished an agent adds, once restarted, for a run whose process
# ended with the agent before it (SIGKILL, a crash): the control plane records that run as
# interrupted too, since the run itself did not fail, and a study runs its repetition again.
AGENT_RESTARTED = "agent_restarted"
