"""The store's SQL: repository functions over a plain sqlite3 connection, and the types they return.

Each function takes a connection rather than the Store, so it runs on any connection, a migrated
`:memory:` one included. `core/store/database.py` runs the write functions in its writer's batched
transactions and the read functions on its reader connection.

Write functions may run twice (`apply_batch` retries a failed batch one write at a time), so
they touch nothing but the database.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, NamedTuple, Protocol, Sequence

from .migrations import rollback_quietly
from ..contract.lifecycle import FINISHED

log = logging.getLogger(__name__)

# A run in any other status (queued, running, disconnected, or one we do not know) is active: it
# is never pruned, and recovery looks at it.
FINISHED_STATUSES = tuple(sorted(FINISHED))
MAX_LIST_LIMIT = 50
# Default byte budget of one events page (CODEFY_RUN_EVENTS_RESPONSE_CAP_BYTES's default).
EVENTS_PAGE_BYTES = 4 * 1024 * 1024
# Counted per event on top of its payload bytes: the seq/type/created_at wrapping in a response.
EVENT_ENVELOPE_BYTES = 64

RUN_COLUMNS = (
    "id", "name", "status", "owner", "device", "devices", "queue_key", "lane", "session", "seed",
    "deterministic", "options", "graph", "submitted_at", "started_at", "finished_at", "error",
    "fingerprint_digest", "worker_id", "last_seq", "execution_facts",
    "sweep_id", "sweep_variant", "study_id", "study_attempt_id",
)
_JSON_COLUMNS = frozenset({"devices", "options", "graph", "error", "execution_facts"})
# last_seq moves only together with the events it counts (append_events); id never changes.
UPDATABLE_RUN_FIELDS = frozenset(RUN_COLUMNS) - {"id", "last_seq"}
_LIST_COLUMNS = tuple(c for c in RUN_COLUMNS if c != "graph")
_ARTIFACT_COLUMNS = ("id", "run_id", "node_id", "kind", "path", "meta", "created_at", "backend", "mount_label")
INT64_MAX = 2**63 - 1
_DELETE_CHUNK = 500  # run ids per DELETE ... IN (...), well under SQLite's variable limit


class StoreError(Exception):
    """A database file we refuse, a closed store, or a write that conflicts with what is stored."""

    def __init__(self, message: str, *, path: Path | str | None = None) -> None:
        super().__init__(message)
        self.path = str(path) if path is not None else None


class StoredEvent(NamedTuple):
    seq: int
    type: str
    payload: dict
    created_at: float


class MetricPoint(NamedTuple):
    run_id: str
    node_id: str | None
    name: str
    step: int | None
    value: float
    created_at: float | None = None


class DeletedRun(NamedTuple):
    """A removed run's row and its artifact records, for the caller to delete files by."""

    run: dict
    artifacts: list[dict]


# ---------------------------------------------------------------------------------------------
# Encoding


def dumps(value: Any) -> str | None:
    return None if value is None else json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _encode_run_value(column: str, value: Any) -> Any:
    if column in _JSON_COLUMNS:
        return dumps(value)
    if column == "deterministic" and value is not None:
        return int(bool(value))
    return value


# In a page of runs (GET runs), a run's error or execution facts longer than this read as a stub:
# the worker that ran it chose most of them (run_finished, run_facts), and a page of fifty must stay
# cheap to render whatever one of them sent. GET the run by id for all of it.
LIST_JSON_MAX_CHARS = 16 * 1024
_LISTED_COLUMNS = frozenset({"error", "execution_facts"})


def _listed(text: str | None) -> Any:
    if text is not None and len(text) > LIST_JSON_MAX_CHARS:
        return {"truncated": True, "chars": len(text),
                "message": f"{len(text)} characters, over the {LIST_JSON_MAX_CHARS} a list shows: read the run itself"}
    return _loads(text)


def _decode_run(columns: Sequence[str], values: Sequence[Any], *, listing: bool = False) -> dict:
    row = dict(zip(columns, values))
    for column in _JSON_COLUMNS.intersection(row):
        row[column] = (_listed if listing and column in _LISTED_COLUMNS else _loads)(row[column])
    if row.get("deterministic") is not None:
        row["deterministic"] = bool(row["deterministic"])
    return row


def _decode_artifact(values: Sequence[Any]) -> dict:
    row = dict(zip(_ARTIFACT_COLUMNS, values))
    row["meta"] = _loads(row["meta"])
    return row


def encode_events(run_id: str, events: Iterable[Sequence[Any]]) -> list[tuple]:
    """(seq, type, payload, created_at) items → insert rows; refuses a batch that is not consecutive.

    A payload is a dict, or its JSON text when the caller already encoded it (the sink does, to
    apply the payload cap): a str is stored as given. Encoding happens here, on the caller's side
    of the queue, so a payload that is not JSON fails its own caller instead of the writer's batch.
    """
    rows = []
    for seq, type_, payload, created_at in events:
        if not isinstance(seq, int) or seq < 1:
            raise ValueError(f"run {run_id!r}: event seq must be a positive int, got {seq!r}")
        if rows and seq != rows[-1][1] + 1:
            raise ValueError(f"run {run_id!r}: event seqs must be consecutive, got {rows[-1][1]} then {seq}")
        text = payload if isinstance(payload, str) else dumps(payload if payload is not None else {})
        rows.append((run_id, seq, str(type_), float(created_at), len(text.encode()), text))
    return rows


def _status_filter(statuses: str | Iterable[str] | None) -> tuple[str, tuple]:
    if statuses is None:
        return "", ()
    wanted = (statuses,) if isinstance(statuses, str) else tuple(statuses)
    if not wanted:
        return "WHERE 0", ()
    return f"WHERE status IN ({', '.join('?' * len(wanted))})", wanted


# ---------------------------------------------------------------------------------------------
# Repository functions


def check_run_fields(names: Iterable[str], allowed: frozenset[str] = UPDATABLE_RUN_FIELDS) -> None:
    """Column names go into SQL text, so only known ones pass (this also catches typos)."""
    unknown = set(names) - allowed
    if unknown:
        raise ValueError(f"unknown or store-managed run fields: {sorted(unknown)}")


def insert_run(conn: sqlite3.Connection, row: Mapping[str, Any], event_rows: Sequence[tuple] = ()) -> None:
    check_run_fields(row, UPDATABLE_RUN_FIELDS | {"id"})
    columns = list(row)
    values = [_encode_run_value(c, row[c]) for c in columns]
    sql = (
        f"INSERT INTO runs ({', '.join(columns)}, submit_order) VALUES ({', '.join('?' * len(columns))}, "
        "(SELECT IFNULL(MAX(submit_order), 0) + 1 FROM runs))"
    )
    try:
        conn.execute(sql, values)
    except sqlite3.IntegrityError as exc:
        raise StoreError(f"run {row['id']!r} already exists") from exc
    if event_rows:
        insert_events(conn, row["id"], event_rows)


def update_run_row(conn: sqlite3.Connection, run_id: str, fields: Mapping[str, Any],
                   only_if_status: Sequence[str] = (), event_rows: Sequence[tuple] = ()) -> bool:
    check_run_fields(fields)
    where, params = "id = ?", [run_id]
    if only_if_status:
        where += f" AND status IN ({', '.join('?' * len(only_if_status))})"
        params += list(only_if_status)
    if fields:
        assignments = ", ".join(f"{c} = ?" for c in fields)
        values = [_encode_run_value(c, v) for c, v in fields.items()]
        hit = conn.execute(f"UPDATE runs SET {assignments} WHERE {where} RETURNING id", values + params).fetchall()
    else:
        hit = conn.execute(f"SELECT id FROM runs WHERE {where}", params).fetchall()
    if not hit:
        return False
    if event_rows:
        insert_events(conn, run_id, event_rows)
    return True


def insert_events(conn: sqlite3.Connection, run_id: str, event_rows: Sequence[tuple]) -> int:
    """Append consecutive events; the first must follow the run's last_seq (gapless, no duplicates)."""
    first, last = event_rows[0][1], event_rows[-1][1]
    # Compare-and-set on last_seq: the seq guard and the counter move in one statement.
    hit = conn.execute(
        "UPDATE runs SET last_seq = ? WHERE id = ? AND last_seq = ? RETURNING id", (last, run_id, first - 1)
    ).fetchall()
    if not hit:
        found = conn.execute("SELECT last_seq FROM runs WHERE id = ?", (run_id,)).fetchone()
        if found is None:
            raise StoreError(f"cannot append events to unknown run {run_id!r}")
        raise StoreError(f"run {run_id!r}: the next event seq is {found[0] + 1}, got {first}")
    conn.executemany(
        "INSERT INTO run_events (run_id, seq, type, created_at, payload_bytes, payload) VALUES (?, ?, ?, ?, ?, ?)",
        event_rows,
    )
    return last


def delete_runs(conn: sqlite3.Connection, run_ids: Sequence[str]) -> list[DeletedRun]:
    """Delete runs with their events, metrics and artifact records; return what was deleted."""
    deleted: list[DeletedRun] = []
    for start in range(0, len(run_ids), _DELETE_CHUNK):
        chunk = list(run_ids[start:start + _DELETE_CHUNK])
        marks = ", ".join("?" * len(chunk))
        runs = conn.execute(
            f"DELETE FROM runs WHERE id IN ({marks}) RETURNING submit_order, {', '.join(RUN_COLUMNS)}", chunk
        ).fetchall()
        if not runs:
            continue
        artifacts = conn.execute(
            f"DELETE FROM run_artifacts WHERE run_id IN ({marks}) RETURNING {', '.join(_ARTIFACT_COLUMNS)}", chunk
        ).fetchall()
        conn.execute(f"DELETE FROM run_events WHERE run_id IN ({marks})", chunk)
        conn.execute(f"DELETE FROM run_metrics WHERE run_id IN ({marks})", chunk)
        conn.execute(f"DELETE FROM run_inputs WHERE run_id IN ({marks})", chunk)
        by_run: dict[str, list[dict]] = {}
        for values in sorted(artifacts, key=lambda a: a[0]):  # RETURNING order is unspecified
            artifact = _decode_artifact(values)
            by_run.setdefault(artifact["run_id"], []).append(artifact)
        for values in sorted(runs, key=lambda r: r[0]):
            run = _decode_run(RUN_COLUMNS, values[1:])
            deleted.append(DeletedRun(run, by_run.get(run["id"], [])))
    return deleted


class PruneHook(Protocol):
    """Told, inside retention's transaction, which runs it is about to delete, so that results
    read from them (a sweep's objectives, a study's evidence) can be copied first."""

    def harvest(self, conn: sqlite3.Connection, run_ids: Sequence[str]) -> None: ...

    def harvest_failed(self, conn: sqlite3.Connection, run_ids: Sequence[str], error: Exception) -> None: ...


def _before_prune(conn: sqlite3.Connection, hook: PruneHook, run_ids: Sequence[str]) -> None:
    # A harvest that fails must not hold the delete back (retention runs on schedule): its writes
    # are rolled back to the savepoint and the hook records that the results are gone.
    conn.execute("SAVEPOINT before_prune")
    try:
        hook.harvest(conn, run_ids)
    except Exception as err:
        conn.execute("ROLLBACK TO before_prune")
        conn.execute("RELEASE before_prune")
        conn.execute("SAVEPOINT before_prune")
        try:
            hook.harvest_failed(conn, run_ids, err)
        except Exception:
            conn.execute("ROLLBACK TO before_prune")
            log.exception("store: recording a failed harvest failed too")
    conn.execute("RELEASE before_prune")


def prune_runs(conn: sqlite3.Connection, keep_last: int, hooks: Sequence[PruneHook] = ()) -> list[DeletedRun]:
    """Delete finished runs outside the newest `keep_last` runs (active runs count, never go);
    `hooks` see the doomed runs first, in the same transaction."""
    finished = ", ".join("?" * len(FINISHED_STATUSES))
    # Everything at or before the (keep_last + 1)-th newest run is outside the window; the
    # subquery is NULL (nothing to prune) when there are no more runs than that.
    rows = conn.execute(
        f"SELECT id FROM runs WHERE status IN ({finished}) AND submit_order <= "
        "(SELECT submit_order FROM runs ORDER BY submit_order DESC LIMIT 1 OFFSET ?) ORDER BY submit_order",
        (*FINISHED_STATUSES, keep_last),
    ).fetchall()
    run_ids = [r[0] for r in rows]
    if run_ids:
        for hook in hooks:
            _before_prune(conn, hook, run_ids)
    return delete_runs(conn, run_ids)


def insert_metrics(conn: sqlite3.Connection, rows: Sequence[tuple]) -> int:
    conn.executemany(
        "INSERT INTO run_metrics (run_id, node_id, name, step, value, created_at) VALUES (?, ?, ?, ?, ?, ?)", rows
    )
    return len(rows)


def insert_artifact(conn: sqlite3.Connection, row: tuple) -> int:
    return int(conn.execute(
        "INSERT INTO run_artifacts (run_id, node_id, kind, path, meta, created_at, backend, mount_label) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
        row,
    ).fetchone()[0])


def select_file_hash(conn: sqlite3.Connection, path: str) -> tuple[int, int, str] | None:
    row = conn.execute("SELECT size, mtime_ns, sha256 FROM file_hashes WHERE path = ?", (path,)).fetchone()
    return (int(row[0]), int(row[1]), str(row[2])) if row else None


def upsert_file_hash(conn: sqlite3.Connection, row: tuple) -> None:
    conn.execute("INSERT INTO file_hashes (path, size, mtime_ns, sha256, hashed_at) VALUES (?, ?, ?, ?, ?) "
                 "ON CONFLICT (path) DO UPDATE SET size = excluded.size, mtime_ns = excluded.mtime_ns, "
                 "sha256 = excluded.sha256, hashed_at = excluded.hashed_at", row)


def insert_fingerprint(conn: sqlite3.Connection, digest: str, document: str, created_at: float) -> bool:
    return bool(conn.execute(
        "INSERT OR IGNORE INTO fingerprints (digest, document, created_at) VALUES (?, ?, ?) RETURNING digest",
        (digest, document, created_at),
    ).fetchall())


def select_run(conn: sqlite3.Connection, run_id: str) -> dict | None:
    row = conn.execute(f"SELECT {', '.join(RUN_COLUMNS)} FROM runs WHERE id = ?", (run_id,)).fetchone()
    return None if row is None else _decode_run(RUN_COLUMNS, row)


def select_run_status(conn: sqlite3.Connection, run_id: str) -> tuple[str, int] | None:
    row = conn.execute("SELECT status, last_seq FROM runs WHERE id = ?", (run_id,)).fetchone()
    return None if row is None else (row[0], int(row[1]))


def select_runs_page(conn: sqlite3.Connection, statuses: str | Iterable[str] | None, offset: int, limit: int,
                     with_graph: bool, before: int | None = None) -> tuple[list[dict], int]:
    """A page newest first, and the total matching `statuses`. `before`: a submit_order; the page
    starts behind it (keyset paging: as fast far back as at the front, where an offset reads
    every row it skips)."""
    columns = RUN_COLUMNS if with_graph else _LIST_COLUMNS
    where, params = _status_filter(statuses)
    listed = ", ".join(columns)
    older, older_args = ("", ()) if before is None else (" AND submit_order < ?", (before,))
    if len(params) > 1:
        # Newest first over several statuses: each status's own newest `offset + limit` through the
        # (status, submit_order) index, merged. A plain `status IN (...) ORDER BY submit_order`
        # walks the submit_order index and filters, which with a million runs and few of the wanted
        # statuses (the Running chip) reads every row: 350 ms instead of 1 ms.
        branches = " UNION ALL ".join(
            f"SELECT * FROM (SELECT {listed}, submit_order FROM runs WHERE status = ?{older} "
            f"ORDER BY submit_order DESC LIMIT ?) AS b{i}" for i in range(len(params)))
        sql = f"SELECT {listed} FROM ({branches}) AS u ORDER BY submit_order DESC LIMIT ? OFFSET ?"
        reach = min(offset + limit, INT64_MAX)  # an offset near the largest integer must not overflow it
        args: tuple = (*(v for status in params for v in (status, *older_args, reach)), limit, offset)
    else:
        keyed = (f"{where}{older}" if where else f"WHERE 1 = 1{older}") if older else where
        sql = f"SELECT {listed} FROM runs {keyed} ORDER BY submit_order DESC LIMIT ? OFFSET ?"
        args = (*params, *older_args, limit, offset)
    with _snapshot(conn):  # the page and the total from the same state
        # run_counts: kept by triggers with every change of a run's status (migrations.py, step 9).
        total = conn.execute(f"SELECT COALESCE(SUM(n), 0) FROM run_counts {where}", params).fetchone()[0]
        if len(params) <= 1 and offset >= DEEP_OFFSET:
            rows = _deep_page(conn, listed, keyed, (*params, *older_args), offset, limit)
        else:
            rows = conn.execute(sql, args).fetchall()
    return [_decode_run(columns, r, listing=not with_graph) for r in rows], int(total)


# From this offset on a page is found by its first submit_order first (see _deep_page).
DEEP_OFFSET = 1000


def _deep_page(conn: sqlite3.Connection, listed: str, keyed: str, args: tuple, offset: int, limit: int) -> list:
    """A page far back by offset, in two steps: the submit_order it starts at, by the index alone
    (the skipped runs' rows are never read: on PostgreSQL reading them made offset=500000 take
    330 ms), then the page itself by keyset from there. Same rows as LIMIT/OFFSET."""
    edge = conn.execute(f"SELECT submit_order FROM runs {keyed} ORDER BY submit_order DESC LIMIT 1 OFFSET ?",
                        (*args, min(offset, INT64_MAX))).fetchone()
    if edge is None:
        return []
    at = f"{keyed} AND submit_order <= ?" if keyed else "WHERE submit_order <= ?"
    return conn.execute(f"SELECT {listed} FROM runs {at} ORDER BY submit_order DESC LIMIT ?",
                        (*args, edge[0], limit)).fetchall()


def select_submit_order(conn: sqlite3.Connection, run_id: str) -> int | None:
    row = conn.execute("SELECT submit_order FROM runs WHERE id = ?", (run_id,)).fetchone()
    return None if row is None else int(row[0])


def select_active_runs(conn: sqlite3.Connection) -> list[dict]:
    finished = ", ".join("?" * len(FINISHED_STATUSES))
    rows = conn.execute(
        f"SELECT {', '.join(RUN_COLUMNS)} FROM runs WHERE status NOT IN ({finished}) ORDER BY submit_order",
        FINISHED_STATUSES,
    ).fetchall()
    return [_decode_run(RUN_COLUMNS, r) for r in rows]


def select_events_page(conn: sqlite3.Connection, run_id: str, cursor: int, byte_budget: int | None,
                       chunk: int = 1024) -> tuple[list[StoredEvent], int, bool]:
    """Events after `cursor`, as many as fit `byte_budget` (at least one); (events, next_cursor, more)."""
    upper: int | None = None
    more = False
    with _snapshot(conn):
        if byte_budget is not None:
            # Size the page on the narrow columns first, then read exactly those payloads: a long
            # log is never loaded past the budget.
            used, after = 0, cursor
            while True:
                sizes = conn.execute(
                    "SELECT seq, payload_bytes FROM run_events WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?",
                    (run_id, after, chunk),
                ).fetchall()
                for seq, size in sizes:
                    cost = size + EVENT_ENVELOPE_BYTES
                    if upper is not None and used + cost > byte_budget:
                        more = True
                        break
                    used, upper = used + cost, seq
                if more or len(sizes) < chunk:
                    break
                after = sizes[-1][0]
            if upper is None:
                return [], cursor, False
        sql = "SELECT seq, type, payload, created_at FROM run_events WHERE run_id = ? AND seq > ?"
        params: tuple = (run_id, cursor)
        if upper is not None:
            sql, params = sql + " AND seq <= ?", params + (upper,)
        rows = conn.execute(sql + " ORDER BY seq", params).fetchall()
    events = [StoredEvent(seq, type_, json.loads(payload), created_at) for seq, type_, payload, created_at in rows]
    return events, (events[-1].seq if events else cursor), more


def select_last_event(conn: sqlite3.Connection, run_id: str) -> StoredEvent | None:
    row = conn.execute(
        "SELECT seq, type, payload, created_at FROM run_events WHERE run_id = ? ORDER BY seq DESC LIMIT 1", (run_id,)
    ).fetchone()
    return None if row is None else StoredEvent(row[0], row[1], json.loads(row[2]), row[3])


def select_metrics(conn: sqlite3.Connection, run_id: str) -> list[dict]:
    rows = conn.execute(
        "SELECT node_id, name, step, value, created_at FROM run_metrics WHERE run_id = ? ORDER BY id", (run_id,)
    ).fetchall()
    return [dict(zip(("node_id", "name", "step", "value", "created_at"), r)) for r in rows]


def select_last_loss_points(conn: sqlite3.Connection, run_ids: Sequence[str]) -> dict[str, list[dict]]:
    """The last point of every loss series (wire.run_summary.is_loss_series: LIKE is ASCII
    case-insensitive too) of each run, in log order: all the final-loss rule reads, one query for a
    page of runs rather than every point of every run."""
    out: dict[str, list[dict]] = {}
    for start in range(0, len(run_ids), 500):  # under SQLite's bound-parameter limit
        chunk = list(run_ids[start:start + 500])
        marks = ",".join("?" * len(chunk))
        rows = conn.execute(
            f"SELECT run_id, name, value FROM run_metrics WHERE id IN (SELECT MAX(id) FROM run_metrics "
            f"WHERE run_id IN ({marks}) AND name LIKE '%loss' AND value IS NOT NULL GROUP BY run_id, name) "
            "ORDER BY id", chunk).fetchall()
        for run_id, name, value in rows:
            out.setdefault(run_id, []).append({"name": name, "value": value})
    return out


def select_artifacts(conn: sqlite3.Connection, run_id: str) -> list[dict]:
    rows = conn.execute(
        f"SELECT {', '.join(_ARTIFACT_COLUMNS)} FROM run_artifacts WHERE run_id = ? ORDER BY id", (run_id,)
    ).fetchall()
    return [_decode_artifact(r) for r in rows]


def select_fingerprint(conn: sqlite3.Connection, digest: str) -> dict | None:
    row = conn.execute("SELECT document FROM fingerprints WHERE digest = ?", (digest,)).fetchone()
    return None if row is None else json.loads(row[0])


@contextmanager
def _snapshot(conn: sqlite3.Connection) -> Iterator[None]:
    """A read transaction: several SELECTs see one state of the file (WAL readers never block)."""
    conn.execute("BEGIN")
    try:
        yield
    finally:
        conn.execute("COMMIT")


# ---------------------------------------------------------------------------------------------
# The writer's batch


def apply_batch(conn: sqlite3.Connection, ops: Sequence[Callable[[sqlite3.Connection], Any]],
                fence: Callable[[sqlite3.Connection], None] | None = None
                ) -> tuple[list[tuple[bool, Any]], list[int]]:
    """Run `ops` in one BEGIN IMMEDIATE transaction: ([(ok, result or error)], [writes per commit]).

    If anything fails, the transaction rolls back and each op is retried alone, so one bad write
    fails by itself and the others still commit. `fence(conn)` runs first in the transaction (the
    leader lease's epoch check, pg_lease.py); what it raises fails the whole batch, untried alone.
    """
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            if fence is not None:
                try:
                    fence(conn)
                except Exception as refused:
                    rollback_quietly(conn)
                    return [(False, refused)] * len(ops), []
            results = [op(conn) for op in ops]
            conn.execute("COMMIT")
        except BaseException:
            rollback_quietly(conn)
            raise
    except Exception as exc:
        if len(ops) == 1:
            return [(False, exc)], []
        outcomes: list[tuple[bool, Any]] = []
        commits: list[int] = []
        for op in ops:
            outcome, committed = apply_batch(conn, [op], fence)
            outcomes += outcome
            commits += committed
        return outcomes, commits
    return [(True, r) for r in results], [len(ops)]
