"""One /codefy/ws/worker connection's protocol, sans I/O (like h11's connection object).

The socket handler feeds the session what happened (opened, a message arrived, the hello deadline
passed, the hello was judged, the socket closed) and carries out the actions it answers, in order:
send a frame, close with a code, judge a hello, hand frames to the WorkerService, warn a run about a
frame that could not be read. No socket, no timer, no store here, so every path of the protocol is
tested without a server (tests/unit/test_worker_session.py).

The rules: a connection refused before anything was read (host, origin, credentials) is closed at
once and reads nothing; then `hello` must come first and within the deadline, else a `reject` and a
close (4400, or 4408 for the deadline); a malformed frame before the hello is rejected the same
way, and a hello over one of wire/hello_limits.py's bounds too, closed with 4413; after the
welcome, a malformed frame is dropped alone (the agent keeps it spooled) and, when it names a run,
that run's log says so; a batch's frames go on in order as if they had come one by one,
a malformed one among them dropped alone, what came before it handed on before its warning.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Union

from ...wire.hello_limits import TOO_LARGE, check_hello_size
from ...wire.protocol import (
    MAX_FRAME_BYTES, Batch, Frame, Hello, ProtocolError, Reject, RunFrame, decode, unpack,
)

# Close codes of /codefy/ws/worker (the 4000s are the application's own).
CLOSE_HOST_ORIGIN = 4003
CLOSE_CREDENTIALS = 4401
CLOSE_REJECTED = 4400
CLOSE_HELLO_TIMEOUT = 4408
CLOSE_HELLO_TOO_LARGE = 4413  # a hello over one of wire/hello_limits.py's bounds (the reason names the field)
CLOSE_REPLACED = 4409
CLOSE_REMOVED = 4410
CLOSE_TOO_BIG = 1009  # RFC 6455: tornado sends it itself for a frame over the size limit

AWAITING_HELLO, JUDGING, OPEN, CLOSED = "awaiting_hello", "judging", "open", "closed"


@dataclass(frozen=True)
class Send:
    frame: Frame


@dataclass(frozen=True)
class Close:
    code: int
    reason: str


@dataclass(frozen=True)
class Judge:
    """Judge this hello (WorkerService.hello), then tell the session with `judged`."""

    hello: Hello


@dataclass(frozen=True)
class Connected:
    """The welcome is sent: runs waiting for this worker may go (WorkerService.connected)."""

    worker: Any


@dataclass(frozen=True)
class Deliver:
    """One frame after the welcome, for WorkerService.frame."""

    frame: Frame


@dataclass(frozen=True)
class Record:
    """Per-run frames of one batch, in order, for WorkerService.frames."""

    frames: tuple[RunFrame, ...]


@dataclass(frozen=True)
class BadFrame:
    """A malformed frame after the welcome: logged, and warned in `run_id`'s log when it names one."""

    code: str
    detail: str  # what was wrong with it
    message: str  # the run warning's text
    run_id: str | None
    params: dict[str, Any]


Action = Union[Send, Close, Judge, Connected, Deliver, Record, BadFrame]


class WorkerSession:
    """`refusal`: (close code, reason) when the connection is refused before anything is read."""

    def __init__(self, *, hello_timeout_s: float, refusal: tuple[int, str] | None = None) -> None:
        self.hello_timeout_s = hello_timeout_s
        self.refusal = refusal
        self.state = AWAITING_HELLO
        self.worker: Any = None

    # -- what happened --------------------------------------------------------------------------------
    def opened(self) -> list[Action]:
        """The socket is open. The caller arms the hello deadline unless the session closed."""
        if self.refusal is not None:
            self.state = CLOSED
            return [Close(*self.refusal)]
        return []

    def hello_deadline(self) -> list[Action]:
        """`hello_timeout_s` passed since the socket opened."""
        if self.state != AWAITING_HELLO:
            return []
        timeout = self.hello_timeout_s
        return self._reject("hello_timeout", f"no hello within {timeout:g} s of connecting", {"seconds": timeout},
                            CLOSE_HELLO_TIMEOUT)

    def received(self, message: str | bytes) -> list[Action]:
        """A message came. Before the welcome, only a hello is taken (to be judged)."""
        if self.state == CLOSED or self.refusal is not None:
            return []
        try:
            if self.worker is None:
                check_hello_size(message)  # before parsing: a first frame is a hello or refused
            frame = decode(message, sender="agent")
        except ProtocolError as err:
            if self.worker is None:
                return self._reject(err.code, str(err), {"path": err.path, **err.params},
                                    CLOSE_HELLO_TOO_LARGE if err.code == TOO_LARGE else CLOSE_REJECTED)
            return [self._bad_frame(err, message)]
        if self.worker is None:
            if not isinstance(frame, Hello):
                return self._reject("hello_required", f"the first frame must be hello, not {frame.type}",
                                    {"type": frame.type})
            self.state = JUDGING
            return [Judge(frame)]
        if type(frame) is Batch:
            return self._batch(frame)
        return [Deliver(frame)]

    def judged(self, reply: Frame, worker: Any, *, still_open: bool = True) -> list[Action]:
        """WorkerService.hello answered: (welcome, the worker) or (reject, None). `still_open`: the
        socket did not close while the hello was judged."""
        if worker is None:
            assert isinstance(reply, Reject)
            self.state = CLOSED
            return [Send(reply), Close(CLOSE_REJECTED, reply.message[:120])]
        if not still_open:
            self.state = CLOSED
            return []
        self.worker = worker
        self.state = OPEN
        return [Send(reply), Connected(worker)]

    def closed(self, close_code: int | None, protocol_close: int | None = None) -> dict[str, Any] | None:
        """The socket closed (`protocol_close`: the code tornado closed it with itself, if it did).
        The reason a welcomed worker's runs give for the drop; None when no worker was welcomed."""
        self.state = CLOSED
        if self.worker is None:
            return None
        if protocol_close == CLOSE_TOO_BIG:
            return {"code": "frame_too_large", "params": {"close_code": CLOSE_TOO_BIG, "limit_bytes": MAX_FRAME_BYTES},
                    "text": f"it sent a frame over the limit of {MAX_FRAME_BYTES} bytes"}
        return {"code": "connection_closed", "params": {"close_code": close_code},
                "text": "connection closed" + (f" ({close_code})" if close_code else "")}

    # -- decisions ------------------------------------------------------------------------------------
    def _reject(self, code: str, message: str, params: dict[str, Any], close_code: int = CLOSE_REJECTED) -> list[Action]:
        self.state = CLOSED
        return [Send(Reject(code=code, message=message, params=params)), Close(close_code, message[:120])]

    def _batch(self, batch: Batch) -> list[Action]:
        actions: list[Action] = []
        frames: list[RunFrame] = []
        for item, raw in zip(unpack(batch), batch.frames):
            if isinstance(item, ProtocolError):
                if frames:  # what came before it is recorded before its warning
                    actions.append(Record(tuple(frames)))
                    frames = []
                actions.append(self._bad_frame(item, raw))
            else:
                frames.append(item)  # type: ignore[arg-type]
        if frames:
            actions.append(Record(tuple(frames)))
        return actions

    def _bad_frame(self, err: ProtocolError, message: Any) -> BadFrame:
        name = self.worker.name
        return BadFrame(err.code, str(err), f"worker {name} sent a frame that could not be read: {err}", run_id_of(message),
                        {"worker": name, "code": err.code, "path": err.path, "error": str(err)})


def run_id_of(message: str | bytes | Any) -> str | None:
    """The run a malformed frame names, if any (`message`: its text, or a batch item as parsed)."""
    if isinstance(message, (str, bytes)):
        try:
            raw = json.loads(message)
        except (ValueError, UnicodeDecodeError, RecursionError):
            return None
    else:
        raw = message
    run_id = raw.get("run_id") if isinstance(raw, dict) else None
    return run_id if isinstance(run_id, str) else None


__all__ = [
    "AWAITING_HELLO", "Action", "BadFrame", "CLOSE_CREDENTIALS", "CLOSE_HELLO_TIMEOUT", "CLOSE_HELLO_TOO_LARGE", "CLOSE_HOST_ORIGIN",
    "CLOSE_REJECTED", "CLOSE_REMOVED", "CLOSE_REPLACED", "CLOSE_TOO_BIG", "CLOSED", "Close", "Connected", "Deliver",
    "JUDGING", "Judge", "OPEN", "Record", "Send", "WorkerSession", "run_id_of",
]
