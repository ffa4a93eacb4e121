"""Queued runs at a takeover, with two real `codefy start` processes on one real PostgreSQL
database (tests/pg_server.py), each with one cpu slot: the leader executes a long run and holds
several named runs queued behind it. `kill -9` of the leader, or a clean stop (`codefy stop`): the
standby takes the lease over, the in-process run that died with the old leader ends interrupted, and
the queued runs keep their order and places in the new leader's queue, then run one by one in that
order, each exactly once. A clean stop with no standby leaves them for the replica's own restart,
which retires them (the restart rule). Waits are on conditions, with generous deadlines."""

from __future__ import annotations

import os
import signal

import pytest

pytest.importorskip("psycopg", reason="psycopg is not installed (pip install -e '.[test]')")

from test_failover import request, role, until  # noqa: E402
from test_headless import Servers, alive  # noqa: E402
from test_server_runs import sleepy  # noqa: E402

NAMES = ("first", "second", "third", "fourth")
FINISHED = ("succeeded", "failed", "cancelled", "interrupted")


def replicas(tmp_path, pg_url) -> list[Servers]:
    out = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        s = Servers(tmp_path / name)
        s.env.update(CODEFY_STORE_URL=pg_url, CODEFY_RUN_FILES_SHARED="1", CODEFY_RUN_QUEUE_MAX_CONCURRENT_CPU="1",
                     CODEFY_LEASE_TTL_S="3", CODEFY_LEASE_RENEW_S="0.5")
        out.append(s)
    return out


def events(state, run_id: str) -> list[dict]:
    code, page = request(state, f"runs/{run_id}/events?cursor=0")
    assert code == 200, page
    assert not page.get("more"), "one page holds a short run's log"
    return page["events"]


def assert_one_life(state, run_id: str, closing: str) -> None:
    """One execution_start at most, exactly one closing event (`closing`), last, and a gapless seq."""
    log = events(state, run_id)
    assert [e["seq"] for e in log] == list(range(1, len(log) + 1)), run_id
    types = [e["type"] for e in log]
    assert types.count("execution_start") <= 1, (run_id, types)
    ends = [t for t in types if t in ("execution_complete", "execution_error", "execution_stopped")]
    assert ends == [closing] and types[-1] == closing, (run_id, types)


def long_run_and_queue(leader) -> tuple[str, list[str]]:
    """A long run in the leader's one cpu slot and NAMES queued behind it, at positions 1, 2, ..."""
    code, long = request(leader, "runs", {"graph": sleepy(600), "name": "dies with a"})
    assert code == 201, long
    until(lambda: request(leader, f"runs/{long['id']}")[1]["status"] == "running", "the long run to start")
    queued = []
    for name in NAMES:
        code, run = request(leader, "runs", {"graph": sleepy(1), "name": name})
        assert code == 201, run
        queued.append(run["id"])
    before = [request(leader, f"runs/{i}")[1] for i in queued]
    assert [(r["status"], r["queue_position"]) for r in before] == [("queued", n) for n in (1, 2, 3, 4)]
    return long["id"], queued


def takes_over_with_the_queue(stop_leader, closing_code: str, tmp_path, pg_url) -> None:
    a, b = replicas(tmp_path, pg_url)
    try:
        leader = a.start()
        until(lambda: role(leader)[0] == "leader", "a to lead")
        standby = b.start()
        assert role(standby)[0] == "standby"
        long, queued = long_run_and_queue(leader)

        stop_leader(a, leader)
        until(lambda: not alive(leader["pid"]), "a to be gone")
        until(lambda: role(standby)[0] == "leader", "b to take over")

        # Still queued, in the same order: the ones that have not started yet stand at the front of
        # b's queue as they stood in a's (1, 2, ... behind any that b has started since).
        after = [request(standby, f"runs/{i}")[1] for i in queued]
        assert [r["name"] for r in after] == list(NAMES)
        started = [r for r in after if r["status"] != "queued"]
        waiting = after[len(started):]
        assert all(r["status"] == "queued" for r in waiting), [r["status"] for r in after]
        assert len(started) <= 1 or started[-2]["status"] == "succeeded", [r["status"] for r in after]
        assert [r["queue_position"] for r in waiting] == list(range(1, len(waiting) + 1))
        assert all(r["status"] in ("queued", "running", "succeeded") for r in after)

        until(lambda: request(standby, f"runs/{long}")[1]["status"] == "interrupted",
              "a's in-process run to end interrupted")
        until(lambda: all(request(standby, f"runs/{i}")[1]["status"] in FINISHED for i in queued),
              "the queued runs to end")
        done = [request(standby, f"runs/{i}")[1] for i in queued]
        assert [r["status"] for r in done] == ["succeeded"] * len(NAMES)
        # One by one (one cpu slot), in their submit order: each starts once the one before has
        # slept its second (its slot is given back before its final status is written).
        for earlier, later in zip(done, done[1:]):
            assert later["started_at"] >= earlier["started_at"] + 1, (earlier, later)
        for run_id in queued:
            assert_one_life(standby, run_id, "execution_complete")
        assert_one_life(standby, long, "execution_stopped")
        assert events(standby, long)[-1]["payload"]["reason"]["code"] == closing_code
    finally:
        for s in (a, b):
            s.stop()
            s.kill_leftovers()


def test_queued_runs_keep_their_order_and_places_at_a_takeover_and_run_once_each(tmp_path, pg_url):
    takes_over_with_the_queue(lambda _servers, leader: os.kill(leader["pid"], signal.SIGKILL),
                              "server_restart", tmp_path, pg_url)


def test_a_clean_stop_of_the_leader_hands_its_queue_to_the_standby(tmp_path, pg_url):
    # `codefy stop` of the leader: its in-process run ends server_shutdown, it gives the lease up
    # (the standby need not wait out the TTL), and its queued runs stay queued for the standby.
    def clean_stop(servers, _leader):
        stopped = servers.stop()
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    takes_over_with_the_queue(clean_stop, "server_shutdown", tmp_path, pg_url)


def test_a_clean_stop_with_no_standby_leaves_the_queue_to_its_own_restart_which_retires_it(tmp_path, pg_url):
    # The seed's restart rule holds on PostgreSQL too: nothing resumes a queue at a restart. The
    # queued runs the clean stop left (for a standby that was not there) end interrupted when the
    # same replica starts again, each with one closing event, none ever started.
    (a,) = replicas(tmp_path, pg_url)[:1]
    try:
        leader = a.start()
        until(lambda: role(leader)[0] == "leader", "a to lead")
        long, queued = long_run_and_queue(leader)
        assert a.stop().returncode == 0
        until(lambda: not alive(leader["pid"]), "a to be gone")

        again = a.start(leader["port"])
        until(lambda: role(again)[0] == "leader", "a to lead again")
        for run_id in queued:
            run = request(again, f"runs/{run_id}")[1]
            assert run["status"] == "interrupted" and run["started_at"] is None, run
            assert_one_life(again, run_id, "execution_stopped")
            assert "execution_start" not in [e["type"] for e in events(again, run_id)]
            assert events(again, run_id)[-1]["payload"]["reason"]["code"] == "server_restart"
        assert events(again, long)[-1]["payload"]["reason"]["code"] == "server_shutdown"
    finally:
        a.stop()
        a.kill_leftovers()
