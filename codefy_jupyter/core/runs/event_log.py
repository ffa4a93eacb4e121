"""The sink every run's events go through: seq in memory, payload cap, batched writes, wake-ups.

`emit` is synchronous and cheap (it runs on the server's loop for every engine event): it gives
the event the run's next seq, caps and encodes its payload (once), and queues it. One flusher
task writes everything queued in one go (the store folds concurrent writes into one
transaction), then wakes the readers. Readers only ever see durable events, read from their
cursor: from the in-memory tail of each run's newest durable events when it holds them all
(`tail_page`), else from the store. So a reader that replays and then follows live sees every
event exactly once, with no gap. The tail takes events in commit order (as each write settles),
so a run's closing event, written by the run service, never lands ahead of events a flush wrote
in the same transaction. One exception: a closing event the store refused because the disk is full
is shown to followers at once (`announce`), and written once the disk has room.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import deque
from functools import partial
from typing import Any, Callable

from ...wire.run_events import RunEvent, cap_payload, encode, encode_storable
from ..store.database import Store
from ..telemetry import SHORT_S, Histogram

log = logging.getLogger("codefy.events")

TAIL_EVENTS = 512  # per run
WITH_NEXT_S = 0.02  # the longest an event emitted `with_next` waits for company
CLOSED_TAILS_KEPT = 1024  # finished runs whose tail stays in memory (the newest; older ones: the store)
CHANGES_KEPT = 65536


class EventLog:
    def __init__(self, store: Store, *, payload_cap_bytes: int, clock: Callable[[], float]) -> None:
        self._store = store
        self._cap = payload_cap_bytes
        self._clock = clock
        self._next_seq: dict[str, int] = {}
        self._pending: dict[str, list[tuple[int, str, str, float]]] = {}
        self._metrics: list[tuple[str, str | None, str, int | None, float, float]] = []
        self._flushed: dict[str, int] = {}
        # The newest durable events of each run, encoded: followers at the live edge read these
        # instead of the database, and share one encoding.
        self._tail: dict[str, list[tuple[int, str, int]]] = {}
        self._closed_tails: deque[str] = deque()  # runs whose closing event is in their tail, oldest first
        # Which runs gained durable events, in order: a follower of every run looks only at those
        # (scanning every run on each wake-up would cost O(runs) per event).
        self.change_no = 0
        self._changes: deque[tuple[int, str]] = deque(maxlen=CHANGES_KEPT)
        self._wake = asyncio.Event()
        # Readers waiting for the next change: plain futures, settled together. (An asyncio
        # Condition under wait_for cost a lock round and a task per wait, for every follower on
        # every change.)
        self._waiters: list[asyncio.Future[bool]] = []
        self._flusher: asyncio.Task[None] | None = None
        self._flush_lock = asyncio.Lock()  # one flush at a time keeps each run's appends in seq order
        self._closed = False
        # Run fields written in the same transaction as each batch of the run's events (a worker
        # run's resume point: what it says was recorded is exactly what was).
        self._attached: dict[str, Callable[[], dict[str, Any]]] = {}
        # Runs whose events the store refused (what was lost, and why), and who is told.
        self.lost: dict[str, dict[str, Any]] = {}
        self.on_write_failed: Callable[[str, dict[str, Any]], None] | None = None
        # Closing events shown to followers before they are durable (the disk was full at the
        # run's final write; see `announce`): the last such seq of each run.
        self._announced: dict[str, int] = {}
        # Seconds from an event's emit to its commit (the oldest of each durable batch): the metrics'
        # event-log lag (server/metrics.py).
        self.lag_seconds = Histogram(SHORT_S)

    # -- writing ----------------------------------------------------------------------------------
    def track(self, run_id: str, last_seq: int) -> None:
        """Continue `run_id`'s log after `last_seq` (a new run: 0)."""
        self._next_seq[run_id] = last_seq + 1
        self._flushed[run_id] = last_seq

    def attach(self, run_id: str, fields: Callable[[], dict[str, Any]] | None) -> None:
        """Write `fields()` (run columns, read when a batch is taken) with each batch of the run's
        events; None detaches."""
        if fields is None:
            self._attached.pop(run_id, None)
        else:
            self._attached[run_id] = fields

    def forget(self, run_id: str) -> None:
        self.lost.pop(run_id, None)
        self._announced.pop(run_id, None)
        self._attached.pop(run_id, None)
        self._next_seq.pop(run_id, None)
        self._flushed.pop(run_id, None)
        self._tail.pop(run_id, None)

    def next_seq(self, run_id: str) -> int:
        return self._next_seq[run_id]

    def emit(self, run_id: str, event: RunEvent, *, with_next: bool = False) -> int:
        """Queue an event; returns its seq. Durable once `flush` (or the flusher) has run.

        `with_next`: no flush of its own; it goes with the next events the log writes (a run's
        execution_start is followed at once by its first node's events: one write and one
        frame to each follower instead of two), and at the latest after WITH_NEXT_S."""
        payload, text = self._encoded(event.payload)  # before the seq: nothing may fail after taking it
        seq = self._next_seq[run_id]
        self._next_seq[run_id] = seq + 1
        self._pending.setdefault(run_id, []).append((seq, event.type, text, self._clock()))
        if event.type == "metric":
            self._metrics.append((run_id, payload.get("node_id"), payload.get("name", ""), payload.get("step"),
                                  _as_float(payload.get("value")), self._clock()))
        if with_next:
            asyncio.get_running_loop().call_later(WITH_NEXT_S, self._kick_if_pending, run_id)
        else:
            self._kick()
        return seq

    def take_closing(self, run_id: str, event: RunEvent) -> list[tuple[int, str, str, float]]:
        """Everything still queued for the run plus its closing event, for the caller to write in
        one transaction with the run's final status (so no reader sees one without the other).
        Events a flush already handed to the store are queued there ahead of that write: the
        store commits writes in the order they were made. Buffered metric points are handed to the
        store here too, ahead of that write: a reader that sees the final status sees every point
        (a sweep harvests a finished run's objective from them)."""
        metrics, self._metrics = self._metrics, []
        if metrics:
            self._store.record_metrics(metrics).add_done_callback(partial(_log_failed_metrics, len(metrics)))
        text = self._encoded(event.payload)[1]
        seq = self._next_seq[run_id]
        self._next_seq[run_id] = seq + 1
        rows = self._pending.pop(run_id, [])
        rows.append((seq, event.type, text, self._clock()))
        return rows

    def retake_closing(self, run_id: str, rows: list[tuple[int, str, str, float]], error: BaseException
                       ) -> list[tuple[int, str, str, float]]:
        """The store refused a closing write (`rows`, from take_closing): a write of the run's events
        failed ahead of it, or its own queued events did. The closing event alone, numbered right
        after what is durable, for one more try; the events it carried are recorded as lost."""
        durable = self._flushed.get(run_id, 0)
        dropped = rows[:-1]
        log.error("codefy: the closing write of run %s failed (%s: %s); writing its closing event alone after seq %d"
                  "%s", run_id, type(error).__name__, error, durable,
                  f", {len(dropped)} event(s) with it lost" if dropped else "")
        if dropped:
            lost = self.lost.setdefault(run_id, {"first_seq": dropped[0][0], "last_seq": dropped[-1][0],
                                                 "error": f"{type(error).__name__}: {error}"})
            lost["last_seq"] = max(lost["last_seq"], dropped[-1][0])
        seq, kind, text, ts = rows[-1]
        self._next_seq[run_id] = durable + 2
        return [(durable + 1, kind, text, ts)]

    def follow_durable(self, run_id: str, rows: list[tuple[int, str, str, float]]
                       ) -> list[tuple[int, str, str, float]]:
        """A refused closing write (`rows`, from take_closing) to be written again later, whole:
        renumbered to follow what is durable now (a write of the run's events queued ahead of it
        may have been refused too, and its events recorded as lost)."""
        first = self._flushed.get(run_id, 0) + 1
        self._next_seq[run_id] = first + len(rows)
        return [(first + i, kind, text, ts) for i, (_, kind, text, ts) in enumerate(rows)]

    def _encoded(self, payload: dict[str, Any]) -> tuple[dict[str, Any], str]:
        """The payload under the cap and its stored text, encoded once when it fits (the usual
        case) rather than once to measure and again to store."""
        payload, text = encode_storable(payload)
        if self._cap > 0 and (len(text) if text.isascii() else len(text.encode())) > self._cap:
            payload = cap_payload(payload, self._cap)
            text = encode(payload)
        return payload, text

    async def committed(self, run_id: str, rows: list[tuple[int, str, str, float]]) -> None:
        """The caller wrote these rows itself (see take_closing): remember them, wake readers."""
        self._durable(run_id, rows)
        self._closed_tails.append(run_id)
        while len(self._closed_tails) > CLOSED_TAILS_KEPT:  # memory stays bounded however many runs end
            self._tail.pop(self._closed_tails.popleft(), None)
        self._notify()

    def announce(self, run_id: str, rows: list[tuple[int, str, str, float]]) -> None:
        """Show `rows` (a run's closing write that the store refused for lack of room) to followers
        now, ahead of their commit: the run has ended here, and its followers must not wait for the
        disk. `flushed_seq`, which acknowledgements go by, does not move; `committed` follows once
        the rows are written."""
        if not rows:
            return
        self._announced[run_id] = rows[-1][0]
        self._remember(run_id, rows)
        self._closed_tails.append(run_id)
        self._notify()

    def _settled(self, run_id: str, rows: list[tuple[int, str, str, float]], write: asyncio.Future) -> None:
        if write.cancelled():
            self._write_failed(run_id, rows, asyncio.CancelledError("the write was cancelled"))
        elif write.exception() is not None:
            self._write_failed(run_id, rows, write.exception())  # type: ignore[arg-type]
        else:
            self._durable(run_id, rows)

    def _write_failed(self, run_id: str, rows: list[tuple[int, str, str, float]], error: BaseException) -> None:
        """The store refused a batch of the run's events: they are lost. Said loudly, never
        swallowed: the run's log continues right after what is durable (so the run can still be
        closed, with the failure on record), events queued since are renumbered to follow on, and
        `on_write_failed` (the run service) ends the run. Whoever acknowledges on the strength of
        the log (worker frames) checks `flushed_seq`, which did not move."""
        log.error("codefy: writing %d event(s) of run %s failed: %s: %s", len(rows), run_id, type(error).__name__,
                  error)
        lost_from = rows[0][0]
        self.lost[run_id] = {"first_seq": lost_from, "last_seq": rows[-1][0], "error": f"{type(error).__name__}: {error}"}
        if run_id in self._next_seq:
            queued = self._pending.get(run_id, [])
            renumbered = [(lost_from + i, kind, text, ts) for i, (_, kind, text, ts) in enumerate(queued)]
            if queued:
                self._pending[run_id] = renumbered
            self._next_seq[run_id] = lost_from + len(renumbered)
        if self.on_write_failed is not None:
            self.on_write_failed(run_id, self.lost[run_id])

    def _durable(self, run_id: str, rows: list[tuple[int, str, str, float]]) -> None:
        if not rows:
            return
        self._flushed[run_id] = max(self._flushed.get(run_id, 0), rows[-1][0])
        self.lag_seconds.observe(max(0.0, self._clock() - rows[0][3]))
        if self._announced.get(run_id, 0) <= rows[-1][0]:
            self._announced.pop(run_id, None)
        self._remember(run_id, rows)

    def _remember(self, run_id: str, rows: list[tuple[int, str, str, float]]) -> None:
        self.change_no += 1
        self._changes.append((self.change_no, run_id))
        tail = self._tail.setdefault(run_id, [])
        for seq, kind, payload, ts in rows:
            if not tail or seq == tail[-1][0] + 1:
                # The event as readers receive it, encoded once for every follower.
                tail.append((seq, f'{{"seq":{seq},"type":{json.dumps(kind)},"payload":{payload},'
                                  f'"created_at":{ts!r}}}', len(payload)))
        if len(tail) > TAIL_EVENTS:
            del tail[: len(tail) - TAIL_EVENTS]

    def tail_page(self, run_id: str, cursor: int, upto: int, budget: int) -> tuple[list[str], int, bool] | None:
        """Encoded events after `cursor` up to `upto` from memory, within `budget` bytes; None
        when memory does not hold all of them (the caller reads the store)."""
        tail = self._tail.get(run_id)
        if upto <= cursor:
            return [], cursor, False
        if not tail or tail[0][0] > cursor + 1 or tail[-1][0] < upto:
            return None
        start = cursor + 1 - tail[0][0]
        texts: list[str] = []
        used = 0
        next_cursor = cursor
        for seq, text, size in tail[start:]:
            if seq > upto:
                break
            if texts and used + size + 64 > budget:
                return texts, next_cursor, True
            texts.append(text)
            used += size + 64
            next_cursor = seq
        return texts, next_cursor, False

    def _kick_if_pending(self, run_id: str) -> None:
        if run_id in self._pending:
            self._kick()

    def _kick(self) -> None:
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.get_running_loop().create_task(self._flush_loop())
        self._wake.set()

    async def _flush_loop(self) -> None:
        while not self._closed:
            await self._wake.wait()
            self._wake.clear()
            await self.flush()

    async def flush(self) -> None:
        """Make everything emitted so far durable (waits for a flush already under way)."""
        async with self._flush_lock:
            await self._flush_pending()

    async def _flush_pending(self) -> None:
        pending, self._pending = self._pending, {}
        metrics, self._metrics = self._metrics, []
        # The store queues each write as it is called, before anything here yields.
        writes = []
        for run_id, rows in pending.items():
            write = self._store.append_events(run_id, rows, self._attached[run_id]() if run_id in self._attached
                                              else None)
            # Noted as each write settles, i.e. in commit order: a run's closing write (made by
            # the run service after this one) may commit in the same transaction, and its waiter
            # must not note the closing event before these (the in-memory tail would have a gap).
            write.add_done_callback(partial(self._settled, run_id, rows))
            writes.append(write)
        if metrics:
            write = self._store.record_metrics(metrics)
            write.add_done_callback(partial(_log_failed_metrics, len(metrics)))
            writes.append(write)
        if not writes:
            return
        # Shielded: whoever waits here (the sink's own task, a worker run's acker that is cancelled
        # as its run ends) may be cancelled, but these writes hold other runs' events, and the
        # store commits them anyway. Cancelling them would record committed events as lost (and
        # end those runs event_log_write_failed); the waiter alone stops waiting.
        await asyncio.shield(self._settle_all(writes))

    async def _settle_all(self, writes: list[asyncio.Future]) -> None:
        await asyncio.gather(*writes, return_exceptions=True)
        self._notify()

    async def close(self) -> None:
        await self.flush()
        self._closed = True
        self._wake.set()
        if self._flusher is not None:
            await asyncio.gather(self._flusher, return_exceptions=True)

    # -- reading ----------------------------------------------------------------------------------
    def flushed_seq(self, run_id: str) -> int | None:
        """The run's last durable seq (what may be acknowledged)."""
        return self._flushed.get(run_id)

    def visible_seq(self, run_id: str) -> int | None:
        """The run's last seq followers are shown: durable, or an announced closing event."""
        flushed = self._flushed.get(run_id)
        announced = self._announced.get(run_id)
        return flushed if announced is None else max(announced, flushed or 0)

    def changed_since(self, change_no: int) -> tuple[list[str], int, bool]:
        """Runs with durable events after change `change_no`, the latest change number, and
        whether the list is complete (False: the follower fell behind what is kept; scan all)."""
        if change_no >= self.change_no:
            return [], self.change_no, True
        if not self._changes or self._changes[0][0] > change_no + 1:
            return self.run_ids(), self.change_no, False
        runs: dict[str, None] = {}
        for number, run_id in reversed(self._changes):
            if number <= change_no:
                break
            runs[run_id] = None
        return list(reversed(list(runs))), self.change_no, True

    async def wait_change(self, change_no: int, timeout: float | None = None) -> bool:
        """Wait until a change after `change_no`; False on timeout (None: no timeout, and no timer
        to make and cancel on every wait of every follower)."""
        return await self._wait(lambda: self.change_no > change_no, timeout)

    def run_ids(self) -> list[str]:
        """Runs whose log this process writes (active now, or since it started)."""
        return list(self._flushed)

    async def wait_beyond(self, run_ids: Callable[[], list[str]] | str, cursor: int | Callable[[str], int],
                          timeout: float) -> bool:
        """Wait until some run has durable events past its cursor; False on timeout."""

        def ready() -> bool:
            ids = [run_ids] if isinstance(run_ids, str) else run_ids()
            for rid in ids:
                after = cursor if isinstance(cursor, int) else cursor(rid)
                if (self.visible_seq(rid) or 0) > after:
                    return True
            return False

        return await self._wait(ready, timeout)

    def _notify(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(True)

    async def _wait(self, ready: Callable[[], bool], timeout: float | None) -> bool:
        """Wait until `ready()` holds, checking it after each change; False once `timeout` s pass."""
        if ready():
            return True
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            waiter: asyncio.Future[bool] = loop.create_future()
            self._waiters.append(waiter)
            timer = None if deadline is None else loop.call_later(max(0.0, deadline - loop.time()), _time_out, waiter)
            try:
                changed = await waiter
            finally:
                if timer is not None:
                    timer.cancel()
            if ready():
                return True
            if not changed:
                return False


def _log_failed_metrics(count: int, write: asyncio.Future) -> None:
    # The events that carried these points are in the log; the metrics table (a query index over
    # them) misses them: said, not swallowed.
    if not write.cancelled() and write.exception() is not None:
        log.error("codefy: recording %d metric point(s) failed: %s", count, write.exception())


def _time_out(waiter: asyncio.Future[bool]) -> None:
    if not waiter.done():
        waiter.set_result(False)


def _as_float(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")
