"""Property tests of worker placement: random submits (local, named workers, any; devices, kinds,
sets; seeded), finishes, cancels and worker state changes over a fixed fleet in which some slots are
one physical device (this server's cards by UUID, a same-machine worker's cpu, two workers sharing
a card, an SSH tunnel that must not count as same-machine).

After every call the driver schedules (as RunService does) and checks, against a model written
here (not the scheduler's own topology): never over a limit counted per physical device; FIFO
within a queue; each placement goes where its target allows (a connected worker, the right devices,
`any` in the allowed order of eligibility, this server never for a renumbered CUDA set); a seeded
run here executes alone among this server's runs. At the end every worker connects and finishing
runs drains everything: no deadlock.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from codefy_jupyter.core.scheduling.queue import (
    CONNECTED, DISCONNECTED, DRAINING, Limits, LocalMachine, OfferedDevice, Run, RunQueue, SubmitError,
    WorkerOffer,
)

MID, OTHER = "m" * 64, "o" * 64
LOCAL_CARDS = (OfferedDevice("cuda:0", "L0"), OfferedDevice("cuda:1", "L1"))
# name -> (devices, loopback, machine id, missing types)
FLEET = {
    "a": ((OfferedDevice("cuda:0", "X"), OfferedDevice("cuda:1", "Y")), False, OTHER, frozenset()),
    "b": ((OfferedDevice("cuda:0", "Y"), OfferedDevice("cuda:1")), False, None, frozenset()),
    "same": ((OfferedDevice("cuda:0", "L1"),), True, MID, frozenset()),
    "tun": ((OfferedDevice("cuda:0"),), True, OTHER, frozenset()),
    "old": ((OfferedDevice("cuda:0", "X"),), False, None, frozenset({"Old"})),
}
# Which physical device each slot is (the model the checks use).
PHYSICAL = {
    "cpu": "cpu@server", "cuda:0": "L0", "cuda:1": "L1",
    "a/cpu": "cpu@other", "a/cuda:0": "X", "a/cuda:1": "Y",
    "b/cpu": "b/cpu", "b/cuda:0": "Y", "b/cuda:1": "b/cuda:1",
    "same/cpu": "cpu@server", "same/cuda:0": "L1",
    "tun/cpu": "cpu@other", "tun/cuda:0": "tun/cuda:0",
    "old/cpu": "old/cpu", "old/cuda:0": "X",
}
WORKERS = sorted(FLEET)

target_st = st.sampled_from(["local"] * 3 + ["any"] * 3 + WORKERS + ["a", "b", "same"])
device_st = st.sampled_from(["cpu", "cuda:0", "cuda:1", "cuda", ("cuda:0", "cuda:1"), ("cuda:1", "cuda:0")])
submit_st = st.tuples(st.just("submit"), target_st, device_st, st.sampled_from([False] * 5 + [True]))
finish_st = st.tuples(st.just("finish"), st.integers(0, 50))
cancel_st = st.tuples(st.just("cancel"), st.integers(0, 60))
state_st = st.tuples(st.just("state"), st.sampled_from(WORKERS),
                     st.sampled_from([CONNECTED, CONNECTED, DRAINING, DISCONNECTED]))
ops_st = st.lists(st.one_of(submit_st, submit_st, submit_st, finish_st, cancel_st, state_st), max_size=45)
own_limits_st = st.dictionaries(st.sampled_from(WORKERS), st.dictionaries(
    st.sampled_from(["cpu", "cuda:0", "cuda:1"]), st.integers(1, 3), min_size=1, max_size=2), max_size=3)


class Driver:
    def __init__(self, gpu: int, cpu: int, own: dict[str, dict[str, int]]) -> None:
        self.limits = Limits(gpu=gpu, cpu=cpu)
        self.own = own
        self.q = RunQueue(self.limits, slots=("cpu", "cuda:0", "cuda:1"), local=LocalMachine(MID, LOCAL_CARDS))
        self.state = {name: CONNECTED for name in FLEET}
        for name in FLEET:
            self.set_state(name, CONNECTED)
        self.order = 0
        self.ids: list[str] = []
        self.started: list[str] = []

    def offer(self, name: str) -> WorkerOffer:
        devices, loopback, mid, missing = FLEET[name]
        limits = {d: n for d, n in self.own.get(name, {}).items() if d == "cpu" or any(x.device == d for x in devices)}
        return WorkerOffer(name, self.state[name], devices, mid, loopback, missing, limits)

    def set_state(self, name: str, state: str) -> None:
        self.state[name] = state
        self.q.set_worker(self.offer(name))
        self.schedule()

    # -- the model --

    def slot_limit(self, slot: str) -> int:
        worker, _, device = slot.rpartition("/")
        if not worker:
            return self.limits.limit(slot)
        if device in self.own.get(worker, {}):
            return self.own[worker][device]
        if worker == "same" and PHYSICAL[slot] in ("cpu@server", "L1"):
            return self.limits.limit("cuda:1" if device == "cuda:0" else "cpu")
        return self.limits.limit(slot)

    def device_limit(self, physical: str, holding: set[str]) -> int:
        def counts(slot: str) -> bool:
            worker = slot.rpartition("/")[0]
            return not worker or slot in holding or self.state[worker] in (CONNECTED, DRAINING)
        slots = [s for s, p in PHYSICAL.items() if p == physical]
        return min(self.slot_limit(s) for s in (s for s in slots if counts(s)))

    def held(self) -> dict[str, tuple[str, ...]]:
        return {r.run_id: self.q.placement(r.run_id).slots for r in self.q.running()}

    # -- calls --

    def submit(self, target: str, device, seeded: bool) -> None:
        self.order += 1
        devices = device if isinstance(device, tuple) else ()
        dev = devices[0] if devices else device
        if target == "local":
            dev = "cuda:0" if dev == "cuda" else dev
            devices = devices or (dev,)
        elif dev != "cuda" and not devices:
            devices = (dev,)
        run = Run(f"r{self.order}", self.order, dev, devices, seeded, worker=target)
        try:
            self.q.submit(run, node_types={"Add"})
        except SubmitError as err:
            assert err.status == 400 and target != "local"
            assert self.q.get(run.run_id) is None
            return
        self.ids.append(run.run_id)
        self.schedule()

    def finish(self, index: int) -> None:
        running = self.q.running()
        if running:
            self.q.finish(running[index % len(running)].run_id)
        self.schedule()

    def cancel(self, index: int) -> None:
        if self.ids:
            rid = self.ids[index % len(self.ids)]
            was_waiting = self.q.is_waiting(rid)
            assert self.q.cancel(rid) is was_waiting
            assert self.q.get(rid) is None or not was_waiting and self.q.is_running(rid)
            self.schedule()

    # -- invariants --

    def schedule(self) -> None:
        waiting_before = {r.run_id: r for r in self.q.waiting()}
        placements = self.q.schedule()
        held = self.held()
        used = Counter(PHYSICAL[s] for slots in held.values() for s in slots)
        holding: dict[str, set[str]] = {}
        for slots in held.values():
            for s in slots:
                holding.setdefault(PHYSICAL[s], set()).add(s)
        waiting = self.q.waiting()
        for p in placements:
            run = waiting_before[p.run_id]
            self.started.append(p.run_id)
            # FIFO within a queue.
            assert not any(w.queue_key == run.queue_key and w.order < run.order for w in waiting)
            # Never over the limit of a physical device (counted over every provider).
            for s in p.slots:
                physical = PHYSICAL[s]
                assert used[physical] <= self.device_limit(physical, holding[physical]), (p, physical, used)
            self.check_target(run, p)
        assert self.q.schedule() == []
        local = [r for r in self.q.running() if self.q.placement(r.run_id).worker == "local"]
        if any(r.seeded for r in local):
            assert len(local) == 1, local

    def check_target(self, run: Run, p) -> None:
        want = run.devices or (run.device,)
        if run.worker == "local":
            assert p.worker == "local" and p.slots == want
            return
        if p.worker == "local":
            assert run.worker == "any"
            here = ("cuda:0",) if run.device == "cuda" else want
            assert p.slots == here and (here == ("cuda:0",) or not any(d.startswith("cuda") for d in here))
            # Every eligible worker that offers it was full: none could have taken it.
            return
        assert self.state[p.worker] == CONNECTED
        assert run.worker in ("any", p.worker)
        if run.worker == "any":
            assert p.worker != "old"  # lacks node types this server has
        devices = p.devices
        if run.device == "cuda":
            assert len(devices) == 1 and devices[0].startswith("cuda:")
        else:
            assert devices == want

    def drain(self) -> None:
        for name in FLEET:
            self.set_state(name, CONNECTED)
        for _ in range(len(self.ids) + 2):
            running = self.q.running()
            if not running:
                break
            self.q.finish(running[0].run_id)
            self.schedule()
        assert self.q.waiting() == [] and self.q.running() == [], (self.q.waiting(), self.q.reasons())
        assert sorted(self.started) == sorted(set(self.started))


def play(gpu: int, cpu: int, own, ops) -> Driver:
    d = Driver(gpu, cpu, own)
    for op in ops:
        if op[0] == "submit":
            d.submit(op[1], op[2], op[3])
        elif op[0] == "finish":
            d.finish(op[1])
        elif op[0] == "cancel":
            d.cancel(op[1])
        else:
            d.set_state(op[1], op[2])
    d.drain()
    return d


@settings(max_examples=200, deadline=None)
@given(gpu=st.integers(1, 2), cpu=st.integers(1, 3), own=own_limits_st, ops=ops_st)
def test_random_fleets_keep_every_rule_and_drain(gpu, cpu, own, ops):
    d = play(gpu, cpu, own, ops)
    cancelled = set(d.ids) - set(d.started)
    assert len(d.started) + len(cancelled) == len(d.ids)


@settings(max_examples=50, deadline=None)
@given(gpu=st.integers(1, 2), cpu=st.integers(1, 3), own=own_limits_st, ops=ops_st)
def test_the_same_calls_always_give_the_same_placements(gpu, cpu, own, ops):
    assert play(gpu, cpu, own, ops).started == play(gpu, cpu, own, ops).started
