"""A real jupyter-server whose store_url names a database on a real PostgreSQL server
(tests/pg_server.py): runs go there, not to an SQLite file in the data dir (the sweep suite on
PostgreSQL: test_sweeps.py); and `codefy start` refuses a store_url it cannot use, or a PostgreSQL
store whose run files only this replica would reach (run_files_shared, or the S3 backend, lets it start)."""

from __future__ import annotations

import time

import pytest
from pg_server import connect_raw

from codefy_jupyter.core.store.lock import DATABASE_FILE

from test_headless import Servers, api, free_port
from test_server_runs import SMALL, all_events, call, wait_status


@pytest.fixture
def jp_server_config(tmp_path, pg_url):
    return {"ServerApp": {"jpserver_extensions": {"codefy_jupyter": True}},
            "CodefyApp": {"data_dir": str(tmp_path / "codefy"), "store_url": pg_url,
                          "run_files_shared": 1}}


async def test_runs_live_in_the_postgresql_database_the_setting_names(jp_fetch, pg_url, tmp_path):
    code, run = await call(jp_fetch, "api", "runs", method="POST", body={"graph": SMALL, "name": "on pg"})
    assert code == 201, run
    done = await wait_status(jp_fetch, run["id"], {"succeeded", "failed"})
    assert done["status"] == "succeeded"
    events = await all_events(jp_fetch, run["id"])
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    code, page = await call(jp_fetch, "api", "runs")
    assert code == 200 and page["total"] == 1 and page["runs"][0]["id"] == run["id"]

    conn = connect_raw(pg_url)
    try:
        rows = conn.execute("SELECT id, status, last_seq FROM runs").fetchall()
        stored = conn.execute("SELECT COUNT(*) FROM run_events WHERE run_id = ?", (run["id"],)).fetchone()[0]
    finally:
        conn.close()
    assert [tuple(r) for r in rows] == [(run["id"], "succeeded", len(events))] and stored == len(events)
    assert not (tmp_path / "codefy" / DATABASE_FILE).exists()  # no SQLite file beside it


def refused_start(tmp_path, store_url: str) -> tuple[Servers, str]:
    """`codefy start` with `store_url`, which must refuse it: its servers and its output."""
    servers = Servers(tmp_path)
    servers.env["CODEFY_STORE_URL"] = store_url
    try:
        done = servers.codefy("start", "--data-dir", str(servers.data_dir), "--port", str(free_port()))
    finally:
        servers.kill_leftovers()
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    return servers, output


def test_codefy_start_refuses_a_store_url_it_cannot_open_naming_the_setting_not_the_password(tmp_path):
    servers, output = refused_start(tmp_path, "mysql://codefy:hunter2@db.example/codefy")
    assert "CODEFY_STORE_URL (c.CodefyApp.store_url)" in output and "not scheme 'mysql'" in output
    assert "hunter2" not in output


def test_codefy_start_refuses_a_postgresql_store_with_run_files_local_to_one_replica(tmp_path, pg_url):
    servers, output = refused_start(tmp_path, pg_url)
    assert "CODEFY_RUN_FILES_SHARED (c.CodefyApp.run_files_shared) = 0" in output, output
    assert "CODEFY_S3_ENABLED=1" in output
    assert not servers.state_file.exists()  # no server runs
    conn = connect_raw(pg_url)
    try:  # refused before the store was opened: the database is as empty as it was given
        tables = conn.execute("SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = 'public'").fetchone()
    finally:
        conn.close()
    assert tables[0] == 0


def test_codefy_start_on_postgresql_with_the_s3_backend_leads_without_run_files_shared(tmp_path, pg_url):
    servers = Servers(tmp_path)
    servers.env.update(CODEFY_STORE_URL=pg_url, CODEFY_S3_ENABLED="1", CODEFY_S3_BUCKET="runs",
                       CODEFY_S3_ENDPOINT_URL="http://127.0.0.1:9")  # never dialled: no worker run here
    try:
        state = servers.start()
        deadline = time.monotonic() + 120
        while (answer := api(state, "GET", "health", token=None))[0] != 200:  # recovering, then leading
            assert time.monotonic() < deadline, answer
            time.sleep(0.1)
        assert answer[1]["role"] == "leader", answer
        assert servers.stop().returncode == 0
    finally:
        servers.kill_leftovers()
