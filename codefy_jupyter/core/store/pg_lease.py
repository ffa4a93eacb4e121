"""The leader lease on PostgreSQL: a keeper thread with a connection of its own renews (or
contends for) the lease row once per renew interval (lease.py decides), and the writer's fence
checks the epoch inside every write transaction.

Why a connection and a thread of their own: a renewal must not queue behind a long batch of
writes, or a busy leader would lose its lease to its own load.

Why the keeper reconnects every renew interval and not with a longer backoff: a leader must renew
within its TTL and a standby must see an expired lease soon after it expires, so neither can wait
longer between attempts than the lease's own cadence (one connection attempt a second is no load).
A connection found cut (a database restart, `pg_terminate_backend`) is replaced within the same
round, so a cut alone costs no renewal.

Why the fence takes the lease row FOR SHARE: a takeover updates that row, so it waits for every
write transaction that read the old epoch to end, and every write transaction that starts after
it reads the new epoch and aborts. A paused leader that wakes after a takeover therefore commits
nothing, whatever its own clock says.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
from typing import Any, Callable

from ..errors import Unavailable
from .lease import FOLLOW, LOST, Lease, LeaseRow
from .reconnect import Outage

log = logging.getLogger(__name__)

_READ = "SELECT holder, epoch, expires_at, url FROM leader_lease WHERE id = 1"


class Fenced(Unavailable):
    """A write refused because this process does not hold the lease (any more): nothing of it
    was written. 503 `standby`, naming the leader when known."""

    code = "standby"

    def __init__(self, message: str, leader_url: str | None) -> None:
        super().__init__(message, params={"leader": leader_url})


def _row(found: Any) -> LeaseRow:
    holder, epoch, expires_at, url = found
    return LeaseRow(holder, int(epoch), float(expires_at), url)


class LeaseKeeper:
    """`await LeaseKeeper.start(...)` runs one round before it returns (the role is known);
    `on_change(WON|LOST)` is called on the loop after each change; `fence(conn)` is the writer's
    check; `pause()`/`resume()` stop renewing as a frozen process would (for failover drills and
    tests); `await close()` gives a held lease up so a standby need not wait out its TTL."""

    def __init__(self, connect: Callable[[], Any], lease: Lease, clock: Callable[[], float],
                 on_change: Callable[[str], None], outage: Outage | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        self._connect = connect
        self._outage = outage or Outage("the lease's database")
        self._conn: Any = None
        self.lease = lease
        self._clock = clock
        self.on_change = on_change
        self._lock = threading.Lock()  # the keeper and the writer's fence both move the lease
        self._wake = threading.Event()
        self._stop = False
        self._running = threading.Event()
        self._running.set()
        self._first: asyncio.Future = self._loop.create_future()
        self._done: asyncio.Future = self._loop.create_future()
        self._thread = threading.Thread(target=self._serve, name="codefy-store-lease", daemon=True)

    @classmethod
    async def start(cls, connect: Callable[[], Any], lease: Lease, clock: Callable[[], float],
                    on_change: Callable[[str], None], outage: Outage | None = None) -> "LeaseKeeper":
        keeper = cls(connect, lease, clock, on_change, outage)
        keeper._thread.start()
        await keeper._first
        return keeper

    # -- the writer's fence (on the writer thread, inside its transaction) ----------------------

    def fence(self, conn: Any) -> None:
        """Raise Fenced unless this process leads: by its own clock, then (with `conn`, inside the
        write transaction) by the epoch in the row. Without `conn` (the writer waiting for the
        database to come back) only the first part."""
        with self._lock:
            epoch, held = self.lease.epoch, self.lease.held(self._clock())
            leader_url = self.lease.leader_url
        if not held:
            raise Fenced("this control plane is a standby: it takes no writes", leader_url)
        if conn is None:
            return
        found = conn.execute("SELECT epoch, url FROM leader_lease WHERE id = 1 FOR SHARE").fetchone()
        if found is None or int(found[0]) != epoch:
            self._step_down(f"the lease moved on to epoch {found[0] if found else '?'} (ours: {epoch})")
            raise Fenced("this control plane lost the leader lease: the write was refused (fenced)",
                         found[1] if found else None)

    def holds(self) -> bool:
        """Whether this process may act as the leader now, by its own clock: False at once when it
        wakes from a pause past its lease, before the keeper's next round has stepped it down (a
        woken leader must not start runs it no longer owns; its writes are fenced besides)."""
        with self._lock:
            return self.lease.held(self._clock())

    # -- test and drill hooks -------------------------------------------------------------------

    def pause(self) -> None:
        self._running.clear()

    def resume(self) -> None:
        self._running.set()
        self._wake.set()

    # -- the thread -------------------------------------------------------------------------

    def _post(self, fn: Callable[..., Any], *args: Any) -> None:
        try:
            self._loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # the loop is closed
            pass

    def _changed(self, change: str | None) -> None:
        if change is not None:
            self._post(self.on_change, change)

    def _step_down(self, why: str) -> None:
        with self._lock:
            lost = self.lease.expire(float("inf"))
        if lost == LOST:
            log.error("store: stepping down: %s", why)
            self._changed(LOST)

    def _serve(self) -> None:
        first = True
        while not self._stop:
            self._running.wait()
            if self._stop:
                break
            self._round()
            if first:
                first = False
                self._post(_settle, self._first)
            with self._lock:
                wait = self.lease.next_round_in(self._clock())
            self._wake.wait(wait)
            self._wake.clear()
        self._give_up()
        if self._conn is not None:
            self._conn.close()
        self._post(_settle, self._done)

    def _round(self) -> None:
        started = self._clock()
        with self._lock:
            self._changed(self.lease.expire(started))
        for attempt in (1, 2):
            try:
                self._renew_or_read(started)
                return
            except Exception as exc:
                cut = self._conn is not None and getattr(self._conn, "broken", False)
                self._drop_connection()
                if cut and attempt == 1:
                    log.info("store: the lease keeper's connection was cut; reading the lease on a new one")
                    continue
                if not self._outage.down:
                    log.warning("store: the leader lease could not be renewed or read: %s", exc)
                with self._lock:
                    self._changed(self.lease.failed(self._clock()))
                return

    def _connection(self) -> Any:
        if self._conn is None:
            try:
                self._conn = self._connect()
            except Exception as exc:
                self._outage.unreachable("lease keeper", exc)
                raise
            self._outage.reachable()
            # A round that waits longer than this (a lock, a stalled server) has failed: the
            # lease's own deadline must be judged again well within its TTL.
            self._conn.execute(f"SET statement_timeout = {max(1, int(self.lease.renew_every_s * 1000))}")
        return self._conn

    def _renew_or_read(self, started: float) -> None:
        conn = self._connection()
        row = _row(conn.execute(_READ).fetchone())
        with self._lock:
            claim = self.lease.claim(row, started)
        if claim.action != FOLLOW:  # take or renew: under the row lock, deciding again on what it holds
            conn.execute("BEGIN")
            try:
                row = _row(conn.execute(_READ + " FOR UPDATE").fetchone())
                with self._lock:
                    claim = self.lease.claim(row, started)
                if claim.action != FOLLOW:
                    conn.execute("UPDATE leader_lease SET holder = ?, url = ?, epoch = ?, expires_at = ?, "
                                 "taken_at = CASE WHEN epoch = ? THEN taken_at ELSE ? END WHERE id = 1",
                                 (claim.holder, claim.url, claim.epoch, claim.expires_at, claim.epoch, started))
                conn.execute("COMMIT")
            except BaseException:
                _rollback(conn)
                raise
        with self._lock:
            change = self.lease.committed(claim, started, row.holder)
        if change is not None:
            log.warning("store: %s the leader lease (epoch %d)", "won" if change != LOST else "lost",
                        claim.epoch)
        self._changed(change)

    def _drop_connection(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:
                pass
            self._conn = None

    def _give_up(self) -> None:
        with self._lock:
            epoch = self.lease.epoch
            self.lease.expire(float("inf"))
        if not epoch or self._conn is None:
            return
        try:
            self._conn.execute("UPDATE leader_lease SET expires_at = 0 WHERE id = 1 AND epoch = ?", (epoch,))
        except sqlite3.Error as exc:
            log.warning("store: could not give the leader lease up (a standby waits out its TTL): %s", exc)

    async def close(self) -> None:
        self._stop = True
        self._running.set()
        self._wake.set()
        await asyncio.shield(self._done)


def _settle(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(None)


def _rollback(conn: Any) -> None:
    try:
        conn.execute("ROLLBACK")
    except sqlite3.Error:
        pass
