"""The durable store on real SQLite files: schema and migrations, refusals, the batching writer,
durability, event pages, run lists, delete, retention, fingerprints. From the writer on, every
test runs on both backends (`store_at`: an SQLite file, and a database on a real PostgreSQL
server, tests/pg_server.py): the same assertions hold on each."""

from __future__ import annotations

import asyncio
import json
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from codefy_jupyter.core.store.migrations import (
    SCHEMA_STEPS,
    SCHEMA_VERSION,
    SchemaVersionError,
    migrate,
    read_schema_version,
)
from codefy_jupyter.core.store.database import EVENT_ENVELOPE_BYTES, Store, StoredEvent, StoreError
from codefy_jupyter.core.store.queries import apply_batch, encode_events, insert_run, select_events_page, select_run


class FakeClock:
    def __init__(self, now: float = 1_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def run(coro):
    return asyncio.run(coro)


def run_row(run_id: str, status: str = "queued", **fields) -> dict:
    return {"id": run_id, "status": status, "name": f"run {run_id}", **fields}


def events(first: int, count: int, size: int = 10, ts: float = 5.0) -> list[tuple]:
    return [(seq, "node_progress", {"seq": seq, "pad": "x" * size}, ts) for seq in range(first, first + count)]


def sidecars(path: Path) -> list[str]:
    return sorted(p.name for p in path.parent.iterdir() if p.name != path.name)


# -- schema, migrations, refusals ----------------------------------------------------------------


def test_open_creates_the_schema_in_wal_mode_and_reopening_is_a_no_op(tmp_path):
    path = tmp_path / "data" / "codefy.db"  # the parent folder is created

    async def main():
        async with await Store.open(path) as store:
            await store.create_run(run_row("r1"))
        for _ in range(2):
            async with await Store.open(path) as store:
                assert (await store.get_run("r1"))["status"] == "queued"

    run(main())
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        indexes = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
        assert db.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 1
    db.close()
    assert {"runs", "run_events", "run_metrics", "run_artifacts", "fingerprints"} <= tables
    assert {"runs_status_order", "run_metrics_run", "run_artifacts_run"} <= indexes


def test_migrate_applies_only_missing_steps(tmp_path):
    later = [*SCHEMA_STEPS, ("ALTER TABLE runs ADD COLUMN note TEXT",)]
    conn = sqlite3.connect(tmp_path / "m.db", isolation_level=None)
    try:
        assert migrate(conn) == SCHEMA_VERSION
        assert migrate(conn) == SCHEMA_VERSION  # idempotent
        conn.execute("INSERT INTO runs (id, submit_order, status, submitted_at) VALUES ('a', 1, 'queued', 1)")
        assert migrate(conn, later) == SCHEMA_VERSION + 1
        assert migrate(conn, later) == SCHEMA_VERSION + 1
        assert conn.execute("SELECT id, note FROM runs").fetchall() == [("a", None)]
        with pytest.raises(SchemaVersionError):
            migrate(conn)  # the file is now newer than SCHEMA_STEPS
    finally:
        conn.close()


def test_a_failing_migration_step_leaves_the_previous_version(tmp_path):
    broken = [*SCHEMA_STEPS, ("ALTER TABLE runs ADD COLUMN note TEXT", "THIS IS NOT SQL")]
    conn = sqlite3.connect(tmp_path / "m.db", isolation_level=None)
    try:
        migrate(conn)
        with pytest.raises(sqlite3.OperationalError):
            migrate(conn, broken)
        assert read_schema_version(conn) == SCHEMA_VERSION
        assert "note" not in [r[1] for r in conn.execute("PRAGMA table_info(runs)")]
    finally:
        conn.close()


def test_repository_functions_run_on_an_in_memory_connection():
    conn = sqlite3.connect(":memory:", isolation_level=None)
    try:
        assert read_schema_version(conn) == 0
        assert migrate(conn) == SCHEMA_VERSION
        outcomes, commits = apply_batch(conn, [
            lambda c: insert_run(c, {"id": "m1", "status": "queued", "submitted_at": 1.0},
                                 encode_events("m1", [(1, "run_queued", {}, 1.0)])),
            lambda c: insert_run(c, {"id": "m1", "status": "queued", "submitted_at": 1.0}),  # duplicate
        ])
        assert [ok for ok, _ in outcomes] == [True, False] and commits == [1]
        assert select_run(conn, "m1")["last_seq"] == 1
        assert select_events_page(conn, "m1", 0, None) == ([StoredEvent(1, "run_queued", {}, 1.0)], 1, False)
    finally:
        conn.close()


@pytest.mark.parametrize("content", [
    b"this is a notebook, not a database\n" * 50,
    b"SQLite format 3\x00" + b"\xff" * 4000,  # the right magic, then garbage
    b"x",
])
def test_refuses_a_file_that_is_not_sqlite_and_leaves_it_alone(tmp_path, content):
    path = tmp_path / "codefy.db"
    path.write_bytes(content)

    with pytest.raises(StoreError) as err:
        run(Store.open(path))

    assert str(path) in str(err.value)
    assert err.value.path == str(path)
    assert path.read_bytes() == content
    assert sidecars(path) == []


def test_refuses_a_directory(tmp_path):
    with pytest.raises(StoreError, match="directory"):
        run(Store.open(tmp_path))


def test_refuses_a_newer_schema_and_leaves_it_alone(tmp_path):
    path = tmp_path / "codefy.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE runs (id TEXT PRIMARY KEY, future_column TEXT)")
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.commit()
    db.close()
    before = path.read_bytes()

    with pytest.raises(StoreError, match="newer") as err:
        run(Store.open(path))

    assert str(path) in str(err.value)
    assert path.read_bytes() == before
    assert sidecars(path) == []


# -- the writer: batching, failures, durability ---------------------------------------------------


def test_concurrent_writes_share_few_transactions(store_at):
    async def main():
        async with await Store.open(store_at("c.db")) as store:
            await asyncio.gather(*(store.create_run(run_row(f"r{i:03d}")) for i in range(200)))
            stats = store.statistics()
            assert stats.writes == 200
            assert stats.commits <= 5  # the writer may take the first alone; the rest queue behind it
            assert stats.largest_batch >= 40
            assert stats.queued == 0
            rows, total = await store.list_runs(limit=50)
            assert total == 200

    run(main())


def test_writes_queued_while_a_commit_runs_share_the_next_one(store_at):
    async def main():
        async with await Store.open(store_at("c.db")) as store:
            queued_up = threading.Event()

            def slow(conn):  # holds the writer (as a slow fsync would) until the others are queued
                assert queued_up.wait(120), "the 50 writes were never queued"
                return "slow"

            first = asyncio.ensure_future(store.write(slow))
            await asyncio.sleep(0)  # the task runs up to the queued write
            while store.statistics().queued:  # until the writer has taken `slow` (alone) and sits in it
                await asyncio.sleep(0.01)
            rest = [store.create_run(run_row(f"q{i:02d}")) for i in range(50)]
            assert store.statistics().queued == 50
            queued_up.set()
            assert await first == "slow"
            await asyncio.gather(*rest)
            stats = store.statistics()
            assert (stats.commits, stats.largest_batch, stats.writes) == (2, 50, 51)

    run(main())


def test_close_commits_what_was_queued_and_refuses_more(store_at):
    async def main():
        store = await Store.open(store_at("c.db"))
        pending = [store.create_run(run_row(f"c{i}")) for i in range(20)]
        await store.close()
        assert all(f.done() and f.exception() is None for f in pending)
        with pytest.raises(StoreError, match="closed"):
            store.create_run(run_row("late"))
        async with await Store.open(store_at("c.db")) as again:
            assert (await again.list_runs())[1] == 20

    run(main())


def test_a_failing_write_fails_alone_and_its_batch_commits(store_at):
    async def main():
        async with await Store.open(store_at("c.db")) as store:
            await store.create_run(run_row("dup"))
            results = await asyncio.gather(
                store.create_run(run_row("a")),
                store.create_run(run_row("dup")),
                store.append_events("a", events(1, 3)),
                store.append_events("nope", events(1, 1)),
                store.create_run(run_row("b")),
                return_exceptions=True,
            )
            assert results[0] is None and results[4] is None
            assert isinstance(results[1], StoreError) and "already exists" in str(results[1])
            assert results[2] == 3
            assert isinstance(results[3], StoreError) and "unknown run" in str(results[3])
            assert store.statistics().failed_writes == 2

            def count_runs(conn):  # a caller's own write: runs on the writer, inside a batch
                return conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0]

            assert await store.write(count_runs) == 3
            _, total = await store.list_runs()
            assert total == 3
            assert [e.seq for e in (await store.read_events("a"))[0]] == [1, 2, 3]

    run(main())


def test_an_acknowledged_write_is_visible_to_reads_at_once_and_after_reopen(store_at):
    path = store_at("d.db")

    async def main():
        store = await Store.open(path)
        for i in range(20):
            await store.create_run(run_row(f"r{i}"))
            assert await store.get_run(f"r{i}") is not None
        # Submitted but not awaited before close: close commits it.
        pending = asyncio.ensure_future(store.update_run("r0", status="running"))
        await asyncio.sleep(0)
        await store.close()
        assert await pending is True
        with pytest.raises(StoreError, match="closed"):
            await store.create_run(run_row("late"))
        await store.close()  # idempotent

        async with await Store.open(path) as again:
            assert (await again.list_runs())[1] == 20
            assert (await again.get_run("r0"))["status"] == "running"

    run(main())


CRASHING_WRITER = textwrap.dedent("""
    import asyncio, os, signal, sys
    from codefy_jupyter.core.store.database import Store

    async def main():
        store = await Store.open(sys.argv[1])
        await store.create_run({"id": "crash", "status": "running"})
        for seq in range(1, 101):
            await store.append_events("crash", [(seq, "tick", {"n": seq}, 1.0)])
        await asyncio.gather(*(store.create_run({"id": f"c{i}", "status": "queued"}) for i in range(50)))
        print("acknowledged", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)  # no close, no checkpoint

    asyncio.run(main())
""")


def test_acknowledged_writes_survive_a_kill_9(store_at):
    path = store_at("k.db")
    child = subprocess.run([sys.executable, "-c", CRASHING_WRITER, str(path)],
                           capture_output=True, text=True, timeout=120)
    assert child.returncode == -signal.SIGKILL, child.stderr
    assert child.stdout.strip() == "acknowledged"

    async def main():
        async with await Store.open(path) as store:
            page, cursor, more = await store.read_events("crash")
            assert [e.seq for e in page] == list(range(1, 101)) and cursor == 100 and not more
            assert (await store.get_run("crash"))["last_seq"] == 100
            assert (await store.list_runs())[1] == 51
            assert [r["id"] for r in await store.active_runs()][0] == "crash"

    run(main())


def test_runs_round_trip_and_the_clock_is_injected(store_at):
    clock = FakeClock(1234.5)

    async def main():
        async with await Store.open(store_at("r.db"), clock=clock) as store:
            row = run_row("r1", owner="ada", device="cuda:0", devices=["cuda:0", "cuda:1"], queue_key="cuda:0",
                          lane="queued", session="s1", seed=7, deterministic=True, options={"device": "auto"},
                          graph={"nodes": [], "edges": []}, error=None, worker_id=None)
            await store.create_run(row)
            got = await store.get_run("r1")
            assert {k: got[k] for k in row} == row
            assert got["submitted_at"] == 1234.5 and got["last_seq"] == 0 and got["started_at"] is None

            assert await store.update_run("r1", status="failed", error={"type": "X", "message": "m"},
                                          finished_at=clock() + 1) is True
            assert (await store.get_run("r1"))["error"] == {"type": "X", "message": "m"}
            assert await store.update_run("missing", status="failed") is False
            assert await store.get_run("missing") is None
            with pytest.raises(ValueError, match="last_seq"):
                await store.update_run("r1", last_seq=4)
            with pytest.raises(ValueError, match="colour"):
                await store.create_run(run_row("r2", colour="red"))

    run(main())


def test_conditional_update_writes_nothing_when_the_status_moved_on(store_at):
    async def main():
        async with await Store.open(store_at("u.db")) as store:
            await store.create_run(run_row("r1", "queued"), events=events(1, 1))
            assert await store.update_run("r1", only_if_status="running", status="succeeded",
                                          events=events(2, 1)) is False
            got = await store.get_run("r1")
            assert got["status"] == "queued" and got["last_seq"] == 1
            assert await store.update_run("r1", only_if_status=["queued", "running"], status="cancelled",
                                          events=[(2, "run_finished", {"status": "cancelled"}, 9.0)]) is True
            assert (await store.last_event("r1")).type == "run_finished"
            assert store.flushed_seq("r1") == 2

    run(main())


# -- events ---------------------------------------------------------------------------------------


def test_event_pages_fit_the_budget_and_join_without_gaps_or_duplicates(store_at):
    async def main():
        async with await Store.open(store_at("e.db")) as store:
            await store.create_run(run_row("r1", "running"))
            for first in range(1, 301, 30):  # sizes vary so pages cut in different places
                batch = [(seq, "log", {"text": "y" * (seq * 7 % 500)}, float(seq)) for seq in range(first, first + 30)]
                assert await store.append_events("r1", batch) == first + 29
            assert store.flushed_seq("r1") == 300

            budget = 4_000
            seen, cursor, pages = [], 0, 0
            while True:
                page, cursor, more = await store.read_events("r1", cursor, byte_budget=budget)
                pages += 1
                assert page
                cost = sum(len(json.dumps(e.payload, separators=(",", ":")).encode()) + EVENT_ENVELOPE_BYTES
                           for e in page)
                assert cost <= budget or len(page) == 1
                seen.extend(e.seq for e in page)
                assert cursor == page[-1].seq
                if not more:
                    break
            assert seen == list(range(1, 301))
            assert pages > 5
            assert (await store.read_events("r1", 300)) == ([], 300, False)
            assert (await store.read_events("r1", 9999)) == ([], 9999, False)
            whole, cursor, more = await store.read_events("r1", 0, byte_budget=None)
            assert len(whole) == 300 and cursor == 300 and not more
            assert whole[4].payload == {"text": "y" * 35} and whole[4].created_at == 5.0

    run(main())


def test_event_page_budget_is_exact_and_an_oversized_event_comes_alone(store_at):
    async def main():
        async with await Store.open(store_at("e.db")) as store:
            await store.create_run(run_row("r1", "running"))
            payload = {"p": "z" * 90}
            cost = len('{"p":""}') + 90 + EVENT_ENVELOPE_BYTES
            await store.append_events("r1", [(s, "t", payload, 1.0) for s in range(1, 11)])
            # A payload may come already encoded (the sink encodes to apply the payload cap).
            await store.append_events("r1", [(11, "big", '{"p":"' + "B" * 10_000 + '"}', 1.0),
                                             (12, "t", payload, 1.0)])

            page, cursor, more = await store.read_events("r1", 0, byte_budget=3 * cost)
            assert [e.seq for e in page] == [1, 2, 3] and cursor == 3 and more
            page, cursor, more = await store.read_events("r1", 3, byte_budget=3 * cost - 1)
            assert [e.seq for e in page] == [4, 5] and more
            page, cursor, more = await store.read_events("r1", 10, byte_budget=cost)
            assert [e.seq for e in page] == [11] and cursor == 11 and more
            assert page[0].payload == {"p": "B" * 10_000}
            page, cursor, more = await store.read_events("r1", 11, byte_budget=cost)
            assert [e.seq for e in page] == [12] and not more
            assert (await store.last_event("r1")).seq == 12
            assert await store.last_event("none") is None
            assert await store.read_events("none") == ([], 0, False)
            with pytest.raises(ValueError):
                await store.read_events("r1", -1)

    run(main())


def test_an_update_whose_events_skip_a_seq_writes_neither_the_fields_nor_the_events(store_at):
    # The fields and last_seq move in one guarded statement; when the seq guard refuses, the error
    # still names the seq expected, and the status is not changed without its events.
    async def main():
        async with await Store.open(store_at("s.db")) as store:
            await store.create_run(run_row("r1", "running"), events=events(1, 2))
            with pytest.raises(StoreError, match="next event seq is 3"):
                await store.update_run("r1", only_if_status="running", status="succeeded", events=events(4, 1))
            got = await store.get_run("r1")
            assert got["status"] == "running" and got["last_seq"] == 2
            assert await store.update_run("r1", only_if_status="running", status="succeeded",
                                          events=events(3, 1)) is True
            got = await store.get_run("r1")
            assert got["status"] == "succeeded" and got["last_seq"] == 3

    run(main())


def test_event_seqs_must_continue_the_log(store_at):
    async def main():
        async with await Store.open(store_at("g.db")) as store:
            await store.create_run(run_row("r1", "running"))
            assert store.flushed_seq("r1") is None
            await store.append_events("r1", events(1, 3))
            with pytest.raises(StoreError, match="next event seq is 4"):
                await store.append_events("r1", events(5, 1))  # a gap
            with pytest.raises(StoreError, match="next event seq is 4"):
                await store.append_events("r1", events(3, 2))  # a duplicate
            with pytest.raises(ValueError, match="consecutive"):
                await store.append_events("r1", [events(4, 1)[0], events(6, 1)[0]])
            with pytest.raises(StoreError, match="unknown run"):
                await store.append_events("ghost", events(1, 1))
            assert await store.append_events("r1", []) == 3
            assert store.flushed_seq("r1") == 3
            assert [e.seq for e in (await store.read_events("r1"))[0]] == [1, 2, 3]

    run(main())


# -- lists, delete, retention ---------------------------------------------------------------------


def test_a_page_far_back_by_offset_has_the_rows_limit_offset_would_give(store_at, monkeypatch):
    """Past DEEP_OFFSET a page is found by its first submit_order, then by keyset: the same rows,
    with and without a status, behind a keyset, at the end and past it."""
    from codefy_jupyter.core.store import queries

    monkeypatch.setattr(queries, "DEEP_OFFSET", 4)

    async def main():
        async with await Store.open(store_at("deep.db"), clock=FakeClock()) as store:
            statuses = ["succeeded", "failed", "succeeded"] * 10  # 30 runs
            ids = [f"d{i * 7 % 30:02d}" for i in range(30)]
            for run_id, status in zip(ids, statuses):
                await store.create_run(run_row(run_id, status))
            newest_first = ids[::-1]
            succeeded = [i for i in newest_first if statuses[ids.index(i)] == "succeeded"]
            for offset in (4, 5, 17, 25, 29, 30, 45, 2**63 - 1):
                rows, total = await store.list_runs(offset=offset, limit=6)
                assert total == 30 and [r["id"] for r in rows] == newest_first[offset:offset + 6], offset
                rows, total = await store.list_runs("succeeded", offset=offset, limit=3)
                assert total == 20 and [r["id"] for r in rows] == succeeded[offset:offset + 3], offset
            before = await store.submit_order_of(newest_first[2])
            rows, _ = await store.list_runs(offset=5, limit=4, before=before)
            assert [r["id"] for r in rows] == newest_first[8:12]
            rows, _ = await store.list_runs("succeeded", offset=4, limit=2, before=before)
            behind = [i for i in newest_first[3:] if statuses[ids.index(i)] == "succeeded"]
            assert [r["id"] for r in rows] == behind[4:6]

    run(main())


def test_list_runs_newest_first_with_status_filter_offset_limit_and_total(store_at):
    clock = FakeClock()  # every run gets the same submitted_at: order must not depend on it

    async def main():
        async with await Store.open(store_at("l.db"), clock=clock) as store:
            statuses = ["succeeded", "failed", "queued", "running", "succeeded"] * 12  # 60 runs
            ids = [f"z{i * 37 % 60:02d}" for i in range(60)]  # neither id order nor its reverse
            for i, (run_id, status) in enumerate(zip(ids, statuses)):
                await store.create_run(run_row(run_id, status, graph={"nodes": [i]}))
            newest_first = ids[::-1]

            rows, total = await store.list_runs()
            assert total == 60 and len(rows) == 50
            assert [r["id"] for r in rows] == newest_first[:50]
            assert "graph" not in rows[0]
            rows, total = await store.list_runs(offset=50)
            assert total == 60 and [r["id"] for r in rows] == newest_first[50:]
            assert (await store.list_runs(offset=100)) == ([], 60)
            assert (await store.list_runs(limit=0)) == ([], 60)

            rows, total = await store.list_runs("succeeded", limit=5)
            assert total == 24
            assert [r["id"] for r in rows] == [i for i in newest_first if statuses[ids.index(i)] == "succeeded"][:5]
            rows, total = await store.list_runs(["queued", "running"], offset=2, limit=3, with_graph=True)
            waiting = [i for i in newest_first if statuses[ids.index(i)] in ("queued", "running")]
            assert total == 24 and [r["id"] for r in rows] == waiting[2:5]
            assert rows[0]["graph"] == {"nodes": [ids.index(rows[0]["id"])]}
            # Keyset paging: behind a run's place, alone or with statuses, the same rows as by offset.
            for status_filter, expected in ((None, newest_first), (["running", "failed", "queued"], None)):
                expected = expected or [i for i in newest_first if statuses[ids.index(i)] in status_filter]
                before = await store.submit_order_of(expected[9])
                rows, total = await store.list_runs(status_filter, limit=6, before=before)
                assert [r["id"] for r in rows] == expected[10:16] and total == len(expected)
            assert await store.submit_order_of("nope") is None
            # An offset as large as the API allows, over several statuses, is an empty page (the
            # per-status reach is capped, not overflowed).
            assert await store.list_runs(["running", "failed"], offset=2**63 - 1, limit=5) == ([], 24)
            # Several statuses are merged newest first across them, pages crossing from one to another.
            three = [i for i in newest_first if statuses[ids.index(i)] in ("failed", "queued", "running")]
            for offset in (0, 7, 30, 35):
                rows, total = await store.list_runs(["running", "failed", "queued"], offset=offset, limit=6)
                assert total == 36 and [r["id"] for r in rows] == three[offset:offset + 6]
            assert (await store.list_runs("interrupted")) == ([], 0)
            assert (await store.list_runs([])) == ([], 0)
            with pytest.raises(ValueError):
                await store.list_runs(limit=51)
            with pytest.raises(ValueError):
                await store.list_runs(offset=-1)

            active = await store.active_runs()
            assert [r["id"] for r in active] == waiting[::-1]  # oldest first

    run(main())


def test_delete_removes_the_run_with_its_events_metrics_and_artifacts(store_at):
    async def main():
        async with await Store.open(store_at("x.db"), clock=FakeClock(50.0)) as store:
            for run_id in ("gone", "kept"):
                await store.create_run(run_row(run_id, "succeeded"), events=events(1, 4))
                await store.record_metrics([(run_id, "n1", "loss", s, 1.0 / (s + 1)) for s in range(5)])
                await store.record_artifact(run_id, "n1", "checkpoint", f"/ckpt/{run_id}.pt", {"epoch": 3})
            assert await store.record_metrics([]) == 0

            deleted = await store.delete_run("gone")
            assert deleted.run["id"] == "gone" and deleted.run["status"] == "succeeded"
            assert [a["path"] for a in deleted.artifacts] == ["/ckpt/gone.pt"]
            assert deleted.artifacts[0]["meta"] == {"epoch": 3}
            assert await store.delete_run("gone") is None
            assert await store.get_run("gone") is None
            assert await store.read_events("gone") == ([], 0, False)
            assert await store.read_metrics("gone") == []
            assert await store.list_artifacts("gone") == []
            assert store.flushed_seq("gone") is None

            assert len((await store.read_events("kept"))[0]) == 4
            metrics = await store.read_metrics("kept")
            assert [m["step"] for m in metrics] == [0, 1, 2, 3, 4]
            assert metrics[0] == {"node_id": "n1", "name": "loss", "step": 0, "value": 1.0, "created_at": 50.0}
            artifacts = await store.list_artifacts("kept")
            assert artifacts[0]["kind"] == "checkpoint" and artifacts[0]["created_at"] == 50.0

    run(main())


def test_prune_keeps_the_newest_window_and_never_active_runs(store_at):
    async def main():
        async with await Store.open(store_at("p.db")) as store:
            # oldest → newest
            plan = [("a", "succeeded"), ("b", "running"), ("c", "failed"), ("d", "interrupted"),
                    ("e", "queued"), ("f", "cancelled"), ("g", "succeeded"), ("h", "succeeded")]
            for run_id, status in plan:
                await store.create_run(run_row(run_id, status), events=events(1, 2))
                await store.record_artifact(run_id, None, "log", f"/logs/{run_id}")

            assert await store.prune_finished(-1) == []
            assert await store.prune_finished(100) == []
            # Window of 3: h, g, f stay; e (queued) and b (running) stay though outside it.
            pruned = await store.prune_finished(3)
            assert [p.run["id"] for p in pruned] == ["a", "c", "d"]
            assert pruned[2].run["status"] == "interrupted"
            assert [a["path"] for a in pruned[2].artifacts] == ["/logs/d"]
            rows, total = await store.list_runs()
            assert [r["id"] for r in rows] == ["h", "g", "f", "e", "b"]
            assert await store.read_events("a") == ([], 0, False)
            assert await store.prune_finished(3) == []

            # Active runs count toward the window: with a window of 2 filled by h, g, nothing else
            # finished survives, and e, b still do.
            await store.update_run("h", status="running")
            pruned = await store.prune_finished(2)
            assert [p.run["id"] for p in pruned] == ["f"]
            pruned = await store.prune_finished(0)
            assert [p.run["id"] for p in pruned] == ["g"]
            assert [r["id"] for r in (await store.list_runs())[0]] == ["h", "e", "b"]

    run(main())


def test_fingerprints_are_stored_once_per_digest(store_at):
    async def main():
        async with await Store.open(store_at("f.db")) as store:
            doc = {"python": "3.11", "torch": "2.3", "packages": {"numpy": "1.26"}}
            results = await asyncio.gather(*(store.put_fingerprint("sha256:abc", doc) for _ in range(5)))
            assert sorted(results) == [False, False, False, False, True]
            assert await store.put_fingerprint("sha256:abc", {"other": 1}) is False
            assert await store.get_fingerprint("sha256:abc") == doc
            assert await store.put_fingerprint("sha256:def", {"python": "3.12"}) is True
            assert await store.get_fingerprint("sha256:missing") is None

    run(main())


def test_a_page_of_runs_reads_an_oversized_column_as_a_stub_and_the_run_itself_whole(store_at):
    # A worker chooses a run's error and facts (run_finished, run_facts): a page of runs must stay
    # cheap to render whatever one sent (issue 27, item 1); GET of the run itself has all of it.
    from codefy_jupyter.core.store.queries import LIST_JSON_MAX_CHARS

    huge = {"message": "boom", "traceback": "x" * (4 * LIST_JSON_MAX_CHARS)}

    async def main():
        async with await Store.open(store_at("big.db"), clock=FakeClock()) as store:
            await store.create_run(run_row("big", "failed", error=huge, execution_facts={"cpu_threads": 1}))
            await store.create_run(run_row("small", "failed", error={"message": "no"}))
            rows, total = await store.list_runs()
            by_id = {r["id"]: r for r in rows}
            stub = by_id["big"]["error"]
            assert stub["truncated"] is True and stub["chars"] > LIST_JSON_MAX_CHARS and "read the run" in stub["message"]
            assert by_id["big"]["execution_facts"] == {"cpu_threads": 1}
            assert by_id["small"]["error"] == {"message": "no"}
            assert (await store.get_run("big"))["error"] == huge

    run(main())


def test_the_status_counts_follow_every_insert_update_and_delete(store_at):
    """A list's `total` reads run_counts, which triggers keep in the change's own transaction."""

    async def main():
        async with await Store.open(store_at("counts.db")) as store:
            for i in range(7):
                await store.create_run(run_row(f"c{i}", "queued"))
            await store.update_run("c0", status="running")
            await store.update_run("c1", status="running")
            await store.update_run("c1", status="succeeded", finished_at=2.0)
            await store.update_run("c2", status="queued", name="same status: not counted twice")
            await store.delete_run("c3")
            assert (await store.list_runs())[1] == 6
            assert (await store.list_runs("queued"))[1] == 4
            assert (await store.list_runs(["running", "succeeded"]))[1] == 2
            assert (await store.list_runs(["failed", "interrupted"]))[1] == 0

    asyncio.run(main())


def test_the_counts_step_counts_the_runs_a_file_already_has(tmp_path):
    conn = sqlite3.connect(tmp_path / "old.db", isolation_level=None)
    try:
        assert migrate(conn, SCHEMA_STEPS[:8]) == 8  # as the version before the counts
        for i, status in enumerate(["queued", "failed", "failed", "succeeded"]):
            conn.execute("INSERT INTO runs (id, submit_order, status, submitted_at) VALUES (?, ?, ?, 1)",
                         (f"o{i}", i + 1, status))
        assert migrate(conn) == SCHEMA_VERSION
        assert dict(conn.execute("SELECT status, n FROM run_counts").fetchall()) == {
            "queued": 1, "failed": 2, "succeeded": 1}
    finally:
        conn.close()
