"""A run's final write: its final status and closing event (with whatever of its log is still
queued) in one transaction, the lifecycle table asked first. On a full disk the run ends all the
same and the ending waits in core/runs/unwritten.py; once an ending is on disk, the run service's
observers are told (they read what it wrote)."""

from __future__ import annotations

from typing import Any, Callable

from ...wire import run_events as ev
from ..errors import StorageFull
from ..store.database import Store
from ..contract import lifecycle as rs
from .event_log import EventLog
from .reads import RunReads
from .run_records import RunBook
from .tally import RunTally
from .unwritten import Rows, StorageWatch, UnwrittenEnding


class FinalWrites:
    def __init__(self, store: Store, events: EventLog, runs: RunBook, storage: StorageWatch, reads: RunReads,
                 clock: Callable[[], float], finished: Callable[[str, str], None]) -> None:
        self.store = store
        self.events = events
        self.runs = runs
        self.storage = storage
        self.reads = reads
        self.clock = clock
        self.finished = finished  # (run_id, status): the ending has committed
        self.tally = RunTally()  # runs started and finished, for the metrics (core/runs/tally.py)

    async def write(self, run_id: str, status: str, closing: ev.RunEvent, *, error: Any,
                    facts: dict[str, Any] | None = None, from_state: str | None = None) -> None:
        """`from_state`: the run's status when this process does not hold it (a waiting run already
        taken out of the queue, a row left by a previous process). An ending the lifecycle does not
        allow (a second ending, say) raises IllegalTransition and writes nothing."""
        before = self.reads.known_status(run_id) if from_state is None else from_state
        rs.finish(before if before is not None else "unknown", status)
        started = self.runs.finishing(run_id, before).started  # followers see `before` until the write commits
        duration = self.clock() - started if started is not None else None
        rows = self.events.take_closing(run_id, closing)
        extra = {"execution_facts": facts} if facts is not None else {}
        try:
            try:
                await self.store.update_run(run_id, status=status, finished_at=self.clock(), error=error,
                                            events=rows, **extra)
            except StorageFull:
                raise
            except Exception as refused:
                # A write of the run's events failed ahead of this one (its seqs no longer follow), or
                # its own queued events were refused: the ending alone, once more. A run must end.
                rows = self.events.retake_closing(run_id, rows, refused)
                await self.store.update_run(run_id, status=status, finished_at=self.clock(), error=error,
                                            events=rows, **extra)
        except StorageFull:
            # The run ends all the same (in memory, for its followers); the disk gets it once it has room.
            rows = self.events.follow_durable(run_id, rows)
            self.runs.finished(run_id, status)
            self.tally.finished(status, closing, error, duration)
            self.storage.keep(UnwrittenEnding(run_id, status, rows, error, facts, self.clock(), started))
            self.events.announce(run_id, rows)
            return
        except BaseException:
            self.runs.discard(run_id)
            raise
        self.tally.finished(status, closing, error, duration)
        await self.written(run_id, status, rows)

    async def written(self, run_id: str, status: str, rows: Rows) -> None:
        """A run's final write committed (now, or once a full disk had room): observers are told
        only now, as they read what it wrote."""
        self.runs.finished(run_id, status)
        await self.events.committed(run_id, rows)
        self.finished(run_id, status)
