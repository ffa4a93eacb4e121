"""A full disk under the data dir (issue 27: it wedged runs), on a real size-limited tmpfs that each
test mounts and unmounts, with a real jupyter-server, real runs and a real agent subprocess.

While the disk is full: executing runs whose events cannot be written end `failed` with
`event_log_write_failed` (their followers are told at once, through the live fan-out), waiting runs
wait, and a submit is answered 507 `storage_full` with Retry-After in the one error shape. Once the
filler file is deleted the server goes on by itself: the endings reach the database (a restart
agrees), the waiting runs start, a new submit runs to its end, and nothing acknowledged is lost.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import shutil
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest

from test_server_runs import SMALL, all_events, call, edge, wait_status
from test_workers_e2e import agents, control, pack_env, server_token, until_connected, worker_state  # noqa: F401

pytestmark = pytest.mark.slow

DISK_MB = 30
END = {"succeeded", "failed", "cancelled", "interrupted"}


def chatter(pause: float = 0.02) -> dict[str, Any]:
    """A run that writes about 800 KB of events a second until it is stopped."""
    return {"nodes": [{"id": "k", "type": "Float", "params": {"value": 1}},
                      {"id": "talk", "type": "Chatter", "params": {"pause": pause}}],
            "edges": [edge("k", "value", "talk", "value")]}


@pytest.fixture
def small_disk(tmp_path):
    """A 30 MB tmpfs of this test's own; skipped only where mounting one is not permitted."""
    mount, umount = shutil.which("mount"), shutil.which("umount")
    if mount is None or umount is None:
        pytest.skip("no mount/umount command here: a size-limited tmpfs cannot be made")
    where = tmp_path / "disk"
    where.mkdir()
    made = subprocess.run([mount, "-t", "tmpfs", "-o", f"size={DISK_MB}m", "tmpfs", str(where)],
                          capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"mounting a {DISK_MB} MB tmpfs is not permitted here: {made.stderr.strip()}")
    try:
        yield where
    finally:
        if subprocess.run([umount, str(where)], capture_output=True).returncode != 0:
            subprocess.run([umount, "-l", str(where)], check=True)  # something still holds a file open


@pytest.fixture
def jp_server_config(small_disk):
    return {"ServerApp": {"jpserver_extensions": {"codefy_jupyter": True}},
            "CodefyApp": {"data_dir": str(small_disk / "codefy"), "run_queue_max_concurrent_cpu": 2}}


def _fill(path: Path) -> int:
    written = 0
    with open(path, "wb", buffering=0) as f:
        block = b"\0" * (1 << 16)
        while True:
            try:
                written += f.write(block)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                return written


async def fill(disk: Path) -> Path:
    """Take every free byte of the disk with a filler file."""
    filler = disk / "filler"
    await asyncio.to_thread(_fill, filler)
    return filler


def stored(disk: Path, run_id: str) -> str:
    """The run's status in the database file itself: what a restart would read."""
    conn = sqlite3.connect((disk / "codefy" / "codefy.sqlite").as_uri() + "?mode=ro", uri=True)
    try:
        return conn.execute("SELECT status FROM runs WHERE id = ?", (run_id,)).fetchone()[0]
    finally:
        conn.close()


async def until(check, what: str, timeout: float = 60.0):
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        found = await check()
        if found:
            return found
        assert asyncio.get_running_loop().time() < deadline, what
        await asyncio.sleep(0.05)


async def chatting(jp_fetch, run_id: str) -> bool:
    code, page = await call(jp_fetch, "api", "runs", run_id, "events", cursor=0)
    return code == 200 and any(e["payload"].get("code") == "chatter"
                               for e in page["events"])


async def submit_raw(jp_fetch, path: tuple[str, ...], body: dict[str, Any]):
    response = await jp_fetch("codefy", "api", *path, method="POST", body=json.dumps(body), raise_error=False)
    return response.code, json.loads(response.body), response.headers


async def refused_while_full(jp_fetch, path: tuple[str, ...], body: dict[str, Any], acknowledged: list[str]) -> None:
    """Submits while the disk is full are refused 507 storage_full with Retry-After. (A submit the
    database still finds room for is acknowledged, and must then be kept: noted in `acknowledged`.)"""
    for _ in range(20):
        code, answer, headers = await submit_raw(jp_fetch, path, body)
        if code == 201:
            acknowledged.append(answer["id"])
            continue
        assert code == 507, answer
        assert set(answer) == {"error"} and set(answer["error"]) == {"code", "message", "params"}, answer
        assert answer["error"]["code"] == "storage_full" and "full" in answer["error"]["message"]
        assert answer["error"]["params"]["path"].endswith("codefy")
        assert int(headers["Retry-After"]) > 0
        return
    raise AssertionError("20 submits on a full disk were all accepted")


async def test_in_process_runs_on_a_full_disk_end_and_the_server_goes_on_once_it_has_room(
        jp_fetch, jp_ws_fetch, pack_env, small_disk):
    code, before = await call(jp_fetch, "api", "runs", method="POST", body={"graph": SMALL})
    assert code == 201
    assert (await wait_status(jp_fetch, before["id"], END))["status"] == "succeeded"
    before_events = await all_events(jp_fetch, before["id"])
    talkers = []
    for _ in range(2):
        code, run = await call(jp_fetch, "api", "runs", method="POST", body={"graph": chatter()})
        assert code == 201, run
        talkers.append(run["id"])
    for rid in talkers:
        await until(lambda: chatting(jp_fetch, rid), f"run {rid} never wrote an event")
    waiting = []
    for _ in range(2):  # both cpu slots are taken: these wait
        code, run = await call(jp_fetch, "api", "runs", method="POST", body={"graph": SMALL})
        assert code == 201 and run["status"] == "queued", run
        waiting.append(run["id"])
    follower = await jp_ws_fetch("codefy", "ws", "execution")
    await follower.write_message(json.dumps({"type": "subscribe", "run_id": talkers[0], "cursor": 0}))

    filler = await fill(small_disk)
    for rid in talkers:
        done = await wait_status(jp_fetch, rid, END, timeout=60)
        assert done["status"] == "failed" and done["error"]["code"] == "event_log_write_failed", done
        assert done["finished_at"] is not None
    # The follower hears the ending now, not once the disk has room.
    closing = None
    while closing is None:
        frame = json.loads(await asyncio.wait_for(follower.read_message(), 30))
        assert frame["type"] == "events", frame
        closing = next((e for e in frame["events"] if e["type"] == "execution_error"), None)
    assert frame["status"] == "failed" and closing["payload"]["error"]["code"] == "event_log_write_failed"
    follower.close()
    # Waiting runs are not started into a disk that can record nothing.
    for rid in waiting:
        assert (await call(jp_fetch, "api", "runs", rid))[1]["status"] == "queued"
    acknowledged: list[str] = []
    await refused_while_full(jp_fetch, ("runs",), {"graph": SMALL}, acknowledged)
    await refused_while_full(jp_fetch, ("sweeps",), {
        "base_graph": SMALL, "name": "factors", "objective": {"metric": "y", "direction": "minimize"},
        "sweep_spec": {"params": [{"node_id": "s", "param": "factor", "values": [1.0, 2.0]}]}}, [])

    os.unlink(filler)  # space returns: nothing more is needed for the server to go on
    for rid in waiting + acknowledged:
        assert (await wait_status(jp_fetch, rid, END, timeout=60))["status"] == "succeeded"
    code, after = await call(jp_fetch, "api", "runs", method="POST", body={"graph": SMALL})
    assert code == 201, after
    assert (await wait_status(jp_fetch, after["id"], END))["status"] == "succeeded"
    # Nothing acknowledged was lost, and the endings are on disk: a restart agrees.
    assert (await call(jp_fetch, "api", "runs", before["id"]))[1]["status"] == "succeeded"
    assert await all_events(jp_fetch, before["id"]) == before_events
    for rid in talkers:
        assert stored(small_disk, rid) == "failed"
        events = await all_events(jp_fetch, rid)
        assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
        assert events[0]["type"] == "execution_start" and events[-1]["type"] == "execution_error"
        assert events[-1]["payload"]["error"]["code"] == "event_log_write_failed"


async def test_a_worker_run_on_a_full_disk_ends_and_the_agent_goes_on_once_it_has_room(
        jp_fetch, agents, pack_env, small_disk):
    agent = agents(env=pack_env)
    await until_connected(jp_fetch, agent)
    target = {"worker": "box"}
    code, before = await call(jp_fetch, "api", "runs", method="POST", body={"graph": SMALL, "options": {"target": target}})
    assert code == 201, before
    assert (await wait_status(jp_fetch, before["id"], END, timeout=60))["status"] == "succeeded"
    before_events = await all_events(jp_fetch, before["id"])
    code, talker = await call(jp_fetch, "api", "runs", method="POST",
                              body={"graph": chatter(), "options": {"target": target}})
    assert code == 201, talker
    await until(lambda: chatting(jp_fetch, talker["id"]), "the worker run never wrote an event")

    filler = await fill(small_disk)
    done = await wait_status(jp_fetch, talker["id"], END, timeout=60)
    assert done["status"] == "failed" and done["error"]["code"] == "event_log_write_failed", done
    acknowledged: list[str] = []
    await refused_while_full(jp_fetch, ("runs",), {"graph": SMALL, "options": {"target": target}}, acknowledged)
    assert (await worker_state(jp_fetch, "box"))["state"] == "connected"

    os.unlink(filler)
    code, after = await call(jp_fetch, "api", "runs", method="POST", body={"graph": SMALL, "options": {"target": target}})
    assert code == 201, after
    for rid in [after["id"], *acknowledged]:
        assert (await wait_status(jp_fetch, rid, END, timeout=60))["status"] == "succeeded"
    assert await all_events(jp_fetch, before["id"]) == before_events
    await until(lambda: asyncio.sleep(0, stored(small_disk, talker["id"]) == "failed"),
                "the worker run's ending never reached the database")
    events = await all_events(jp_fetch, talker["id"])
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert events[-1]["type"] == "execution_error"
    assert events[-1]["payload"]["error"]["code"] == "event_log_write_failed"
    assert agent.proc.poll() is None, agent.output()


async def test_the_store_on_a_full_disk_refuses_writes_as_storage_full_and_takes_them_again_once_it_has_room(
        small_disk):
    from codefy_jupyter.core.errors import StorageFull
    from codefy_jupyter.core.store.database import Store

    store = await Store.open(small_disk / "codefy" / "codefy.sqlite")
    told = []
    store.on_full = lambda: told.append(store.full)
    try:
        await store.create_run({"id": "kept", "status": "queued"})
        filler = await fill(small_disk)
        big = "x" * 65536
        refused = None
        for i in range(200):  # until the database needs a page the disk does not have
            try:
                await store.create_run({"id": f"r{i}", "status": "queued", "name": big})
            except StorageFull as err:
                refused = err
                break
        assert refused is not None, "the database never ran out of room"
        assert refused.status == 507 and refused.code == "storage_full" and refused.retry_after_s
        assert store.full and told == [True]
        assert not await store.probe_room() and store.full
        os.unlink(filler)
        assert await store.probe_room() and not store.full
        await store.create_run({"id": "after", "status": "queued", "name": big})  # the writer thread lives on
        assert (await store.get_run("kept"))["status"] == "queued"
        assert (await store.get_run("after")) is not None
        assert not (small_disk / "codefy" / ".codefy-space-probe").exists()
    finally:
        await store.close()
