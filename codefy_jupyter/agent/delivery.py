"""Every run's frames on their way to the control plane: spooled first, sent when connected, dropped
when acked, replayed after a reconnect.

Each run has a `RunSpool` (`agent-runs/<run>/spool.jsonl`, agent/spool.py) and `sent_seq`, the last
seq written to the current connection. A new frame is spooled (numbered, flushed), then sent at once
when the connection is up and everything before it was sent; otherwise `replay` sends it later, in
order. After a reconnect every unacked frame is sent again from the spool (the control plane drops
duplicates by seq). A run whose `run_finished` is acked is done: its spool file goes, its folder
(output.log, data/) stays.

Spools survive the agent: `reload` finds this agent's spooled runs (`owner` file = registered name)
after a restart. A run reloaded without a `run_finished` had its process end with the old agent, so
one is added (failed, `agent_restarted`) for the control plane to close it with.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Awaitable, Callable

from ..core.worker_protocol import ProtocolError, RunFinished, RunFrame, encode
from .frames import too_large_warning
from .spool import RunSpool, SpoolError, run_dir, spooled_runs

log = logging.getLogger("codefy.agent")

OWNER_FILE = "owner"
# Replay yields to the event loop (heartbeats, acks, new frames) after this many frames.
REPLAY_CHUNK = 256

Send = Callable[[str], Awaitable[None] | None]


@dataclass
class Delivery:
    spool: RunSpool
    sent_seq: int = 0
    finished_seq: int | None = None  # seq of run_finished, once spooled

    @property
    def done(self) -> bool:
        return self.finished_seq is not None and self.spool.acked_seq >= self.finished_seq


class Deliveries:
    def __init__(self, runs_dir: Path, owner: str) -> None:
        self.runs_dir = Path(runs_dir)
        self.owner = owner
        self.runs: dict[str, Delivery] = {}
        self._send: Callable[[str], object] | None = None
        self._replaying = False
        self.changed = asyncio.Event()  # a run became done (one-shot and stop wait on it)

    # -- runs ---------------------------------------------------------------------------------------
    def open(self, run_id: str) -> Delivery:
        found = self.runs.get(run_id)
        if found is not None:
            return found
        directory = run_dir(self.runs_dir, run_id)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / OWNER_FILE).write_text(self.owner, encoding="utf-8")
        delivery = Delivery(RunSpool(directory, run_id))
        self.runs[run_id] = delivery
        return delivery

    def reload(self, live: set[str] = frozenset()) -> list[str]:
        """Load this agent's spooled runs (after a restart). Returns their ids."""
        found = []
        for run_id in spooled_runs(self.runs_dir):
            if run_id in self.runs:
                continue
            try:
                owner = (self.runs_dir / run_id / OWNER_FILE).read_text(encoding="utf-8").strip()
            except OSError:
                continue
            if owner != self.owner:
                continue
            try:
                spool = RunSpool(run_dir(self.runs_dir, run_id), run_id)
            except SpoolError as err:
                log.error("run %s: its spool cannot be read, its unsent frames are lost: %s", run_id, err)
                continue
            delivery = Delivery(spool)
            finished = [f for f in spool.unacked() if isinstance(f, RunFinished)]
            if finished:
                delivery.finished_seq = finished[-1].seq
            self.runs[run_id] = delivery
            if delivery.finished_seq is None and run_id not in live:
                self.add(run_id, RunFinished(
                    run_id=run_id, status="failed",
                    error={"type": "AgentRestarted", "code": "agent_restarted",
                           "message": "the worker agent stopped while this run was executing; its process ended "
                                      "with it"}))
            if delivery.done or (delivery.finished_seq is None and len(spool) == 0 and spool.last_seq == 0):
                self._forget(run_id)
                continue
            found.append(run_id)
        return found

    def known(self) -> set[str]:
        return set(self.runs)

    def unfinished(self) -> set[str]:
        return {r for r, d in self.runs.items() if d.finished_seq is None}

    def alive(self) -> dict[str, int]:
        """run_alive's content: each run with the last seq assigned."""
        return {run_id: d.spool.last_seq for run_id, d in sorted(self.runs.items())}

    # -- frames -------------------------------------------------------------------------------------
    def add(self, run_id: str, frame: RunFrame) -> None:
        delivery = self.runs.get(run_id) or self.open(run_id)
        if delivery.finished_seq is not None:
            log.warning("run %s: dropped a %s frame after its run_finished", run_id, frame.type)
            return
        try:
            ((numbered, text),) = delivery.spool.add_many_encoded([frame])
        except ProtocolError as err:  # too large for one frame: say so instead
            ((numbered, text),) = delivery.spool.add_many_encoded([too_large_warning(run_id, frame, str(err))])
        except (ValueError, TypeError) as err:
            log.error("run %s: dropped a %s frame that cannot be encoded: %s", run_id, frame.type, err)
            return
        if isinstance(numbered, RunFinished):
            delivery.finished_seq = numbered.seq
        if self._send is not None and not self._replaying and delivery.sent_seq == numbered.seq - 1:
            delivery.sent_seq = numbered.seq
            self._send(text)

    def ack(self, run_id: str, seq: int) -> None:
        delivery = self.runs.get(run_id)
        if delivery is None:
            return
        try:
            delivery.spool.ack(min(seq, delivery.spool.last_seq))
        except ProtocolError as err:
            log.warning("run %s: %s", run_id, err)
            return
        if delivery.done:
            self._forget(run_id)

    def _forget(self, run_id: str) -> None:
        delivery = self.runs.pop(run_id)
        delivery.spool.close()
        try:
            delivery.spool.path.unlink()
        except OSError:
            pass
        self.changed.set()

    # -- the connection -----------------------------------------------------------------------------
    def disconnected(self) -> None:
        self._send = None

    async def connected(self, send: Callable[[str], object], drain: Callable[[], Awaitable[None]]) -> int:
        """A new connection: send every unacked frame of every run, in seq order per run, then go live.
        Returns how many frames were replayed."""
        self._send = send
        self._replaying = True
        replayed = 0
        try:
            for delivery in self.runs.values():
                delivery.sent_seq = delivery.spool.acked_seq
            while True:
                pending = [(run_id, d) for run_id, d in list(self.runs.items())
                           if d.sent_seq < d.spool.last_seq]
                if not pending:
                    break
                for run_id, delivery in pending:
                    frames = [f for f in delivery.spool.unacked() if f.seq > delivery.sent_seq]
                    for i, frame in enumerate(frames):
                        if self._send is not send:
                            return replayed  # the connection dropped mid-replay
                        send(encode(frame))
                        delivery.sent_seq = frame.seq
                        replayed += 1
                        if i % REPLAY_CHUNK == REPLAY_CHUNK - 1:
                            await drain()
                await drain()
        finally:
            if self._send is send:
                self._replaying = False
        return replayed

    def close(self) -> None:
        for delivery in self.runs.values():
            delivery.spool.close()
