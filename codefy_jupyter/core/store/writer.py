"""The store's writer: one SQLite connection on a thread of its own, committing queued writes in
batches (group commit) and handing each batch's outcomes back to the event loop in commit order.

Why a thread that takes writes itself, rather than a loop task handing batches to an executor:
a write queued by the loop reaches the thread at once (a queue put wakes it), not after the loop
has come round to a writer task and then to the executor hand-off. Under load, those loop turns
waited behind everything else the loop had to do, and they were a visible share of a submit's
latency. Batching is unchanged: the thread takes every write queued by the time it is free, so
the writes queued while one commit runs share the next one, and an idle store adds no delay.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import sqlite3
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ..errors import Unavailable
from ..telemetry import SHORT_S, Histogram
from .checkpoints import CheckpointPolicy
from .queries import apply_batch
from .reconnect import Backoff, Outage

log = logging.getLogger(__name__)

# A batch's outcomes, as apply_batch gives them: [(ok, result or error)] and [writes per commit].
Outcomes = tuple[list[tuple[bool, Any]], list[int]]


@dataclass
class Write:
    op: Callable[[sqlite3.Connection], Any]
    future: asyncio.Future
    after_commit: Callable[[Any], None] | None


BUSY_TIMEOUT_MS = 5000  # the writer connection's, as database.py sets it
RESTART_WAIT_MS = 100   # the longest a RESTART checkpoint waits for the readers reading now

_STOP = object()   # commit what is queued before this, then report drained
_CLOSE = object()  # close the connection and end the thread


class WriterThread:
    """Start with `await WriterThread.start(...)`; `put` writes (loop thread only); `await
    drain()` commits everything queued so far and takes no more; `await close()` then closes
    the connection. `deliver(batch, outcomes)`, set by the owner before the first `put`, runs on
    the loop after each commit, in commit order. With a `checkpoints` policy the thread
    checkpoints the WAL itself (the connection should have `wal_autocheckpoint` off; see
    checkpoints.py), after handing the batch's outcomes back, so no write waits inside a COMMIT
    for a checkpoint.

    A connection that can be cut (PostgreSQL's, with `broken` and `cut_at`: postgres.py) is
    replaced: a batch cut before its COMMIT is written again on a new connection, made with
    backoff while the server is away. The writes queued meanwhile wait, in order, so an outage
    shorter than the leader lease loses nothing; they fail instead once the fence refuses them
    without the database (the lease ran out: a new leader recovers what they meant) or once the
    store closes. A batch cut at its COMMIT may or may not have committed: it is reported failed,
    never written twice."""

    deliver: Callable[[list[Write], Outcomes], None]

    def __init__(self, name: str, connect: Callable[[], sqlite3.Connection], *, batch_window_s: float,
                 max_batch: int, checkpoints: CheckpointPolicy | None = None, outage: Outage | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._loop = asyncio.get_running_loop()
        self._connect = connect
        self._conn: Any = None
        self._outage = outage
        self._clock = clock
        self._stopping = threading.Event()  # set by drain(): a writer waiting for the server gives up
        self._batch_window_s = batch_window_s
        self._max_batch = max_batch
        self._checkpoints = checkpoints
        self.checkpoint_runs = self.checkpoint_short = 0  # read by the owner for its statistics
        # Seconds each batch took to apply and commit, observed on the thread (server/metrics.py).
        self.commit_seconds = Histogram(SHORT_S)
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._opened = self._loop.create_future()
        self._drained = self._loop.create_future()
        self._closed = self._loop.create_future()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        # Run first in every write transaction (the leader lease's epoch check); None on SQLite.
        # Called with None while the server is away: the local part of the check only.
        self.fence: Callable[[sqlite3.Connection | None], None] | None = None

    @classmethod
    async def start(cls, name: str, connect: Callable[[], sqlite3.Connection], *, batch_window_s: float = 0.0,
                    max_batch: int = 512, checkpoints: CheckpointPolicy | None = None,
                    outage: Outage | None = None) -> "WriterThread":
        """The thread, once its connection is open; raises what `connect` raised."""
        writer = cls(name, connect, batch_window_s=batch_window_s, max_batch=max_batch, checkpoints=checkpoints,
                     outage=outage)
        writer._thread.start()
        await writer._opened
        return writer

    def put(self, write: Write) -> None:
        self._queue.put(write)

    def queued(self) -> int:
        return self._queue.qsize()

    async def drain(self) -> None:
        self._stopping.set()
        if not self._drained.done():
            self._queue.put(_STOP)
        await asyncio.shield(self._drained)

    async def close(self) -> None:
        await self.drain()
        if not self._closed.done():
            self._queue.put(_CLOSE)
        await asyncio.shield(self._closed)

    # -- on the thread ------------------------------------------------------------------------

    def _post(self, fn: Callable[..., Any], *args: Any) -> None:
        try:
            self._loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # the loop is closed: nobody is left to tell
            pass

    def _serve(self) -> None:
        try:
            self._conn = self._connect()
        except BaseException as exc:
            self._post(settle, self._opened, None, exc)
            return
        self._post(settle, self._opened, None, None)
        try:
            self._commit_until_stopped()
            self._post(settle, self._drained, None, None)
            while self._queue.get() is not _CLOSE:
                pass  # nothing is put after the stop marker but the close marker
        finally:
            if self._conn is not None:
                self._conn.close()
            self._post(settle, self._closed, None, None)

    def _commit_until_stopped(self) -> None:
        while True:
            first = self._queue.get()
            if first is _STOP:
                return
            if self._batch_window_s > 0:
                time.sleep(self._batch_window_s)
            batch, stopping = [first], False
            while len(batch) < self._max_batch:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is _STOP:
                    stopping = True
                    break
                batch.append(item)
            began = time.perf_counter()
            outcomes = self._apply(batch)
            self.commit_seconds.observe(time.perf_counter() - began)
            self._post(self.deliver, batch, outcomes)
            if self._checkpoints is not None:
                self._maybe_checkpoint(self._conn, len(outcomes[1]))
            if stopping:
                return

    def _maybe_checkpoint(self, conn: sqlite3.Connection, commits: int) -> None:
        policy = self._checkpoints
        assert policy is not None
        policy.committed(commits)
        if not policy.due(idle=self._queue.empty()):
            return
        mode = policy.mode()
        try:
            if mode != "PASSIVE":  # it waits for readers: briefly, a held snapshot must not stall writes
                conn.execute(f"PRAGMA busy_timeout = {RESTART_WAIT_MS}")
            try:
                busy, wal_frames, copied = conn.execute(f"PRAGMA wal_checkpoint({mode})").fetchone()
            finally:
                if mode != "PASSIVE":
                    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        except sqlite3.Error:  # the commits are safe in the WAL; a later try copies them back
            log.exception("store: a WAL checkpoint failed")
            policy.checkpointed(1, 0)
            return
        self.checkpoint_runs += 1
        if busy or copied < wal_frames:
            self.checkpoint_short += 1
        policy.checkpointed(wal_frames, -1 if busy else copied)

    def _apply(self, batch: Sequence[Write]) -> Outcomes:
        outcomes: list[tuple[bool, Any]] = [(False, None)] * len(batch)
        commits: list[int] = []
        todo = list(range(len(batch)))
        while todo:
            conn = self._usable()
            if isinstance(conn, BaseException):  # refused without the database: nothing was written
                for n in todo:
                    outcomes[n] = (False, conn)
                break
            try:
                done, committed = apply_batch(conn, [batch[n].op for n in todo], self.fence)
            except Exception as exc:  # apply_batch reports op errors itself; this is worse
                log.exception("store: the writer failed a whole batch")
                done, committed = [(False, exc)] * len(todo), []
            commits += committed
            for n, outcome in zip(todo, done):
                outcomes[n] = outcome
            if not getattr(conn, "broken", False):
                break
            if conn.cut_at == "COMMIT":
                log.error("store: the writer's connection was cut during a COMMIT: whether it committed is "
                          "unknown, so its writes are reported failed rather than written twice")
                break
            # Cut before a COMMIT: what failed did not commit (what committed before the cut
            # stays committed); the failed writes go again on a new connection.
            todo = [n for n in todo if not outcomes[n][0]]
            log.info("store: the writer's connection was cut; %d write(s) go again on a new one", len(todo))
        return outcomes, commits

    def _usable(self) -> Any:
        """The connection, or a new one once the old one is cut (waiting with backoff while the
        server is away); an exception to fail the batch with when it should not wait any longer."""
        conn = self._conn
        if conn is not None and not getattr(conn, "broken", False):
            return conn
        self._conn = None
        if conn is not None:
            try:
                conn.close()
            except Exception:
                pass
        backoff = Backoff()
        while True:
            if self._stopping.is_set():
                return Unavailable("the run database cannot be reached and the store is closing: the write "
                                   "was not made", code="store_unavailable")
            if self.fence is not None:
                try:
                    self.fence(None)
                except Exception as refused:
                    return refused
            now = self._clock()
            try:
                self._conn = self._connect()
            except Exception as exc:
                if self._outage is not None:
                    self._outage.unreachable("writer", exc)
                self._stopping.wait(backoff.failed(now))
                continue
            if self._outage is not None:
                self._outage.reachable()
            return self._conn


def settle(future: asyncio.Future, result: Any = None, error: BaseException | None = None) -> None:
    if future.done():  # the caller stopped waiting; the write itself still happened (or failed)
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
