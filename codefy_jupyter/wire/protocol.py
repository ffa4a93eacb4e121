"""The /codefy/ws/worker protocol: frames, encode/decode/validate, and the reliable-delivery
state machines. Sans-IO and shared by both ends (the agent imports this module, so it must never
import torch, tornado or anything of `server/`).

A frame is one JSON object per WebSocket text message with a `type` and that type's fields.

    agent -> control plane   hello, heartbeat, run_alive, and per run: run_started, event, metrics,
                             artifact, warning, run_facts, run_finished
    control plane -> agent   welcome, reject, assign, cancel, drain, ack; credentials (capability s3)
    agent -> control plane   run_released (capability run_released: the run's cards are free while
                             its files upload; the run ends with its run_finished)

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

Bounds (wire/hello_limits.py): a hello carries at most 256 devices, 4096 node types, names of 128
characters and 2 MiB in all (the module lists every bound); over one it is refused with a `reject`
`too_large` naming the field and close 4413, so no agent can make what the control plane keeps and
shows of it (GET workers) grow without bound. Heartbeats are bounded the same way.

Errors: `ProtocolError` is "the peer sent something wrong" (a malformed frame), with a `code` and
the `path` of the offending field, e.g. `ProtocolError("bad_field", ..., path="hello.devices[1]")`.
Mistakes of our own side (encoding a frame with a wrong field type, acking past what was sent to us)
raise `ValueError`/`TypeError`.

Where it lives: wire/frames.py (version, capabilities, timing defaults, frame types, ProtocolError),
wire/codec.py (encode/decode/validate, batches), wire/hello_limits.py (the hello's bounds),
wire/acks.py (Outbox, RunInbox). This module re-exports them, so a reader of the protocol as a
whole (tests, benchmarks) has one name for it.
"""

from __future__ import annotations

from .acks import (
    ACK_AFTER_S, ACK_EVERY_FRAMES, Clock, INBOX_MAX_FRAMES, Outbox, Received, RunInbox, should_pause_reading,
)
from .codec import (
    BATCH_MAX_BYTES, BATCH_MAX_FRAMES, MAX_FRAME_BYTES, check_frame_size, decode, encode, encode_batch,
    from_dict, numbered, to_dict, unpack,
)
from .hello_limits import HELLO_MAX_BYTES, HELLO_MAX_DEVICES, HELLO_MAX_NODE_TYPES, TOO_LARGE, check_hello_size
from .frames import (
    AGENT_FRAMES, AGENT_RESTARTED, AGENT_STOPPED, Ack, Artifact, Assign, Batch, CAPABILITY_FRAMES, Cancel, Credentials,
    DEFAULT_GRACE_S,
    DEFAULT_HEARTBEAT_S, Drain, Event, FRAME_TYPES, Frame, HEARTBEAT_MISSES, HELLO_TIMEOUT_S, Heartbeat,
    Hello, KILL_AFTER_TERMINATE_S, KNOWN_CAPABILITIES, Metrics, PROTOCOL_VERSION, ProtocolError,
    RUN_FINISHED_STATUSES, Reject, RunAlive, RunFacts, RunFinished, RunFrame, RunReleased, RunStarted, RunWarning,
    SERVER_FRAMES, SUPPORTED_CAPABILITIES, Welcome, negotiate,
)

__all__ = [
    "ACK_AFTER_S", "ACK_EVERY_FRAMES", "AGENT_FRAMES", "AGENT_RESTARTED", "AGENT_STOPPED", "Ack", "Artifact",
    "Assign",
    "BATCH_MAX_BYTES", "BATCH_MAX_FRAMES", "Batch", "CAPABILITY_FRAMES", "Cancel", "Clock", "Credentials", "DEFAULT_GRACE_S",
    "DEFAULT_HEARTBEAT_S", "Drain", "Event", "FRAME_TYPES", "Frame", "HEARTBEAT_MISSES", "HELLO_TIMEOUT_S",
    "HELLO_MAX_BYTES", "HELLO_MAX_DEVICES", "HELLO_MAX_NODE_TYPES", "Heartbeat", "Hello", "INBOX_MAX_FRAMES", "KILL_AFTER_TERMINATE_S", "KNOWN_CAPABILITIES",
    "MAX_FRAME_BYTES", "Metrics", "Outbox", "PROTOCOL_VERSION", "ProtocolError", "RUN_FINISHED_STATUSES",
    "Received", "Reject", "RunAlive", "RunFacts", "RunFinished", "RunFrame", "RunInbox", "RunReleased", "RunStarted",
    "RunWarning", "SERVER_FRAMES", "SUPPORTED_CAPABILITIES", "Welcome", "check_frame_size", "decode",
    "encode", "encode_batch", "from_dict", "negotiate", "numbered", "should_pause_reading", "to_dict",
    "unpack"
]
