"""Runs whose ending the store could not write because its disk is full, and the watch that writes
them once it has room.

A run still ends when its final write is refused for lack of room: its slot is free already, its
in-memory status is final, and its followers are shown the closing event (core/runs/event_log.py
`announce`). What is not yet on disk is the final status and the closing event; they are kept here
and written again every `RETRY_S`, oldest first, until the disk takes them. While the disk is full
and nothing is kept, the watch probes for room instead (core/store/database.py `probe_room`). Once
a write or a probe gets through, `resumed` is called: the run service starts waiting runs again
(it holds them while the disk is full, as a run started then could record nothing).

If the server stops before the disk has room, the endings kept here are lost with it and the runs'
rows still say `running`: the next start retires them as `interrupted`, as after any crash.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from ..errors import StorageFull
from ..store.database import Store

log = logging.getLogger("codefy.runs")

RETRY_S = 1.0

Rows = list[tuple[int, str, str, float]]


@dataclass(frozen=True)
class UnwrittenEnding:
    run_id: str
    status: str
    rows: Rows  # the closing write's events, numbered to follow what is durable
    error: Any
    facts: dict[str, Any] | None
    finished_at: float
    started_at: float | None

    def fields(self) -> dict[str, Any]:
        """The run columns its final write sets (started_at too: the write that marked it running
        may have been refused as well)."""
        fields: dict[str, Any] = {"status": self.status, "finished_at": self.finished_at, "error": self.error}
        if self.facts is not None:
            fields["execution_facts"] = self.facts
        if self.started_at is not None:
            fields["started_at"] = self.started_at
        return fields


class StorageWatch:
    """`keep` an ending the disk refused; `start` when the store says its disk is full."""

    def __init__(self, store: Store, *, written: Callable[[UnwrittenEnding], Awaitable[None]],
                 resumed: Callable[[], Awaitable[None]], retry_s: float = RETRY_S) -> None:
        self._store = store
        self._written = written
        self._resumed = resumed
        self.retry_s = retry_s
        self.endings: dict[str, UnwrittenEnding] = {}
        self._task: asyncio.Task[None] | None = None

    @property
    def holding(self) -> bool:
        """Waiting runs are held: the disk is full, or endings wait to be written."""
        return self._store.full or bool(self.endings)

    def keep(self, ending: UnwrittenEnding) -> None:
        log.error("codefy: run %s ended %s, but the disk is full: its final status is written once there is "
                  "room (every %g s)", ending.run_id, ending.status, self.retry_s)
        self.endings[ending.run_id] = ending
        self.start()

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._watch())
            self._task.add_done_callback(_log_crash)

    async def _watch(self) -> None:
        while self.holding:
            await asyncio.sleep(self.retry_s)
            if self.endings:
                await self.write_endings()
            else:
                await self._store.probe_room()
        await self._resumed()

    async def write_endings(self) -> None:
        """One try at every kept ending, oldest first; stops at the first the disk refuses."""
        for run_id, ending in list(self.endings.items()):
            try:
                await self._store.update_run(run_id, events=ending.rows, **ending.fields())
            except StorageFull:
                return
            except Exception:
                # Not the disk: trying again would fail the same way. The row stays as it was; the
                # next start retires the run (interrupted).
                log.exception("codefy: the final write of run %s failed; it is not tried again", run_id)
                del self.endings[run_id]
                continue
            del self.endings[run_id]
            log.warning("codefy: run %s: its final status (%s) is written now", run_id, ending.status)
            await self._written(ending)

    def overlay(self, view: dict[str, Any]) -> dict[str, Any]:
        """A run's view with the ending that is not yet written, when it has one."""
        ending = self.endings.get(view.get("id", ""))
        if ending is not None:
            view.update(status=ending.status, finished_at=ending.finished_at, error=ending.error)
        return view

    async def close(self) -> None:
        """At shutdown: one last try at the kept endings, then the watch stops."""
        if self.endings:
            await self.write_endings()
        for run_id in self.endings:
            log.error("codefy: run %s: the disk is still full; its ending (%s) is lost, and the next start "
                      "retires it as interrupted", run_id, self.endings[run_id].status)
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)


def _log_crash(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("codefy: the full-disk watch failed", exc_info=task.exception())


__all__ = ["RETRY_S", "StorageWatch", "UnwrittenEnding"]
