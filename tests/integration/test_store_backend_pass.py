"""The PostgreSQL pass of `make test` (CODEFY_TEST_STORE=postgresql, conftest's `store_backend`):
the suites it repeats must really run on PostgreSQL, in a process of their own and in this one.
Skipped on the ordinary SQLite pass."""

from __future__ import annotations

import os

import pytest
from pg_server import connect_raw

from codefy_jupyter.core.store.lock import DATABASE_FILE

from test_headless import SMALL, servers, submit, wait_status  # noqa: F401  (servers: a fixture)
from test_server_runs import call
from test_server_runs import wait_status as server_wait

pytestmark = pytest.mark.skipif(os.environ.get("CODEFY_TEST_STORE", "sqlite") != "postgresql",
                                reason="the PostgreSQL pass only (CODEFY_TEST_STORE=postgresql)")


def test_codefy_start_in_the_postgresql_pass_keeps_its_runs_in_the_tests_database(servers):
    url = os.environ["CODEFY_STORE_URL"]
    assert servers.env["CODEFY_STORE_URL"] == url and url.startswith("postgresql")
    state = servers.start()
    try:
        run = submit(state, SMALL, name="on the postgresql pass")
        assert wait_status(state, run["id"], {"succeeded", "failed"})["status"] == "succeeded"
    finally:
        servers.stop()
    conn = connect_raw(url)
    try:
        rows = conn.execute("SELECT id, status FROM runs").fetchall()
    finally:
        conn.close()
    assert [tuple(r) for r in rows] == [(run["id"], "succeeded")]
    assert not (servers.data_dir / DATABASE_FILE).exists()  # not an SQLite file beside it


@pytest.fixture
def jp_server_config(tmp_path):
    return {"ServerApp": {"jpserver_extensions": {"codefy_jupyter": True}},
            "CodefyApp": {"data_dir": str(tmp_path / "codefy")}}


async def test_an_in_process_server_in_the_postgresql_pass_uses_the_tests_database(jp_fetch, jp_serverapp):
    code, run = await call(jp_fetch, "api", "runs", method="POST", body={"graph": SMALL})
    assert code == 201, run
    await server_wait(jp_fetch, run["id"], {"succeeded"})
    app = jp_serverapp.extension_manager.extension_points["codefy"].app
    assert app.codefy_settings.store_url == os.environ["CODEFY_STORE_URL"]
    conn = connect_raw(os.environ["CODEFY_STORE_URL"])
    try:
        assert conn.execute("SELECT status FROM runs WHERE id = ?", (run["id"],)).fetchone()[0] == "succeeded"
    finally:
        conn.close()
