"""A leader frozen past its lease (SIGSTOP), with two real `codefy start` processes on one real
PostgreSQL database (tests/pg_server.py) and the shortest lease these tests trust on a loaded
machine. The frozen leader has work pending: a run in flight whose graph ends while it is frozen,
and a run queued behind it that it would start next. The standby takes the lease over and settles
both (the in-flight run ends interrupted, the queued one runs there). Then SIGCONT: the old leader
wakes believing it leads, but none of its writes lands (fenced), it starts nothing, it steps down
(its health says standby, naming the new leader), and no run changes state twice: each run's event
log has at most one execution_start, exactly one closing event, and a gapless seq.
Waits are on conditions, with generous deadlines."""

from __future__ import annotations

import os
import signal
import time

import pytest

pytest.importorskip("psycopg", reason="psycopg is not installed (pip install -e '.[test]')")

from pg_server import connect_raw  # noqa: E402

from test_failover import request, role, until  # noqa: E402
from test_failover_queue import FINISHED, assert_one_life, replicas  # noqa: E402
from test_headless import alive  # noqa: E402
from test_server_runs import SMALL, sleepy  # noqa: E402

IN_FLIGHT_S = 4  # the in-flight run's graph: long enough to be frozen mid-way, short enough to end frozen
ROW = ("status", "started_at", "finished_at", "last_seq", "error")


def lease_row(pg_url: str) -> tuple:
    conn = connect_raw(pg_url)
    try:
        return conn.execute("SELECT holder, epoch, url FROM leader_lease").fetchone()
    finally:
        conn.close()


def test_a_leader_frozen_past_its_lease_is_fenced_and_steps_down_when_it_wakes(tmp_path, pg_url):
    a, b = replicas(tmp_path, pg_url)
    leader = None
    try:
        leader = a.start()
        until(lambda: role(leader)[0] == "leader", "a to lead")
        standby = b.start()
        assert role(standby)[0] == "standby"
        holder, epoch, _ = lease_row(pg_url)

        code, flight = request(leader, "runs", {"graph": sleepy(IN_FLIGHT_S), "name": "in flight"})
        assert code == 201, flight
        until(lambda: request(leader, f"runs/{flight['id']}")[1]["status"] == "running", "the run to start")
        started = time.monotonic()
        code, nxt = request(leader, "runs", {"graph": sleepy(1), "name": "next"})
        assert code == 201 and nxt["status"] == "queued", nxt

        os.kill(leader["pid"], signal.SIGSTOP)
        until(lambda: role(standby)[0] == "leader", "b to take the lease over")
        b_url = role(standby)[1]
        assert lease_row(pg_url)[1] == epoch + 1 and lease_row(pg_url)[0] != holder

        until(lambda: request(standby, f"runs/{flight['id']}")[1]["status"] == "interrupted",
              "the in-flight run to end interrupted on b")
        until(lambda: request(standby, f"runs/{nxt['id']}")[1]["status"] in FINISHED, "the queued run to run on b")
        # The in-flight graph's end fell while a was frozen: it has an ending (and the queued run a
        # start) to write the moment it wakes.
        until(lambda: time.monotonic() - started > IN_FLIGHT_S + 1, "the in-flight graph's end to pass")
        rows = {i: {k: request(standby, f"runs/{i}")[1][k] for k in ROW} for i in (flight["id"], nxt["id"])}
        assert rows[nxt["id"]]["status"] == "succeeded", rows

        os.kill(leader["pid"], signal.SIGCONT)
        until(lambda: role(leader) == ("standby", b_url), "a to step down to a standby naming b")
        assert alive(leader["pid"])
        assert role(standby) == ("leader", b_url)
        assert lease_row(pg_url)[1] == epoch + 1  # a took nothing back

        # Nothing a tried after it woke landed: the rows and logs are b's.
        for run_id, before in rows.items():
            assert {k: request(standby, f"runs/{run_id}")[1][k] for k in ROW} == before, run_id
        assert_one_life(standby, flight["id"], "execution_stopped")
        assert_one_life(standby, nxt["id"], "execution_complete")
        log = (a.data_dir / "server.log").read_text(errors="replace")
        assert "lost the leader lease" in log, log[-3000:]
        assert "Fenced" in log, log[-3000:]  # it did try to write (the in-flight run's ending), and was refused
        assert f"marking run {nxt['id']} running" not in log, log[-3000:]  # it did not start the queued run (b had it)
        assert "store_locked" not in log and "in use by another codefy server" not in log, log[-3000:]

        code, after = request(standby, "runs", {"graph": SMALL, "name": "on b, after"})
        assert code == 201, after
        until(lambda: request(standby, f"runs/{after['id']}")[1]["status"] in FINISHED, "b's run to end")
        assert request(standby, f"runs/{after['id']}")[1]["status"] == "succeeded"
    finally:
        if leader is not None and alive(leader["pid"]):
            os.kill(leader["pid"], signal.SIGCONT)  # a stopped process cannot be stopped gracefully
        for s in (a, b):
            s.stop()
            s.kill_leftovers()
