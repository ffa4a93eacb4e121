"""The `output_drops` table: worker runs whose recorded outputs the control plane gave up, and
whether their worker has been told. Functions of a connection, for `Store.write`/`Store.read`."""

from __future__ import annotations

import sqlite3


def add(conn: sqlite3.Connection, run_id: str, worker: str, sent: bool, now: float) -> None:
    conn.execute("INSERT INTO output_drops (run_id, worker, sent, dropped_at) VALUES (?, ?, ?, ?) "
                 "ON CONFLICT(run_id) DO UPDATE SET sent = MAX(sent, excluded.sent)", (run_id, worker, int(sent), now))


def mark_sent(conn: sqlite3.Connection, run_ids: list[str]) -> None:
    conn.executemany("UPDATE output_drops SET sent = 1 WHERE run_id = ?", [(r,) for r in run_ids])


def unsent(conn: sqlite3.Connection, worker: str) -> list[str]:
    rows = conn.execute("SELECT run_id FROM output_drops WHERE worker = ? AND sent = 0 ORDER BY dropped_at",
                        (worker,)).fetchall()
    return [r[0] for r in rows]


def is_dropped(conn: sqlite3.Connection, run_id: str) -> bool:
    return conn.execute("SELECT 1 FROM output_drops WHERE run_id = ?", (run_id,)).fetchone() is not None
