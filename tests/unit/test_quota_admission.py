"""The queued cap under concurrent submits (core/scheduling/quotas.py `Admission`, through RunQueue):
a plain run, a sweep of n and a study of width w interleave their steps (the check, each child's
enqueue, a child that is never queued, the release of what was not used, a study's later child,
runs starting and being cancelled) as the awaits between them allow on the server. Against a
sequential model in which each submit happens whole at the moment of its check, the queue must
take the same decisions, and never have more than `max_queued` runs of an owner waiting."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from codefy_jupyter.core.scheduling.queue import Limits, Run, RunQueue, SubmitError
from codefy_jupyter.core.scheduling.quotas import OWNER_QUEUE_FULL, Quotas, Reservation

OWNERS = ["alice", "bob", None]


@dataclass
class Submit:
    """One submit in flight: a sweep's or study's places and the children it has still to queue."""
    owner: str | None
    reservation: Reservation
    to_queue: int  # children not yet queued nor given up
    given_up: int = 0  # children that will not be queued (their submit failed before the queue)
    ids: list[str] = field(default_factory=list)


class Model:
    """Sequential: a submit's every child counts the moment it is admitted; what it does not queue
    comes back when it ends (as if those children were cancelled then)."""

    def __init__(self, quotas: Quotas) -> None:
        self.quotas = quotas
        self.counted: Counter = Counter()

    def admits(self, owner: str | None, n: int) -> bool:
        limit = self.quotas.queued_limit(owner)
        if limit is not None and self.counted[owner] + n > limit:
            return False
        self.counted[owner] += n
        return True


op_st = st.one_of(
    st.tuples(st.just("plain"), st.sampled_from(OWNERS), st.just(1)),
    st.tuples(st.just("sweep"), st.sampled_from(OWNERS), st.integers(1, 4)),
    st.tuples(st.just("study"), st.sampled_from(OWNERS), st.integers(1, 3)),  # its create: width places
    st.tuples(st.just("later"), st.sampled_from(OWNERS), st.just(1)),  # a study's later child takes one
    st.tuples(st.just("child"), st.integers(0, 30), st.just(0)),  # a submit in flight queues its next child
    st.tuples(st.just("fail"), st.integers(0, 30), st.just(0)),  # ... or gives it up (never queued)
    st.tuples(st.just("end"), st.integers(0, 30), st.just(0)),  # ... or ends: its unused places go back
    st.tuples(st.just("start"), st.integers(0, 30), st.just(0)),  # a finish, then the pass starts runs
    st.tuples(st.just("cancel"), st.integers(0, 30), st.just(0)),  # a waiting run is cancelled
)


@settings(max_examples=400, deadline=None)
@given(max_queued=st.integers(1, 6), max_running=st.integers(0, 2), ops=st.lists(op_st, max_size=60))
def test_interleaved_mixed_submits_never_pass_the_cap_and_refuse_as_a_sequential_order_would(
        max_queued, max_running, ops):
    quotas = Quotas(max_running=max_running, max_queued=max_queued)
    q = RunQueue(Limits(cpu=1), slots=["cpu"])
    q.quotas = quotas
    model = Model(quotas)
    flight: list[Submit] = []
    queued_ids: list[str] = []
    order = 0

    def enqueue(owner: str | None, reservation: Reservation | None) -> None:
        nonlocal order
        order += 1
        q.submit(Run(f"r{order}", order, "cpu", owner=owner), reservation=reservation)
        queued_ids.append(f"r{order}")

    def end(s: Submit) -> None:
        unused = s.to_queue + s.given_up
        assert q.release_owner_room(s.reservation) == unused
        model.counted[s.owner] -= unused
        flight.remove(s)

    for kind, a, n in ops:
        if kind in ("plain", "sweep", "study", "later"):
            owner = a
            admitted = model.admits(owner, n)
            try:
                if kind == "plain":  # checked and queued in one call
                    enqueue(owner, None)
                else:
                    reservation = q.reserve_owner_room(owner, n)
                    flight.append(Submit(owner, reservation, n))
            except SubmitError as err:
                assert err.code == OWNER_QUEUE_FULL and err.status == 429
                assert not admitted, "refused where the sequential order admits"
                continue
            assert admitted, "admitted where the sequential order refuses"
        elif kind in ("child", "fail", "end") and flight:
            s = flight[a % len(flight)]
            if kind == "end" or not s.to_queue:
                end(s)
            elif kind == "child":
                enqueue(s.owner, s.reservation)  # never refused: its place was reserved
                s.to_queue -= 1
            else:
                s.to_queue -= 1
                s.given_up += 1
        elif kind == "start":
            running = q.running()
            if running:
                q.finish(running[a % len(running)].run_id)
            for placement in q.schedule():
                run = next(r for r in q.running() if r.run_id == placement.run_id)
                model.counted[run.owner] -= 1
        elif kind == "cancel" and queued_ids:
            run_id = queued_ids[a % len(queued_ids)]
            waiting = {r.run_id: r for r in q.waiting()}
            if run_id in waiting and q.cancel(run_id):
                model.counted[waiting[run_id].owner] -= 1
        waiting = Counter(r.owner for r in q.waiting())
        reserved = Counter()
        for s in flight:
            reserved[s.owner] += s.reservation.left
        for owner in OWNERS:
            assert waiting[owner] <= max_queued, (owner, waiting)
            assert waiting[owner] + reserved[owner] <= max_queued
            assert q.owner_counts(owner)[1] == waiting[owner]
            assert model.counted[owner] == waiting[owner] + reserved[owner], owner
    for s in list(flight):
        end(s)
    assert all(q.has_owner_room(o, max_queued - Counter(r.owner for r in q.waiting())[o]) for o in OWNERS)
