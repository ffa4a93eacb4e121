"""The store's SQL for worker agents and their enrollment tokens (tables of migrations 2 and 3).

Only sha256 hashes of tokens reach the database (`token_hash`): the one-time enrollment tokens and
the long-lived worker tokens alike, so a copy of the file lets nobody connect as a worker.

Like `store_queries`, every function takes a plain sqlite3 connection; the write functions may run
twice (a failed batch is retried one write at a time), so they touch nothing but the database and
decide the same way both times.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any, Mapping

_WORKER_COLUMNS = ("id", "name", "token_hash", "enrolled_at", "last_seen_at", "info", "enrolled_by")
# A row's `info` (what its last hello said) is read only under this many characters: a hello within
# wire/hello_limits.py's bounds stores well under it; a bigger one was stored by an older version
# (50,000 devices, 13 MB) and reading it would hold whoever asks, so it reads as none.
STORED_INFO_MAX_CHARS = 1024 * 1024


class EnrollmentRefused(Exception):
    """An enrollment token that cannot be exchanged: `code` (`enrollment_unknown`, `enrollment_used`,
    `enrollment_expired`, `worker_name_taken`, `enrollment_bound`), English message, params."""

    def __init__(self, code: str, message: str, params: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.params = params or {}


def _worker(values: tuple) -> dict:
    row = dict(zip(_WORKER_COLUMNS, values))
    text = row["info"]
    try:
        info = json.loads(text) if text and len(text) <= STORED_INFO_MAX_CHARS else {}
    except (ValueError, RecursionError):
        info = {}
    row["info"] = info if isinstance(info, dict) else {}
    return row


def insert_enrollment(conn: sqlite3.Connection, token_hash: str, worker_id: str | None, created_at: float,
                      expires_at: float, created_by: str | None) -> None:
    """A new one-time token. A re-issue for a worker (worker_id set) replaces that worker's unused
    earlier ones: only the newest may enroll it."""
    if worker_id is not None:
        conn.execute("DELETE FROM worker_enrollments WHERE worker_id = ? AND used_at IS NULL", (worker_id,))
    conn.execute(
        "INSERT INTO worker_enrollments (token_hash, worker_id, created_at, expires_at, created_by) "
        "VALUES (?, ?, ?, ?, ?)", (token_hash, worker_id, created_at, expires_at, created_by))


def redeem_enrollment(conn: sqlite3.Connection, token_hash: str, name: str, worker_token_hash: str,
                      now: float) -> tuple[dict, str | None]:
    """Exchange a one-time token for a worker token under `name`, in one transaction. Returns the
    worker row and the hash of the token it replaces (a re-issue), or raises EnrollmentRefused.
    A new worker is enrolled by whoever issued the token; a re-enrolled one keeps its enroller
    (an admin re-issuing a user's worker does not take it over)."""
    found = conn.execute(
        "SELECT worker_id, expires_at, used_at, created_by FROM worker_enrollments WHERE token_hash = ?",
        (token_hash,)).fetchone()
    if found is None:
        raise EnrollmentRefused("enrollment_unknown", "this enrollment token is not valid (it was never issued, "
                                "or it was revoked)")
    bound_id, expires_at, used_at, created_by = found
    if used_at is not None:
        raise EnrollmentRefused("enrollment_used", "this enrollment token was already used; ask for a new one")
    if now >= expires_at:
        raise EnrollmentRefused("enrollment_expired", "this enrollment token has expired; ask for a new one",
                                {"expires_at": expires_at})
    holder = conn.execute(f"SELECT {', '.join(_WORKER_COLUMNS)} FROM workers WHERE name = ?", (name,)).fetchone()
    if bound_id is not None:
        bound = conn.execute("SELECT name FROM workers WHERE id = ?", (bound_id,)).fetchone()
        if bound is not None and bound[0] != name:
            raise EnrollmentRefused("enrollment_bound", f"this token re-enrolls worker {bound[0]!r}, not {name!r}",
                                    {"name": name, "worker": bound[0]})
    if holder is not None and holder[0] != bound_id:
        raise EnrollmentRefused("worker_name_taken", f"worker name {name!r} is enrolled already; only a token "
                                "re-issued for that worker may enroll it again", {"name": name})
    conn.execute("UPDATE worker_enrollments SET used_at = ?, used_by = ? WHERE token_hash = ?",
                 (now, name, token_hash))
    if holder is not None:
        replaced = holder[2]
        conn.execute("UPDATE workers SET token_hash = ?, enrolled_at = ? WHERE id = ?",
                     (worker_token_hash, now, holder[0]))
        return _worker((holder[0], name, worker_token_hash, now, holder[4], holder[5], holder[6])), replaced
    conn.execute("INSERT INTO workers (id, name, token_hash, enrolled_at, enrolled_by) VALUES (?, ?, ?, ?, ?)",
                 (name, name, worker_token_hash, now, created_by))
    return _worker((name, name, worker_token_hash, now, None, None, created_by)), None


def select_workers(conn: sqlite3.Connection) -> list[dict]:
    rows = conn.execute(f"SELECT {', '.join(_WORKER_COLUMNS)} FROM workers ORDER BY name").fetchall()
    return [_worker(r) for r in rows]


def select_worker_by_token(conn: sqlite3.Connection, token_hash: str) -> dict | None:
    row = conn.execute(f"SELECT {', '.join(_WORKER_COLUMNS)} FROM workers WHERE token_hash = ?",
                       (token_hash,)).fetchone()
    return None if row is None else _worker(row)


def update_worker_seen(conn: sqlite3.Connection, worker_id: str, seen_at: float, info: Mapping[str, Any]) -> bool:
    return bool(conn.execute("UPDATE workers SET last_seen_at = ?, info = ? WHERE id = ? RETURNING id",
                             (seen_at, json.dumps(dict(info), separators=(",", ":")), worker_id)).fetchall())


def delete_worker(conn: sqlite3.Connection, worker_id: str) -> bool:
    """Remove an enrolled worker: its token and any unused re-issue stop working at once."""
    conn.execute("DELETE FROM worker_enrollments WHERE worker_id = ? AND used_at IS NULL", (worker_id,))
    return bool(conn.execute("DELETE FROM workers WHERE id = ? RETURNING id", (worker_id,)).fetchall())
