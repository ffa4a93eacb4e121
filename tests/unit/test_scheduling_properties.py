"""Property tests of the pure run scheduler: random submit / finish / cancel sequences over a few
devices, device sets, seeded runs, the interactive lane and random limits.

After every call the driver schedules (as RunService does) and checks the invariants:
never over a slot's limit; FIFO within a queue; a start never takes room an earlier waiting head
needs (the reservation rule, which also gives the oldest head a shared slot); a seeded run executes
alone; interactive admission limits; positions 1..n in submit order; cancel removes exactly that
run; a waiting run without a reason is plain FIFO behind a head that waits for its own device, and
one behind a head with a reason says so. At the end, finishing runs drains
every queue: no deadlock, no starvation.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from codefy_jupyter.core.scheduling.queue import INTERACTIVE, QUEUED, Limits, Run, RunQueue, SubmitError

DEVICES = ["cpu", "cuda:0", "cuda:1", "cuda:2"]
CARDS = DEVICES[1:]
SESSIONS = [None, "s1", "s2", "s3"]

limits_st = st.builds(
    Limits,
    gpu=st.integers(1, 2),
    cpu=st.integers(1, 3),
    overrides=st.dictionaries(st.sampled_from(DEVICES), st.integers(1, 3), max_size=2),
)

device_set_st = st.lists(st.sampled_from(CARDS), min_size=2, max_size=3, unique=True).map(tuple)

submit_st = st.tuples(
    st.just("submit"),
    st.one_of(st.sampled_from(DEVICES).map(lambda d: (d, ())), device_set_st.map(lambda s: (s[0], s))),
    st.sampled_from([False] * 7 + [True]),  # seeded: about one in eight
    st.sampled_from([QUEUED] * 5 + [INTERACTIVE]),
    st.sampled_from(SESSIONS),
)
finish_st = st.tuples(st.just("finish"), st.integers(0, 50))
cancel_st = st.tuples(st.just("cancel"), st.integers(0, 60))
ops_st = st.lists(st.one_of(submit_st, submit_st, finish_st, cancel_st), max_size=40)


class Driver:
    def __init__(self, limits: Limits, interactive_limit: int) -> None:
        self.limits = limits
        self.q = RunQueue(limits, interactive_limit=interactive_limit, slots=DEVICES)
        self.order = 0
        self.ids: list[str] = []
        self.started: list[str] = []
        self.placements: list[tuple] = []

    # -- calls --

    def submit(self, device: str, devices: tuple[str, ...], seeded: bool, lane: str, session: str | None) -> None:
        self.order += 1
        run = Run(f"r{self.order}", self.order, device, devices, seeded, lane, session)
        admitted = [r for r in (*self.q.running(), *self.q.waiting()) if r.lane == INTERACTIVE]
        try:
            self.q.submit(run)
        except SubmitError as err:
            assert lane == INTERACTIVE and err.status == 503
            busy_session = session is not None and any(r.session == session for r in admitted)
            assert err.code == ("session_busy" if busy_session else "interactive_busy")
            assert busy_session or len(admitted) >= self.q.interactive_limit
            assert self.q.get(run.run_id) is None
            return
        if lane == INTERACTIVE:
            assert len(admitted) < self.q.interactive_limit
            assert session is None or all(r.session != session for r in admitted)
        self.ids.append(run.run_id)
        self.schedule()

    def finish(self, index: int) -> None:
        running = self.q.running()
        if running:
            self.q.finish(running[index % len(running)].run_id)
        self.schedule()

    def cancel(self, index: int) -> None:
        if not self.ids:
            return
        rid = self.ids[index % len(self.ids)]
        waiting_before = {r.run_id for r in self.q.waiting()}
        running_before = {r.run_id for r in self.q.running()}
        assert self.q.cancel(rid) is (rid in waiting_before)
        assert {r.run_id for r in self.q.waiting()} == waiting_before - {rid}
        assert {r.run_id for r in self.q.running()} == running_before
        self.schedule()

    # -- invariants --

    def used(self) -> Counter:
        return Counter(s for r in self.q.running() if r.lane == QUEUED for s in r.slots)

    def heads(self) -> list[Run]:
        seen: set[str] = set()
        heads = []
        for r in self.q.waiting():  # in submit order
            if r.lane == QUEUED and r.queue_key not in seen:
                seen.add(r.queue_key)
                heads.append(r)
        return heads

    def schedule(self) -> None:
        waiting_before = {r.run_id: r for r in self.q.waiting()}
        placements = self.q.schedule()
        self.placements.append(tuple(placements))
        used = self.used()
        waiting = self.q.waiting()
        heads = self.heads()
        for p in placements:
            run = waiting_before[p.run_id]
            assert self.q.is_running(p.run_id) and not self.q.is_waiting(p.run_id)
            self.started.append(p.run_id)
            if run.lane != QUEUED:
                continue
            # FIFO: nothing submitted earlier to the same queue still waits.
            assert not any(w.queue_key == run.queue_key and w.order < run.order for w in waiting if w.lane == QUEUED)
            # Reservations: the start left a unit for every earlier head still waiting on its slots.
            for slot in p.slots:
                earlier = sum(1 for h in heads if h.order < run.order and slot in h.slots)
                assert used[slot] + earlier <= self.limits.limit(slot), (p, slot, heads)
        assert self.q.schedule() == []  # a pass leaves nothing startable behind
        self.check_state()

    def check_state(self) -> None:
        running = self.q.running()
        used = self.used()
        for slot, n in used.items():
            assert n <= self.limits.limit(slot), (slot, n)
        if any(r.seeded for r in running):
            assert len(running) == 1, running
        interactive = [r for r in (*running, *self.q.waiting()) if r.lane == INTERACTIVE]
        assert len(interactive) <= self.q.interactive_limit
        sessions = [r.session for r in interactive if r.session is not None]
        assert len(sessions) == len(set(sessions))
        # Positions: 1..n per queue, in submit order; none for anything else.
        positions = self.q.positions()
        by_queue: dict[str, list[Run]] = {}
        for r in self.q.waiting():
            if r.lane == QUEUED:
                by_queue.setdefault(r.queue_key, []).append(r)
            else:
                assert self.q.position(r.run_id) is None
        assert len(positions) == sum(len(v) for v in by_queue.values())
        for runs in by_queue.values():
            assert [positions[r.run_id] for r in runs] == list(range(1, len(runs) + 1))
            assert all(self.q.position(r.run_id) == positions[r.run_id] for r in runs)
        for r in running:
            assert self.q.position(r.run_id) is None and self.q.reason(r.run_id) is None
        # Reasons: a waiting run without one waits plain FIFO: it is in a queue whose head has no
        # reason and waits for its own device (its turn). A run behind a head with a reason names
        # that head and its code; a waiting interactive run always has one. reason() agrees.
        reasons = self.q.reasons()
        head_of = {h.queue_key: h for h in self.heads()}
        for r in self.q.waiting():
            assert self.q.reason(r.run_id) == reasons.get(r.run_id), r
            if r.lane == INTERACTIVE:
                assert r.run_id in reasons
                continue
            h = head_of[r.queue_key]
            if r.run_id not in reasons:
                assert h.run_id not in reasons and used[h.device] >= self.limits.limit(h.device), (r, h, used)
            elif r is not h:
                assert h.run_id in reasons, (r, h)
                assert (reasons[r.run_id].code, reasons[r.run_id].params) == (
                    "behind_waiting_run", {"run_id": h.run_id, "name": h.name, "queue": h.queue_key,
                                           "code": reasons[h.run_id].code, "ahead": reasons[h.run_id].to_dict()})
        stats = self.q.statistics()
        for row in stats.queues:
            assert row.running == used.get(row.key, 0) and row.limit == self.limits.limit(row.key)
            assert row.waiting == len(by_queue.get(row.key, ()))

    def drain(self, one_at_a_time: bool) -> None:
        """Finish runs until nothing waits; each round must make progress."""
        for _ in range(len(self.ids) + 2):
            running = self.q.running()
            if not running:
                break
            for r in running[:1] if one_at_a_time else running:
                self.q.finish(r.run_id)
            self.schedule()
        assert self.q.waiting() == [] and self.q.running() == []
        assert sorted(self.started) == sorted(set(self.started))  # nothing started twice


def play(limits: Limits, interactive_limit: int, ops, one_at_a_time: bool) -> Driver:
    d = Driver(limits, interactive_limit)
    for op in ops:
        if op[0] == "submit":
            (device, devices), seeded, lane, session = op[1], op[2], op[3], op[4]
            d.submit(device, devices, seeded, lane, session)
        elif op[0] == "finish":
            d.finish(op[1])
        else:
            d.cancel(op[1])
    d.drain(one_at_a_time)
    return d


@settings(max_examples=200, deadline=None)
@given(limits=limits_st, interactive_limit=st.integers(1, 2), ops=ops_st, one_at_a_time=st.booleans())
def test_random_sequences_keep_every_rule_and_drain(limits, interactive_limit, ops, one_at_a_time):
    d = play(limits, interactive_limit, ops, one_at_a_time)
    # Every run that was not cancelled started exactly once.
    cancelled = set(d.ids) - set(d.started)
    assert len(d.started) + len(cancelled) == len(d.ids)


@settings(max_examples=50, deadline=None)
@given(limits=limits_st, ops=ops_st)
def test_the_same_calls_always_give_the_same_placements(limits, ops):
    assert play(limits, 2, ops, True).placements == play(limits, 2, ops, True).placements


FIVE_CARDS = [f"cuda:{i}" for i in range(5)]
wide_set_st = st.lists(st.sampled_from(FIVE_CARDS), min_size=2, max_size=4, unique=True).map(tuple)


@settings(max_examples=100, deadline=None)
@given(sets=st.lists(wide_set_st, min_size=2, max_size=5, unique_by=lambda s: s[0]),
       busy=st.lists(st.sampled_from(FIVE_CARDS), max_size=3, unique=True))
def test_set_runs_at_the_front_start_first_come_first_served(sets, busy):
    """Set runs that each wait at the front of their queue, under limit 1, while some cards are
    busy: no deadlock, and two sets that share a card start in submit order."""
    d = Driver(Limits(), 2)
    for card in busy:
        d.submit(card, (), False, QUEUED, None)
    first_set = d.order + 1
    for s in sets:
        d.submit(s[0], s, False, QUEUED, None)
    d.drain(one_at_a_time=True)
    starts = {rid: i for i, rid in enumerate(d.started)}
    set_runs = [(f"r{first_set + i}", s) for i, s in enumerate(sets)]
    for i, (a, sa) in enumerate(set_runs):
        for b, sb in set_runs[i + 1:]:
            if set(sa) & set(sb):
                assert starts[a] < starts[b], (a, sa, b, sb)


queued_submit_st = st.tuples(
    st.just("submit"),
    st.one_of(st.sampled_from(DEVICES).map(lambda d: (d, ())), device_set_st.map(lambda s: (s[0], s))),
    st.sampled_from([False] * 7 + [True]),
    st.just(QUEUED),
    st.just(None),
)


@settings(max_examples=150, deadline=None)
@given(limits=limits_st, ops=st.lists(st.one_of(queued_submit_st, queued_submit_st, finish_st), max_size=40))
def test_the_oldest_waiting_run_is_never_starved(limits, ops):
    """No starvation while new runs keep arriving: once a run is the oldest waiting one, it starts
    as soon as the runs executing at that moment have finished, whatever was submitted since.
    A seeded run waits for its own devices the same way, then claims the seeded gate: nothing else
    starts until it has."""
    d = Driver(limits, 2)
    watched: dict[str, set[str]] = {}  # oldest waiting run -> runs executing when it became oldest
    claimed: set[str] = set()  # oldest waiting seeded runs whose own devices have room

    def check() -> None:
        waiting = d.q.waiting()
        running = {r.run_id for r in d.q.running()}
        for rid, blockers in list(watched.items()):
            if not d.q.is_waiting(rid):
                del watched[rid]
            else:
                assert blockers & running, f"{rid} still waits although {blockers} have finished"
        for rid in list(claimed):
            # It holds the gate: the next start here is that run, alone.
            started = [p.run_id for p in d.placements[-1]]
            assert started in ([], [rid]), (rid, started)
            if started:
                claimed.discard(rid)
        if not waiting:
            return
        oldest = waiting[0]
        if not oldest.seeded and oldest.run_id not in watched:
            watched[oldest.run_id] = running
        used = d.used()
        if oldest.seeded and all(used[s] < limits.limit(s) for s in oldest.slots):
            claimed.add(oldest.run_id)

    for op in ops:
        if op[0] == "submit":
            (device, devices), seeded = op[1], op[2]
            d.submit(device, devices, seeded, QUEUED, None)
        else:
            d.finish(op[1])
        check()
    d.drain(one_at_a_time=True)
