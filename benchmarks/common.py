"""What every benchmark here shares: a description of the machine, the JSON report (printed,
and saved when asked), a free loopback port, the `codefy` command, and a throwaway PostgreSQL
server for the benchmarks of the PostgreSQL store."""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil

TESTS_DIR = Path(__file__).resolve().parent.parent / "tests"


def machine() -> dict[str, Any]:
    return {"python": sys.version.split()[0], "implementation": platform.python_implementation(),
            "platform": platform.platform(), "processor": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(), "memory_gb": round(psutil.virtual_memory().total / 1024**3, 1),
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}


def publish(out: str | None, started: float, **sections: Any) -> None:
    """The report, on stdout and in `out` when given: the machine first, then `sections` in the
    order given, then the wall time since `started` (a time.perf_counter() value)."""
    report = {"machine": machine(), **sections, "wall_s": round(time.perf_counter() - started, 2)}
    text = json.dumps(report, indent=2)
    print(text)
    if out:
        Path(out).write_text(text + "\n", encoding="utf-8")


def free_port() -> int:
    """A loopback port nothing listens on now (the server binds it a moment later)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_all(procs: Any, grace_s: float = 30.0) -> None:
    """Terminate every process, then wait for each; one that outlives `grace_s` is killed."""
    procs = list(procs)
    for proc in procs:
        proc.terminate()
    for proc in procs:
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def codefy(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """The `codefy` command of this interpreter, its output captured."""
    return subprocess.run([sys.executable, "-m", "codefy_jupyter.cli", *args], env=env, capture_output=True,
                          text=True, timeout=120)


class ThrowawayPostgres:
    """A real PostgreSQL server started as the tests start one (tests/pg_server.py: Debian's
    `postgresql` binaries, or CODEFY_TEST_PG_BIN; `initdb` into a temporary folder, `postgres` on a
    free loopback port, trusting loopback, no fsync), stopped and removed on exit. One server
    start-up code for tests and benchmarks, so a figure is taken on the server the tests check.

        with ThrowawayPostgres() as pg:
            url = pg.create_database()   # an empty database, its postgresql:// URL
    """

    def __init__(self) -> None:
        self.server: Any = None

    def __enter__(self) -> "ThrowawayPostgres":
        if str(TESTS_DIR) not in sys.path:
            sys.path.insert(0, str(TESTS_DIR))
        try:
            import psycopg  # noqa: F401  (the store's driver; pg_server needs it too)
        except ImportError:
            raise SystemExit("psycopg is not installed: pip install 'codefy-jupyter[postgresql]'") from None
        from pg_server import PgServer, find_bindir

        bindir = find_bindir()
        if bindir is None:
            raise SystemExit("no PostgreSQL server binaries (initdb, postgres) found: install Debian's postgresql "
                             "or set CODEFY_TEST_PG_BIN, or pass --store-url with a database of your own")
        self.server = PgServer.start(bindir)
        return self

    def create_database(self) -> str:
        return self.server.create_database()

    def version(self) -> str:
        """The server's version, for the report."""
        import psycopg

        with psycopg.connect(self.server.url("postgres")) as conn:
            return str(conn.execute("SHOW server_version").fetchone()[0])

    def __exit__(self, *exc: object) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None
