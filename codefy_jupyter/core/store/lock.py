"""One server per run database: an exclusive OS lock on `<database>.lock`, held for the life of the
server process that opened the database (the extension inside Lab, Notebook or `jupyter server`,
and `codefy start`'s headless server alike).

Why a lock file and not the database itself: SQLite takes POSIX byte-range locks on the database
file, and on some file systems `flock` is emulated with them; a separate file keeps the two apart.
Why `flock`: the OS drops it when the process dies (kill -9, power cut), so a lock file left behind
by a dead server blocks nobody, and no pid has to be trusted.

The holder writes who it is (pid, URL, start time) into the file once it holds the lock, so the one
refused can name it. Where `fcntl` is missing (Windows) nothing is locked.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from .queries import StoreError

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None  # type: ignore[assignment]

DATABASE_FILE = "codefy.sqlite"
LOCK_SUFFIX = ".lock"
PROBE_RETRIES, PROBE_WAIT_S = 3, 0.01  # a prober holds it for microseconds
WHERE_ELSE = ("give this one its own data dir: `codefy start --data-dir DIR`, the CODEFY_DATA_DIR "
              "environment variable, or c.CodefyApp.data_dir in the Jupyter config")


def lock_path(database: Path) -> Path:
    return database.with_name(database.name + LOCK_SUFFIX)


@dataclass(frozen=True)
class Holder:
    """Who holds a database, as it recorded itself (any part may be unknown)."""
    pid: int | None = None
    url: str | None = None
    started_at: float | None = None

    @classmethod
    def parse(cls, text: str) -> "Holder":
        try:
            data = json.loads(text)
        except ValueError:
            return cls()
        if not isinstance(data, dict):
            return cls()
        pid, url, started = data.get("pid"), data.get("url"), data.get("started_at")
        return cls(pid if isinstance(pid, int) and not isinstance(pid, bool) else None,
                   url if isinstance(url, str) and url else None,
                   float(started) if isinstance(started, (int, float)) and not isinstance(started, bool) else None)

    def params(self) -> dict[str, Any]:
        return {"holder_pid": self.pid, "holder_url": self.url}


def held_message(database: Path, holder: Holder) -> str:
    """What the refused server tells its user: who holds the database and how to go elsewhere."""
    who = ", ".join(part for part in (f"pid {holder.pid}" if holder.pid is not None else None,
                                      holder.url) if part) or "a process that did not say who it is"
    return (f"the run database {database} is in use by another codefy server ({who}); two servers must "
            f"not share one database. Stop that server, or {WHERE_ELSE}")


class DatabaseLocked(StoreError):
    """Another live process holds the database's lock."""

    def __init__(self, database: Path, holder: Holder) -> None:
        super().__init__(held_message(database, holder), path=database)
        self.holder = holder


def _private_fd(path: Path) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        os.fchmod(fd, 0o600)  # an older, wider file of that name
    except OSError:
        pass  # not ours to change (another user's file): the lock still works
    return fd


def _lock(fd: int, sleep: Callable[[float], None]) -> None:
    # `holder_of` holds a shared lock for a few microseconds: a server starting just then must not
    # take that prober for a rival server.
    for _ in range(PROBE_RETRIES):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            sleep(PROBE_WAIT_S)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)


def _read_holder(fd: int) -> Holder:
    try:
        return Holder.parse(os.pread(fd, 4096, 0).decode("utf-8", errors="replace"))
    except OSError:
        return Holder()


class DatabaseLock:
    """Held from `acquire` until `release` (or the process's end)."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, database: Path, *, url: str | None = None, clock: Callable[[], float] = time.time,
                sleep: Callable[[float], None] = time.sleep) -> "DatabaseLock":
        """Take the lock of `database`, or raise DatabaseLocked naming its holder. Blocks for at most
        about PROBE_RETRIES * PROBE_WAIT_S: call it off the event loop."""
        path = lock_path(database)
        fd = _private_fd(path)
        if fcntl is not None:
            try:
                _lock(fd, sleep)
            except BlockingIOError:
                holder = _read_holder(fd)
                os.close(fd)
                raise DatabaseLocked(database, holder) from None
            except BaseException:
                os.close(fd)
                raise
        record = json.dumps({"pid": os.getpid(), "url": url, "started_at": clock(), "database": str(database)})
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, record.encode() + b"\n", 0)
        except OSError:
            pass  # the lock is what matters; the record only names us to whoever is refused
        return cls(path, fd)

    def release(self) -> None:
        """Idempotent. The file stays: removing it could let two processes lock two different files."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing the last descriptor drops the flock

    @property
    def held(self) -> bool:
        return self._fd is not None


def holder_of(database: Path) -> Holder | None:
    """Who holds `database` now, or None when nobody does (or locks are not available here)."""
    if fcntl is None:
        return None
    try:
        fd = os.open(lock_path(database), os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read_holder(fd)
        except OSError:
            return None
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)
