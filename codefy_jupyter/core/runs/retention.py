"""What goes when a run goes: retention prunes the oldest finished runs, Delete removes one, and
with each row go the run's files (but what it keeps: checkpoints) and its S3 objects."""

from __future__ import annotations

import asyncio
import logging
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config import Settings
from ..errors import ServiceError
from ..storage import plan as storage_plan
from ..store.database import Store
from ..contract import lifecycle as rs
from .event_log import EventLog
from .recorded import RecordedOutputs

if TYPE_CHECKING:
    from ..contract.worker_side import WorkerSide

log = logging.getLogger("codefy.runs")


class RunRemoval:
    def __init__(self, store: Store, events: EventLog, outputs: RecordedOutputs, workers: WorkerSide,
                 data_dir: Path, settings: Settings) -> None:
        self.store = store
        self.events = events
        self.outputs = outputs
        self.workers = workers
        self.data_dir = data_dir
        self.settings = settings

    async def prune(self) -> None:
        """Keep the newest finished runs; a pruned run's files go too (checkpoints, logs), except
        the checkpoints of a run that ended interrupted: they are its resume point."""
        # Prune hooks harvest results from the runs' metric points, which are flushed apart from
        # the closing write: make them durable first.
        await self.events.flush()
        pruned = await self.store.prune_finished(self.settings.run_retention_keep_last)
        for item in pruned:
            self.events.forget(item.run["id"])
            folder = self.data_dir / "runs" / item.run["id"]
            keep = {"checkpoints"} if item.run["status"] == rs.INTERRUPTED else set()
            await asyncio.to_thread(remove_run_files, folder, keep)
            await self._remove_s3_objects(item.run)

    async def delete(self, row: dict[str, Any]) -> None:
        """A finished run's row, recorded outputs, events and the copies made for it alone."""
        run_id = row["id"]
        await self.outputs.delete(run_id)
        await self.store.delete_run(run_id)
        self.events.forget(run_id)
        if row.get("worker_id") and ((row.get("execution_facts") or {}).get("storage") or {}).get("backend") == "transfer":
            # What the agent uploaded is a copy made for this run alone (seed: storage, transfer),
            # but Delete keeps checkpoint files on disk, as for any run (run queue: Delete).
            await asyncio.to_thread(remove_run_files, self.data_dir / "runs" / run_id, {"checkpoints"})
        await self._remove_s3_objects(row)

    async def _remove_s3_objects(self, row: dict[str, Any]) -> None:
        """An S3 run's objects go with it, but for its output/ (and checkpoint/ when interrupted:
        wire/s3_keys.py). A bucket that fails is logged; the row is gone either way."""
        if ((row.get("execution_facts") or {}).get("storage") or {}).get("backend") != storage_plan.S3:
            return
        s3 = self.workers.s3
        if s3 is None:
            log.warning("codefy: run %s kept objects in S3, but S3 is off now: they stay", row["id"])
            return
        try:
            await s3.remove_run(row["id"], interrupted=row["status"] == rs.INTERRUPTED)
        except ServiceError as err:
            log.warning("codefy: run %s: its S3 objects could not be removed: %s", row["id"], err)


def remove_run_files(folder: Path, keep: set[str]) -> None:
    if not folder.is_dir():
        return
    for entry in folder.iterdir():
        if entry.name in keep:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)
    if not keep:
        try:
            folder.rmdir()
        except OSError:  # something new appeared in it: leave it
            pass
