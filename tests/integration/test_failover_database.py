"""Two real `codefy start` replicas on one real PostgreSQL database (tests/pg_server.py) when the
database side goes wrong, rather than a replica:

- every connection of the leader's process terminated (`pg_terminate_backend` from a superuser
  connection, found by the `application_name` each replica sets in its store_url): the leader
  reconnects its writer, readers and lease keeper and keeps leading, or steps down within its
  lease; either way exactly one replica leads again, and no run is lost or ends twice;
- the database server itself stopped (`pg_ctl stop -m fast`) and started again on the same data
  dir and port while runs are running and queued: both replicas wait (their routes may answer 503
  meanwhile) and go on; one leads, every acknowledged run is still there, the queued ones run, and
  submits work again.

Waits are on conditions, with generous deadlines; nothing here asserts a time.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("psycopg", reason="psycopg is not installed (pip install -e '.[test]')")

from pg_server import connect_raw  # noqa: E402

from test_failover import request, role, until  # noqa: E402
from test_headless import Servers, alive  # noqa: E402
from test_server_runs import SMALL, sleepy  # noqa: E402

CLOSING = ("execution_complete", "execution_error", "execution_stopped")
FINAL = ("succeeded", "failed", "cancelled", "interrupted")


def replicas(tmp_path, url: str, **env: str) -> list[Servers]:
    made = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        s = Servers(tmp_path / name)
        # Each replica names its connections, so the test can find the leader's in pg_stat_activity.
        s.env["CODEFY_STORE_URL"] = f"{url}?application_name=codefy-{name}"
        s.env["CODEFY_RUN_FILES_SHARED"] = "1"  # one machine: each replica reaches the other's data dir
        s.env.update(env)
        made.append(s)
    return made


def leading_with_a_queue(servers: list[Servers], run_s: float, what: str, queued: int) -> tuple:
    """a leads and b stands by; on a, one run of `run_s` seconds is running and `queued` small runs
    wait behind it: (leader, standby, the running run, the queued runs)."""
    a, b = servers
    leader = a.start()
    until(lambda: role(leader)[0] == "leader", "a to lead")
    standby = b.start()
    running = submit(leader, sleepy(run_s), what)
    until(lambda: status(leader, running) == "running", "the run to start")
    return leader, standby, running, [submit(leader, SMALL, f"queued {n}") for n in range(queued)]


def lease(url: str) -> tuple[int, str]:
    conn = connect_raw(url)
    try:
        epoch, holder_url = conn.execute("SELECT epoch, url FROM leader_lease").fetchone()
    finally:
        conn.close()
    return int(epoch), holder_url


def leaders(states: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [s for s in states if role(s)[0] == "leader"]


def the_leader(states: list[dict[str, Any]]) -> dict[str, Any] | None:
    found = leaders(states)
    return found[0] if len(found) == 1 else None


def submit(state: dict[str, Any], graph: dict, name: str) -> str:
    code, run = request(state, "runs", {"graph": graph, "name": name})
    assert code == 201, run
    return run["id"]


def status(state: dict[str, Any], run_id: str) -> str | None:
    code, body = request(state, f"runs/{run_id}")
    return body["status"] if code == 200 else None


def events(state: dict[str, Any], run_id: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    cursor = 0
    while True:
        code, page = request(state, f"runs/{run_id}/events?cursor={cursor}")
        assert code == 200, page
        out += page["events"]
        if not page["events"] or page.get("next_cursor") in (None, cursor):
            return out
        cursor = page["next_cursor"]


def assert_ended_once(state: dict[str, Any], run_id: str) -> str:
    """The run is there, ended, and its log is gapless with exactly one closing event, last."""
    final = status(state, run_id)
    assert final in FINAL, (run_id, final)
    log = events(state, run_id)
    seqs = [e["seq"] for e in log]
    assert seqs == list(range(1, len(seqs) + 1)), (run_id, seqs)
    closing = [e for e in log if e["type"] in CLOSING]
    assert len(closing) == 1 and log[-1] is closing[0], (run_id, [e["type"] for e in log])
    return final


def terminate(url: str, app: str) -> int:
    conn = connect_raw(url)
    try:
        return len(conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                "WHERE application_name = ? AND pid <> pg_backend_pid()", (app,)).fetchall())
    finally:
        conn.close()


def test_the_leaders_connections_terminated_it_reconnects_or_steps_down_and_one_leads(tmp_path, pg_url):
    servers = replicas(tmp_path, pg_url)
    try:
        leader, standby, running, queued = leading_with_a_queue(servers, 3, "in flight", 4)
        assert role(standby)[0] == "standby"
        epoch, _ = lease(pg_url)

        # The writer, the readers and the lease keeper of a's process: every one cut.
        assert terminate(pg_url, "codefy-a") >= 3

        until(lambda: the_leader([leader, standby]) is not None, "exactly one leader again")
        now_epoch, _ = lease(pg_url)
        if now_epoch == epoch:
            # a reconnected within its lease and kept it: nobody else may lead meanwhile.
            assert role(leader)[0] == "leader" and role(standby)[0] == "standby"
            serving, expected_running = leader, {"succeeded"}
        else:
            # a stepped down (its lease ran out before it reconnected): b took over and recovered
            # a's runs as after a kill -9 (its in-process run interrupted, its queued ones too).
            until(lambda: role(leader)[0] != "leader", "a to step down")
            serving, expected_running = standby, {"interrupted"}
            until(lambda: role(serving)[0] == "leader", "b to lead")
        until(lambda: status(serving, running) in FINAL, "the run in flight to end")
        assert assert_ended_once(serving, running) in expected_running
        for run_id in queued:
            until(lambda: status(serving, run_id) in FINAL, f"queued run {run_id} to end")
            assert assert_ended_once(serving, run_id) in ({"succeeded"} if serving is leader else {"interrupted"})

        # The leader writes (a new run on new connections) and a's connections are back.
        after = submit(serving, SMALL, "after")
        until(lambda: status(serving, after) in FINAL, "the run after to end")
        assert assert_ended_once(serving, after) == "succeeded"
        code, listed = request(serving, "runs")
        assert code == 200
        assert {r["id"] for r in listed["runs"]} >= {running, after, *queued}
        assert the_leader([leader, standby]) is serving
    finally:
        for s in servers:
            s.stop()
            s.kill_leftovers()


def test_the_database_restarted_under_both_replicas_they_wait_and_go_on(tmp_path, own_pg_server):
    url = own_pg_server.create_database()
    # A lease longer than the restart on a loaded machine: this test is about reconnecting (the
    # writer, the readers, the keeper), so the leader keeps its lease through the outage and its
    # queued runs go on. A lease shorter than the outage ends in a takeover, as a kill -9 does.
    servers = replicas(tmp_path, url, CODEFY_LEASE_TTL_S="60", CODEFY_RUN_QUEUE_MAX_CONCURRENT_CPU="1")
    try:
        leader, standby, running, queued = leading_with_a_queue(servers, 4, "running through the restart", 3)
        assert all(status(leader, q) == "queued" for q in queued)  # one cpu slot, taken

        own_pg_server.pause("fast")
        # The outage: both replicas stay up; a codefy route answers, in the error shape, or waits.
        code, body = request(leader, f"runs/{running}")
        assert code in (200, 503), body
        if code == 503:
            assert body["error"]["code"] in ("store_unavailable", "recovering", "standby"), body
        assert alive(leader["pid"]) and alive(standby["pid"])
        own_pg_server.resume()

        until(lambda: the_leader([leader, standby]) is leader, "a to lead after the restart")
        assert role(standby)[0] == "standby"
        assert lease(url)[0] == 1  # the same leadership throughout
        until(lambda: status(leader, running) in FINAL, "the running run to end")
        assert assert_ended_once(leader, running) == "succeeded"
        for run_id in queued:
            until(lambda: status(leader, run_id) in FINAL, f"queued run {run_id} to end")
            assert assert_ended_once(leader, run_id) == "succeeded"
        after = submit(leader, SMALL, "after the restart")
        until(lambda: status(leader, after) in FINAL, "the run after to end")
        assert assert_ended_once(leader, after) == "succeeded"
        assert alive(leader["pid"]) and alive(standby["pid"])
    finally:
        for s in servers:
            s.stop()
            s.kill_leftovers()
    for s in servers:  # the outage is logged once per replica, not once per retry
        log = s.data_dir / "server.log"
        assert log.read_text(errors="replace").count("is unreachable") <= 1


def test_a_database_away_longer_than_the_lease_ends_in_one_leader_and_a_standby(tmp_path, own_pg_server):
    url = own_pg_server.create_database()
    # A short lease, so the database stays away longer than it: the leader steps down by its own
    # clock, starts again as a standby once the database is back (by itself, no request needed),
    # and one replica takes the lease with the next epoch and recovers as after a kill -9.
    servers = replicas(tmp_path, url, CODEFY_LEASE_TTL_S="2", CODEFY_LEASE_RENEW_S="1",
                       CODEFY_RUN_QUEUE_MAX_CONCURRENT_CPU="1")
    try:
        leader, standby, running, queued = leading_with_a_queue(servers, 600, "running when the database went", 2)

        own_pg_server.pause("fast")
        until(lambda: role(leader)[0] not in ("leader", "unreachable"), "a to step down while the database is away")
        assert alive(leader["pid"]) and alive(standby["pid"])
        own_pg_server.resume()

        until(lambda: the_leader([leader, standby]) is not None, "exactly one leader again")
        serving = the_leader([leader, standby])
        other = standby if serving is leader else leader
        until(lambda: role(other)[0] == "standby", "the other replica to be a standby again")
        assert lease(url)[0] >= 2  # a new leadership, which recovered what the old one left
        until(lambda: status(serving, running) in FINAL, "the running run to end")
        assert assert_ended_once(serving, running) == "interrupted"
        # The queue passes to the new leadership, whichever replica won it: the old leader kept
        # running, so its own leadership taken again is a takeover too, not a restart.
        for run_id in queued:
            until(lambda: status(serving, run_id) in FINAL, f"queued run {run_id} to end")
            assert assert_ended_once(serving, run_id) == "succeeded"
        after = submit(serving, SMALL, "after")
        until(lambda: status(serving, after) in FINAL, "the run after to end")
        assert assert_ended_once(serving, after) == "succeeded"
        assert the_leader([leader, standby]) is serving and role(other)[0] == "standby"
    finally:
        for s in servers:
            s.stop()
            s.kill_leftovers()
