"""A store on a real PostgreSQL server (tests/pg_server.py) whose connections go away: terminated
by `pg_terminate_backend`, or cut by a restart of the server. The writer, the readers and the
lease keeper reconnect by themselves; writes queued meanwhile wait and commit in order, reads
answer 503 `store_unavailable` while the server is away, the outage is logged once, and a write
that waits past the lease is refused (fenced) without the database. Waits are on conditions."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

pytest.importorskip("psycopg", reason="psycopg is not installed (pip install -e '.[test]')")

from codefy_jupyter.core.errors import Unavailable  # noqa: E402
from codefy_jupyter.core.store.database import Store  # noqa: E402
from codefy_jupyter.core.store.lease import LEADER, Lease  # noqa: E402
from codefy_jupyter.core.store.pg_lease import Fenced  # noqa: E402
from codefy_jupyter.core.store.reconnect import Backoff  # noqa: E402
from pg_server import connect_raw  # noqa: E402

DEADLINE_S = 60.0


async def until(condition, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not await condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


def terminate(url: str, app: str) -> int:
    conn = connect_raw(url)
    try:
        return len(conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                "WHERE application_name = ?", (app,)).fetchall())
    finally:
        conn.close()


def connections(url: str, app: str) -> int:
    conn = connect_raw(url)
    try:
        return conn.execute("SELECT COUNT(*) FROM pg_stat_activity WHERE application_name = ?", (app,)).fetchone()[0]
    finally:
        conn.close()


def test_backoff_doubles_up_to_its_cap_and_starts_again_after_a_success():
    backoff = Backoff(first_delay_s=0.1, max_delay_s=0.5)
    assert backoff.due(0.0)
    assert [backoff.failed(0.0) for _ in range(4)] == [0.1, 0.2, 0.4, 0.5]
    assert not backoff.due(0.4) and backoff.due(0.5)
    backoff.succeeded()
    assert backoff.due(0.0) and backoff.failed(1.0) == 0.1


def test_a_store_whose_connections_are_terminated_reconnects_and_keeps_leading(pg_url, caplog):
    url = pg_url + "?application_name=cut-me"

    async def go():
        store = await Store.open(url, lease=Lease("a", "http://a/", ttl_s=5, renew_every_s=1))
        try:
            await store.create_run({"id": "before", "status": "queued"})
            epoch = store.lease_keeper.lease.epoch
            # The writer, four readers and the lease keeper: every one of them cut.
            assert terminate(pg_url, "cut-me") == 6
            await store.create_run({"id": "after", "status": "queued"})
            assert (await store.get_run("before"))["id"] == "before"
            assert (await store.get_run("after"))["id"] == "after"

            async def keeper_back():
                return connections(pg_url, "cut-me") >= 2 and store.lease_keeper.lease.epoch == epoch

            await until(keeper_back, "the keeper to renew on a new connection")
            assert store.role == LEADER
        finally:
            await store.close()

    with caplog.at_level(logging.INFO, logger="codefy_jupyter.core.store"):
        asyncio.run(go())
    assert not [r for r in caplog.records if "unreachable" in r.getMessage()]  # cut, never away


def test_a_store_waits_through_a_database_restart_and_loses_no_write(own_pg_server, caplog):
    url = own_pg_server.create_database()

    async def go():
        # A lease longer than the restart: the store leads throughout, and its writes wait for it.
        store = await Store.open(url, lease=Lease("a", "http://a/", ttl_s=60, renew_every_s=1))
        try:
            await store.create_run({"id": "r0", "status": "queued"})
            own_pg_server.pause("fast")
            writes = [asyncio.ensure_future(store.create_run({"id": f"r{n}", "status": "queued"}))
                      for n in range(1, 6)]
            for _ in range(3):  # the first read finds its connection cut; later ones the server away
                with pytest.raises(Unavailable) as refused:
                    await store.get_run("r0")
                assert refused.value.code == "store_unavailable" and refused.value.status == 503
            await asyncio.sleep(0.5)  # the writer retries meanwhile (logged once, not per retry)
            assert not any(w.done() for w in writes)
            own_pg_server.resume()
            await asyncio.wait_for(asyncio.gather(*writes), DEADLINE_S)

            async def readable():
                try:
                    return all([await store.get_run(f"r{n}") for n in range(6)])
                except Unavailable:
                    return False

            await until(readable, "every run to read back")
            assert store.role == LEADER and store.lease_keeper.lease.epoch == 1
        finally:
            await store.close()

    with caplog.at_level(logging.INFO, logger="codefy_jupyter.core.store"):
        asyncio.run(go())
    messages = [r.getMessage() for r in caplog.records]
    assert len([m for m in messages if "is unreachable" in m]) == 1, messages
    assert len([m for m in messages if "reachable again" in m]) == 1, messages


def test_a_write_waiting_past_the_lease_is_refused_without_the_database(own_pg_server):
    url = own_pg_server.create_database()

    async def go():
        store = await Store.open(url, lease=Lease("a", "http://a/", ttl_s=2, renew_every_s=1))
        try:
            own_pg_server.pause("fast")
            with pytest.raises(Fenced):
                await asyncio.wait_for(store.create_run({"id": "late", "status": "queued"}), DEADLINE_S)
            assert store.role != LEADER
            own_pg_server.resume()

            async def leads_again():
                return store.role == LEADER

            # Nobody else contends: it takes the lease again, with the next epoch, and writes.
            await until(leads_again, "the store to lead again")
            assert store.lease_keeper.lease.epoch == 2
            await store.create_run({"id": "later", "status": "queued"})
            assert await store.get_run("late") is None
        finally:
            await store.close()

    asyncio.run(go())
