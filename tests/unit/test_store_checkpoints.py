"""The writer's own WAL checkpoints (core/store/checkpoints.py): the pure policy, then real SQLite
files: no checkpoint inside a COMMIT, the WAL bounded while readers poll, a held reader costs a
retry every few commits (not one per commit), and acknowledged writes survive kill -9 between
and around checkpoints."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from codefy_jupyter.core.store.checkpoints import CheckpointPolicy
from codefy_jupyter.core.store.database import Store

PAGE = 4096


def wal_size(path: Path) -> int:
    try:
        return os.path.getsize(f"{path}-wal")
    except FileNotFoundError:
        return 0


# -- the policy ---------------------------------------------------------------------------------


def test_policy_waits_for_idle_then_forces_under_load():
    p = CheckpointPolicy(idle_after=10, force_after=40, retry_after=5)
    p.committed(9)
    assert not p.due(idle=True)
    p.committed(1)
    assert p.due(idle=True) and not p.due(idle=False)
    p.committed(29)
    assert not p.due(idle=False)
    p.committed(1)
    assert p.due(idle=False)
    p.checkpointed(wal_frames=120, copied_frames=120)
    assert (p.pending, p.wait) == (0, 0) and not p.due(idle=True)


def test_policy_retries_a_short_checkpoint_after_retry_after_commits():
    p = CheckpointPolicy(idle_after=10, force_after=40, retry_after=5)
    p.committed(10)
    p.checkpointed(wal_frames=50, copied_frames=20)  # a reader's snapshot stopped it
    for _ in range(4):
        p.committed(1)
        assert not p.due(idle=True)
    p.committed(1)
    assert p.due(idle=True)


def test_policy_under_load_with_a_reader_in_the_way_does_not_checkpoint_every_commit():
    p = CheckpointPolicy(idle_after=10, force_after=40, retry_after=5)
    tries = 0
    for _ in range(400):
        p.committed(1)
        if p.due(idle=False):
            tries += 1
            p.checkpointed(wal_frames=100, copied_frames=0)
    assert tries <= 400 // 5 + 1


@pytest.mark.parametrize("kw", [{"idle_after": 0}, {"idle_after": 50, "force_after": 10}, {"retry_after": 0}])
def test_policy_refuses_nonsense(kw):
    with pytest.raises(ValueError):
        CheckpointPolicy(**kw)


# -- on real files ------------------------------------------------------------------------------


async def commit_runs(store: Store, first: int, count: int) -> None:
    for i in range(first, first + count):
        await store.create_run({"id": f"r{i}", "status": "queued", "name": "x" * 200})


def test_no_checkpoint_inside_a_commit_and_the_writer_runs_them(tmp_path):
    path = tmp_path / "c.db"

    async def main():
        async with await Store.open(path, checkpoints=CheckpointPolicy(idle_after=20, force_after=80)) as store:
            assert await store.write(lambda c: c.execute("PRAGMA wal_autocheckpoint").fetchone()[0]) == 0
            await commit_runs(store, 0, 200)
            stats = store.statistics()
            assert stats.checkpoints >= 200 // 80 and stats.short_checkpoints == 0
            assert (await store.list_runs())[1] == 200

    asyncio.run(main())


def test_wal_stays_bounded_while_readers_poll(tmp_path):
    """Readers reading back to back always hold a mark in the WAL, so PASSIVE checkpoints alone
    never let it restart (it grew to 17 MB here); past `restart_frames` a RESTART checkpoint
    waits out the reads in progress and the WAL stays a few checkpoints' worth."""
    path = tmp_path / "b.db"
    stop = threading.Event()

    def poll() -> None:
        conn = sqlite3.connect(path.as_uri() + "?mode=ro", uri=True, isolation_level=None)
        try:
            while not stop.is_set():
                conn.execute("BEGIN")
                conn.execute("SELECT COUNT(*), SUM(LENGTH(name)) FROM runs").fetchall()
                conn.execute("COMMIT")
        finally:
            conn.close()

    async def main():
        policy = CheckpointPolicy(idle_after=20, force_after=80, restart_frames=100)
        async with await Store.open(path, checkpoints=policy) as store:
            await commit_runs(store, 0, 10)
            readers = [threading.Thread(target=poll) for _ in range(2)]
            for t in readers:
                t.start()
            try:
                await commit_runs(store, 10, 1000)
            finally:
                stop.set()
                for t in readers:
                    t.join()
            assert store.statistics().checkpoints >= 1000 // 80
            # Unchecked (PASSIVE only) these commits left a 17 MB WAL; here ~1.6 MB was measured.
            assert wal_size(path) < 1000 * PAGE, wal_size(path)
            assert (await store.list_runs())[1] == 1010

    asyncio.run(main())


def test_a_held_reader_costs_a_retry_every_few_commits_and_the_wal_restarts_once_it_lets_go(tmp_path):
    path = tmp_path / "h.db"
    policy = CheckpointPolicy(idle_after=20, force_after=80, retry_after=10)

    async def main():
        async with await Store.open(path, checkpoints=policy) as store:
            await commit_runs(store, 0, 30)
            held = sqlite3.connect(path.as_uri() + "?mode=ro", uri=True, isolation_level=None)
            held.execute("BEGIN")
            assert held.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 30  # the snapshot is held
            before = store.statistics()
            await commit_runs(store, 30, 300)
            during = store.statistics()
            short = during.short_checkpoints - before.short_checkpoints
            assert 1 <= short <= 300 // policy.retry_after + 1  # not one per commit
            assert held.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 30  # its snapshot intact
            held.execute("COMMIT")
            held.close()
            await commit_runs(store, 330, 100)  # a complete checkpoint now; the WAL restarts
            grown = wal_size(path)
            await commit_runs(store, 430, 400)
            assert wal_size(path) <= grown  # reused from its start, not grown
            assert (await store.list_runs())[1] == 830

    asyncio.run(main())


CRASHING_WRITER = textwrap.dedent("""
    import asyncio, os, signal, sys
    from codefy_jupyter.core.store.checkpoints import CheckpointPolicy
    from codefy_jupyter.core.store.database import Store

    async def main():
        # Small figures: many checkpoints (and commits after them) before the kill.
        store = await Store.open(sys.argv[1], checkpoints=CheckpointPolicy(idle_after=3, force_after=7, retry_after=2))
        await store.create_run({"id": "crash", "status": "running"})
        for seq in range(1, 301):
            await store.append_events("crash", [(seq, "tick", {"n": seq}, 1.0)])
        await asyncio.gather(*(store.create_run({"id": f"c{i}", "status": "queued"}) for i in range(50)))
        assert store.statistics().checkpoints > 10
        print("acknowledged", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)  # no close, no final checkpoint

    asyncio.run(main())
""")


def test_acknowledged_writes_survive_a_kill_9_among_checkpoints(tmp_path):
    path = tmp_path / "k.db"
    child = subprocess.run([sys.executable, "-c", CRASHING_WRITER, str(path)],
                           capture_output=True, text=True, timeout=120)
    assert child.returncode == -signal.SIGKILL, child.stderr
    assert child.stdout.strip() == "acknowledged"

    async def main():
        async with await Store.open(path) as store:
            page, cursor, more = await store.read_events("crash", byte_budget=None)
            assert [e.seq for e in page] == list(range(1, 301)) and cursor == 300 and not more
            assert (await store.get_run("crash"))["last_seq"] == 300
            assert (await store.list_runs())[1] == 51

    asyncio.run(main())
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    db.close()


def test_policy_restarts_a_long_wal_and_goes_back_to_passive_once_it_went_through():
    p = CheckpointPolicy(idle_after=1, force_after=10, retry_after=1, restart_frames=100)
    assert p.mode() == "PASSIVE"
    p.checkpointed(wal_frames=150, copied_frames=150)  # copied, but readers kept the WAL from restarting
    assert p.mode() == "RESTART"
    p.checkpointed(wal_frames=160, copied_frames=-1)   # busy: readers still reading
    assert p.mode() == "RESTART"
    p.checkpointed(wal_frames=170, copied_frames=170)
    assert p.mode() == "PASSIVE"
