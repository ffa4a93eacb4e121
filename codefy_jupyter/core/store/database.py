"""The durable store: runs, their event logs, metrics, artifacts and environment fingerprints, in
one SQLite file.

Why it is shaped this way:
- One writer connection on a thread of its own (`writer.py`). A write is a function of that
  connection; the thread takes whatever writes are queued and applies them in one `BEGIN
  IMMEDIATE` transaction (group commit). Under load a batch forms while the previous commit is in
  flight, so N concurrent writes cost about one fsync rather than N, and an idle store adds no
  delay. `await store.write(...)` returns only after its transaction committed, with WAL and
  `synchronous=FULL`, so a write acknowledged to a client survives a crash.
- Reads go through a second, read-only connection on another thread. In WAL mode a reader never
  waits for the writer and sees every committed transaction.
- The repository functions take a plain sqlite3 connection, not the Store, so each one runs on
  any connection (a migrated `:memory:` one included).
- The clock is injected: nothing here calls time.time() except as the default clock.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
import uuid
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence, TypeVar

from ..config import redact_url
from ..errors import StorageFull, is_storage_full
from . import postgres
from ..telemetry import Histogram
from . import provenance as store_provenance
from . import workers as store_workers
from .checkpoints import CheckpointPolicy
from .ids import select_ids_with_prefix
from .lease import LEADER, RENEW_EVERY_S, TTL_S, WON, Lease
from .leadership_view import LeadershipView
from .pg_lease import LeaseKeeper
from .migrations import SchemaVersionError
from .postgres import is_postgres_url
from .reconnect import Outage
from .sqlite_file import ConnectionThread, check_is_sqlite, connect_reader, connect_writer, make_private, probe_room
from .writer import Outcomes, Write, WriterThread, settle
from .queries import (
    EVENT_ENVELOPE_BYTES,
    EVENTS_PAGE_BYTES,
    FINISHED_STATUSES,
    MAX_LIST_LIMIT,
    UPDATABLE_RUN_FIELDS,
    DeletedRun,
    MetricPoint,
    PruneHook,
    StoredEvent,
    StoreError,
    check_run_fields,
    delete_runs,
    dumps,
    encode_events,
    insert_artifact,
    select_file_hash,
    upsert_file_hash,
    insert_events,
    insert_fingerprint,
    insert_metrics,
    insert_run,
    prune_runs,
    select_active_runs,
    select_artifacts,
    select_events_page,
    select_fingerprint,
    select_last_event,
    select_last_loss_points,
    select_metrics,
    select_run,
    select_run_status,
    select_runs_page,
    select_submit_order,
    update_run_row,
)

__all__ = [
    "EVENT_ENVELOPE_BYTES", "EVENTS_PAGE_BYTES", "FINISHED_STATUSES", "MAX_LIST_LIMIT", "DeletedRun",
    "MetricPoint", "Store", "StoreError", "StoreStatistics", "StoredEvent",
]

log = logging.getLogger(__name__)

T = TypeVar("T")
Clock = Callable[[], float]
KEEPER_CONNECT_TIMEOUT_S = 2


@dataclass(frozen=True)
class StoreStatistics:
    commits: int        # transactions committed by the writer
    writes: int         # writes acknowledged as committed
    failed_writes: int  # writes whose own transaction failed (their callers got the error)
    largest_batch: int  # most writes committed in one transaction
    queued: int         # writes waiting for the writer now
    checkpoints: int = 0        # WAL checkpoints the writer ran (checkpoints.py)
    short_checkpoints: int = 0  # of those, cut short by a reader's snapshot (tried again later)


# ---------------------------------------------------------------------------------------------
# The store


class Store(LeadershipView):
    """Open with `await Store.open(path)`; close with `await store.close()` (or `async with`)."""

    def __init__(self, path: Path, writer: WriterThread, reader: ConnectionThread | postgres.ReaderPool, *,
                 clock: Clock) -> None:
        self._path = path
        self._writer = writer
        self._reader = reader
        self._clock = clock
        self._flushed: dict[str, int] = {}
        self._prune_hooks: list[PruneHook] = []
        # Bumped once runs are deleted (after the commit): a view cached with the runs it read
        # (a study's `run_exists`) is stale when this has moved.
        self.runs_deleted = 0
        self._commits = self._writes = self._failed = self._largest = 0
        self._closed = False
        self._shutdown: asyncio.Future | None = None
        # PostgreSQL only: the leader lease (pg_lease.py). Without it this store always leads.
        self.lease_keeper: LeaseKeeper | None = None
        self._leading: asyncio.Event = asyncio.Event()
        self._leading.set()
        # Told WON or LOST (lease.py) on the loop each time this store starts or stops leading.
        self.on_lease_change: Callable[[str], None] | None = None
        # The disk was full at the last write that needed room (cleared by the next commit, or by
        # `probe_room`); `on_full` is told each time it becomes so.
        self.full = False
        self.on_full: Callable[[], None] | None = None
        writer.deliver = self._record

    @classmethod
    async def open(cls, path: str | Path, *, clock: Clock = time.time, synchronous: str = "FULL",
                   batch_window_s: float = 0.0, max_batch: int = 512,
                   checkpoints: CheckpointPolicy | None = None, lease: Lease | None = None,
                   lease_clock: Clock = time.time) -> "Store":
        """Open (creating and migrating as needed) the store at `path`: an SQLite file, or a
        `postgresql://` URL (postgres.py; `synchronous` and `checkpoints` are SQLite's only).

        Raises StoreError, without writing to the file, when it is not SQLite or its schema is
        newer than this code. `synchronous` is SQLite's: FULL makes a commit survive power loss;
        NORMAL survives a process crash only. `batch_window_s` > 0 makes the writer wait that long
        after the first queued write to gather more (larger batches, added latency). `checkpoints`:
        when the writer checkpoints the WAL (default: checkpoints.py's figures). `lease` (PostgreSQL
        only): this control plane's side of the leader lease (default: a fresh holder id, no URL),
        on `lease_clock` (not `clock`: a test that moves the records' clock must not expire the lease).
        """
        if is_postgres_url(path):
            return await cls._open_postgres(str(path), clock=clock, batch_window_s=batch_window_s,
                                            max_batch=max_batch, lease=lease, lease_clock=lease_clock)
        synchronous = synchronous.upper()
        if synchronous not in ("NORMAL", "FULL", "EXTRA"):
            raise ValueError(f"synchronous must be NORMAL, FULL or EXTRA, got {synchronous!r}")
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        path = Path(path).expanduser().absolute()
        check_is_sqlite(path)
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        make_private(path)
        try:
            writer = await WriterThread.start("codefy-store-writer", partial(connect_writer, path, synchronous),
                                              batch_window_s=batch_window_s, max_batch=max_batch,
                                              checkpoints=checkpoints or CheckpointPolicy())
        except SchemaVersionError as exc:
            raise StoreError(f"{path} was written by a newer codefy-jupyter ({exc}); refusing to open it",
                             path=path) from exc
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"cannot use {path} as the codefy database: {exc}", path=path) from exc
        try:
            reader = await ConnectionThread.start("codefy-store-reader", partial(connect_reader, path))
        except BaseException as exc:
            await writer.close()
            if isinstance(exc, sqlite3.Error):
                raise StoreError(f"cannot open {path} for reading: {exc}", path=path) from exc
            raise
        return cls(path, writer, reader, clock=clock)

    @classmethod
    async def _open_postgres(cls, url: str, *, clock: Clock, batch_window_s: float, max_batch: int,
                             lease: Lease | None, lease_clock: Clock) -> "Store":
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        shown = redact_url(url)
        lease = lease or Lease(uuid.uuid4().hex, ttl_s=TTL_S, renew_every_s=RENEW_EVERY_S)
        outage = Outage(shown)  # the writer, the readers and the keeper log one outage once
        try:
            writer, reader = await postgres.start_connections(url, batch_window_s=batch_window_s, max_batch=max_batch,
                                                              outage=outage, idle_in_transaction_s=lease.ttl_s)
        except SchemaVersionError as exc:
            raise StoreError(f"{shown} was written by a newer codefy-jupyter ({exc}); refusing to use it",
                             path=shown) from exc
        except sqlite3.Error as exc:  # what the PostgreSQL connection's errors read as (postgres.py)
            raise StoreError(f"cannot use {shown} as the codefy database: {exc}", path=shown) from exc
        except Exception as exc:
            if type(exc).__module__.startswith("psycopg"):
                raise StoreError(f"cannot connect to the codefy database at {shown}: {exc}", path=shown) from exc
            raise
        store = cls(shown, writer, reader, clock=clock)  # type: ignore[arg-type]
        try:
            await store._keep_lease(url, lease, lease_clock, outage)
        except BaseException:
            await store.close()
            raise
        return store

    async def _keep_lease(self, url: str, lease: Lease, clock: Clock, outage: Outage) -> None:
        self._leading.clear()
        # A short connect timeout: an attempt that hangs (an unreachable host) must not hold the
        # keeper past its lease's deadline (libpq's shortest is 2 s).
        keeper = await LeaseKeeper.start(partial(postgres.connect_plain, url, KEEPER_CONNECT_TIMEOUT_S), lease,
                                         clock, self._lease_changed, outage)
        self.lease_keeper = keeper
        self._writer.fence = keeper.fence
        if lease.role == LEADER:
            self._leading.set()

    def _lease_changed(self, change: str) -> None:
        if change == WON:
            self._leading.set()
        else:
            self._leading.clear()
        if self.on_lease_change is not None:
            self.on_lease_change(change)

    async def leadership(self) -> None:
        """Return once this store leads (at once on SQLite)."""
        await self._leading.wait()

    @property
    def path(self) -> Path:
        """The SQLite file, or (on PostgreSQL) the database URL without its password."""
        return self._path

    @property
    def commit_seconds(self) -> Histogram:
        """How long the writer's batches took to apply and commit (core/telemetry.py)."""
        return self._writer.commit_seconds

    async def __aenter__(self) -> "Store":
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.close()

    # -- the writer ---------------------------------------------------------------------------

    async def write(self, op: Callable[[sqlite3.Connection], T]) -> T:
        """Run `op(writer_connection)` in the next batch; return its result once committed.

        `op` runs on the writer thread inside the batch's transaction and may run twice (a failed
        batch is retried one write at a time), so it must only touch the database. Once submitted
        it runs even if the caller stops waiting.
        """
        return await self._submit(op)

    async def read(self, op: Callable[..., T], *args: Any) -> T:
        """Run `op(reader_connection, *args)` on the read-only connection (sees every commit)."""
        return await self._reader.run(op, *args)

    def _submit(self, op: Callable[[sqlite3.Connection], Any],
                after_commit: Callable[[Any], None] | None = None) -> asyncio.Future:
        if self._closed:
            raise StoreError(f"the store at {self._path} is closed", path=self._path)
        future = asyncio.get_running_loop().create_future()
        self._writer.put(Write(op, future, after_commit))
        return future

    def _record(self, batch: list[Write], done: Outcomes) -> None:
        outcomes, commits = done
        self._commits += len(commits)
        self._largest = max([self._largest, *commits])
        # Decided before any caller resumes: a caller that sees StorageFull also sees `full`.
        full = any(not ok and is_storage_full(result) for ok, result in outcomes)
        was_full, self.full = self.full, full or (self.full and not commits)
        if full and not was_full:
            log.error("store: the disk holding %s is full; writes fail until it has room again", self._path)
            if self.on_full is not None:
                self.on_full()
        elif was_full and not self.full:
            log.warning("store: %s takes writes again", self._path)
        for w, (ok, result) in zip(batch, outcomes):
            if not ok:
                self._failed += 1
                settle(w.future, error=self._full_error(result) if is_storage_full(result) else result)
                continue
            self._writes += 1
            if w.after_commit is not None:
                try:
                    w.after_commit(result)
                except Exception:
                    log.exception("store: after-commit hook failed")
            settle(w.future, result)

    def _full_error(self, cause: BaseException) -> StorageFull:
        folder = self._path.parent if isinstance(self._path, Path) else self._path
        error = StorageFull(f"the disk holding the run database ({folder}) is full ({cause}); nothing of this "
                            "request was written. Free space there: the server goes on by itself once it has room",
                            params={"path": str(folder)})
        error.__cause__ = cause
        return error

    async def probe_room(self) -> bool:
        """After a full disk: whether it has room again (a small file written, synced and removed
        next to the database); clears `full` when it has."""
        if not isinstance(self._path, Path):  # PostgreSQL's disk is its server's: the next commit tells
            self.full = False
            return True
        room = await asyncio.to_thread(probe_room, self._path.parent)
        if room and self.full:
            self.full = False
            log.warning("store: the disk holding %s has room again", self._path)
        return room

    def statistics(self) -> StoreStatistics:
        return StoreStatistics(self._commits, self._writes, self._failed, self._largest, self._writer.queued(),
                               self._writer.checkpoint_runs, self._writer.checkpoint_short)

    async def close(self) -> None:
        """Commit every write submitted so far, then close both connections. Idempotent."""
        if self._shutdown is None:
            self._closed = True
            self._shutdown = asyncio.ensure_future(self._close_all())
        await asyncio.shield(self._shutdown)

    async def _close_all(self) -> None:
        try:
            await self._writer.drain()
            if self.lease_keeper is not None:
                await self.lease_keeper.close()
        finally:
            # Reader first: the last connection to close checkpoints the WAL into the main file.
            try:
                await self._reader.close()
            finally:
                await self._writer.close()

    # -- runs ---------------------------------------------------------------------------------

    def create_run(self, row: Mapping[str, Any], *, events: Iterable[Sequence[Any]] = ()) -> asyncio.Future:
        """Insert a run row (id and status required; submitted_at defaults to now), optionally
        with its first events (seq from 1) in the same transaction.

        Like every write here, it is queued when called (await the returned future for the
        commit), so writes commit in the order they were called."""
        check_run_fields(row, UPDATABLE_RUN_FIELDS | {"id"})
        if not isinstance(row.get("id"), str) or not row["id"]:
            raise ValueError("a run row needs a non-empty string id")
        if not isinstance(row.get("status"), str):
            raise ValueError("a run row needs a status")
        row = dict(row)
        if row.get("submitted_at") is None:
            row["submitted_at"] = self._clock()
        event_rows = encode_events(row["id"], events)
        return self._submit(partial(insert_run, row=row, event_rows=event_rows),
                            self._note_flushed(row["id"], event_rows))

    def update_run(self, run_id: str, *, only_if_status: str | Iterable[str] | None = None,
                   events: Iterable[Sequence[Any]] = (), **fields: Any) -> asyncio.Future:
        """Set `fields` (and append `events`) in one transaction; False if the run does not exist
        or its status is not one of `only_if_status`, in which case nothing is written."""
        check_run_fields(fields)
        statuses = (only_if_status,) if isinstance(only_if_status, str) else tuple(only_if_status or ())
        event_rows = encode_events(run_id, events)
        return self._submit(
            partial(update_run_row, run_id=run_id, fields=fields, only_if_status=statuses, event_rows=event_rows),
            self._note_flushed(run_id, event_rows, only_if=bool),
        )

    async def get_run(self, run_id: str) -> dict | None:
        return await self._reader.run(select_run, run_id)

    async def ids_with_prefix(self, kind: str, prefix: str, limit: int) -> list[str]:
        """Up to `limit` ids of `kind` (run, sweep, study) starting with `prefix` (ids.IdIndex)."""
        return await self._reader.run(select_ids_with_prefix, kind, prefix, limit)

    async def run_status(self, run_id: str) -> tuple[str, int] | None:
        """(status, last_seq) without the rest of the row: what a follower asks on every page."""
        return await self._reader.run(select_run_status, run_id)

    async def list_runs(self, status: str | Iterable[str] | None = None, *, offset: int = 0,
                        limit: int = MAX_LIST_LIMIT, with_graph: bool = False,
                        before: int | None = None) -> tuple[list[dict], int]:
        """A page of runs newest first and the total matching `status`. Rows leave out the graph
        unless asked: a list view does not need it and graphs can be large. `before`: a
        submit_order (`submit_order_of`); the page starts behind that run."""
        if not 0 <= limit <= MAX_LIST_LIMIT:
            raise ValueError(f"limit must be between 0 and {MAX_LIST_LIMIT}, got {limit}")
        if offset < 0:
            raise ValueError(f"offset must not be negative, got {offset}")
        return await self._reader.run(select_runs_page, status, offset, limit, with_graph, before)

    async def submit_order_of(self, run_id: str) -> int | None:
        """Where a run stands in the newest-first order (for keyset paging), None if there is none."""
        return await self._reader.run(select_submit_order, run_id)

    async def active_runs(self) -> list[dict]:
        """Runs not in a finished status (queued, running, ...), oldest first: what recovery retires."""
        return await self._reader.run(select_active_runs)

    async def delete_run(self, run_id: str) -> DeletedRun | None:
        """Remove a run with its events, metrics and artifact records; None if there was none."""
        deleted = await self._submit(partial(delete_runs, run_ids=[run_id]), self._forget_runs)
        return deleted[0] if deleted else None

    async def prune_finished(self, keep_last: int) -> list[DeletedRun]:
        """Keep the newest `keep_last` runs; delete the finished runs behind them, oldest first.

        Active runs count towards the window but are never deleted. A negative keep_last disables
        retention. The caller deletes files named by the returned rows and artifacts.
        """
        if keep_last < 0:
            return []
        return await self._submit(partial(prune_runs, keep_last=keep_last, hooks=tuple(self._prune_hooks)),
                                  self._forget_runs)

    def add_prune_hook(self, hook: PruneHook) -> None:
        """`hook` sees the runs retention is about to delete, in its transaction (queries.PruneHook)."""
        self._prune_hooks.append(hook)

    def _forget_runs(self, deleted: list[DeletedRun]) -> None:
        if deleted:
            self.runs_deleted += 1
        for item in deleted:
            self._flushed.pop(item.run["id"], None)

    # -- events -------------------------------------------------------------------------------

    def append_events(self, run_id: str, events: Iterable[Sequence[Any]],
                      fields: Mapping[str, Any] | None = None) -> asyncio.Future:
        """Append (seq, type, payload, created_at) events, consecutive and continuing the run's
        log; the future gives the run's last committed seq once they are durable. Queued when
        called, so appends and updates of one run commit in call order. `fields` are run columns
        set in the same transaction (a worker run's resume point moves with its events)."""
        event_rows = encode_events(run_id, events)
        if not event_rows:
            return asyncio.ensure_future(self._last_seq(run_id))
        if fields:
            check_run_fields(fields)
            op = partial(_insert_events_and_set, run_id=run_id, event_rows=event_rows, fields=dict(fields))
        else:
            op = partial(insert_events, run_id=run_id, event_rows=event_rows)
        return self._submit(op, self._note_flushed(run_id, event_rows))

    def _note_flushed(self, run_id: str, event_rows: list[tuple],
                      only_if: Callable[[Any], bool] | None = None) -> Callable[[Any], None] | None:
        if not event_rows:
            return None
        last = event_rows[-1][1]

        def note(result: Any) -> None:
            if only_if is None or only_if(result):
                self._flushed[run_id] = max(self._flushed.get(run_id, 0), last)

        return note

    def flushed_seq(self, run_id: str) -> int | None:
        """The highest seq of `run_id` this store has committed since it opened (None if it has
        committed none; a run from an earlier process has its `last_seq` in its row)."""
        return self._flushed.get(run_id)

    async def _last_seq(self, run_id: str) -> int:
        run = await self.get_run(run_id)
        if run is None:
            raise StoreError(f"unknown run {run_id!r}")
        return int(run["last_seq"])

    async def read_events(self, run_id: str, cursor: int = 0,
                          byte_budget: int | None = EVENTS_PAGE_BYTES) -> tuple[list[StoredEvent], int, bool]:
        """Events with seq > cursor, in order, up to `byte_budget` (payload bytes plus
        EVENT_ENVELOPE_BYTES each; at least one event). Returns (events, next_cursor, more):
        next_cursor is the last seq returned (or `cursor`), more says events remain after it."""
        if cursor < 0:
            raise ValueError(f"cursor must not be negative, got {cursor}")
        if byte_budget is not None and byte_budget < 1:
            raise ValueError(f"byte_budget must be positive or None, got {byte_budget}")
        return await self._reader.run(select_events_page, run_id, cursor, byte_budget)

    async def last_event(self, run_id: str) -> StoredEvent | None:
        return await self._reader.run(select_last_event, run_id)

    # -- metrics, artifacts, fingerprints -----------------------------------------------------

    def record_metrics(self, points: Iterable[Sequence[Any]]) -> asyncio.Future:
        """Record (run_id, node_id, name, step, value[, created_at]) points in one write."""
        rows = []
        for point in points:
            p = MetricPoint(**point) if isinstance(point, Mapping) else MetricPoint(*point)
            created = p.created_at if p.created_at is not None else self._clock()
            rows.append((p.run_id, p.node_id, p.name, p.step, None if p.value is None else float(p.value), created))
        if not rows:
            done = asyncio.get_running_loop().create_future()
            done.set_result(0)
            return done
        return self._submit(partial(insert_metrics, rows=rows))

    async def read_metrics(self, run_id: str) -> list[dict]:
        """A run's metric points in the order they were recorded."""
        return await self._reader.run(select_metrics, run_id)

    async def last_loss_points(self, run_ids: Sequence[str]) -> dict[str, list[dict]]:
        """run id -> the last point of each of its loss series, in log order (runs without one left out)."""
        return await self._reader.run(select_last_loss_points, list(run_ids)) if run_ids else {}

    async def record_artifact(self, run_id: str, node_id: str | None, kind: str, path: str,
                              meta: Mapping[str, Any] | None = None, created_at: float | None = None, *,
                              backend: str | None = None, mount_label: str | None = None) -> int:
        """Record an artifact a run wrote; returns its id. `backend`/`mount_label`: where a worker
        run's `path` is relative to (core/storage/plan.py); None for a plain path."""
        row = (run_id, node_id, kind, str(path), dumps(meta), self._clock() if created_at is None else created_at,
               backend, mount_label)
        return await self._submit(partial(insert_artifact, row=row))

    async def file_hash(self, path: str) -> tuple[int, int, str] | None:
        """(size, mtime_ns, sha256) last computed for `path`, or None."""
        return await self._reader.run(select_file_hash, path)

    async def put_file_hash(self, path: str, size: int, mtime_ns: int, sha256: str) -> None:
        await self._submit(partial(upsert_file_hash, row=(path, size, mtime_ns, sha256, self._clock())))

    async def list_artifacts(self, run_id: str) -> list[dict]:
        return await self._reader.run(select_artifacts, run_id)

    async def record_inputs(self, run_id: str, records: Sequence[Mapping[str, Any]]) -> int:
        """Keep a run's input provenance records (engine/provenance.py) in one write."""
        rows = store_provenance.input_rows(run_id, records, self._clock())
        return await self._submit(partial(store_provenance.insert_inputs, rows=rows)) if rows else 0

    async def list_inputs(self, run_id: str) -> list[dict]:
        return await self._reader.run(store_provenance.select_inputs, run_id)

    async def inputs_of(self, run_ids: Sequence[str]) -> dict[str, list[dict]]:
        return await self._reader.run(store_provenance.select_inputs_of, list(run_ids)) if run_ids else {}

    async def put_fingerprint(self, digest: str, document: Mapping[str, Any]) -> bool:
        """Store an environment document under its digest once; True if this call stored it."""
        return await self._submit(partial(insert_fingerprint, digest=digest, document=dumps(document),
                                          created_at=self._clock()))

    async def get_fingerprint(self, digest: str) -> dict | None:
        return await self._reader.run(select_fingerprint, digest)

    # -- workers and enrollments (hashes only) ------------------------------------------------

    async def add_enrollment(self, token_hash: str, *, expires_at: float, worker_id: str | None = None,
                             created_by: str | None = None) -> None:
        await self._submit(partial(store_workers.insert_enrollment, token_hash=token_hash, worker_id=worker_id,
                                   created_at=self._clock(), expires_at=expires_at, created_by=created_by))

    async def redeem_enrollment(self, token_hash: str, name: str, worker_token_hash: str) -> tuple[dict, str | None]:
        """(worker row, replaced token hash or None), or EnrollmentRefused."""
        return await self._submit(partial(store_workers.redeem_enrollment, token_hash=token_hash, name=name,
                                          worker_token_hash=worker_token_hash, now=self._clock()))

    async def list_workers(self) -> list[dict]:
        return await self._reader.run(store_workers.select_workers)

    async def worker_by_token(self, token_hash: str) -> dict | None:
        return await self._reader.run(store_workers.select_worker_by_token, token_hash)

    async def worker_seen(self, worker_id: str, info: Mapping[str, Any]) -> bool:
        return await self._submit(partial(store_workers.update_worker_seen, worker_id=worker_id,
                                          seen_at=self._clock(), info=info))

    async def delete_worker(self, worker_id: str) -> bool:
        return await self._submit(partial(store_workers.delete_worker, worker_id=worker_id))


def _insert_events_and_set(conn: Any, run_id: str, event_rows: Sequence[tuple], fields: Mapping[str, Any]) -> int:
    last = insert_events(conn, run_id, event_rows)
    update_run_row(conn, run_id, fields)
    return last
