"""The leader lease on a real PostgreSQL server (tests/pg_server.py): two stores on one database,
exactly one leads; a leader frozen past its lease (its renewals stopped, its clock standing still,
as under SIGSTOP) is taken over, and its next write is refused by the epoch check (fenced) and
steps it down. Each store's clock is a fake the test moves; waits are on conditions."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

pytest.importorskip("psycopg", reason="psycopg is not installed (pip install -e '.[test]')")

from codefy_jupyter.core.store.database import Store  # noqa: E402
from codefy_jupyter.core.store.lease import LEADER, LOST, STANDBY, WON, Lease  # noqa: E402
from codefy_jupyter.core.store.pg_lease import Fenced  # noqa: E402
from pg_server import connect_raw  # noqa: E402

DEADLINE_S = 60.0


class FakeClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


async def until(condition, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


def lease_row(url: str) -> tuple:
    conn = connect_raw(url)
    try:
        return tuple(conn.execute("SELECT holder, epoch, url FROM leader_lease").fetchone())
    finally:
        conn.close()


async def open_two(url: str, clock_a: FakeClock, clock_b: FakeClock) -> tuple[Store, Store]:
    a = await Store.open(url, lease_clock=clock_a, lease=Lease("a", "http://a/"))
    b = await Store.open(url, lease_clock=clock_b, lease=Lease("b", "http://b/"))
    return a, b


def test_of_two_stores_on_one_database_the_first_leads_and_the_other_takes_no_writes(pg_url):
    async def main():
        a, b = await open_two(pg_url, FakeClock(), FakeClock())
        try:
            assert (a.role, b.role) == (LEADER, STANDBY)
            await until(lambda: b.leader_url == "http://a/", "b to see a's URL")
            await a.create_run({"id": "r1", "status": "queued"})
            with pytest.raises(Fenced) as refused:
                await b.create_run({"id": "r2", "status": "queued"})
            assert refused.value.code == "standby" and refused.value.status == 503
            assert refused.value.params == {"leader": "http://a/"}
            assert await b.get_run("r1") is not None and await b.get_run("r2") is None  # reads are served
        finally:
            await b.close()
            await a.close()

    asyncio.run(main())


def test_a_frozen_leader_is_taken_over_and_its_next_write_is_fenced_and_steps_it_down(pg_url):
    async def main():
        clock_a, clock_b = FakeClock(), FakeClock()
        a, b = await open_two(pg_url, clock_a, clock_b)
        changes: list[tuple[str, str]] = []
        a.on_lease_change = lambda c: changes.append(("a", c))
        b.on_lease_change = lambda c: changes.append(("b", c))
        try:
            await a.create_run({"id": "before", "status": "queued"})
            a.lease_keeper.pause()  # frozen: no renewals, and its clock stands still
            clock_b.now += 10.0     # past a's lease (its expiry: a's last renewal + 5 s)
            await until(lambda: b.role == LEADER, "b to take the lease over")
            assert lease_row(pg_url) == ("b", 2, "http://b/")
            await until(lambda: ("b", WON) in changes, "b to be told it won")
            # a wakes believing it leads (its clock never moved): the database refuses its write.
            assert a.role == LEADER and a.lease_keeper.lease.held(clock_a())
            with pytest.raises(Fenced, match="fenced") as refused:
                await a.create_run({"id": "fenced", "status": "queued"})
            assert refused.value.params == {"leader": "http://b/"}
            assert a.role == STANDBY  # stepped down at once, before its keeper ran again
            await until(lambda: ("a", LOST) in changes, "a to be told it lost")
            assert await b.get_run("fenced") is None and await b.get_run("before") is not None
            await b.create_run({"id": "after", "status": "queued"})
            a.lease_keeper.resume()
            await until(lambda: a.leader_url == "http://b/", "a to follow b")
            assert a.role == STANDBY and b.role == LEADER and lease_row(pg_url)[:2] == ("b", 2)
        finally:
            a.lease_keeper.resume()
            await b.close()
            await a.close()

    asyncio.run(main())


def test_a_leader_frozen_inside_a_write_does_not_hold_the_lease_row_past_its_ttl(pg_url):
    """Its fence's FOR SHARE lock on the lease row would block every takeover until it woke: the
    database ends the frozen writer's session after the lease's TTL, and the standby takes over."""
    async def main():
        clock_a, clock_b = FakeClock(), FakeClock()
        a = await Store.open(pg_url, lease_clock=clock_a, lease=Lease("a", "http://a/", ttl_s=2, renew_every_s=0.5))
        b = await Store.open(pg_url, lease_clock=clock_b, lease=Lease("b", "http://b/", ttl_s=2, renew_every_s=0.5))
        wake = threading.Event()

        def frozen(conn):
            conn.execute("UPDATE runs SET name = 'frozen' WHERE id = 'before'")
            wake.wait(2 * DEADLINE_S)  # the writer thread stops here, inside its transaction

        try:
            await a.create_run({"id": "before", "status": "queued"})
            write = asyncio.ensure_future(a.write(frozen))
            await until(lambda: holding_share_lock(pg_url), "a's write to hold the lease row")
            a.lease_keeper.pause()
            clock_b.now += 10.0
            await until(lambda: b.role == LEADER, "b to take the lease over from a frozen writer")
            wake.set()
            with pytest.raises(Exception):
                await write
            assert (await b.get_run("before"))["name"] is None
            await b.create_run({"id": "after", "status": "queued"})
        finally:
            wake.set()
            a.lease_keeper.resume()
            await b.close()
            await a.close()

    asyncio.run(main())


def holding_share_lock(url: str) -> bool:
    conn = connect_raw(url)
    try:
        return conn.execute("SELECT count(*) FROM pg_stat_activity WHERE state = 'idle in transaction' "
                            "AND application_name = 'codefy-jupyter'").fetchone()[0] > 0
    finally:
        conn.close()


def test_a_leader_that_closes_gives_the_lease_up_and_a_standby_takes_it_without_waiting(pg_url):
    async def main():
        clock = FakeClock()  # never moves: only the give-up can free the lease
        a, b = await open_two(pg_url, clock, clock)
        try:
            await a.close()
            await until(lambda: b.role == LEADER, "b to take the given-up lease")
            await b.leadership()
            assert lease_row(pg_url) == ("b", 2, "http://b/")
            await b.create_run({"id": "r1", "status": "queued"})
        finally:
            await b.close()
            await a.close()

    asyncio.run(main())


def test_a_standby_waits_for_leadership(pg_url):
    async def main():
        clock_a, clock_b = FakeClock(), FakeClock()
        a, b = await open_two(pg_url, clock_a, clock_b)
        try:
            waiting = asyncio.ensure_future(b.leadership())
            await asyncio.sleep(0)
            assert not waiting.done()
            a.lease_keeper.pause()
            clock_b.now += 10.0
            await asyncio.wait_for(waiting, DEADLINE_S)
            assert b.role == LEADER
        finally:
            a.lease_keeper.resume()
            await b.close()
            await a.close()

    asyncio.run(main())


def test_an_sqlite_store_always_leads(tmp_path):
    async def main():
        async with await Store.open(tmp_path / "codefy.db") as store:
            assert store.role == LEADER and store.leader_url is None
            await store.leadership()
            await store.create_run({"id": "r1", "status": "queued"})

    asyncio.run(main())
