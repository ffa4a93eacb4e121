"""The SQLite file under the store and its connections, each on a thread of its own: the writer
(WAL, the schema migrated, checkpoints left to the writer thread) and a read-only reader; a file
that is not SQLite refused before SQLite touches it; the files private to their owner; and the
probe that tells whether a full disk has room again."""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any, Callable, TypeVar

from ..errors import is_storage_full
from .migrations import SCHEMA_VERSION, SchemaVersionError, migrate, read_schema_version
from .queries import StoreError
from .writer import BUSY_TIMEOUT_MS

log = logging.getLogger("codefy_jupyter.core.store.database")

T = TypeVar("T")
_SQLITE_HEADER = b"SQLite format 3\x00"
# What `probe_room` writes to see whether a full disk has room again: about one batch of events.
PROBE_BYTES = 256 * 1024
PROBE_NAME = ".codefy-space-probe"


class ConnectionThread:
    """A sqlite3 connection living on one thread; `await run(fn, *args)` calls fn(conn, *args) there.

    Why not a call per statement (what aiosqlite offers): each call is a thread hand-off, measured
    at 0.1-0.3 ms on a 2-core box, while a statement takes a few microseconds. Running a whole batch
    of writes, or a whole read, as one function costs one hand-off.
    """

    def __init__(self, executor: ThreadPoolExecutor, conn: sqlite3.Connection) -> None:
        self._executor = executor
        self._conn = conn

    @classmethod
    async def start(cls, name: str, connect: Callable[[], sqlite3.Connection]) -> "ConnectionThread":
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        try:
            conn = await asyncio.get_running_loop().run_in_executor(executor, connect)
        except BaseException:
            executor.shutdown(wait=True)
            raise
        return cls(executor, conn)

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, partial(fn, self._conn, *args))

    async def close(self) -> None:
        try:
            await asyncio.get_running_loop().run_in_executor(self._executor, self._conn.close)
        finally:
            self._executor.shutdown(wait=True)  # the thread is idle by now: this returns at once


def connect_writer(path: Path, synchronous: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)  # autocommit: we issue BEGIN ourselves
    try:
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        # Read the version before anything writes: a newer file must stay untouched.
        version = read_schema_version(conn)
        if version > SCHEMA_VERSION:
            raise SchemaVersionError(version, SCHEMA_VERSION)
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise StoreError(f"{path}: SQLite would not switch to WAL mode (got {mode!r})", path=path)
        conn.execute(f"PRAGMA synchronous = {synchronous}")
        # The writer thread checkpoints between batches (checkpoints.py), not inside a COMMIT.
        conn.execute("PRAGMA wal_autocheckpoint = 0")
        migrate(conn)
        return conn
    except BaseException:
        conn.close()
        raise


def connect_reader(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path.as_uri() + "?mode=ro", uri=True, isolation_level=None)
    conn.execute("PRAGMA busy_timeout = 5000")
    return conn


def check_is_sqlite(path: Path) -> None:
    """Refuse a file that is not SQLite before SQLite gets to touch it."""
    try:
        with open(path, "rb") as f:
            head = f.read(len(_SQLITE_HEADER))
    except FileNotFoundError:
        return
    except IsADirectoryError:
        raise StoreError(f"{path} is a directory, not a database file", path=path) from None
    except OSError as exc:
        raise StoreError(f"cannot read the database file {path}: {exc}", path=path) from exc
    if head and head != _SQLITE_HEADER:  # an empty file is a valid, empty database
        raise StoreError(f"{path} is not an SQLite database; refusing to use it (it was left unchanged)", path=path)


def probe_room(folder: Path) -> bool:
    probe = folder / PROBE_NAME
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            left = memoryview(b"\0" * PROBE_BYTES)
            while left:  # a nearly full disk takes part of a write, then refuses the rest
                left = left[os.write(fd, left):]
            os.fsync(fd)
        finally:
            os.close(fd)
        return True
    except OSError as exc:
        if not is_storage_full(exc):
            log.warning("store: probing %s for room failed: %s", folder, exc)
        return False
    finally:
        try:
            probe.unlink()
        except OSError:
            pass


def make_private(path: Path) -> None:
    """The database (and its -wal, -shm, -journal) readable by the owner only: runs hold graphs,
    parameters and outputs. SQLite gives its side files the database file's mode, so creating the
    database 0600 before SQLite does is enough for new files; older, wider ones are narrowed."""
    try:
        os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
    except OSError as exc:
        raise StoreError(f"cannot open the database file {path}: {exc}", path=path) from exc
    for side in ("", "-wal", "-shm", "-journal"):
        try:
            os.chmod(f"{path}{side}", 0o600)
        except FileNotFoundError:
            pass
        except PermissionError:
            log.warning("store: cannot make %s%s private to its owner", path, side)
