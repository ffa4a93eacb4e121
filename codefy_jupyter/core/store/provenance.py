"""Queries of input provenance records (`run_inputs`, migration step "input provenance").

A record is what the engine's `ctx.record_input` made (engine/provenance.py): node_id, kind,
path, sha256, size, revision, rows. The column is `n_rows` because ROWS is a keyword on PostgreSQL.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

_COLUMNS = ("node_id", "kind", "path", "sha256", "size", "revision", "n_rows")


def input_rows(run_id: str, records: Sequence[Mapping[str, Any]], created_at: float) -> list[tuple]:
    return [(run_id, r.get("node_id"), r["kind"], r["path"], r["sha256"], int(r["size"]), r.get("revision"),
             r.get("rows"), created_at) for r in records]


def insert_inputs(conn: Any, rows: Sequence[tuple]) -> int:
    conn.executemany(
        "INSERT INTO run_inputs (run_id, node_id, kind, path, sha256, size, revision, n_rows, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
    return len(rows)


def select_inputs(conn: Any, run_id: str) -> list[dict[str, Any]]:
    """A run's records in the order its nodes made them."""
    rows = conn.execute(f"SELECT {', '.join(_COLUMNS)} FROM run_inputs WHERE run_id = ? ORDER BY id",
                        (run_id,)).fetchall()
    return [{**dict(zip(_COLUMNS[:-1], row[:-1])), "rows": row[-1]} for row in rows]


def select_inputs_of(conn: Any, run_ids: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
    """run id -> its records (runs without any left out), for a sweep's or study's export."""
    out: dict[str, list[dict[str, Any]]] = {}
    for start in range(0, len(run_ids), 500):
        chunk = list(run_ids[start:start + 500])
        marks = ", ".join("?" * len(chunk))
        for row in conn.execute(f"SELECT run_id, {', '.join(_COLUMNS)} FROM run_inputs "
                                f"WHERE run_id IN ({marks}) ORDER BY id", chunk).fetchall():
            out.setdefault(row[0], []).append({**dict(zip(_COLUMNS[:-1], row[1:-1])), "rows": row[-1]})
    return out


def delete_inputs(conn: Any, run_ids: Sequence[str]) -> None:
    marks = ", ".join("?" * len(run_ids))
    conn.execute(f"DELETE FROM run_inputs WHERE run_id IN ({marks})", list(run_ids))
