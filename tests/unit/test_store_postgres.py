"""The store on a real PostgreSQL server (tests/pg_server.py): the schema from empty and step by
step, a newer schema refused untouched, two stores migrating one empty database at once, refusals
that name the database without its password, the SQL rewrites, types SQLite stores natively."""

from __future__ import annotations

import asyncio
import sqlite3

import pytest

psycopg = pytest.importorskip("psycopg", reason="psycopg is not installed (pip install -e '.[test]')")

from codefy_jupyter.core.store.database import Store, StoreError  # noqa: E402
from codefy_jupyter.core.store.migrations import SCHEMA_STEPS, SCHEMA_VERSION, SchemaVersionError  # noqa: E402
from codefy_jupyter.core.store.postgres import PgConnection, migrate, pg_ddl, read_schema_version, translate  # noqa: E402


def run(coro):
    return asyncio.run(coro)


def connect(url: str) -> PgConnection:
    """A connection as the store's writer has it (autocommit; the callers begin and commit)."""
    return PgConnection(psycopg.connect(url, autocommit=True))


def tables(url: str) -> set[str]:
    with psycopg.connect(url) as conn:
        return {r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}


def test_open_creates_the_schema_from_empty_and_reopening_is_a_no_op(pg_url):
    async def main():
        async with await Store.open(pg_url) as store:
            await store.create_run({"id": "r1", "status": "queued"})
        for _ in range(2):
            async with await Store.open(pg_url) as store:
                assert (await store.get_run("r1"))["status"] == "queued"

    run(main())
    assert {"runs", "run_events", "run_metrics", "run_artifacts", "fingerprints", "workers", "worker_enrollments",
            "sweeps", "sweep_variants", "studies", "study_variants", "study_attempts", "study_events",
            "file_hashes", "output_drops", "codefy_schema"} <= tables(pg_url)
    with psycopg.connect(pg_url) as conn:
        assert conn.execute("SELECT version FROM codefy_schema").fetchall() == [(SCHEMA_VERSION,)]
        kinds = {name: (kind, collation) for name, kind, collation in conn.execute(
            "SELECT column_name, data_type, collation_name FROM information_schema.columns "
            "WHERE table_name = 'runs'").fetchall()}
    # SQLite's integers are 64 bits, its REAL a double, its text compared byte by byte (whatever the
    # database's locale: the tests' server is initdb'd with C, so the column must say so itself).
    assert (kinds["seed"][0], kinds["submitted_at"][0]) == ("bigint", "double precision")
    assert kinds["id"] == ("text", "C") and kinds["status"] == ("text", "C")


def test_migrate_applies_only_missing_steps_and_refuses_a_newer_schema(pg_url):
    later = [*SCHEMA_STEPS, ("ALTER TABLE runs ADD COLUMN note TEXT",)]
    conn = connect(pg_url)
    try:
        assert read_schema_version(conn) == 0
        assert migrate(conn) == SCHEMA_VERSION
        assert migrate(conn) == SCHEMA_VERSION
        conn.execute("INSERT INTO runs (id, submit_order, status, submitted_at) VALUES ('a', 1, 'queued', 1)")
        assert migrate(conn, later) == SCHEMA_VERSION + 1
        assert conn.execute("SELECT id, note FROM runs").fetchall() == [("a", None)]
        with pytest.raises(SchemaVersionError):
            migrate(conn)
    finally:
        conn.close()

    async def main():
        with pytest.raises(StoreError, match="newer codefy-jupyter"):
            await Store.open(pg_url)

    run(main())
    with psycopg.connect(pg_url) as db:  # refused untouched
        assert db.execute("SELECT version FROM codefy_schema").fetchone()[0] == SCHEMA_VERSION + 1


def test_a_failing_step_leaves_the_previous_version_and_no_half_of_it(pg_url):
    broken = [*SCHEMA_STEPS, ("ALTER TABLE runs ADD COLUMN note TEXT", "THIS IS NOT SQL")]
    conn = connect(pg_url)
    try:
        migrate(conn)
        with pytest.raises(sqlite3.DatabaseError, match="PostgreSQL"):
            migrate(conn, broken)
        assert read_schema_version(conn) == SCHEMA_VERSION
        columns = [r[0] for r in conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'runs'").fetchall()]
        assert "note" not in columns and "status" in columns
    finally:
        conn.close()


def test_two_stores_opening_one_empty_database_at_once_migrate_it_once(pg_url):
    async def main():
        stores = await asyncio.gather(Store.open(pg_url), Store.open(pg_url))
        try:
            # Exactly one leads (the leader lease, test_lease_postgres.py) and takes the writes;
            # the other reads them.
            assert sorted(s.role for s in stores) == ["leader", "standby"]
            leader, standby = sorted(stores, key=lambda s: s.role)
            await leader.create_run({"id": "a", "status": "queued"})
            assert (await standby.get_run("a"))["status"] == "queued"
        finally:
            for store in stores:
                await store.close()

    run(main())
    with psycopg.connect(pg_url) as db:
        assert db.execute("SELECT version FROM codefy_schema").fetchall() == [(SCHEMA_VERSION,)]


def test_an_unreachable_server_is_a_store_error_naming_it_without_its_password(pg_server):
    url = pg_server.url("no_such_database").replace("codefy@", "codefy:hunter2@")

    async def main():
        with pytest.raises(StoreError) as info:
            await Store.open(url)
        message = str(info.value)
        assert "no_such_database" in message and "hunter2" not in message and "***" in message
        assert info.value.path is not None and "hunter2" not in info.value.path

    run(main())


def test_the_store_path_is_the_url_without_its_password(pg_url):
    async def main():
        async with await Store.open(pg_url) as store:
            assert store.path == pg_url  # the tests' server has no password
            assert await store.probe_room() is True

    run(main())


def test_what_sqlite_stores_natively_comes_back_the_same(pg_url):
    async def main():
        async with await Store.open(pg_url) as store:
            big = 2**62 + 1
            await store.create_run({"id": "r", "status": "queued", "seed": big, "deterministic": False,
                                    "options": {"ünï": "cødé", "n": 1.5}, "submitted_at": 1.25e9 + 0.123456})
            got = await store.get_run("r")
            assert got["seed"] == big and got["deterministic"] is False
            assert got["options"] == {"ünï": "cødé", "n": 1.5} and got["submitted_at"] == 1.25e9 + 0.123456
            await store.put_file_hash("/data/x", 10, 1_700_000_000_123_456_789, "ab" * 32)
            assert await store.file_hash("/data/x") == (10, 1_700_000_000_123_456_789, "ab" * 32)
            await store.record_metrics([("r", "n", "Train_LOSS", 1, 2.0), ("r", "n", "acc", 1, 0.5)])
            # SQLite's LIKE is ASCII case-insensitive: the loss series is found whatever its case.
            assert await store.last_loss_points(["r"]) == {"r": [{"name": "Train_LOSS", "value": 2.0}]}
            # Ids compare byte by byte, as in SQLite: a prefix is a key range whatever the locale.
            for rid in ("abcdef01zz", "abcdef01ZZ", "abcdef01__"):
                await store.create_run({"id": rid, "status": "queued"})
            assert await store.ids_with_prefix("run", "abcdef01", 10) == ["abcdef01ZZ", "abcdef01__", "abcdef01zz"]

    run(main())


@pytest.mark.parametrize("sqlite_sql, pg_sql", [
    ("SELECT id FROM runs WHERE id = ? AND status IN (?, ?)",
     "SELECT id FROM runs WHERE id = %s AND status IN (%s, %s)"),
    ("BEGIN IMMEDIATE", "BEGIN"),
    ("INSERT OR IGNORE INTO f (a) VALUES (?) RETURNING a",
     "INSERT INTO f (a) VALUES (%s) ON CONFLICT DO NOTHING RETURNING a"),
    ("INSERT OR IGNORE INTO f (a) VALUES (?)", "INSERT INTO f (a) VALUES (%s) ON CONFLICT DO NOTHING"),
    ("SELECT IFNULL(MAX(n), 0) + 1 FROM runs WHERE 0", "SELECT COALESCE(MAX(n), 0) + 1 FROM runs WHERE false"),
    ("UPDATE o SET sent = MAX(sent, excluded.sent)", "UPDATE o SET sent = GREATEST(sent, excluded.sent)"),
    ("SELECT json_extract(payload, '$.attempt_id') FROM e WHERE c > ?",
     "SELECT (payload::jsonb ->> 'attempt_id') FROM e WHERE c > %s"),
    ("SELECT name FROM m WHERE name LIKE '%loss' AND id = ?",
     "SELECT name FROM m WHERE name ILIKE '%%loss' AND id = %s"),
    ("SELECT '?' , ? FROM t", "SELECT '?' , %s FROM t"),
])
def test_the_sqlite_spellings_are_rewritten(sqlite_sql, pg_sql):
    assert translate(sqlite_sql) == pg_sql


def test_without_parameters_a_percent_stays_single_and_a_snapshot_read_is_repeatable():
    assert translate("SELECT 1 WHERE 'a' LIKE '%'", params=False) == "SELECT 1 WHERE 'a' ILIKE '%'"
    assert translate("BEGIN", reader=True) == "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
    assert translate("BEGIN") == "BEGIN"


def test_the_schema_steps_get_postgresql_types():
    assert pg_ddl("CREATE TABLE t (\n  id INTEGER PRIMARY KEY,\n  v REAL,\n  s TEXT\n)") == (
        'CREATE TABLE t (\n    rowid BIGINT GENERATED ALWAYS AS IDENTITY,\n'
        '  id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,\n  v DOUBLE PRECISION,\n  s TEXT COLLATE "C"\n)')
    assert pg_ddl("CREATE TABLE k (a TEXT, PRIMARY KEY (a)) WITHOUT ROWID") == (
        'CREATE TABLE k (a TEXT COLLATE "C", PRIMARY KEY (a))')
    assert pg_ddl("ALTER TABLE runs ADD COLUMN n INTEGER") == "ALTER TABLE runs ADD COLUMN n BIGINT"


def test_a_duplicate_key_reads_as_the_integrity_error_sqlite_raises(pg_url):
    conn = connect(pg_url)
    try:
        migrate(conn)
        conn.execute("INSERT INTO fingerprints (digest, document, created_at) VALUES (?, ?, ?)", ("d", "{}", 1.0))
        with pytest.raises(sqlite3.IntegrityError, match="duplicate key"):
            conn.execute("INSERT INTO fingerprints (digest, document, created_at) VALUES (?, ?, ?)", ("d", "{}", 1.0))
    finally:
        conn.close()


def test_reads_go_side_by_side_on_the_pool_and_a_slow_one_holds_up_no_other(pg_url):
    import threading

    from codefy_jupyter.core.store.postgres import READERS

    async def main():
        async with await Store.open(pg_url) as store:
            await store.create_run({"id": "r", "status": "queued"})
            release = threading.Event()

            def slow(conn):  # a read that holds its connection until told
                assert release.wait(120), "never released"
                return conn.execute("SELECT pg_backend_pid()").fetchone()[0]

            held = asyncio.ensure_future(store.read(slow))
            await asyncio.sleep(0)
            # While it holds its reader, the others answer (on one reader they would wait behind it).
            assert (await store.get_run("r"))["status"] == "queued"
            pids = await asyncio.gather(*(store.read(lambda c: c.execute("SELECT pg_backend_pid()").fetchone()[0])
                                          for _ in range(READERS - 1)))
            release.set()
            pids.append(await held)
            assert len(set(pids)) == READERS

    run(main())
