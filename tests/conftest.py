import os
import sys
from pathlib import Path

import pytest

# A real jupyter-server for integration tests (jp_fetch, jp_ws_fetch, jp_serverapp).
pytest_plugins = ["pytest_jupyter.jupyter_server"]

# Test helper modules (tests/unit/engine_nodes.py) import as plain modules.
sys.path.insert(0, str(Path(__file__).parent / "unit"))
sys.path.insert(0, str(Path(__file__).parent / "integration"))


@pytest.fixture(autouse=True)
def _default_node_registry_restored():
    """A test that registers a node type in the process-wide registry (the one the control plane
    checks graphs and worker catalogs against) takes it away again, so a later test's agent is not
    listed degraded for lacking it."""
    from codefy_jupyter.engine import default_registry

    registry = default_registry()
    before = dict(registry._defs)
    yield
    if registry._defs != before:
        registry._defs.clear()
        registry._defs.update(before)


sys.path.insert(0, str(Path(__file__).parent))  # tests/pg_server.py


@pytest.fixture(scope="session")
def pg_server():
    """One real PostgreSQL server for this pytest process (tests/pg_server.py), stopped at the end;
    the tests using it are skipped, with the reason, where no PostgreSQL is installed."""
    import pg_server as pg

    bindir = pg.find_bindir()
    if bindir is None:
        pytest.skip("no PostgreSQL server binaries (initdb, postgres) found: install Debian's postgresql "
                    "(.ci/run does) or set CODEFY_TEST_PG_BIN")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        pytest.skip("psycopg is not installed (pip install -e '.[test]')")
    server = pg.PgServer.start(bindir)
    yield server
    server.stop()


@pytest.fixture
def own_pg_server():
    """A PostgreSQL server of this test's own (tests/pg_server.py), for a test that stops and
    starts it (`pause`, `resume`) without disturbing the tests sharing `pg_server`."""
    import pg_server as pg

    bindir = pg.find_bindir()
    if bindir is None:
        pytest.skip("no PostgreSQL server binaries (initdb, postgres) found: install Debian's postgresql "
                    "(.ci/run does) or set CODEFY_TEST_PG_BIN")
    pytest.importorskip("psycopg", reason="psycopg is not installed (pip install -e '.[test]')")
    server = pg.PgServer.start(bindir)
    yield server
    server.stop()


@pytest.fixture
def pg_url(pg_server):
    """The URL of a fresh, empty database on the tests' PostgreSQL server."""
    return pg_server.create_database()


@pytest.fixture(autouse=True)
def store_backend(request, monkeypatch):
    """`CODEFY_TEST_STORE=postgresql`: every control plane the test starts, in this process or as
    `codefy start`, keeps its runs in a fresh PostgreSQL database of its own (one per test, so a
    restart in the test finds its runs again), with run files shared as one replica needs. `make
    test` runs the recovery, adoption, sweep and study suites a second time this way, so they hold
    on both backends. A test that names its own database (`pg_url`, `own_pg_server`) is left alone."""
    if os.environ.get("CODEFY_TEST_STORE", "sqlite") != "postgresql":
        return
    if {"pg_url", "own_pg_server", "store_at"} & set(request.fixturenames):
        return
    server = request.getfixturevalue("pg_server")
    monkeypatch.setenv("CODEFY_STORE_URL", server.create_database())
    monkeypatch.setenv("CODEFY_RUN_FILES_SHARED", "1")


@pytest.fixture(params=["sqlite", "postgresql"])
def store_at(request, tmp_path):
    """name → where `Store.open` opens it: a file in tmp_path, or (the postgresql param) a fresh
    database on the tests' PostgreSQL server; the same name gives the same place within a test."""
    if request.param == "sqlite":
        return lambda name: tmp_path / name
    server = request.getfixturevalue("pg_server")
    made: dict[str, str] = {}

    def at(name: str) -> str:
        if name not in made:
            made[name] = server.create_database()
        return made[name]

    return at
