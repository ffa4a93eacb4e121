"""Enrolled workers across a restart of `codefy start`, and what the database keeps of their tokens
(seed: execution architecture, roles and enrollment), against real headless servers and their SQLite
file."""

from __future__ import annotations

import hashlib
import sqlite3
import time
from typing import Any

import pytest
import test_headless as headless

from codefy_jupyter.core.store.lock import DATABASE_FILE

pytestmark = pytest.mark.slow


@pytest.fixture
def servers(tmp_path, request) -> headless.Servers:
    s = headless.Servers(tmp_path)
    request.addfinalizer(s.kill_leftovers)
    return s


def enroll(state: dict[str, Any], name: str) -> tuple[str, str]:
    """A one-time token issued with the server's token, exchanged (with no token) for a worker token."""
    code, issued = headless.api(state, "POST", "workers/enrollments", {})
    assert code == 201, issued
    code, got = headless.api(state, "POST", "workers/enroll", {"token": issued["token"], "name": name}, token=None)
    assert code == 201, got
    return issued["token"], got["worker_token"]


def workers(state: dict[str, Any]) -> list[dict[str, Any]]:
    code, listing = headless.api(state, "GET", "workers")
    assert code == 200, listing
    return listing["workers"]


def test_an_enrolled_worker_is_offline_after_a_restart_and_a_run_for_it_waits(servers):
    port = headless.free_port()
    state = servers.start(port)
    enroll(state, "gpu-box")
    assert servers.stop().returncode == 0
    headless.wait_gone(state["pid"])

    again = servers.start(port)
    assert [(w["name"], w["state"], w["enrolled"]) for w in workers(again)] == [("gpu-box", "offline", True)]
    run = headless.submit(again, headless.SMALL, options={"target": {"worker": "gpu-box"}})
    deadline = time.monotonic() + 60
    while True:  # the queue decides a moment after the submit answers
        code, row = headless.api(again, "GET", f"runs/{run['id']}")
        assert code == 200 and row["status"] == "queued", row
        if row["queue_reason"] is not None:
            break
        assert time.monotonic() < deadline, row
        time.sleep(0.05)
    assert row["queue_reason"] == {"code": "worker_disconnected", "message": "waiting for worker gpu-box to reconnect",
                                   "params": {"worker": "gpu-box"}}
    code, cancelled = headless.api(again, "POST", f"runs/{run['id']}/cancel")
    assert code == 200 and cancelled["status"] == "cancelled"
    assert servers.stop().returncode == 0


def test_the_database_keeps_only_hashes_of_the_tokens(servers):
    state = servers.start()
    one_time, worker_token = enroll(state, "gpu-box")
    assert servers.stop().returncode == 0
    headless.wait_gone(state["pid"])

    path = servers.data_dir / DATABASE_FILE
    assert path.is_file()
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        text = []
        for (table,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'"):
            for row in db.execute(f'SELECT * FROM "{table}"'):
                text += [str(v) for v in row if v is not None]
    finally:
        db.close()
    everything = "\n".join(text)
    assert "gpu-box" in everything  # the worker's row was read
    for token in (one_time, worker_token):
        assert token not in everything
        assert hashlib.sha256(token.encode()).hexdigest() in everything  # what is kept instead
    for part in one_time.split("."):  # the one-time token's halves are not kept apart either
        assert len(part) < 6 or part not in everything
