"""One record per run the run service holds, from submit to its final write, and a bounded memory of
the runs that finished here (followers ask for a run's status right after it ended).

A record's `status` changes only through core/contract/lifecycle.py; the run service does that, this module
just keeps what it decided. The record answers the questions that used to take nine dicts: is the
run's row written yet, does a placement wait for it, which graph starts it (its SECRET values included), is it
executing here (and with which handle, since when, on which worker), is its final write under way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

from ..scheduling.queue import Placement
from ..contract import lifecycle as rs
from ..contract.execution import RunHandle

FINISHED_KEPT = 10000


@dataclass
class RunRecord:
    run_id: str
    status: str = rs.QUEUED
    # The row is in the store. A placement that comes before waits in `deferred` (the submit that
    # writes the row starts it).
    written: bool = True
    deferred: Placement | None = None
    # A waiting run submitted here: its row and its graph, SECRET values included (the stored graph
    # has them blanked), so that starting it reads nothing back. Dropped when it starts.
    row: dict[str, Any] | None = None
    graph: dict[str, Any] | None = None
    # A waiting worker run's files: (RunFiles, Need) from core/storage/run_needs.py, or None.
    files: Any = None
    # Executing here: set when it starts (or is adopted after a restart).
    started: float | None = None
    handle: RunHandle | None = None
    worker: str | None = None
    device: str | None = None  # an in-process run's device, for its peak memory
    facts: dict[str, Any] | None = None  # an in-process run's execution_facts written at its start
    sampler: Any = None  # an in-process run's system metrics sampler (core/runs/system_sampling.py)
    # Its final write is under way: `status` is still the one before, which followers see until the
    # write commits.
    finishing: bool = False

    @property
    def executing(self) -> bool:
        return self.started is not None and not self.finishing


class RunBook:
    """The records by run id, and the final status of the last `keep_finished` runs that ended here
    (insertion order: the oldest is forgotten first)."""

    def __init__(self, keep_finished: int = FINISHED_KEPT) -> None:
        self.keep_finished = keep_finished
        self._records: dict[str, RunRecord] = {}
        self._finished: dict[str, str] = {}

    def add(self, run_id: str, **fields: Any) -> RunRecord:
        record = self._records[run_id] = RunRecord(run_id, **fields)
        return record

    def get(self, run_id: str) -> RunRecord | None:
        return self._records.get(run_id)

    def discard(self, run_id: str) -> None:
        self._records.pop(run_id, None)

    def executing(self, run_id: str) -> RunRecord | None:
        record = self._records.get(run_id)
        return record if record is not None and record.executing else None

    def all_executing(self) -> Iterator[RunRecord]:
        return (r for r in list(self._records.values()) if r.executing)

    def executing_count(self) -> int:
        return sum(1 for r in self._records.values() if r.executing)

    def finishing(self, run_id: str, before: str | None) -> RunRecord:
        """The run's final write begins; until it commits, followers see `before`."""
        record = self._records.get(run_id) or self.add(run_id)
        record.finishing = True
        record.status = before if before is not None else record.status
        record.row = record.graph = None
        return record

    def finished(self, run_id: str, status: str) -> None:
        """The final write committed: the record goes, its status is remembered for a while."""
        self._records.pop(run_id, None)
        self._finished[run_id] = status
        if len(self._finished) > self.keep_finished:
            del self._finished[next(iter(self._finished))]

    def finished_status(self, run_id: str) -> str | None:
        return self._finished.get(run_id)


__all__ = ["FINISHED_KEPT", "RunBook", "RunRecord"]
