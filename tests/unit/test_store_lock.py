"""One server per run database (`core/store/lock.py`), and the database's files private to their
owner. The rival holders are real processes: `flock` is per open file, and the OS drops it when
its process dies."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from codefy_jupyter.core.store.database import Store
from codefy_jupyter.core.store.lock import (
    DatabaseLock, DatabaseLocked, Holder, held_message, holder_of, lock_path,
)

HOLD = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from codefy_jupyter.core.store.lock import DatabaseLock
    lock = DatabaseLock.acquire(Path(sys.argv[1]), url="http://127.0.0.1:9999/lab/")
    print("held", flush=True)
    time.sleep(120)
""")


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def holder_process(tmp_path):
    """Another process holding the lock of tmp_path/codefy.sqlite."""
    database = tmp_path / "codefy.sqlite"
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(database)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        yield proc, database
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
        proc.stdout.close()


def test_a_second_process_is_refused_with_the_holder_named(holder_process):
    proc, database = holder_process
    assert holder_of(database) == Holder(pid=proc.pid, url="http://127.0.0.1:9999/lab/",
                                         started_at=holder_of(database).started_at)
    with pytest.raises(DatabaseLocked) as refused:
        DatabaseLock.acquire(database, url="http://127.0.0.1:8888/", sleep=lambda s: None)
    err = refused.value
    assert err.holder.pid == proc.pid and err.holder.url == "http://127.0.0.1:9999/lab/"
    assert err.path == str(database)
    message = str(err)
    for part in (str(database), f"pid {proc.pid}", "http://127.0.0.1:9999/lab/", "--data-dir",
                 "CODEFY_DATA_DIR", "c.CodefyApp.data_dir"):
        assert part in message, (part, message)
    # The refused one wrote nothing over the holder's record.
    assert json.loads(lock_path(database).read_text())["pid"] == proc.pid


def test_the_lock_of_a_killed_holder_blocks_nobody(holder_process):
    proc, database = holder_process
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert lock_path(database).exists()  # left behind, as kill -9 leaves it
    assert holder_of(database) is None
    lock = DatabaseLock.acquire(database, url="http://127.0.0.1:8888/", clock=lambda: 1234.5)
    try:
        record = json.loads(lock_path(database).read_text())
        assert record["pid"] == os.getpid() and record["url"] == "http://127.0.0.1:8888/"
        assert record["started_at"] == 1234.5
        assert holder_of(database) == Holder(os.getpid(), "http://127.0.0.1:8888/", 1234.5)
    finally:
        lock.release()
    assert holder_of(database) is None and not lock.held
    lock.release()  # idempotent


def test_release_lets_the_next_server_in(tmp_path):
    database = tmp_path / "codefy.sqlite"
    first = DatabaseLock.acquire(database)
    with pytest.raises(DatabaseLocked):  # a second open file in this very process is refused too
        DatabaseLock.acquire(database, sleep=lambda s: None)
    first.release()
    DatabaseLock.acquire(database).release()


def test_a_prober_is_not_taken_for_a_rival(tmp_path):
    """`holder_of` holds a shared lock for an instant; a server starting then waits it out."""
    import fcntl

    database = tmp_path / "codefy.sqlite"
    DatabaseLock.acquire(database).release()
    fd = os.open(lock_path(database), os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_SH)
    waits: list[float] = []

    def sleep(seconds: float) -> None:  # the prober lets go while the server waits
        waits.append(seconds)
        os.close(fd)

    DatabaseLock.acquire(database, sleep=sleep).release()
    assert len(waits) == 1


def test_the_lock_file_is_private_even_when_an_older_one_was_not(tmp_path):
    database = tmp_path / "codefy.sqlite"
    lock_path(database).write_text("")
    os.chmod(lock_path(database), 0o644)
    DatabaseLock.acquire(database).release()
    assert mode(lock_path(database)) == 0o600


@pytest.mark.parametrize("text", ["", "not json", "[1]", '{"pid": "7", "url": 3, "started_at": true}'])
def test_an_unreadable_record_names_nobody_but_still_refuses(text):
    holder = Holder.parse(text)
    assert holder == Holder()
    assert "a process that did not say who it is" in held_message(Path("/d/codefy.sqlite"), holder)


def test_the_database_and_its_side_files_are_private(tmp_path):
    async def main() -> None:
        store = await Store.open(tmp_path / "data" / "codefy.sqlite")
        try:
            await store.write(lambda conn: conn.execute("CREATE TABLE IF NOT EXISTS t (x)"))
            for name in ("codefy.sqlite", "codefy.sqlite-wal", "codefy.sqlite-shm"):
                assert mode(tmp_path / "data" / name) == 0o600, name
            assert mode(tmp_path / "data") == 0o700
        finally:
            await store.close()

    old = os.umask(0o022)  # the usual umask: SQLite alone would make these 0644
    try:
        asyncio.run(main())
    finally:
        os.umask(old)


def test_an_older_world_readable_database_is_narrowed(tmp_path):
    path = tmp_path / "codefy.sqlite"

    async def open_close() -> None:
        await (await Store.open(path)).close()

    asyncio.run(open_close())
    os.chmod(path, 0o644)
    asyncio.run(open_close())
    assert mode(path) == 0o600

