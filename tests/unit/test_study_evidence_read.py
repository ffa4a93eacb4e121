"""A study reads a finished child's row and metric points in one snapshot (store/studies.py
read_run_and_points), on both backends. Retention may delete the child between two reads; read
apart, the row was found with its points already gone, and the study copied an empty evidence
over the one retention's harvest had written (a CI failure: a variant left out of the ranking)."""

from __future__ import annotations

import asyncio

from pg_server import connect_raw

from codefy_jupyter.core.store import studies as db
from codefy_jupyter.core.store.database import Store


class DeleteAfterFirstRead:
    """The reader's connection, but the first statement after BEGIN is followed by retention's
    delete of the run, committed on a connection of its own (as the writer would)."""

    def __init__(self, conn, target, run_id: str) -> None:
        self.conn, self.target, self.run_id = conn, target, run_id
        self.reads = 0

    def execute(self, sql, params=()):
        cursor = self.conn.execute(sql, params)
        if sql.lstrip().upper().startswith("SELECT"):
            self.reads += 1
            if self.reads == 1:
                rows = cursor.fetchall()  # the snapshot is taken by this first read
                other = connect_raw(self.target)
                try:
                    other.execute("DELETE FROM run_metrics WHERE run_id = ?", (self.run_id,))
                    other.execute("DELETE FROM runs WHERE id = ?", (self.run_id,))
                finally:
                    other.close()
                return _Rows(rows)
        return cursor


class _Rows:
    def __init__(self, rows) -> None:
        self.rows = rows

    def fetchone(self):
        return self.rows[0] if self.rows else None

    def fetchall(self):
        return self.rows

    def __iter__(self):
        return iter(self.rows)


async def finished_child(store: Store) -> None:
    """A study's child that ended with its objective's point recorded."""
    await store.create_run({"id": "child", "status": "running", "name": "probe / one / r0"})
    await store.record_metrics([("child", "p", "score", 1, 3.0)])
    await store.update_run("child", status="succeeded", finished_at=5.0)


def test_a_child_deleted_between_the_reads_is_read_whole_from_one_snapshot(store_at):
    target = store_at("evidence.db")

    async def main():
        async with await Store.open(target) as store:
            await finished_child(store)
            straddled: list[DeleteAfterFirstRead] = []

            def read(conn):
                proxy = DeleteAfterFirstRead(conn, target, "child")
                straddled.append(proxy)
                return db.read_run_and_points(proxy, "child")

            found = await store.read(read)
            assert straddled[0].reads == 2  # the row, then the points: the delete fell between them
            assert found is not None, "the row was read before the delete"
            run, points = found
            assert run["status"] == "succeeded"
            assert [(p["node_id"], p["name"], p["value"]) for p in points] == [("p", "score", 3.0)]
            # The delete did commit: a read after it finds no child (the study keeps the harvest's copy).
            assert await store.read(db.read_run_and_points, "child") is None

    asyncio.run(main())


def test_read_apart_the_same_interleaving_loses_the_points(store_at):
    # What the snapshot prevents, shown on the same interleaving: without it the row is found and
    # the points are not (so the test above would fail without read_run_and_points' transaction).
    target = store_at("apart.db")

    async def main():
        async with await Store.open(target) as store:
            await finished_child(store)
            found = await store.read(lambda conn: db.run_and_points(DeleteAfterFirstRead(conn, target, "child"), "child"))
            assert found is not None and found[1] == []

    asyncio.run(main())
