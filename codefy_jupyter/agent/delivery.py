"""Every run's frames on their way to the control plane: spooled first, sent when connected, dropped
when acked, replayed after a reconnect.

Each run has a `RunSpool` (`agent-runs/<run>/spool.jsonl`, agent/spool.py) and `sent_seq`, the last
seq written to the current connection. A new frame is spooled (numbered, flushed), then sent at once
when the connection is up and everything before it was sent; otherwise `replay` sends it later, in
order. After a reconnect every unacked frame is sent again from the spool (the control plane drops
duplicates by seq). A run whose `run_finished` is acked is done: its spool file goes, its folder
(output.log, data/) stays.

Batches: when the connection negotiated `batch`, live frames added in one turn of the event loop go
out together, as one `batch` message (or alone when there is one) at the end of that turn, and a
replay sends the spooled texts in batches; a frame is still spooled before it is queued. Without
`batch` every frame is its own message, as any control plane reads them.

Spools survive the agent: `reload` finds this agent's spooled runs (`owner` file = registered name)
after a restart. A run reloaded without a `run_finished` had its process end with the old agent, so
one is added (failed, `agent_restarted`) for the control plane to close it with (as interrupted: the
run did not fail, its agent went away).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Awaitable, Callable

from . import private
from ..wire.codec import BATCH_MAX_BYTES, BATCH_MAX_FRAMES, encode_batch
from ..wire.frames import AGENT_RESTARTED, ProtocolError, RunFinished, RunFrame
from .pipe_frames import too_large_warning
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
        self._batching = False
        self._queued: list[str] = []  # live frames of this loop turn, sent as one batch at its end
        self._queued_chars = 0
        self._flush_handle: asyncio.Handle | None = None
        self._unwritten: dict[str, RunSpool] = {}  # spools holding lines of queued frames
        self.changed = asyncio.Event()  # a run became done (one-shot and stop wait on it)
        self.on_done: Callable[[], None] | None = None  # called when a run becomes done

    # -- runs ---------------------------------------------------------------------------------------
    def open(self, run_id: str) -> Delivery:
        found = self.runs.get(run_id)
        if found is not None:
            return found
        directory = run_dir(self.runs_dir, run_id)
        private.make_dir(directory)
        private.write_text(directory / OWNER_FILE, self.owner)
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
                    error={"type": "AgentRestarted", "code": AGENT_RESTARTED,
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
        spool = delivery.spool
        live = self._send is not None and not self._replaying and delivery.sent_seq == spool.last_seq
        # A frame that joins this turn's batch is written to the spool with the batch, just before
        # it is sent (one write for many frames); any other frame is written now.
        defer = live and self._batching
        try:
            ((numbered, text),) = spool.add_many_encoded([frame], defer=defer)
        except ProtocolError as err:  # too large for one frame: say so instead
            ((numbered, text),) = spool.add_many_encoded([too_large_warning(run_id, frame, str(err))], defer=defer)
        except (ValueError, TypeError) as err:
            log.error("run %s: dropped a %s frame that cannot be encoded: %s", run_id, frame.type, err)
            return
        if isinstance(numbered, RunFinished):
            delivery.finished_seq = numbered.seq
        if live:
            delivery.sent_seq = numbered.seq
            if defer:
                self._unwritten[run_id] = spool
                self._queue(text)
            else:
                self._send(text)  # type: ignore[misc]

    def _queue(self, text: str) -> None:
        # Characters stand in for bytes (a character is 1 to 4 UTF-8 bytes): a batch stays far
        # under MAX_FRAME_BYTES either way.
        if self._queued and (len(self._queued) >= BATCH_MAX_FRAMES
                             or self._queued_chars + len(text) > BATCH_MAX_BYTES):
            self._flush()
        self._queued.append(text)
        self._queued_chars += len(text)
        if self._flush_handle is None:
            self._flush_handle = asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        """Send the frames queued in this loop turn (one message)."""
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        self._write_spools()
        texts, self._queued, self._queued_chars = self._queued, [], 0
        if texts and self._send is not None:
            self._send(texts[0] if len(texts) == 1 else encode_batch(texts))

    def _write_spools(self) -> None:
        spools, self._unwritten = self._unwritten, {}
        for spool in spools.values():
            spool.write_deferred()

    def _drop_queued(self) -> None:
        # Spooled all the same; their runs' sent_seq is reset at the next connection, so they are
        # replayed from the spool.
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        self._write_spools()
        self._queued, self._queued_chars = [], 0

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
        if self.on_done is not None:
            self.on_done()

    # -- the connection -----------------------------------------------------------------------------
    def disconnected(self) -> None:
        self._send = None
        self._drop_queued()

    async def connected(self, send: Callable[[str], object], drain: Callable[[], Awaitable[None]], *,
                        batch: bool = False) -> int:
        """A new connection: send every unacked frame of every run, in seq order per run, then go live.
        `batch`: the connection negotiated the `batch` capability. Returns how many frames were
        replayed."""
        self._drop_queued()
        self._send = send
        self._batching = batch
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
                    # The texts as spooled, sent in chunks; frames added meanwhile are picked up by
                    # the next pass of the outer loop.
                    items = delivery.spool.encoded_after(delivery.sent_seq)
                    for chunk in _chunks(items, REPLAY_CHUNK if not batch else BATCH_MAX_FRAMES):
                        if self._send is not send:
                            return replayed  # the connection dropped mid-replay
                        if batch and len(chunk) > 1:
                            send(encode_batch([text for _, text in chunk]))
                        else:
                            for _, text in chunk:
                                send(text)
                        delivery.sent_seq = chunk[-1][0]
                        replayed += len(chunk)
                        await drain()
        finally:
            if self._send is send:
                self._replaying = False
        return replayed

    def close(self) -> None:
        self._drop_queued()
        for delivery in self.runs.values():
            delivery.spool.close()


def _chunks(items: list[tuple[int, str]], most: int) -> list[list[tuple[int, str]]]:
    """Consecutive chunks of at most `most` items and about BATCH_MAX_BYTES characters (a longer
    item goes alone)."""
    chunks: list[list[tuple[int, str]]] = []
    chunk: list[tuple[int, str]] = []
    chars = 0
    for item in items:
        size = len(item[1])
        if chunk and (len(chunk) >= most or chars + size > BATCH_MAX_BYTES):
            chunks.append(chunk)
            chunk, chars = [], 0
        chunk.append(item)
        chars += size
    if chunk:
        chunks.append(chunk)
    return chunks
