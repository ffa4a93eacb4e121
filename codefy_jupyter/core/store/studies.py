"""The store's SQL for studies (the tables of the studies' migration step): the study row, its
variants, every attempt, and its audit log.

Every change to a study goes through `change`: one transaction bumps the study's revision, applies
the study and attempt updates, inserts new attempts and appends the events it caused, each event's
payload carrying the revision the change produced. The audit log's cursors are gapless per study.

Every function takes a plain sqlite3 connection; the write functions may run twice (a failed batch
is retried one write at a time), so they touch nothing but the database and decide the same way
both times.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

STUDY_COLUMNS = ("id", "created_order", "name", "owner", "status", "revision", "request_digest", "idempotency_key",
                 "objective", "seed", "repetitions", "options", "budget", "resume_policy", "halt", "error",
                 "last_cursor", "created_at", "updated_at")
_STUDY_JSON = frozenset({"objective", "options", "budget", "halt", "error"})
STUDY_UPDATABLE = frozenset({"status", "budget", "halt", "error"})
ATTEMPT_COLUMNS = ("id", "study_id", "variant", "repetition", "attempt", "seed", "run_id", "status", "error",
                   "created_at", "submitted_at", "started_at", "finished_at", "objective_value", "final_metrics",
                   "fingerprint_digest", "stop_reason", "evidence_copied")
_ATTEMPT_JSON = frozenset({"error", "final_metrics"})
ATTEMPT_UPDATABLE = frozenset(ATTEMPT_COLUMNS) - {"id", "study_id", "variant", "repetition", "attempt", "seed",
                                                   "run_id", "created_at"}


def _dumps(value: Any) -> str | None:
    return None if value is None else json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _study(values: Sequence[Any]) -> dict[str, Any]:
    row = dict(zip(STUDY_COLUMNS, values))
    for column in _STUDY_JSON:
        row[column] = _loads(row[column])
    return row


def _attempt(values: Sequence[Any]) -> dict[str, Any]:
    row = dict(zip(ATTEMPT_COLUMNS, values))
    for column in _ATTEMPT_JSON:
        row[column] = _loads(row[column])
    row["evidence_copied"] = bool(row["evidence_copied"])
    return row


def _encode(columns: Iterable[str], row: Mapping[str, Any], json_columns: frozenset[str]) -> list[Any]:
    return [_dumps(row.get(c)) if c in json_columns else row.get(c) for c in columns]


@dataclass
class Change:
    """One change to a study: what `change` applies in one transaction."""
    study: dict[str, Any] = field(default_factory=dict)  # STUDY_UPDATABLE columns
    attempts: dict[str, dict[str, Any]] = field(default_factory=dict)  # attempt id -> ATTEMPT_UPDATABLE columns
    new_attempts: list[dict[str, Any]] = field(default_factory=list)
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (type, payload)


# -- writes ---------------------------------------------------------------------------------------

def find_by_key(conn: sqlite3.Connection, key: str) -> tuple[str, str] | None:
    """(study id, request digest) of the study submitted with this idempotency key."""
    row = conn.execute("SELECT id, request_digest FROM studies WHERE idempotency_key = ?", (key,)).fetchone()
    return (row[0], row[1]) if row else None


def insert_study(conn: sqlite3.Connection, study: Mapping[str, Any], variants: Sequence[Mapping[str, Any]],
                 attempts: Sequence[Mapping[str, Any]], event: tuple[str, dict[str, Any]]) -> str | None:
    """The study, its variants, every attempt and its first event, together. Returns None when
    written, or the id of the study that already holds its idempotency key (then nothing is)."""
    key = study.get("idempotency_key")
    if key is not None and (found := find_by_key(conn, key)) is not None:
        return found[0]
    (top,) = conn.execute("SELECT COALESCE(MAX(created_order), 0) FROM studies").fetchone()
    row = {**study, "created_order": top + 1, "revision": 1, "last_cursor": 0}
    conn.execute(f"INSERT INTO studies ({', '.join(STUDY_COLUMNS)}) VALUES ({', '.join('?' * len(STUDY_COLUMNS))})",
                 _encode(STUDY_COLUMNS, row, _STUDY_JSON))
    conn.executemany("INSERT INTO study_variants (study_id, variant, label, graph, ops) VALUES (?, ?, ?, ?, ?)",
                     [(study["id"], v["variant"], v["label"], _dumps(v["graph"]), _dumps(v["ops"])) for v in variants])
    _insert_attempts(conn, attempts)
    _append(conn, study["id"], 1, [event], study["created_at"])
    return None


def _insert_attempts(conn: sqlite3.Connection, attempts: Sequence[Mapping[str, Any]]) -> None:
    conn.executemany(
        f"INSERT INTO study_attempts ({', '.join(ATTEMPT_COLUMNS)}) VALUES ({', '.join('?' * len(ATTEMPT_COLUMNS))})",
        [_encode(ATTEMPT_COLUMNS, {"evidence_copied": 0, **a}, _ATTEMPT_JSON) for a in attempts])


def _append(conn: sqlite3.Connection, study_id: str, revision: int, events: Sequence[tuple[str, dict[str, Any]]],
            now: float) -> None:
    (cursor,) = conn.execute("SELECT last_cursor FROM studies WHERE id = ?", (study_id,)).fetchone()
    rows = []
    for kind, payload in events:
        cursor += 1
        rows.append((study_id, cursor, kind, _dumps({**payload, "revision": revision}), now))
    conn.executemany("INSERT INTO study_events (study_id, cursor, type, payload, created_at) VALUES (?, ?, ?, ?, ?)",
                     rows)
    conn.execute("UPDATE studies SET last_cursor = ? WHERE id = ?", (cursor, study_id))


def change(conn: sqlite3.Connection, study_id: str, c: Change, now: float,
           expected_revision: int | None = None) -> int | None:
    """Apply `c` and bump the revision; return the new revision, or None (nothing written) when
    `expected_revision` is given and the study has moved past it."""
    found = conn.execute("SELECT revision FROM studies WHERE id = ?", (study_id,)).fetchone()
    if found is None:
        raise KeyError(study_id)
    if expected_revision is not None and found[0] != expected_revision:
        return None
    revision = found[0] + 1
    fields = {k: v for k, v in c.study.items()}
    unknown = set(fields) - STUDY_UPDATABLE
    if unknown:
        raise ValueError(f"not updatable on a study: {sorted(unknown)}")
    sets = [f"{k} = ?" for k in fields] + ["revision = ?", "updated_at = ?"]
    conn.execute(f"UPDATE studies SET {', '.join(sets)} WHERE id = ?",
                 [_dumps(v) if k in _STUDY_JSON else v for k, v in fields.items()] + [revision, now, study_id])
    for attempt_id, updates in c.attempts.items():
        unknown = set(updates) - ATTEMPT_UPDATABLE
        if unknown:
            raise ValueError(f"not updatable on an attempt: {sorted(unknown)}")
        if updates:
            conn.execute(f"UPDATE study_attempts SET {', '.join(f'{k} = ?' for k in updates)} WHERE id = ?",
                         [_dumps(v) if k in _ATTEMPT_JSON else v for k, v in updates.items()] + [attempt_id])
    _insert_attempts(conn, c.new_attempts)
    if c.events:
        _append(conn, study_id, revision, c.events, now)
    return revision


# -- reads ----------------------------------------------------------------------------------------

def get_study(conn: sqlite3.Connection, study_id: str) -> dict[str, Any] | None:
    row = conn.execute(f"SELECT {', '.join(STUDY_COLUMNS)} FROM studies WHERE id = ?", (study_id,)).fetchone()
    return _study(row) if row else None


def study_revision(conn: sqlite3.Connection, study_id: str) -> int | None:
    row = conn.execute("SELECT revision FROM studies WHERE id = ?", (study_id,)).fetchone()
    return row[0] if row else None


def list_studies(conn: sqlite3.Connection, statuses: Sequence[str] | None, offset: int,
                 limit: int) -> list[dict[str, Any]]:
    where, args = "", []
    if statuses:
        where = f"WHERE status IN ({', '.join('?' * len(statuses))})"
        args = list(statuses)
    rows = conn.execute(f"SELECT {', '.join(STUDY_COLUMNS)} FROM studies {where} ORDER BY created_order DESC"
                        " LIMIT ? OFFSET ?", [*args, limit, offset]).fetchall()
    return [_study(r) for r in rows]


def active_study_ids(conn: sqlite3.Connection, statuses: Sequence[str]) -> list[str]:
    return [r[0] for r in conn.execute(
        f"SELECT id FROM studies WHERE status IN ({', '.join('?' * len(statuses))}) ORDER BY created_order",
        list(statuses))]


def studies_with_attempts_in(conn: sqlite3.Connection, statuses: Sequence[str]) -> list[str]:
    return [r[0] for r in conn.execute(
        f"SELECT DISTINCT study_id FROM study_attempts WHERE status IN ({', '.join('?' * len(statuses))})",
        list(statuses))]


def get_variants(conn: sqlite3.Connection, study_id: str) -> list[dict[str, Any]]:
    return [{"variant": v, "label": label, "graph": _loads(graph), "ops": _loads(ops)} for v, label, graph, ops in
            conn.execute("SELECT variant, label, graph, ops FROM study_variants WHERE study_id = ? ORDER BY variant",
                         (study_id,))]


def get_attempts(conn: sqlite3.Connection, study_id: str) -> list[dict[str, Any]]:
    return [_attempt(r) for r in conn.execute(
        f"SELECT {', '.join(ATTEMPT_COLUMNS)} FROM study_attempts WHERE study_id = ?"
        " ORDER BY variant, repetition, attempt", (study_id,))]


def attempt_by_run(conn: sqlite3.Connection, run_id: str) -> dict[str, Any] | None:
    row = conn.execute(f"SELECT {', '.join(ATTEMPT_COLUMNS)} FROM study_attempts WHERE run_id = ?",
                       (run_id,)).fetchone()
    return _attempt(row) if row else None


def study_bundle(conn: sqlite3.Connection, study_id: str) -> dict[str, Any] | None:
    """The study with its variants, attempts and its children's live run columns, read together."""
    study = get_study(conn, study_id)
    if study is None:
        return None
    runs = {r[0]: {"status": r[1], "worker_id": r[2], "devices": _loads(r[3]), "queue_key": r[4]}
            for r in conn.execute("SELECT id, status, worker_id, devices, queue_key FROM runs WHERE study_id = ?",
                                  (study_id,))}
    return {"study": study, "variants": get_variants(conn, study_id), "attempts": get_attempts(conn, study_id),
            "runs": runs}


def study_snapshot(conn: sqlite3.Connection, study_id: str) -> dict[str, Any] | None:
    """`study_bundle` read in one transaction (one snapshot), to follow with `study_delta` from
    its study's `last_cursor`."""
    conn.execute("BEGIN")
    try:
        return study_bundle(conn, study_id)
    finally:
        conn.execute("COMMIT")


def study_delta(conn: sqlite3.Connection, study_id: str, cursor: int) -> dict[str, Any] | None:
    """What changed after audit-log `cursor`, in one snapshot: {study, attempts, runs}, the
    attempts the events after `cursor` name (new ones included) and their children's run columns
    (as in study_bundle). Every change to an attempt appends an event naming it (`attempt_id`),
    except start-up reconciliation (before anything is served) and retention's harvest, which
    deletes runs: a reader that saw runs deleted reads everything again."""
    conn.execute("BEGIN")
    try:
        study = get_study(conn, study_id)
        if study is None:
            return None
        ids = [r[0] for r in conn.execute(
            "SELECT DISTINCT json_extract(payload, '$.attempt_id') FROM study_events"
            " WHERE study_id = ? AND cursor > ? AND cursor <= ?", (study_id, cursor, study["last_cursor"]))
            if r[0] is not None]
        attempts: list[dict[str, Any]] = []
        runs: dict[str, dict[str, Any]] = {}
        for start in range(0, len(ids), 500):
            chunk = ids[start:start + 500]
            marks = ", ".join("?" * len(chunk))
            mine = [_attempt(r) for r in conn.execute(
                f"SELECT {', '.join(ATTEMPT_COLUMNS)} FROM study_attempts WHERE id IN ({marks})", chunk)]
            attempts += mine
            run_ids = [a["run_id"] for a in mine]
            runs.update({r[0]: {"status": r[1], "worker_id": r[2], "devices": _loads(r[3]), "queue_key": r[4]}
                         for r in conn.execute("SELECT id, status, worker_id, devices, queue_key FROM runs"
                                               f" WHERE id IN ({', '.join('?' * len(run_ids))})", run_ids)})
        return {"study": study, "attempts": attempts, "runs": runs}
    finally:
        conn.execute("COMMIT")


def events_after(conn: sqlite3.Connection, study_id: str, cursor: int, limit: int) -> list[dict[str, Any]]:
    return [{"cursor": c, "type": t, "payload": _loads(p), "created_at": at} for c, t, p, at in conn.execute(
        "SELECT cursor, type, payload, created_at FROM study_events WHERE study_id = ? AND cursor > ?"
        " ORDER BY cursor LIMIT ?", (study_id, cursor, limit))]


def study_events_page(conn: sqlite3.Connection, study_id: str, cursor: int,
                      limit: int) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """The study row and `events_after` together: one reader hop for each poll of a follower."""
    study = get_study(conn, study_id)
    return study, (events_after(conn, study_id, cursor, limit) if study is not None else [])


def run_by_stamp(conn: sqlite3.Connection, attempt_id: str) -> dict[str, Any] | None:
    """The child run carrying this attempt's id (the partial index on study_attempt_id)."""
    row = conn.execute("SELECT id, status FROM runs WHERE study_attempt_id = ?", (attempt_id,)).fetchone()
    return {"id": row[0], "status": row[1]} if row else None


def run_and_points(conn: sqlite3.Connection, run_id: str) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
    """A child's row (the columns evidence needs) and its metric points in write order. Inside a
    transaction (retention's harvest); a reader calls read_run_and_points."""
    row = conn.execute("SELECT id, status, started_at, finished_at, fingerprint_digest, error FROM runs WHERE id = ?",
                       (run_id,)).fetchone()
    if row is None:
        return None
    run = dict(zip(("id", "status", "started_at", "finished_at", "fingerprint_digest", "error"), row))
    run["error"] = _loads(run["error"])
    points = [{"node_id": n, "name": name, "step": step, "value": value} for n, name, step, value in conn.execute(
        "SELECT node_id, name, step, value FROM run_metrics WHERE run_id = ? ORDER BY id", (run_id,))]
    return run, points


def read_run_and_points(conn: sqlite3.Connection, run_id: str) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
    """run_and_points in one snapshot. Two separate reads could straddle retention's delete of
    the child: the row found, its points already gone, and the study would copy an empty
    evidence over the one retention's harvest had just written."""
    conn.execute("BEGIN")
    try:
        return run_and_points(conn, run_id)
    finally:
        conn.execute("COMMIT")


def attempts_for_runs(conn: sqlite3.Connection, run_ids: Sequence[str]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for start in range(0, len(run_ids), 500):
        chunk = list(run_ids[start:start + 500])
        out += [_attempt(r) for r in conn.execute(
            f"SELECT {', '.join(ATTEMPT_COLUMNS)} FROM study_attempts WHERE run_id IN ({', '.join('?' * len(chunk))})",
            chunk)]
    return out
