"""The store's SQL for sweeps (tables of migration 5): one `sweeps` row per sweep and one
`sweep_variants` row per variant, which keeps the variant's harvested result once its run is gone.

Like `queries`, every function takes a plain sqlite3 connection; the write functions may run twice
(a failed batch is retried one write at a time), so they touch only the database and decide the
same way both times (a harvest writes only rows not harvested yet).
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any, Callable, Iterable, Mapping, Sequence

_CHUNK = 500  # ids per IN (...), well under SQLite's variable limit
_SWEEP_COLUMNS = ("id", "name", "owner", "state", "method", "objective", "params", "spec", "options",
                  "seed_variants", "total_combinations", "error", "failure", "created_at", "finished_at")
_SWEEP_JSON = frozenset({"objective", "params", "spec", "options"})
_VARIANT_COLUMNS = ("idx", "run_id", "params", "seed", "harvested", "status", "objective", "objective_node_id",
                    "ambiguous_producers", "objective_logged", "series")
_VARIANT_JSON = frozenset({"params", "ambiguous_producers", "series"})
_HARVEST_FIELDS = ("status", "objective", "objective_node_id", "ambiguous_producers", "objective_logged", "series")

SCHEMA = (
    """
    CREATE TABLE sweeps (
        id                 TEXT PRIMARY KEY,
        name               TEXT,
        owner              TEXT,
        state              TEXT NOT NULL,   -- running, cancelling, finished, failed
        method             TEXT NOT NULL,
        objective          TEXT NOT NULL,   -- json {metric, direction, node_id}
        params             TEXT NOT NULL,   -- json [{node_id, param, domain}]
        spec               TEXT NOT NULL,   -- json: the sweep_spec as submitted
        options            TEXT NOT NULL,   -- json: every child's options
        seed_variants      INTEGER NOT NULL,
        total_combinations TEXT NOT NULL,   -- a product of domain sizes may pass SQLite's integers
        error              TEXT,            -- retention could not harvest (the results are gone)
        failure            TEXT,            -- why the submit loop broke (state failed)
        created_at         REAL NOT NULL,
        finished_at        REAL
    )
    """,
    """
    CREATE TABLE sweep_variants (
        sweep_id            TEXT NOT NULL,
        idx                 INTEGER NOT NULL,
        run_id              TEXT,           -- NULL: the submit loop never got to it
        params              TEXT NOT NULL,  -- json list, in the sweep's params order
        seed                INTEGER,
        harvested           INTEGER NOT NULL DEFAULT 0,
        status              TEXT,
        objective           REAL,
        objective_node_id   TEXT,
        ambiguous_producers TEXT,           -- json list
        objective_logged    INTEGER,
        series              TEXT,           -- json list: the series the run recorded
        PRIMARY KEY (sweep_id, idx)
    ) WITHOUT ROWID
    """,
    "CREATE INDEX sweep_variants_run ON sweep_variants (run_id) WHERE run_id IS NOT NULL",
    "CREATE INDEX sweeps_created ON sweeps (created_at)",
)


def _dumps(value: Any) -> str | None:
    return None if value is None else json.dumps(value, separators=(",", ":"), allow_nan=False)


def _loads(value: Any) -> Any:
    return None if value is None else json.loads(value)


def _sweep(values: Sequence[Any]) -> dict[str, Any]:
    row = dict(zip(_SWEEP_COLUMNS, values))
    for key in _SWEEP_JSON:
        row[key] = _loads(row[key])
    row["seed_variants"] = bool(row["seed_variants"])
    row["total_combinations"] = int(row["total_combinations"])
    return row


def _variant(values: Sequence[Any]) -> dict[str, Any]:
    row = dict(zip(_VARIANT_COLUMNS, values))
    row["index"] = row.pop("idx")
    for key in _VARIANT_JSON:
        row[key] = _loads(row[key])
    row["harvested"] = bool(row["harvested"])
    row["objective_logged"] = bool(row["objective_logged"])
    return row


def insert_sweep(conn: sqlite3.Connection, sweep: Mapping[str, Any], variants: Sequence[Mapping[str, Any]]) -> None:
    """The sweep with its first variant rows, written before any child's row (the others follow
    with insert_variants, before their children are submitted)."""
    values = [_dumps(sweep[c]) if c in _SWEEP_JSON else sweep.get(c) for c in _SWEEP_COLUMNS]
    values[_SWEEP_COLUMNS.index("seed_variants")] = int(bool(sweep["seed_variants"]))
    values[_SWEEP_COLUMNS.index("total_combinations")] = str(sweep["total_combinations"])
    conn.execute(f"INSERT INTO sweeps ({', '.join(_SWEEP_COLUMNS)}) VALUES ({', '.join('?' * len(_SWEEP_COLUMNS))})",
                 values)
    insert_variants(conn, sweep["id"], variants)


def insert_variants(conn: sqlite3.Connection, sweep_id: str, variants: Sequence[Mapping[str, Any]]) -> None:
    conn.executemany("INSERT INTO sweep_variants (sweep_id, idx, run_id, params, seed) VALUES (?, ?, ?, ?, ?)",
                     [(sweep_id, v["index"], v["run_id"], _dumps(list(v["params"])), v["seed"]) for v in variants])


def mark_failed(conn: sqlite3.Connection, sweep_id: str, unsubmitted: Sequence[int], failure: str) -> None:
    """The submit loop broke: the variants it never submitted have no run."""
    conn.executemany("UPDATE sweep_variants SET run_id = NULL WHERE sweep_id = ? AND idx = ?",
                     [(sweep_id, i) for i in unsubmitted])
    conn.execute("UPDATE sweeps SET state = 'failed', failure = ? WHERE id = ?", (failure, sweep_id))


def set_state(conn: sqlite3.Connection, sweep_id: str, state: str, only_if: Sequence[str],
              finished_at: float | None = None) -> bool:
    marks = ", ".join("?" * len(only_if))
    cur = conn.execute(f"UPDATE sweeps SET state = ?, finished_at = COALESCE(?, finished_at) "
                       f"WHERE id = ? AND state IN ({marks})", (state, finished_at, sweep_id, *only_if))
    return cur.rowcount > 0


def select_sweep(conn: sqlite3.Connection, sweep_id: str) -> dict[str, Any] | None:
    row = conn.execute(f"SELECT {', '.join(_SWEEP_COLUMNS)} FROM sweeps WHERE id = ?", (sweep_id,)).fetchone()
    if row is None:
        return None
    sweep = _sweep(row)
    sweep["variants"] = [_variant(v) for v in conn.execute(
        f"SELECT {', '.join(_VARIANT_COLUMNS)} FROM sweep_variants WHERE sweep_id = ? ORDER BY idx", (sweep_id,))]
    return sweep


def select_sweeps(conn: sqlite3.Connection, offset: int, limit: int) -> tuple[list[dict[str, Any]], int]:
    """A page of sweeps, newest first, each with how many variants it has."""
    total = int(conn.execute("SELECT COUNT(*) FROM sweeps").fetchone()[0])
    rows = conn.execute(
        f"SELECT {', '.join('s.' + c for c in _SWEEP_COLUMNS)}, "
        "(SELECT COUNT(*) FROM sweep_variants v WHERE v.sweep_id = s.id) "
        "FROM sweeps s ORDER BY s.created_at DESC, s.rowid DESC LIMIT ? OFFSET ?", (limit, offset)).fetchall()
    out = []
    for row in rows:
        sweep = _sweep(row[:-1])
        sweep["variant_count"] = int(row[-1])
        out.append(sweep)
    return out, total


def select_child_runs(conn: sqlite3.Connection, sweep_id: str) -> dict[str, dict[str, Any]]:
    """run_id -> the child's live columns, for every child run that still exists."""
    out = {}
    for run_id, status, worker_id, devices, queue_key in conn.execute(
            "SELECT id, status, worker_id, devices, queue_key FROM runs WHERE sweep_id = ?", (sweep_id,)):
        out[run_id] = {"status": status, "worker_id": worker_id, "devices": _loads(devices), "queue_key": queue_key}
    return out


def select_points(conn: sqlite3.Connection, run_ids: Iterable[str]) -> dict[str, list[dict[str, Any]]]:
    """run_id -> its metric points in write order."""
    ids = list(run_ids)
    out: dict[str, list[dict[str, Any]]] = {r: [] for r in ids}
    for start in range(0, len(ids), _CHUNK):
        chunk = ids[start:start + _CHUNK]
        for run_id, node_id, name, step, value in conn.execute(
                f"SELECT run_id, node_id, name, step, value FROM run_metrics WHERE run_id IN "
                f"({', '.join('?' * len(chunk))}) ORDER BY id", chunk):
            out[run_id].append({"node_id": node_id, "name": name, "step": step, "value": value})
    return out


def write_harvest(conn: sqlite3.Connection, sweep_id: str, harvests: Mapping[int, Mapping[str, Any]]) -> int:
    """Copy finished children's results onto their variant rows (rows harvested already keep theirs)."""
    rows = [(h["status"], h["objective"], h["objective_node_id"], _dumps(h["ambiguous_producers"]),
             int(bool(h["objective_logged"])), _dumps(h["series"]), sweep_id, idx) for idx, h in harvests.items()]
    cur = conn.executemany(
        "UPDATE sweep_variants SET harvested = 1, status = ?, objective = ?, objective_node_id = ?, "
        "ambiguous_producers = ?, objective_logged = ?, series = ? WHERE sweep_id = ? AND idx = ? AND harvested = 0",
        rows)
    return cur.rowcount


def unharvested_children(conn: sqlite3.Connection, run_ids: Sequence[str]) -> list[tuple[str, int, str, Any]]:
    """(sweep_id, index, run_id, objective) of every variant among `run_ids` not harvested yet."""
    out = []
    for start in range(0, len(run_ids), _CHUNK):
        chunk = list(run_ids[start:start + _CHUNK])
        out += [(s, i, r, _loads(o)) for s, i, r, o in conn.execute(
            "SELECT v.sweep_id, v.idx, v.run_id, s.objective FROM sweep_variants v JOIN sweeps s ON s.id = v.sweep_id "
            f"WHERE v.run_id IN ({', '.join('?' * len(chunk))}) AND v.harvested = 0", chunk)]
    return out


def harvest_before_prune(conn: sqlite3.Connection, run_ids: Sequence[str],
                         decide: Callable[[Mapping[str, Any], str, list[dict[str, Any]]], Mapping[str, Any]]) -> int:
    """Retention is about to delete `run_ids`: harvest the sweep children among them first."""
    children = unharvested_children(conn, run_ids)
    if not children:
        return 0
    ids = [c[2] for c in children]
    statuses = {}
    for start in range(0, len(ids), _CHUNK):
        chunk = ids[start:start + _CHUNK]
        statuses.update(conn.execute(f"SELECT id, status FROM runs WHERE id IN ({', '.join('?' * len(chunk))})",
                                     chunk).fetchall())
    points = select_points(conn, ids)
    by_sweep: dict[str, dict[int, Mapping[str, Any]]] = {}
    for sweep_id, idx, run_id, objective in children:
        if run_id in statuses:
            by_sweep.setdefault(sweep_id, {})[idx] = decide(objective, statuses[run_id], points[run_id])
    return sum(write_harvest(conn, s, h) for s, h in by_sweep.items())


def note_harvest_failed(conn: sqlite3.Connection, run_ids: Sequence[str], error: BaseException) -> None:
    """Retention deleted children whose results could not be copied: say so on each sweep, for good."""
    counts: dict[str, int] = {}
    for sweep_id, _idx, _run, _obj in unharvested_children(conn, run_ids):
        counts[sweep_id] = counts.get(sweep_id, 0) + 1
    for sweep_id, n in counts.items():
        message = (f"retention deleted {n} run{'s' if n != 1 else ''} of this sweep before their results could be "
                   f"copied onto it ({type(error).__name__}: {error}); those objectives are lost")
        conn.execute("UPDATE sweeps SET error = CASE WHEN error IS NULL THEN ? ELSE error || '; ' || ? END "
                     "WHERE id = ?", (message, message, sweep_id))
