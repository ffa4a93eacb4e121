"""Per-owner quotas in the pure scheduler (core/scheduling/quotas.py): the running cap and its wait
reason, no head-of-line blocking of other owners, the queued cap's refusal, exemptions, ownerless
runs, worker runs, the interactive lane, adoption; then a property test against a greedy model."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codefy_jupyter.core.scheduling.memory_ledger import CardMemory
from codefy_jupyter.core.scheduling.queue import INTERACTIVE, Limits, Run, RunQueue, SubmitError, WorkerOffer
from codefy_jupyter.core.scheduling.quotas import (
    OWNER_QUEUE_FULL, OWNER_QUOTA, Quotas, build_quotas, capped, check_room, parse_exempt, reason_owner_quota,
)


class Q:
    """A RunQueue with quotas that numbers submits itself and answers started run ids."""

    def __init__(self, limits: Limits | None = None, quotas: Quotas | None = None, **kw) -> None:
        self.q = RunQueue(limits or Limits(), **kw)
        self.q.quotas = quotas or Quotas()
        self.n = 0

    def add(self, run_id: str, owner: str | None, device: str = "cpu", **kw) -> None:
        self.n += 1
        self.q.submit(Run(run_id, self.n, device, owner=owner, **{k: v for k, v in kw.items() if k != "reservation"}),
                      reservation=kw.get("reservation"))

    def go(self) -> list[str]:
        return [p.run_id for p in self.q.schedule()]

    def done(self, *run_ids: str) -> list[str]:
        for rid in run_ids:
            self.q.finish(rid)
        return self.go()

    def why(self, run_id: str):
        r = self.q.reason(run_id)
        return None if r is None else (r.code, r.params)

    def __getattr__(self, name):
        return getattr(self.q, name)


def check_room_error(quotas: Quotas, owner: str | None, queued: int, adding: int = 1) -> SubmitError:
    with pytest.raises(SubmitError) as err:
        check_room(quotas, owner, queued, adding)
    return err.value


# --- the pure decisions -------------------------------------------------------------------------


class TestDecisions:
    def test_zero_is_unlimited(self):
        q = Quotas()
        assert not q.caps_running and q.running_limit("a") is None and q.queued_limit("a") is None
        assert capped(q, "a", 10**6) is None
        check_room(q, "a", 10**6, 10**6)

    def test_caps_and_exemptions(self):
        q = Quotas(max_running=2, max_queued=3, exempt=frozenset({"boss"}))
        assert [capped(q, "a", n) for n in (0, 1, 2, 3)] == [None, None, 2, 2]
        assert capped(q, "boss", 99) is None and q.queued_limit("boss") is None
        assert capped(q, None, 2) == 2  # the ownerless runs are one owner
        check_room(q, "a", 2, 1)
        with pytest.raises(SubmitError) as err:
            check_room(q, "a", 2, 2)
        assert (err.value.status, err.value.code) == (429, OWNER_QUEUE_FULL)
        assert err.value.params == {"setting": "run_quota_max_queued", "owner": "a", "limit": 3, "queued": 2,
                                    "adding": 2}
        assert str(err.value) == ("a has 2 runs waiting, at most 3 per user (run_quota_max_queued): "
                                  "2 more would exceed it")
        assert str(check_room_error(q, "a", 3)) == ("a already has 3 runs waiting, at most 3 per user "
                                                     "(run_quota_max_queued): submit again once one has started")

    @pytest.mark.parametrize("kw", [{"max_running": -1}, {"max_queued": -2}, {"max_running": 1.5},
                                    {"max_queued": True}])
    def test_invalid_caps_are_refused(self, kw):
        with pytest.raises(ValueError):
            Quotas(**kw)

    def test_settings_build_with_warnings(self):
        quotas, warnings = build_quotas(-1, 4, " alice, ,bob ")
        assert quotas == Quotas(0, 4, frozenset({"alice", "bob"}))
        assert [w.code for w in warnings] == ["quota_below_zero"]
        assert warnings[0].params == {"setting": "run_quota_max_running", "value": -1}
        assert parse_exempt("") == frozenset() and parse_exempt(None) == frozenset()

    def test_the_wait_reason(self):
        n = reason_owner_quota("alice", 2, 2)
        assert (n.code, n.params) == (OWNER_QUOTA, {"owner": "alice", "running": 2, "limit": 2})
        assert n.message == "waiting for alice's run quota (2 running of 2)"
        assert reason_owner_quota(None, 1, 1).message == "waiting for the shared run quota (1 running of 1)"


# --- the running cap ----------------------------------------------------------------------------


class TestRunningCap:
    def test_a_run_past_the_cap_waits_with_owner_quota(self):
        q = Q(Limits(cpu=4), Quotas(max_running=1))
        q.add("a1", "alice"), q.add("a2", "alice"), q.add("b1", "bob")
        assert q.go() == ["a1", "b1"]
        assert q.why("a2") == (OWNER_QUOTA, {"owner": "alice", "running": 1, "limit": 1})
        assert q.why("b1") is None and q.owner_counts("alice") == (1, 1) and q.owner_counts("bob") == (1, 0)
        assert q.done("a1") == ["a2"]
        assert q.owner_counts("alice") == (1, 0)

    def test_other_owners_pass_a_capped_head_on_its_own_device(self):
        """alice's runs fill the front of the cuda:0 FIFO (limit 2); bob's run behind them starts."""
        q = Q(Limits(overrides={"cuda:0": 2}), Quotas(max_running=1), slots=["cpu", "cuda:0"])
        for i in range(1, 5):
            q.add(f"a{i}", "alice", "cuda:0")
        q.add("b1", "bob", "cuda:0")
        q.add("b2", "bob", "cuda:0")
        assert q.go() == ["a1", "b1"]
        assert q.position("a2") == 1 and q.position("b2") == 4
        reasons = q.reasons()
        assert {rid: n.code for rid, n in reasons.items()} == {"a2": OWNER_QUOTA, "a3": OWNER_QUOTA,
                                                              "a4": OWNER_QUOTA, "b2": OWNER_QUOTA}
        # alice's earliest waiting run keeps its place: first once her count drops.
        assert q.done("a1") == ["a2"]
        assert q.done("b1") == ["b2"]
        assert q.done("a2", "b2") == ["a3"]

    def test_a_capped_run_keeps_submit_order_over_later_runs(self):
        q = Q(quotas=Quotas(max_running=1), slots=["cpu", "cuda:0"])
        q.add("a1", "alice", "cuda:0"), q.add("a2", "alice", "cuda:0"), q.add("b1", "bob", "cuda:0")
        assert q.go() == ["a1"]
        assert q.why("a2")[0] == OWNER_QUOTA and q.why("b1") is None  # b1 waits its turn: cuda:0 is full
        assert q.done("a1") == ["a2"]
        assert q.done("a2") == ["b1"]

    def test_the_cap_counts_runs_on_every_device(self):
        q = Q(Limits(cpu=4), Quotas(max_running=2), slots=["cpu", "cuda:0", "cuda:1"])
        q.add("a1", "alice", "cuda:0"), q.add("a2", "alice", "cuda:1"), q.add("a3", "alice", "cpu")
        assert q.go() == ["a1", "a2"]
        assert q.why("a3") == (OWNER_QUOTA, {"owner": "alice", "running": 2, "limit": 2})
        assert q.done("a2") == ["a3"]

    def test_a_capped_head_reserves_nothing(self):
        """A set run at the front would reserve its free card; capped, it leaves the card to others."""
        q = Q(quotas=Quotas(max_running=1), slots=["cpu", "cuda:0", "cuda:1"])
        q.add("a0", "alice", "cuda:1")
        q.add("set", "alice", "cuda:0", devices=("cuda:0", "cuda:1"))
        q.add("b1", "bob", "cuda:0")
        assert q.go() == ["a0", "b1"]
        assert q.why("set")[0] == OWNER_QUOTA
        # Without quotas the set run at the front of cuda:0 holds b1 behind it.
        p = Q(slots=["cpu", "cuda:0", "cuda:1"])
        p.add("a0", "alice", "cuda:1")
        p.add("set", "alice", "cuda:0", devices=("cuda:0", "cuda:1"))
        p.add("b1", "bob", "cuda:0")
        assert p.go() == ["a0"] and p.why("b1")[0] == "behind_waiting_run"

    def test_a_capped_seeded_run_claims_no_gate(self):
        q = Q(Limits(cpu=4), Quotas(max_running=1))
        q.add("a1", "alice")
        assert q.go() == ["a1"]
        q.add("seeded", "alice", seeded=True)
        q.add("b1", "bob")
        assert q.go() == ["b1"]
        assert q.why("seeded")[0] == OWNER_QUOTA
        assert q.done("a1") == []  # its owner has room now; it waits to run alone (b1 executes)
        assert q.why("seeded")[0] == "waiting_to_run_alone"
        assert q.done("b1") == ["seeded"]

    def test_a_run_behind_a_blocked_head_says_its_quota(self):
        q = Q(quotas=Quotas(max_running=1), slots=["cpu", "cuda:0", "cuda:1"])
        q.add("a1", "alice", "cuda:1"), q.add("b0", "bob", "cuda:1")
        q.add("set", "bob", "cuda:0", devices=("cuda:0", "cuda:1"))
        q.add("c1", "carol", "cuda:0"), q.add("a2", "alice", "cuda:0")
        assert q.go() == ["a1"]
        assert q.why("c1")[0] == "behind_waiting_run"
        assert q.why("a2")[0] == OWNER_QUOTA  # alice's cap holds it even after the set run starts
        assert q.reasons()["a2"].code == OWNER_QUOTA

    def test_a_head_passed_while_its_owner_reaches_the_cap_later_in_the_pass(self):
        """a1 waits its turn on a full cuda:0; a2, submitted later to the free cpu, starts in the same
        pass and brings alice to her cap: a1 now waits for her quota, and both views say so."""
        q = Q(quotas=Quotas(max_running=1), slots=["cpu", "cuda:0"])
        q.add("b0", "bob", "cuda:0")
        assert q.go() == ["b0"]
        q.add("a1", "alice", "cuda:0"), q.add("a2", "alice", "cpu")
        assert q.go() == ["a2"]
        assert q.why("a1")[0] == OWNER_QUOTA and q.reasons()["a1"].code == OWNER_QUOTA
        assert q.done("b0") == []  # cuda:0 is free, but alice is at her cap
        assert q.done("a2") == ["a1"]

    def test_exempt_and_ownerless(self):
        q = Q(Limits(cpu=8), Quotas(max_running=1, exempt=frozenset({"boss"})))
        for rid, owner in (("x1", "boss"), ("x2", "boss"), ("n1", None), ("n2", None), ("a1", "alice")):
            q.add(rid, owner)
        assert q.go() == ["x1", "x2", "n1", "a1"]
        assert q.why("n2") == (OWNER_QUOTA, {"owner": None, "running": 1, "limit": 1})

    def test_interactive_runs_neither_count_nor_wait(self):
        q = Q(Limits(cpu=4), Quotas(max_running=1, max_queued=1))
        q.add("a1", "alice")
        q.add("i1", "alice", lane=INTERACTIVE, session="s1")
        assert q.go() == ["i1", "a1"]  # interactive runs are offered first
        assert q.owner_counts("alice") == (1, 0)
        q.add("a2", "alice")  # the interactive run took no queued room
        assert q.go() == [] and q.why("a2")[0] == OWNER_QUOTA

    def test_worker_runs_count_with_local_ones(self):
        q = Q(Limits(cpu=4), Quotas(max_running=1), slots=["cpu"])
        q.set_worker(WorkerOffer("box", devices=("cuda:0",)))
        q.add("w1", "alice", "cuda:0", worker="box")
        q.add("l1", "alice")
        q.add("b1", "bob", "cuda:0", worker="box")
        assert q.go() == ["w1"]
        assert q.why("l1")[0] == OWNER_QUOTA and q.why("b1") is None
        assert q.done("w1") == ["l1", "b1"]

    def test_an_adopted_run_counts_until_it_finishes(self):
        q = Q(quotas=Quotas(max_running=1), slots=["cpu"])
        q.set_worker(WorkerOffer("box", devices=("cuda:0",)))
        q.adopt(Run("old", 1, "cuda:0", worker="box", owner="alice"), "box", ["box/cuda:0"])
        q.n = 1
        q.add("a1", "alice")
        assert q.go() == [] and q.why("a1")[0] == OWNER_QUOTA
        assert q.done("old") == ["a1"]

    def test_a_one_shot_run_out_of_turn_respects_the_cap(self):
        q = Q(quotas=Quotas(max_running=1), slots=["cpu"])
        q.add("a1", "alice")
        q.add("shot", "alice", "cuda:0", pool="one-shot")
        assert q.go() == ["a1"]
        q.set_worker(WorkerOffer("shot-1", devices=("cuda:0",), one_shot=True, run_id="shot"))
        assert q.go() == [] and q.why("shot")[0] == OWNER_QUOTA
        assert q.done("a1") == ["shot"]

    def test_no_wait_memory_run_refused_with_the_quota_reason(self):
        q = Q(quotas=Quotas(max_running=1), slots=["cpu"])
        q.set_worker(WorkerOffer("box", devices=("cuda:0",), shared_memory=frozenset({"cuda:0"})))
        q.set_card_memory("box", {"cuda:0": CardMemory(80000, 80000)})
        q.add("a1", "alice")
        assert q.go() == ["a1"]
        with pytest.raises(SubmitError) as err:
            q.add("m", "alice", "cuda:0", worker="box", memory_mib=1000, wait=False)
        assert err.value.status == 409 and err.value.params["reason"]["code"] == OWNER_QUOTA
        assert q.get("m") is None and q.owner_counts("alice") == (1, 0)


# --- the queued cap -----------------------------------------------------------------------------


class TestQueuedCap:
    def test_a_submit_past_the_cap_is_refused_and_nothing_is_queued(self):
        q = Q(quotas=Quotas(max_running=1, max_queued=2))
        q.add("a1", "alice")
        assert q.go() == ["a1"]
        q.add("a2", "alice"), q.add("a3", "alice")
        before = [r.run_id for r in q.waiting()]
        with pytest.raises(SubmitError) as err:
            q.add("a4", "alice")
        assert (err.value.status, err.value.code) == (429, OWNER_QUEUE_FULL)
        assert err.value.params == {"setting": "run_quota_max_queued", "owner": "alice", "limit": 2, "queued": 2,
                                    "adding": 1}
        assert [r.run_id for r in q.waiting()] == before and q.get("a4") is None
        assert q.owner_counts("alice") == (1, 2)
        q.add("b1", "bob")  # another owner's room is their own
        assert q.go() == ["b1"]

    def test_room_comes_back_as_runs_start_or_are_cancelled(self):
        q = Q(quotas=Quotas(max_running=1, max_queued=1))
        q.add("a1", "alice"), q.go(), q.add("a2", "alice")
        with pytest.raises(SubmitError):
            q.add("a3", "alice")
        assert q.cancel("a2") and q.owner_counts("alice") == (1, 0)
        q.add("a3", "alice")
        assert q.done("a1") == ["a3"]
        q.add("a4", "alice")
        assert q.owner_counts("alice") == (1, 1)

    def test_a_parent_reserves_room_up_front_and_its_children_take_it(self):
        q = Q(quotas=Quotas(max_queued=3))
        with pytest.raises(SubmitError) as err:
            q.reserve_owner_room("alice", 4)
        assert err.value.params["adding"] == 4 and q.waiting() == []
        sweep = q.reserve_owner_room("alice", 3)
        # Reserved places count for every other check before any child is queued: the race of
        # concurrent sweeps that each checked an empty queue is closed.
        with pytest.raises(SubmitError) as err:
            q.reserve_owner_room("alice", 1)
        assert err.value.params["queued"] == 3
        with pytest.raises(SubmitError):
            q.add("plain", "alice", "cuda:0")
        q.add("c0", "alice", "cuda:0", reservation=sweep)
        q.add("c1", "alice", "cuda:0", reservation=sweep)
        assert q.owner_counts("alice")[1] == 2 and sweep.left == 1
        with pytest.raises(SubmitError):  # the third place is still the sweep's
            q.add("plain", "alice", "cuda:0")
        assert q.release_owner_room(sweep) == 1 and q.release_owner_room(sweep) == 0
        q.add("plain", "alice", "cuda:0")
        with pytest.raises(SubmitError):  # a spent reservation is no pass: the run is checked
            q.add("c2", "alice", "cuda:0", reservation=sweep)
        assert [r.run_id for r in q.waiting()] == ["c0", "c1", "plain"]

    def test_a_reservation_holds_places_for_its_own_owner_only(self):
        q = Q(quotas=Quotas(max_queued=1, exempt=frozenset({"carol"})))
        mine = q.reserve_owner_room("alice", 1)
        q.add("b1", "bob", reservation=mine)  # bob's run is checked against bob's room
        with pytest.raises(SubmitError):
            q.add("b2", "bob", reservation=mine)
        assert mine.left == 1 and q.has_owner_room("bob") is False and q.has_owner_room("alice") is False
        assert q.has_owner_room("carol") and q.reserve_owner_room("carol", 50).left == 50  # exempt
        q.cancel("b1")
        assert q.has_owner_room("bob")

    def test_a_refused_submit_leaves_the_order_free(self):
        q = Q(quotas=Quotas(max_queued=1))
        q.add("a1", "alice", "cuda:0")
        with pytest.raises(SubmitError):
            q.add("a2", "alice", "cuda:0")
        q.add("b1", "bob", "cuda:0")  # the next submit order is accepted
        assert [r.run_id for r in q.waiting()] == ["a1", "b1"]


# --- property: the pass equals a greedy walk in submit order ----------------------------------

OWNERS = ["alice", "bob", "carol", None]
DEVICES = ["cpu", "cuda:0", "cuda:1"]

op_st = st.one_of(
    st.tuples(st.just("submit"), st.sampled_from(OWNERS), st.sampled_from(DEVICES)),
    st.tuples(st.just("submit"), st.sampled_from(OWNERS), st.sampled_from(DEVICES)),
    st.tuples(st.just("finish"), st.integers(0, 40), st.just(None)),
    st.tuples(st.just("cancel"), st.integers(0, 40), st.just(None)),
)


def greedy(q: RunQueue, limits: Limits, quotas: Quotas) -> list[str]:
    """What should start now, without sets, seeds or workers: each waiting run in submit order starts
    when its owner is under the cap and its device has room. A full device blocks only its own
    queue; a capped owner blocks only their own runs."""
    used = Counter(r.device for r in q.running())
    owners = Counter(r.owner for r in q.running())
    out = []
    for run in q.waiting():
        if capped(quotas, run.owner, owners[run.owner]) is not None or used[run.device] >= limits.limit(run.device):
            continue
        used[run.device] += 1
        owners[run.owner] += 1
        out.append(run.run_id)
    return out


@settings(max_examples=200, deadline=None)
@given(gpu=st.integers(1, 2), cpu=st.integers(1, 3), max_running=st.integers(0, 2), max_queued=st.integers(0, 3),
       exempt=st.sampled_from([frozenset(), frozenset({"carol"})]), ops=st.lists(op_st, max_size=40))
def test_random_sequences_match_the_greedy_model(gpu, cpu, max_running, max_queued, exempt, ops):
    limits, quotas = Limits(gpu=gpu, cpu=cpu), Quotas(max_running, max_queued, exempt)
    q = RunQueue(limits, slots=DEVICES)
    q.quotas = quotas
    n = 0
    ids: list[str] = []

    def schedule() -> None:
        expected = greedy(q, limits, quotas)
        assert [p.run_id for p in q.schedule()] == expected
        running = Counter(r.owner for r in q.running())
        waiting = Counter(r.owner for r in q.waiting())
        reasons = q.reasons()
        for owner in OWNERS:
            assert q.owner_counts(owner) == (running[owner], waiting[owner])
            if quotas.running_limit(owner) is not None:
                assert running[owner] <= quotas.running_limit(owner)
        for run in q.waiting():
            why = q.reason(run.run_id)
            assert why == reasons.get(run.run_id)
            at_cap = capped(quotas, run.owner, running[run.owner]) is not None
            assert (why is not None and why.code == OWNER_QUOTA) is at_cap, (run, why)
            if not at_cap:  # nothing else in this model makes a run wait for more than its turn
                assert why is None

    for kind, a, b in ops:
        if kind == "submit":
            n += 1
            waiting_before = [r.run_id for r in q.waiting()]
            run = Run(f"r{n}", n, b, owner=a)
            try:
                q.submit(run)
            except SubmitError as err:
                assert err.code == OWNER_QUEUE_FULL and quotas.queued_limit(a) is not None
                assert Counter(r.owner for r in q.waiting())[a] >= quotas.queued_limit(a)
                assert [r.run_id for r in q.waiting()] == waiting_before
                continue
            if quotas.queued_limit(a) is not None:
                assert Counter(r.owner for r in q.waiting())[a] <= quotas.queued_limit(a)
            ids.append(run.run_id)
        elif kind == "finish":
            running = q.running()
            if running:
                q.finish(running[a % len(running)].run_id)
        elif ids:
            q.cancel(ids[a % len(ids)])
        schedule()
    for _ in range(len(ids) + 1):  # drain: every run that was not cancelled starts
        for run in q.running():
            q.finish(run.run_id)
        schedule()
    assert q.waiting() == [] and q.running() == []
    assert all(q.owner_counts(o) == (0, 0) for o in OWNERS)


CARDS = ["cuda:0", "cuda:1", "cuda:2"]
full_op_st = st.one_of(
    st.tuples(st.just("submit"), st.sampled_from(OWNERS),
              st.one_of(st.sampled_from(["cpu", *CARDS]).map(lambda d: (d, ())),
                        st.lists(st.sampled_from(CARDS), min_size=2, max_size=3, unique=True).map(
                            lambda s: (s[0], tuple(s)))),
              st.sampled_from([False] * 5 + [True]), st.sampled_from(["queued"] * 5 + [INTERACTIVE])),
    st.tuples(st.just("finish"), st.integers(0, 40), st.none(), st.none(), st.none()),
    st.tuples(st.just("cancel"), st.integers(0, 40), st.none(), st.none(), st.none()),
)


@settings(max_examples=150, deadline=None)
@given(gpu=st.integers(1, 2), max_running=st.integers(1, 2), ops=st.lists(full_op_st, max_size=40))
def test_with_sets_seeds_and_lanes_the_cap_holds_views_agree_and_everything_drains(gpu, max_running, ops):
    """Reservations, the seeded gate and the interactive lane together with a running cap: no owner
    ever has more queued-lane runs executing than the cap, reason() and reasons() agree, a waiting
    run whose owner is at the cap and that the pass never offered says owner_quota, and finishing
    runs drains every queue (a capped run never deadlocks the gate or a reservation)."""
    quotas = Quotas(max_running=max_running)
    q = RunQueue(Limits(gpu=gpu, cpu=2), interactive_limit=2, slots=["cpu", *CARDS])
    q.quotas = quotas
    n, ids = 0, []

    def check() -> None:
        running = Counter(r.owner for r in q.running() if r.lane == "queued")
        assert all(count <= max_running for count in running.values()), running
        reasons = q.reasons()
        for run in q.waiting():
            assert q.reason(run.run_id) == reasons.get(run.run_id), run
            if run.lane == "queued" and running[run.owner] >= max_running:
                assert run.run_id in reasons, run  # owner_quota, or what held it before its owner's cap

    for kind, a, target, seeded, lane in ops:
        if kind == "submit":
            n += 1
            device, devices = target
            run = Run(f"r{n}", n, device, devices, seeded, lane, f"s{n}" if lane == INTERACTIVE else None, owner=a)
            try:
                q.submit(run)
            except SubmitError as err:
                assert err.status == 503  # the interactive lane's limit; there is no queued cap here
                continue
            ids.append(run.run_id)
        elif kind == "finish":
            running = q.running()
            if running:
                q.finish(running[a % len(running)].run_id)
        elif ids:
            q.cancel(ids[a % len(ids)])
        q.schedule()
        assert q.schedule() == []  # one pass starts everything the rules allow
        check()
    for _ in range(len(ids) + 2):
        running = q.running()
        if not running:
            break
        q.finish(running[0].run_id)
        q.schedule()
        check()
    assert q.waiting() == [] and q.running() == []
