"""Losing the PostgreSQL server and finding it again: how long to wait between connection attempts
(`Backoff`, pure: the clock is passed in) and what the log says about it (`Outage`).

Why the writer, the readers and the lease keeper reconnect by themselves: a database restart, a
failover of the database server or a `pg_terminate_backend` cuts every connection, and a control
plane that went on with dead connections would fail every request until it was restarted itself.

Why a cut connection alone is not an outage: after a restart every connection finds out that it
was cut at its next statement, one by one, and reconnects at once. Only a connection attempt that
fails says the server is away; that is logged once, as is its end, and not once per retry.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

log = logging.getLogger(__name__)

FIRST_DELAY_S = 0.05  # the first retry after a failed attempt
MAX_DELAY_S = 2.0     # the longest wait between two attempts while the server is away


class Backoff:
    """When the next connection attempt may be made: at once after a success, then after
    FIRST_DELAY_S, doubling on each failure up to `max_delay_s`."""

    def __init__(self, *, first_delay_s: float = FIRST_DELAY_S, max_delay_s: float = MAX_DELAY_S) -> None:
        self.first_delay_s = first_delay_s
        self.max_delay_s = max_delay_s
        self.delay = 0.0
        self.next_at = 0.0

    def due(self, now: float) -> bool:
        return now >= self.next_at

    def failed(self, now: float) -> float:
        """An attempt failed at `now`: the seconds to wait before the next one."""
        self.delay = min(self.max_delay_s, self.delay * 2 if self.delay else self.first_delay_s)
        self.next_at = now + self.delay
        return self.delay

    def succeeded(self) -> None:
        self.delay = 0.0
        self.next_at = 0.0


class Outage:
    """One per store, shared by its writer, readers and lease keeper (each on its own thread):
    `unreachable(who, exc)` after a failed connection attempt, `reachable()` after one that
    worked. Each outage is logged once when it starts and once when it ends."""

    def __init__(self, where: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.where = where
        self._clock = clock
        self.since: float | None = None
        self.outages = 0  # how many began (for tests and statistics)
        self._lock = threading.Lock()

    def unreachable(self, who: str, exc: BaseException) -> None:
        with self._lock:
            if self.since is not None:
                return
            self.since = self._clock()
            self.outages += 1
        log.error("store: the database at %s is unreachable (%s: %s); the %s and the other connections "
                  "retry with backoff (up to every %g s); requests may answer 503 meanwhile",
                  self.where, who, _first_line(exc), who, MAX_DELAY_S)

    def reachable(self) -> None:
        with self._lock:
            since, self.since = self.since, None
        if since is not None:
            log.warning("store: the database at %s is reachable again (away for %.1f s)", self.where,
                        self._clock() - since)

    @property
    def down(self) -> bool:
        return self.since is not None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
