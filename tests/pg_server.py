"""A real PostgreSQL server for the tests: one per pytest process, in a temporary folder, on a free
loopback port, each test on a database of its own.

Which server: Debian's `postgresql` package (its binaries in /usr/lib/postgresql/<major>/bin;
`.ci/run` installs it on a fresh machine as it installs chromium), or any `initdb`/`postgres` on
PATH, or the folder named by CODEFY_TEST_PG_BIN. Without one the PostgreSQL tests are skipped with
that reason.

PostgreSQL refuses to run as root (sessions and CI are root): then `initdb` and `postgres` run as
the unprivileged `postgres` user (or `nobody`; Popen's user and group, set in the child before
exec), in a folder that user owns. It is a throwaway server for tests: it trusts every connection
to its random loopback port, skips fsync, and its folder is removed when it stops.
"""

from __future__ import annotations

import ctypes
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

START_DEADLINE_S = 60.0
_LIBC = ctypes.CDLL(None, use_errno=True)  # resolved here: the child between fork and exec only calls it
_PR_SET_PDEATHSIG = 1


def find_bindir() -> Path | None:
    wanted = os.environ.get("CODEFY_TEST_PG_BIN")
    candidates = [wanted] if wanted else []
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=_major, reverse=True)
    on_path = shutil.which("initdb")
    if on_path:
        candidates.append(str(Path(on_path).parent))
    for folder in candidates:
        if folder and (Path(folder) / "initdb").is_file() and (Path(folder) / "postgres").is_file():
            return Path(folder)
    return None


def _major(folder: str) -> int:
    try:
        return int(Path(folder).parent.name)
    except ValueError:
        return 0


def _unprivileged_user() -> str | None:
    """None when we are not root (the server runs as us); else a user PostgreSQL accepts."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    raise RuntimeError("running as root and neither a postgres nor a nobody user exists to run PostgreSQL as")


def _die_with_parent() -> None:
    """In the server's child before exec (after Popen's setuid, which would clear it): a fast
    shutdown (SIGINT) once pytest is gone, even killed with SIGKILL, so no server outlives its tests."""
    _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGINT)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PgServer:
    """`PgServer.start()` → a running server; `url(dbname)`, `create_database()`, `stop()`."""

    def __init__(self, bindir: Path, root: Path, user: str | None) -> None:
        self.bindir = bindir
        self.root = root
        self.user = user
        self.port = 0
        self.process: subprocess.Popen | None = None
        self._databases = 0

    def _as_user(self) -> dict:
        """Popen's arguments that run a program as the server's user (setuid in the child)."""
        if self.user is None:
            return {}
        entry = pwd.getpwnam(self.user)
        return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": [], "cwd": str(self.root)}

    @classmethod
    def start(cls, bindir: Path) -> "PgServer":
        user = _unprivileged_user()
        # Not under pytest's tmp folders: those are private to root, which the server's user is not.
        root = Path(tempfile.mkdtemp(prefix="codefy-pg-"))
        server = cls(bindir, root, user)
        try:
            if user is not None:
                entry = pwd.getpwnam(user)
                os.chown(root, entry.pw_uid, entry.pw_gid)
            done = subprocess.run([str(bindir / "initdb"), "-D", str(root / "data"), "-A", "trust", "-U", "codefy",
                                   "-E", "UTF8", "--no-sync", "--locale=C"],
                                  capture_output=True, timeout=120, **server._as_user())
            if done.returncode:
                raise RuntimeError(f"initdb failed ({done.returncode}): {done.stderr.decode(errors='replace')}")
            server._launch()
        except BaseException:
            server.stop()
            raise
        return server

    def _launch(self, port: int | None = None) -> None:
        for _ in range(1 if port else 5):  # the free port may be taken between finding it and binding it
            self.port = port or _free_port()
            log = open(self.root / "server.log", "ab")
            self.process = subprocess.Popen(
                [str(self.bindir / "postgres"), "-D", str(self.root / "data"), "-h", "127.0.0.1",
                 "-p", str(self.port), "-k", str(self.root), "-F", "-c", "max_connections=200",
                 "-c", "synchronous_commit=off", "-c", "full_page_writes=off"],
                stdout=log, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent, **self._as_user())
            log.close()
            if self._wait_ready():
                return
        raise RuntimeError(f"PostgreSQL did not start; its log: {self.root / 'server.log'}:\n{self.log_tail()}")

    def _wait_ready(self) -> bool:
        import psycopg

        deadline = time.monotonic() + START_DEADLINE_S
        while time.monotonic() < deadline:
            if self.process is None or self.process.poll() is not None:
                return False
            try:
                psycopg.connect(self.url("postgres"), connect_timeout=2).close()
                return True
            except psycopg.OperationalError:
                time.sleep(0.05)  # polling a condition (the server accepting), not waiting on time
        self.process.kill()
        self.process.wait()
        return False

    def pause(self, mode: str = "fast") -> None:
        """`pg_ctl stop -m <mode>` (fast: sessions cut, a clean shutdown; immediate: as a crash),
        keeping the data dir and the port for `resume`."""
        assert self.process is not None
        done = subprocess.run([str(self.bindir / "pg_ctl"), "stop", "-D", str(self.root / "data"), "-m", mode, "-w"],
                              capture_output=True, timeout=120, **self._as_user())
        if done.returncode:
            raise RuntimeError(f"pg_ctl stop failed ({done.returncode}): {done.stderr.decode(errors='replace')}")
        self.process.wait(timeout=60)

    def resume(self) -> None:
        """Start the server again on its data dir and port (after `pause`)."""
        self._launch(self.port)

    def log_tail(self) -> str:
        try:
            return (self.root / "server.log").read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def url(self, dbname: str) -> str:
        return f"postgresql://codefy@127.0.0.1:{self.port}/{dbname}"

    def create_database(self) -> str:
        """A fresh, empty database; returns its URL."""
        import psycopg

        self._databases += 1
        name = f"test_{os.getpid()}_{self._databases}"
        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)  # a fast shutdown: open connections are cut
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.root, ignore_errors=True)


def connect_raw(target):
    """A plain connection to a store's database (an SQLite path, or a postgresql:// URL) in
    autocommit mode, spoken to with `?` placeholders either way: for tests that set rows up as a
    crash would have left them, or read what landed."""
    import sqlite3

    if isinstance(target, str) and target.startswith("postgresql://"):
        import psycopg

        from codefy_jupyter.core.store.postgres import PgConnection

        return PgConnection(psycopg.connect(target, autocommit=True))
    # A server just killed may hold the file's locks until its last thread has exited: wait for them.
    return sqlite3.connect(target, isolation_level=None, timeout=60)


BACKEND_KEYS = ("CODEFY_STORE_URL", "CODEFY_RUN_FILES_SHARED")


def backend_env() -> dict[str, str]:
    """Under `CODEFY_TEST_STORE=postgresql`, the store settings conftest's `store_backend` gave this
    test, for a `codefy start` whose environment is otherwise cleared of CODEFY_* settings."""
    if os.environ.get("CODEFY_TEST_STORE", "sqlite") != "postgresql":
        return {}
    return {k: os.environ[k] for k in BACKEND_KEYS if k in os.environ}


def store_target(data_dir) -> Any:
    """Where a server on `data_dir` keeps its runs: the test's database on the PostgreSQL pass,
    else the SQLite file in the data dir (for `connect_raw`)."""
    url = backend_env().get("CODEFY_STORE_URL")
    return url if url else str(Path(data_dir) / "codefy.sqlite")


def stored_bytes(data_dir) -> bytes:
    """Everything the store holds, to search for what must never be written (a secret): the SQLite
    file and its WAL, or on the PostgreSQL pass every row of every table as text."""
    target = store_target(data_dir)
    if not target.startswith("postgresql://"):
        db, wal = Path(target), Path(target + "-wal")
        return db.read_bytes() + (wal.read_bytes() if wal.exists() else b"")
    conn = connect_raw(target)
    try:
        tables = [t for (t,) in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()").fetchall()]
        rows = [r for t in tables for (r,) in conn.execute(f'SELECT t::text FROM "{t}" AS t').fetchall()]
    finally:
        conn.close()
    return "\n".join(rows).encode()
