"""A real jupyter-server on a real PostgreSQL database whose leader lease another control plane
holds (its row written as that leader would have): the server is a standby, its codefy routes
answer 503 `standby` naming the leader's URL, and `GET health` says so. Once the lease is given up
the server takes it with the next epoch, recovers what the old leader left as a restart after
kill -9 would (its in-process run ends interrupted, its queued run is queued again), and serves."""

from __future__ import annotations

import asyncio
import time

import pytest

pytest.importorskip("psycopg", reason="psycopg is not installed (pip install -e '.[test]')")

from pg_server import connect_raw  # noqa: E402

from codefy_jupyter.core.store.database import Store  # noqa: E402

from test_server_runs import SMALL, call, wait_status  # noqa: E402

OTHER = "http://other.example:8888/"
DEADLINE_S = 60.0


def hold_lease(url: str, *, epoch: int, expires_at: float, holder: str = "other") -> None:
    conn = connect_raw(url)
    try:
        conn.execute("UPDATE leader_lease SET holder = ?, url = ?, epoch = ?, expires_at = ? WHERE id = 1",
                     (holder, OTHER, epoch, expires_at))
    finally:
        conn.close()


@pytest.fixture
def old_leader(pg_url):
    """The database as a leader left it: a run executing in its process, a run queued; the lease
    still its own for an hour."""
    async def left():
        store = await Store.open(pg_url)
        await store.create_run({"id": "old-running", "status": "running", "started_at": time.time()})
        await store.create_run({"id": "old-queued", "status": "queued", "name": "waited", "graph": SMALL,
                                "options": {"lane": "queued", "record_outputs": False, "requested_device": None}})
        await store.close()

    asyncio.run(left())
    hold_lease(pg_url, epoch=5, expires_at=time.time() + 3600)
    return pg_url


@pytest.fixture
def jp_server_config(tmp_path, old_leader):
    return {"ServerApp": {"jpserver_extensions": {"codefy_jupyter": True}},
            "CodefyApp": {"data_dir": str(tmp_path / "codefy"), "store_url": old_leader,
                          "run_files_shared": 1}}


async def until_health(jp_fetch, role: str) -> dict:
    deadline = time.monotonic() + DEADLINE_S
    while True:
        code, body = await call(jp_fetch, "api", "health")
        now = body.get("role") if code == 200 else body["error"]["params"].get("role")
        if now == role:
            return body
        assert time.monotonic() < deadline, f"health stayed {now}"
        await asyncio.sleep(0.05)


async def test_a_standby_refuses_naming_the_leader_then_takes_over_when_the_lease_is_given_up(jp_fetch, old_leader):
    code, body = await call(jp_fetch, "api", "health")
    assert code == 503 and body["error"]["code"] == "standby"
    assert body["error"]["params"] == {"role": "standby", "leader": OTHER}
    for path in (("api", "runs"), ("api", "runs", "old-queued"), ("api", "workers")):
        code, body = await call(jp_fetch, *path)
        assert code == 503, path
        assert body["error"]["code"] == "standby" and body["error"]["params"] == {"leader": OTHER}
        assert OTHER in body["error"]["message"]
    code, body = await call(jp_fetch, "api", "runs", method="POST", body={"graph": SMALL})
    assert code == 503 and body["error"]["code"] == "standby"

    hold_lease(old_leader, epoch=5, expires_at=0)  # the old leader gives the lease up
    leading = await until_health(jp_fetch, "leader")
    assert leading["leader"] and leading["leader"] != OTHER
    conn = connect_raw(old_leader)
    try:
        holder, epoch, url = conn.execute("SELECT holder, epoch, url FROM leader_lease").fetchone()
    finally:
        conn.close()
    assert holder != "other" and epoch == 6 and url == leading["leader"]

    # The recovery of a restart after kill -9: the old leader's in-process run died with it.
    ended = await wait_status(jp_fetch, "old-running", {"interrupted"})
    assert ended["status"] == "interrupted"
    # A queued run keeps its place: queued again in the new leader's queue, and run there.
    assert (await wait_status(jp_fetch, "old-queued", {"succeeded", "failed", "interrupted"}))["status"] == "succeeded"
    code, run = await call(jp_fetch, "api", "runs", method="POST", body={"graph": SMALL, "name": "after"})
    assert code == 201, run
    assert (await wait_status(jp_fetch, run["id"], {"succeeded", "failed"}))["status"] == "succeeded"
