"""The leader lease's pure decisions (core/store/lease.py): every row a tick can read, for a leader
and a standby, and the role after every step; the clock is a number the test moves."""

from __future__ import annotations

import itertools

import pytest

from codefy_jupyter.core.store.lease import (
    FOLLOW, LEADER, LOST, RENEW, STANDBY, TAKE, WON, Lease, LeaseRow, check_timing, decide,
)

TTL = 5.0  # the state-machine tests' lease, whatever the default (its own test below)
FREE = LeaseRow(None, 0, 0.0)


def test_a_never_taken_lease_is_taken_with_epoch_one():
    claim = decide(FREE, "a", 0, "http://a/", now=100.0, ttl_s=TTL)
    assert (claim.action, claim.holder, claim.epoch, claim.expires_at, claim.url) == (TAKE, "a", 1, 105.0, "http://a/")


def test_the_holder_renews_its_own_epoch_and_pushes_the_expiry():
    row = LeaseRow("a", 7, 103.0, "http://a/")
    claim = decide(row, "a", 7, "http://a/", now=102.0, ttl_s=TTL)
    assert (claim.action, claim.epoch, claim.expires_at) == (RENEW, 7, 107.0)


def test_a_live_lease_of_another_is_followed_and_nothing_is_written():
    row = LeaseRow("b", 3, 104.0, "http://b/")
    claim = decide(row, "a", 0, "http://a/", now=103.9, ttl_s=TTL)
    assert (claim.action, claim.holder, claim.epoch, claim.url) == (FOLLOW, "b", 3, "http://b/")


def test_an_expired_lease_is_taken_with_the_next_epoch_exactly_at_expiry():
    row = LeaseRow("b", 3, 104.0, "http://b/")
    assert decide(row, "a", 0, None, now=104.0, ttl_s=TTL).action == TAKE
    assert decide(row, "a", 0, None, now=104.0, ttl_s=TTL).epoch == 4


def test_a_leader_whose_epoch_moved_on_does_not_renew():
    # b took over (epoch 4) and its lease is live: a, who believed it held epoch 3, follows.
    row = LeaseRow("b", 4, 110.0, "http://b/")
    assert decide(row, "a", 3, None, now=105.0, ttl_s=TTL).action == FOLLOW


def test_our_own_row_under_another_epoch_is_taken_afresh():
    row = LeaseRow("a", 3, 110.0)
    claim = decide(row, "a", 0, None, now=105.0, ttl_s=TTL)
    assert (claim.action, claim.epoch) == (TAKE, 4)


@pytest.mark.parametrize("holder,epoch,expires,mine,now", list(itertools.product(
    [None, "a", "b"], [0, 1, 5], [0.0, 100.0, 200.0], [0, 1, 5], [99.0, 100.0, 150.0])))
def test_every_decision_keeps_the_rules(holder, epoch, expires, mine, now):
    """Over every combination: the epoch never goes back, a take always moves it on, a renew is
    only of our own epoch, and a live lease of another is never taken."""
    row = LeaseRow(holder, epoch, expires, "u")
    claim = decide(row, "a", mine, "mine", now, TTL)
    assert claim.epoch >= epoch
    if claim.action == TAKE:
        assert claim.epoch == epoch + 1 and claim.holder == "a" and claim.expires_at == now + TTL
        assert not (holder == "b" and expires > now)
    elif claim.action == RENEW:
        assert holder == "a" and mine == epoch != 0 and claim.expires_at == now + TTL
    else:
        assert holder == "b" and expires > now and (claim.holder, claim.url) == ("b", "u")


@pytest.mark.parametrize("ttl,renew", [(0, 1), (-1, 0.5), (5, 0), (5, 3), (5, -1)])
def test_bad_timings_are_refused_naming_the_setting(ttl, renew):
    with pytest.raises(ValueError, match="lease_ttl_s|lease_renew_s"):
        check_timing(ttl, renew)


def test_the_default_timings_keep_the_issue_promise():
    lease = Lease("a")
    assert lease.renew_every_s <= 1.0 and lease.ttl_s <= 5.0
    check_timing(lease.ttl_s, lease.renew_every_s)  # and at least two renewals fit in a lease


def test_a_standby_looks_again_just_past_the_expiry_it_read_and_a_leader_every_renew_interval():
    a, b = Lease("a", ttl_s=TTL, renew_every_s=1.0), Lease("b", ttl_s=TTL, renew_every_s=1.0)
    assert b.next_round_in(0.0) == 1.0  # nothing read yet
    _, row = tick(a, FREE, 0.0)
    assert a.next_round_in(0.0) == 1.0
    tick(b, row, 0.5)  # follows a; a's lease runs out at 5.0
    assert b.next_round_in(0.5) == 1.0
    assert b.next_round_in(4.5) == pytest.approx(0.51)
    assert b.next_round_in(5.2) == 0.0  # past it already: at once
    change, row = tick(b, row, 4.5 + b.next_round_in(4.5))  # the round it woke for takes it
    assert change == WON and b.role == LEADER and b.next_round_in(6.0) == 1.0


# -- the Lease state machine -----------------------------------------------------------------


def tick(lease: Lease, row: LeaseRow, now: float) -> tuple[str | None, LeaseRow]:
    """One keeper round as pg_lease.py runs it: expire, claim, commit; the changes it reported
    (None, one, or "lost+won" for a fresh leadership), and the row as the database then holds it."""
    changes = [lease.expire(now)]
    claim = lease.claim(row, now)
    changes.append(lease.committed(claim, started_at=now, previous=row.holder))
    if claim.action != FOLLOW:
        row = LeaseRow(claim.holder, claim.epoch, claim.expires_at, claim.url)
    said = [c for c in changes if c is not None]
    return ("+".join(said) if said else None), row


def test_two_planes_one_leads_the_other_follows_then_takes_over_when_renewals_stop():
    a, b = Lease("a", "http://a/", ttl_s=TTL), Lease("b", "http://b/", ttl_s=TTL)
    change, row = tick(a, FREE, 0.0)
    assert change == WON and a.role == LEADER and a.epoch == 1 and a.held(0.0)
    change, row = tick(b, row, 0.5)
    assert change is None and b.role == STANDBY and (b.leader, b.leader_url) == ("a", "http://a/")
    for now in (1.0, 2.0, 3.0):  # a renews every second; b keeps following
        change, row = tick(a, row, now)
        assert change is None and a.role == LEADER and row.expires_at == now + TTL
        change, row = tick(b, row, now + 0.5)
        assert change is None and b.role == STANDBY
    # a is paused: no more renewals. b looks until the lease has run out, then takes epoch 2.
    change, row = tick(b, row, 7.9)
    assert change is None and b.role == STANDBY
    change, row = tick(b, row, 8.0)
    assert change == WON and b.role == LEADER and b.epoch == 2 and row.holder == "b"
    # a wakes with its clock from before the pause: it believes it holds epoch 1 ...
    assert a.role == LEADER and a.epoch == 1
    # ... until its next tick: its local deadline passed (3.0 + TTL), it steps down and follows b.
    change, row = tick(a, row, 8.5)
    assert change == LOST and a.role == STANDBY and a.epoch == 0 and a.leader_url == "http://b/"
    assert not a.held(8.5) and b.held(8.5)


def test_a_leadership_taken_from_another_replica_is_a_takeover_and_our_own_is_a_restart():
    a, b = Lease("a"), Lease("b")
    _, row = tick(a, FREE, 0.0)
    assert a.took_from is None  # a fresh database: nobody held it before
    _, row = tick(b, row, 0.5)
    assert b.took_from is None  # following takes nothing
    _, row = tick(b, row, 10.0)  # a stopped renewing: b takes over from a
    assert b.role == LEADER and b.took_from == "a"
    _, row = tick(b, row, 11.0)
    assert b.took_from == "a"  # renewals keep saying how this leadership began
    again = Lease("b")  # b restarted (kill -9): it takes its own lease back, a restart
    _, row = tick(again, row, 11.5)
    assert again.role == LEADER and again.took_from is None


def test_a_woken_leader_whose_clock_did_not_pass_its_deadline_follows_the_new_epoch():
    a = Lease("a")
    _, row = tick(a, FREE, 0.0)
    row = LeaseRow("b", 2, 20.0, "http://b/")  # a takeover a did not see (its clock stood still)
    change, _ = tick(a, row, 1.0)
    assert change == LOST and a.role == STANDBY and a.leader == "b"


def test_a_leader_that_cannot_reach_the_database_loses_the_lease_at_its_deadline():
    a = Lease("a", ttl_s=TTL, renew_every_s=1.0)
    tick(a, FREE, 10.0)
    for now in (11.0, 12.0, 14.9):
        assert a.failed(now) is None and a.held(now)
    assert a.failed(15.0) == LOST and a.role == STANDBY and not a.held(15.0)
    assert a.failed(16.0) is None  # lost once


def test_a_claim_by_a_leader_past_its_deadline_is_a_take_not_a_renew():
    a = Lease("a", ttl_s=TTL)
    _, row = tick(a, FREE, 0.0)
    assert a.claim(row, 4.9).action == RENEW
    assert (a.claim(row, 5.0).action, a.claim(row, 5.0).epoch) == (TAKE, 2)


def test_the_deadline_counts_from_when_the_tick_began_not_when_it_answered():
    a = Lease("a", ttl_s=TTL)
    claim = a.claim(FREE, 10.0)
    a.committed(claim, started_at=10.0)
    assert a.deadline == 15.0 and a.held(14.99) and not a.held(15.0)


def test_a_leader_past_its_deadline_retakes_with_a_new_epoch_even_if_nobody_else_did():
    a = Lease("a")
    _, row = tick(a, FREE, 0.0)
    change, row = tick(a, row, 6.0)  # paused 6 s: lost locally, and the row has expired too
    assert change == f"{LOST}+{WON}" and a.epoch == 2 and row.epoch == 2  # a fresh leadership (recovery again)


def test_a_standby_that_never_led_reports_no_change_while_following():
    b = Lease("b")
    row = LeaseRow("a", 1, 100.0, "http://a/")
    for now in range(0, 99, 10):
        change, row = tick(b, row, float(now))
        assert change is None and b.role == STANDBY and b.last_epoch == 1
    assert b.failed(99.0) is None and b.expire(99.0) is None


def test_a_replica_keeps_its_name_in_its_data_dir(tmp_path):
    """The same server started again (after a kill -9) is the same lease holder: it takes the
    lease its dead predecessor held at once (decide's `row.holder == me`), with the next epoch."""
    import stat

    from codefy_jupyter.server.app import replica_id

    first = replica_id(tmp_path)
    assert first == replica_id(tmp_path) and len(first) == 32
    assert stat.S_IMODE((tmp_path / "replica.id").stat().st_mode) == 0o600
    other = tmp_path / "other"
    other.mkdir()
    assert replica_id(other) != first  # another data dir, another replica


def test_a_leadership_retaken_by_a_process_that_stepped_down_is_a_takeover():
    a = Lease("a")
    _, row = tick(a, FREE, 0.0)
    # The database was away past the lease: a stepped down while it kept running, and its next
    # Lease says so. Taking its own expired lease back passes the queue on, as b taking it would.
    again = Lease("a", stepped_down=True)
    _, row = tick(again, row, 10.0)
    assert again.role == LEADER and again.epoch == 2 and again.took_from == "a"
