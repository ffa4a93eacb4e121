"""What a run looks like to its readers: its row as the API shows it, pages of its event log (from
the store, or from the in-memory tail for followers), its metrics and artifacts. Reads only; the
status it knows from memory is the one RunService's endings ask before they write."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config import Settings
from ..errors import BadRequest, NotFound
from ..scheduling.queue import RunQueue
from ..storage import plan as storage_plan
from ..store.database import Store
from ..contract import lifecycle as rs
from .cards import RunCards
from .event_log import EventLog
from .run_records import RunBook
from .summary import add_final_loss
from .unwritten import StorageWatch

if TYPE_CHECKING:
    from ..contract.worker_side import WorkerSide

LIST_LIMIT = 50
OFFSET_MAX = 2**63 - 1  # SQLite's largest integer: a larger offset cannot even be bound


class RunReads:
    def __init__(self, store: Store, settings: Settings, queue: RunQueue, runs: RunBook, events: EventLog,
                 storage: StorageWatch, workers: WorkerSide, data_dir: Path,
                 card_names: dict[str, str] | None = None) -> None:
        self.store = store
        self.settings = settings
        self.queue = queue
        self.runs = runs
        self.events = events
        self.storage = storage
        self.workers = workers
        self.data_dir = data_dir
        self.cards = RunCards(card_names, workers.card_names)

    async def row(self, run_id: str) -> dict[str, Any]:
        row = await self.store.get_run(run_id)
        if row is None:
            raise NotFound(f"no run {run_id}", code="run_not_found", params={"run_id": run_id})
        return row

    async def get(self, run_id: str) -> dict[str, Any]:
        row = await self.row(run_id)
        view = (await add_final_loss(self.store, [self.view(row)]))[0]
        if (row.get("options") or {}).get("provenance"):  # one read more, only for runs that asked
            view["inputs"] = await self.store.list_inputs(run_id)
        return view

    async def list(self, *, status: str | list[str] | None = None, offset: int = 0,
                   limit: int = LIST_LIMIT, after: str | None = None) -> dict[str, Any]:
        """A page newest first. `after`: a run id from an earlier page (its `next`): the page goes
        on behind that run, as fast a million runs back as at the front."""
        statuses = [status] if isinstance(status, str) else status
        for s in statuses or ():
            if s not in rs.STATES:
                raise BadRequest(f"unknown status {s!r}", code="invalid_status",
                                 params={"field": "status", "allowed": sorted(rs.STATES)})
        if not 1 <= limit <= LIST_LIMIT:
            raise BadRequest(f"limit must be from 1 to {LIST_LIMIT}", code="invalid_limit", params={"field": "limit"})
        if not 0 <= offset <= OFFSET_MAX:
            raise BadRequest(f"offset must be from 0 to {OFFSET_MAX}", code="invalid_offset",
                             params={"field": "offset"})
        before = None
        if after is not None:
            before = await self.store.submit_order_of(after)
            if before is None:
                raise BadRequest(f"after: no run {after!r} to page on from (it may have been deleted); "
                                 "start again from the first page", code="invalid_after",
                                 params={"field": "after", "run_id": after})
        rows, total = await self.store.list_runs(statuses, offset=offset, limit=limit, before=before)
        runs = await add_final_loss(self.store, [self.view(r) for r in rows])
        page: dict[str, Any] = {"runs": runs, "total": total, "offset": offset, "limit": limit}
        # The run to pass as `after` for the next page; absent on a page that is not full.
        if len(runs) == limit:
            page["next"] = runs[-1]["id"]
        return page

    def view(self, row: dict[str, Any]) -> dict[str, Any]:
        view = self.storage.overlay({k: v for k, v in row.items() if k not in ("graph", "last_seq")})
        view["last_seq"] = row.get("last_seq")
        self.cards.add(view)
        if row["status"] == rs.QUEUED:
            view["queue_position"] = self.queue.position(row["id"])
            reason = self.queue.reason(row["id"])
            view["queue_reason"] = reason.to_dict() if reason else None
        return view

    async def _status(self, run_id: str) -> tuple[str, int]:
        found = await self.store.run_status(run_id)
        if found is None:
            raise NotFound(f"no run {run_id}", code="run_not_found", params={"run_id": run_id})
        return found

    async def check_cursor(self, run_id: str, cursor: int) -> tuple[str, int]:
        """(status, last seq) of a run whose log reaches `cursor`; a cursor past its end is refused
        (400 cursor_past_end) the same way on REST and on /ws/execution."""
        status, last_seq = await self._status(run_id)
        last = max(last_seq, self.events.visible_seq(run_id) or 0)
        if cursor > last:
            raise BadRequest(f"cursor {cursor} is past the end of run {run_id}'s log ({last})",
                             code="cursor_past_end", params={"field": "cursor", "last_seq": last})
        return status, last

    async def events_page(self, run_id: str, cursor: int = 0, wait: float = 0.0) -> dict[str, Any]:
        status, last = await self.check_cursor(run_id, cursor)
        if wait > 0 and cursor >= last and status in rs.ACTIVE:
            await self.events.wait_beyond(run_id, cursor, min(wait, 60.0))
        # The status first, then the events: a run's closing event commits with its final status,
        # so a finished status read here guarantees the read below sees the whole log.
        status, _ = await self._status(run_id)
        events, next_cursor, more = await self.store.read_events(
            run_id, cursor, self.settings.run_events_response_cap_bytes)
        return {"run_id": run_id, "events": [_event_view(e) for e in events], "cursor": next_cursor, "more": more,
                "status": status}

    def known_status(self, run_id: str) -> str | None:
        """The status from memory, consistent with the in-memory log: a run is final here only once
        its closing event is in it. None for runs this process does not know."""
        final = self.runs.finished_status(run_id)
        if final is not None:
            return final
        record = self.runs.get(run_id)
        if record is not None and (record.finishing or record.started is not None):
            return record.status
        if self.queue.get(run_id) is not None or (record is not None and not record.written):
            return rs.QUEUED
        return None

    async def live_page(self, run_id: str, cursor: int, wait: float) -> tuple[str, list[str], int, bool]:
        """For followers: (status, encoded events, next cursor, more). Served from the in-memory
        tail when it holds the events (all followers share its encoding), else from the store."""
        status = self.known_status(run_id)
        if status is not None:
            flushed = self.events.visible_seq(run_id) or 0
            if wait > 0 and cursor >= flushed and status in rs.ACTIVE:
                await self.events.wait_beyond(run_id, cursor, min(wait, 60.0))
                status = self.known_status(run_id) or status
                flushed = self.events.visible_seq(run_id) or 0
            page = self.events.tail_page(run_id, cursor, flushed, self.settings.run_events_response_cap_bytes)
            if page is not None:
                texts, next_cursor, more = page
                return status, texts, next_cursor, more
        full = await self.events_page(run_id, cursor, wait)
        texts = [json.dumps(e, allow_nan=False, separators=(",", ":")) for e in full["events"]]
        return full["status"], texts, full["cursor"], full["more"]

    async def metrics(self, run_id: str) -> list[dict[str, Any]]:
        await self.row(run_id)
        return await self.store.read_metrics(run_id)

    async def artifacts(self, run_id: str) -> list[dict[str, Any]]:
        """The run's artifact rows, worker paths mapped back to this server's (core/storage/plan.py)."""
        rows = await self._artifact_rows(run_id)
        return [storage_plan.read_view(row, self.data_dir, self.settings.mount_label) for row in rows]

    async def s3_artifact(self, run_id: str, artifact_id: str) -> tuple[Any, str]:
        """(the S3 backend, the object's key) of one of the run's S3 artifacts, for its download
        route; NotFound for another artifact, or when S3 is off now."""
        rows = await self._artifact_rows(run_id)
        row = next((r for r in rows if str(r["id"]) == artifact_id), None)
        if row is None or row.get("backend") != storage_plan.S3:
            raise NotFound(f"run {run_id} has no S3 artifact {artifact_id}", code="artifact_not_found",
                           params={"run_id": run_id, "artifact_id": artifact_id})
        s3 = self.workers.s3
        if s3 is None or row.get("mount_label") != s3.config.bucket:
            raise NotFound(f"artifact {artifact_id} is in bucket {row.get('mount_label')}, which this server does "
                           "not use now (settings s3_enabled, s3_bucket)", code="artifact_bucket_unknown",
                           params={"run_id": run_id, "artifact_id": artifact_id, "bucket": row.get("mount_label")})
        return s3, row["path"]

    async def _artifact_rows(self, run_id: str) -> list[dict[str, Any]]:
        await self.row(run_id)
        return await self.store.list_artifacts(run_id)


def _event_view(e: Any) -> dict[str, Any]:
    return {"seq": e.seq, "type": e.type, "payload": e.payload, "created_at": e.created_at}
