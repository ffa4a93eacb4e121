"""Reliable delivery of per-run frames: the agent's `Outbox` (numbering, what to replay) and the
control plane's `RunInbox` (duplicates, gaps, when to ack), and when to pause reading. Pure; the
clock is injected."""

from __future__ import annotations

import typing
from collections import deque
from dataclasses import dataclass
from typing import Iterable

from .codec import numbered
from .frames import Ack, ProtocolError, RunFrame

# Reliable delivery (seed: "ack every 64 frames or 1 s"; "pause reading past 10,000 frames").
ACK_EVERY_FRAMES = 64
ACK_AFTER_S = 1.0
INBOX_MAX_FRAMES = 10_000


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
