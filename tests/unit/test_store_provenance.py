"""Input provenance records in the store: the migration step from empty and from the version
before it, on SQLite and on a real PostgreSQL (tests/pg_server.py); writes, reads, deletion."""

from __future__ import annotations

import asyncio
import sqlite3

import pytest

from codefy_jupyter.core.store.database import Store
from codefy_jupyter.core.store.migrations import SCHEMA_STEPS, SCHEMA_VERSION, migrate

STEP = next(i for i, step in enumerate(SCHEMA_STEPS, 1) if any("CREATE TABLE run_inputs" in s for s in step))

RECORDS = [
    {"node_id": "csv", "kind": "dataset", "path": "/d/a.csv", "sha256": "ab" * 32, "size": 120,
     "revision": None, "rows": 10},
    {"node_id": "load", "kind": "model", "path": "/d/m.pt", "sha256": "cd" * 32, "size": 2**40,
     "revision": "v2", "rows": None},
]


async def exercise(target) -> None:
    async with await Store.open(target) as store:
        for rid in ("r1", "r2"):
            await store.create_run({"id": rid, "status": "queued"})
        assert await store.record_inputs("r1", RECORDS) == 2
        assert await store.record_inputs("r2", []) == 0
        assert await store.list_inputs("r1") == RECORDS
        assert await store.list_inputs("r2") == []
        assert await store.inputs_of(["r1", "r2", "nope"]) == {"r1": RECORDS}
        await store.delete_run("r1")
        assert await store.list_inputs("r1") == []


def test_records_round_trip_and_go_with_their_run_on_sqlite(tmp_path):
    asyncio.run(exercise(tmp_path / "c.db"))


def test_the_step_applies_on_a_file_of_the_version_before(tmp_path):
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        assert migrate(conn, SCHEMA_STEPS[:STEP - 1]) == STEP - 1
        conn.execute("INSERT INTO runs (id, submit_order, status, submitted_at) VALUES ('old', 1, 'succeeded', 1)")
        assert migrate(conn) == SCHEMA_VERSION
        assert conn.execute("SELECT COUNT(*) FROM run_inputs").fetchone() == (0,)
    finally:
        conn.close()
    asyncio.run(exercise(path))


def test_records_round_trip_on_postgresql(pg_url):
    pytest.importorskip("psycopg", reason="psycopg is not installed (pip install -e '.[test]')")
    asyncio.run(exercise(pg_url))


def test_the_step_applies_on_a_postgresql_database_of_the_version_before(pg_url):
    psycopg = pytest.importorskip("psycopg", reason="psycopg is not installed (pip install -e '.[test]')")
    from codefy_jupyter.core.store.postgres import PgConnection
    from codefy_jupyter.core.store.postgres import migrate as pg_migrate

    conn = PgConnection(psycopg.connect(pg_url, autocommit=True))
    try:
        assert pg_migrate(conn, SCHEMA_STEPS[:STEP - 1]) == STEP - 1
        assert pg_migrate(conn) == SCHEMA_VERSION
    finally:
        conn.close()
    asyncio.run(exercise(pg_url))
