"""Queued runs at a takeover, with two real `codefy start` processes on one real PostgreSQL
database (tests/pg_server.py), each with one cpu slot: the leader executes a long run and holds
several named runs queued behind it. `kill -9` of the leader: the standby takes the lease over,
the in-process run that died with the old leader ends interrupted, and the queued runs keep their
order and places in the new leader's queue, then run one by one in that order, each exactly once.
Waits are on conditions, with generous deadlines."""

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


def test_queued_runs_keep_their_order_and_places_at_a_takeover_and_run_once_each(tmp_path, pg_url):
    a, b = replicas(tmp_path, pg_url)
    try:
        leader = a.start()
        until(lambda: role(leader)[0] == "leader", "a to lead")
        standby = b.start()
        assert role(standby)[0] == "standby"

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

        os.kill(leader["pid"], signal.SIGKILL)
        until(lambda: not alive(leader["pid"]), "a to die")
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

        until(lambda: request(standby, f"runs/{long['id']}")[1]["status"] == "interrupted",
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
        assert_one_life(standby, long["id"], "execution_stopped")
    finally:
        for s in (a, b):
            s.stop()
            s.kill_leftovers()
