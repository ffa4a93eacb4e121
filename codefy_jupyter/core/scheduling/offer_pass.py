"""One offer pass of the scheduler (queue.py's docstring has the rules): candidates in priority
order, one start at a time, with reservations, the seeded gate and worker choices. Pure; the same
pass runs for real (`schedule`) and as a dry run on copies (`reasons`)."""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field
from typing import Iterable, Mapping, NamedTuple

from codefy_jupyter.core.scheduling import memory_ledger as ml
from codefy_jupyter.core.scheduling import placement as wp
from codefy_jupyter.core.scheduling import quotas as qt
from codefy_jupyter.core.scheduling.device_sets import KIND_REQUESTS, Notice
from codefy_jupyter.core.scheduling.placement import ANY
from codefy_jupyter.core.scheduling.scheduler_values import INTERACTIVE, QUEUED, Run
from codefy_jupyter.core.scheduling.slot_groups import (
    DISCONNECTED, DRAINING, LOCAL, OFFLINE, Topology, WorkerOffer, slot_name,
)


class Held(NamedTuple):
    """An executing run: where it runs, the slots it holds, and the groups those counted against
    when it started (kept, so a worker that changes or leaves cannot unbalance the counts). A
    tuple: one is made per start, and a frozen dataclass costs several times more to build."""

    run: Run
    worker: str
    slots: tuple[str, ...]
    groups: tuple[str, ...]


@dataclass
class PassState:
    """Bookkeeping of one offer pass; reason() runs the same pass on a copy and throws it away."""

    used: dict[str, int]  # slot -> units
    group_used: dict[str, int]  # group -> units
    running: dict[str, Held]
    commit: bool
    holding: Mapping[str, Iterable[str]]  # group -> slots with a run on them when the pass began
    reserved: dict[str, list[str]] = field(default_factory=dict)  # group -> earlier waiting heads
    gate_claim: str | None = None
    seeded_running: str | None = None
    started: list[Held] = field(default_factory=list)
    reasons: dict[str, Notice | None] = field(default_factory=dict)
    limits: dict[str, int] = field(default_factory=dict)  # group -> limit, computed once a pass
    heads: dict[str, str] = field(default_factory=dict)  # queue key -> the last head offered there
    # group shared by memory -> what earlier waiting heads reserve there (memory_ledger.py)
    mem_reserved: dict[str, list[ml.Holder]] = field(default_factory=dict)
    # owner -> queued-lane runs executing, those this pass started included (quotas.py)
    owner_running: dict[str | None, int] = field(default_factory=dict)
    capped: set[str | None] = field(default_factory=set)  # owners at their running cap


def holding_of(running: dict[str, Held]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for held in running.values():
        for slot, group in zip(held.slots, held.groups):
            out.setdefault(group, set()).add(slot)
    return out


def hold(held: Held, used: dict[str, int], group_used: dict[str, int], running: dict[str, Held]) -> None:
    """Count an executing run on its slots and groups."""
    running[held.run.run_id] = held
    for slot, group in zip(held.slots, held.groups):
        used[slot] = used.get(slot, 0) + 1
        group_used[group] = group_used.get(group, 0) + 1


class OfferPass:
    """The queue's waiting runs and workers as one pass sees them. On a real pass (commit=True) the
    runs it starts leave `waiting`, `interactive_waiting` and `queues`, which are the queue's own
    (shared, not copied); a dry pass leaves them alone."""

    def __init__(self, *, queues: dict[str, deque[Run]], interactive_waiting: dict[str, Run],
                 waiting: dict[str, Run], workers: dict[str, WorkerOffer], one_shot_taken: set[str],
                 topology: Topology, mount_label: str = "data",
                 memory: Mapping[str, ml.CardMemory] | None = None, context_mib: int = 0,
                 quotas: qt.Quotas | None = None, owner_running: Mapping[str | None, int] | None = None) -> None:
        self._queues = queues
        self._interactive_waiting = interactive_waiting
        self._waiting = waiting
        self._workers = workers
        self._one_shot_taken = one_shot_taken
        self._topology = topology
        self._mount_label = mount_label
        self._memory = memory or {}
        self._context_mib = context_mib
        # Without a running cap the pass does no quota work at all (not even a copy of the counts).
        self._quotas = quotas if quotas is not None and quotas.caps_running else None
        self._owner_running = owner_running or {}

    def workers(self) -> list[WorkerOffer]:
        return [self._workers[k] for k in sorted(self._workers)]

    def topology(self) -> Topology:
        return self._topology

    def run(self, used: dict[str, int], group_used: dict[str, int], running: dict[str, Held],
            commit: bool, holding: Mapping[str, Iterable[str]] | None = None) -> PassState:
        """Offer candidates in priority order, one start at a time (queue.py's docstring). With
        commit=False this is a dry run on copies, used to explain waits. `holding`: that of
        `running` (`holding_of`), which the pass only reads."""
        holding = holding_of(running) if holding is None else holding
        state = PassState(used=used, group_used=group_used, running=running, commit=commit, holding=holding,
                          seeded_running=next((h.run.run_id for h in running.values()
                                               if h.run.seeded and h.worker == LOCAL), None))
        if self._quotas is not None:
            state.owner_running = dict(self._owner_running)
            state.capped = {o for o, n in state.owner_running.items() if qt.capped(self._quotas, o, n) is not None}
        self._out_of_turn(state)
        # (lane rank, submit order): interactive runs first, then queue heads, oldest first.
        heap: list[tuple[int, int, str]] = [(0, r.order, r.run_id) for r in self._interactive_waiting.values()]
        at: dict[str, int] = {}  # index of each queue's head in this pass
        for key, queue in self._queues.items():
            i = self._next_waiting(queue, 0, state)
            if i < len(queue):
                at[key] = i
                heap.append((1, queue[i].order, key))
        heapq.heapify(heap)
        while heap:
            rank, _, ref = heapq.heappop(heap)
            run = self._interactive_waiting[ref] if rank == 0 else self._queues[ref][at[ref]]
            if rank == 1 and run.owner in state.capped:  # its owner reached the cap since it was offered
                self._offer_next(heap, at, ref, state)
                continue
            why, choice = self._evaluate(run, state)
            state.reasons[run.run_id] = why
            if rank == 1:
                state.heads[ref] = run.run_id
            if choice is None:
                continue
            self._start(run, choice, state)
            if rank == 1:
                self._offer_next(heap, at, ref, state)
        if commit:
            self._drop_started(state)
        return state

    def _offer_next(self, heap: list[tuple[int, int, str]], at: dict[str, int], ref: str, state: PassState) -> None:
        queue = self._queues[ref]
        i = self._next_waiting(queue, at[ref] + 1, state)
        if i < len(queue):
            at[ref] = i
            heapq.heappush(heap, (1, queue[i].order, ref))

    def over_quota(self, run: Run, state: PassState) -> Notice | None:
        """`owner_quota` for a queued-lane run whose owner has reached the running cap, else None."""
        if self._quotas is None or run.lane != QUEUED:
            return None
        running = state.owner_running.get(run.owner, 0)
        limit = qt.capped(self._quotas, run.owner, running)
        return None if limit is None else qt.reason_owner_quota(run.owner, running, limit)

    @staticmethod
    def _next_waiting(queue: deque[Run], i: int, state: PassState) -> int:
        """The next run of the queue to offer: not started out of turn, and not one whose owner is at
        their running cap. A capped run holds nothing (no reservation, no gate claim) and gets no
        reason here (`over_quota` answers that when asked): the run behind it is offered in its
        place, so one owner's waiting runs never block another's. Its owner's count only rises
        during a pass, so a run passed over stays passed over."""
        capped, running = state.capped, state.running
        if capped:
            while i < len(queue) and (queue[i].owner in capped or queue[i].run_id in running):
                i += 1
            return i
        while i < len(queue) and queue[i].run_id in running:  # started out of turn
            i += 1
        return i

    def _drop_started(self, state: PassState) -> None:
        started: dict[str, set[str]] = {}
        for held in state.started:
            if held.run.lane == QUEUED:
                started.setdefault(held.run.queue_key, set()).add(held.run.run_id)
        for key, ids in started.items():
            queue = self._queues[key]
            left = len(ids)
            while queue and queue[0].run_id in ids:  # the usual case: a prefix started
                queue.popleft()
                left -= 1
            if left:  # a run started out of turn (a one-shot agent's --run-id)
                self._queues[key] = queue = deque(r for r in queue if r.run_id not in ids)
            if not queue:
                del self._queues[key]

    def _out_of_turn(self, state: PassState) -> None:
        """A one-shot agent started with --run-id takes its run out of turn, before anything else."""
        if not self._workers:
            return
        for offer in self.workers():
            run = self._waiting.get(offer.run_id or "")
            if not (offer.one_shot and run is not None and run.lane == QUEUED and run.run_id not in state.running):
                continue
            if run.pool is None and run.worker != offer.name:
                continue
            if run.owner in state.capped:
                continue
            choices = self._one_shot_choices(run, [offer], state)
            for choice in choices:
                why, ok = self._check(run, choice[1], state, here=False, fixed=False)
                if ok:
                    self._start(run, choice, state)
                    break

    def _limit(self, group: str, state: PassState) -> int:
        if group not in state.limits:
            state.limits[group] = self.topology().group_limit(group, state.holding.get(group, ())).limit
        return state.limits[group]

    def _evaluate(self, run: Run, state: PassState) -> tuple[Notice | None, tuple[str, tuple[str, ...]] | None]:
        """(wait reason, where to start it now or None) for one candidate."""
        if run.is_local:
            slots = run.slots if run.lane == QUEUED else ()
            why, ok = self._check(run, slots, state, here=True, fixed=True)
            return why, ((LOCAL, slots) if ok else None)
        choices, why, fixed = self._choices(run, state)
        if not choices:
            return why, None
        reasons = []
        for provider, slots in choices:
            why, ok = self._check(run, slots, state, here=provider == LOCAL, fixed=fixed)
            if ok:
                return None, (provider, slots)
            reasons.append(why)
        # Several choices all taken: waiting its turn, unless none of them was simply full.
        return (reasons[0] if fixed or None not in reasons else None), None

    def _serves_files(self, run: Run, offer: WorkerOffer) -> bool:
        """Whether the worker can reach the files the run uses (placement.storage_backend)."""
        if run.files == "none":
            return True
        return wp.storage_backend(run.files, same_machine=self.topology().same_machine(offer),
                                  has_label=offer.has_label, transfer=offer.transfer) is not None

    def _choices(self, run: Run, state: PassState) -> tuple[list[tuple[str, tuple[str, ...]]], Notice | None, bool]:
        """(where the run could go now, best first; why nowhere; whether its slots are fixed, so that
        it reserves them while it waits at the front: a named worker's concrete device or set)."""
        need = wp.wanted(run.device, run.devices)
        if run.pool is not None:
            offers = [o for o in self.workers() if o.one_shot and (o.run_id is None or o.run_id == run.run_id)]
            choices = self._one_shot_choices(run, offers, state)
            if not choices and any(not self._serves_files(run, o) for o in offers if o.accepting):
                return [], wp.reason_storage(run.files, ANY, self._mount_label, run.files_why), False
            return choices, (None if choices else wp.reason_one_shot_pool(need)), False
        if run.worker == ANY:
            choices, draining = [], []
            lacking_files = False
            for offer in self.workers():
                if offer.one_shot or not offer.catalog_complete:
                    continue
                if not self._serves_files(run, offer):
                    lacking_files = lacking_files or offer.accepting
                    continue
                devs = wp.device_choices(run.device, run.devices, offer.device_names())
                if devs and offer.state == DRAINING:
                    draining.append(offer.name)
                elif devs and offer.accepting:
                    choices += [(offer.name, tuple(slot_name(offer.name, d) for d in ds)) for ds in devs]
            here = wp.local_choice(run.device, run.devices, self.topology().local_slots)
            if here is not None:
                choices.append((LOCAL, here))
            if not choices and lacking_files:
                return [], wp.reason_storage(run.files, ANY, self._mount_label, run.files_why), False
            return choices, (None if choices else wp.reason_no_offer(need, ANY, draining)), False
        offer = self._workers.get(run.worker)
        if offer is None or offer.state in (DISCONNECTED, OFFLINE):
            if offer is not None and offer.one_shot:
                return [], wp.reason_one_shot_start(run.worker), False
            return [], wp.reason_disconnected(run.worker), False
        if offer.state == DRAINING:
            return [], wp.reason_draining(run.worker), False
        if not self._serves_files(run, offer):
            return [], wp.reason_storage(run.files, offer.name, self._mount_label, run.files_why), False
        if offer.one_shot:
            if offer.run_id is not None and offer.run_id != run.run_id:
                return [], wp.reason_one_shot_run_id(offer.name, offer.run_id,
                                                     self._who(offer.run_id, state)["name"]), False
            choices = self._one_shot_choices(run, [offer], state)
            if not choices and self._one_shot_busy(offer, state):
                return [], wp.reason_one_shot_taken(offer.name), False
            return choices, (None if choices else wp.reason_no_offer(need, offer.name)), False
        devs = wp.device_choices(run.device, run.devices, offer.device_names())
        if not devs:
            return [], wp.reason_no_offer(need, offer.name), False
        return ([(offer.name, tuple(slot_name(offer.name, d) for d in ds)) for ds in devs], None,
                run.device not in KIND_REQUESTS)

    def _one_shot_busy(self, offer: WorkerOffer, state: PassState) -> bool:
        return offer.name in self._one_shot_taken or any(h.worker == offer.name for h in state.running.values())

    def _one_shot_choices(self, run: Run, offers: list[WorkerOffer],
                          state: PassState) -> list[tuple[str, tuple[str, ...]]]:
        """A one-shot worker takes one run, ever: connected, not draining, nothing taken yet."""
        return [(o.name, tuple(slot_name(o.name, d) for d in ds)) for o in offers
                if o.one_shot and o.accepting and not self._one_shot_busy(o, state) and self._serves_files(run, o)
                for ds in wp.device_choices(run.device, run.devices, o.device_names())]

    def _check(self, run: Run, slots: tuple[str, ...], state: PassState, *, here: bool,
               fixed: bool) -> tuple[Notice | None, bool]:
        """(wait reason, may start now) for one run on one choice of slots. `here`: the choice is
        this server's process (the seeded gate applies). `fixed`: the run's only choice, so a
        blocked run records its hold (reservations, the gate claim)."""
        if here and state.seeded_running is not None:
            return said("seeded_run_executing", self._who(state.seeded_running, state)), False
        if here and state.gate_claim is not None:
            return said("waiting_for_seeded_run", self._who(state.gate_claim, state)), False
        topo = self.topology()
        counted = slots
        if not here and any(topo.shared_by_memory(topo.group(s)) for s in slots):
            why = self._check_memory(run, slots, state, fixed=fixed)
            if why is not None:
                return why, False
            counted = tuple(s for s in slots if not topo.shared_by_memory(topo.group(s)))
        reserved_by: tuple[str, str] | None = None
        busy_set: list[str] = []
        own_full = False
        for slot in counted:
            group = topo.group(slot)
            room = self._limit(group, state) - state.group_used.get(group, 0)
            holders = state.reserved.get(group, ())
            if room - len(holders) >= 1:
                continue
            if room >= 1 and reserved_by is None:
                reserved_by = (slot, holders[0])
            elif room < 1 and slot == slots[0]:
                own_full = True
            elif room < 1:
                busy_set.append(slot)
        blocked = reserved_by is not None or busy_set or own_full
        # Only a seeded run here asks what else runs here (a scan of the running runs per check).
        local_running = [h for h in state.running.values() if h.worker == LOCAL] if here and run.seeded else []
        alone_blocked = bool(local_running)
        if (blocked or alone_blocked) and fixed:
            for slot in slots:
                state.reserved.setdefault(topo.group(slot), []).append(run.run_id)
            if alone_blocked and not blocked:
                state.gate_claim = run.run_id
        if reserved_by is not None:
            slot, holder = reserved_by
            return said("device_reserved", {"device": slot, **self._who(holder, state)}), False
        if busy_set:
            return said("waiting_for_set_devices", {"devices": busy_set}), False
        if alone_blocked and (not own_full or any(slots[0] not in h.slots or h.run.lane == INTERACTIVE
                                                  for h in local_running)):
            return said("waiting_to_run_alone", {"running": len(local_running)}), False
        return None, not (own_full or alone_blocked)

    def _who(self, run_id: str, state: PassState) -> dict[str, str | None]:
        """The params naming another run in a reason: its id, and its name for the words."""
        run = self._waiting.get(run_id)
        held = state.running.get(run_id)
        found = run if run is not None else held.run if held is not None else None
        return {"run_id": run_id, "name": found.name if found is not None else None}

    def _need(self, run: Run) -> int | None:
        return None if run.memory_mib is None else run.memory_mib + self._context_mib

    def _check_memory(self, run: Run, slots: tuple[str, ...], state: PassState, *, fixed: bool) -> Notice | None:
        """The ledger of every card of the choice shared by memory (memory_ledger.py), instead of
        its count limit. A blocked run whose slots are fixed reserves its need there."""
        topo = self.topology()
        groups = [(s, topo.group(s)) for s in slots if topo.shared_by_memory(topo.group(s))]
        first: Notice | None = None
        for slot, group in groups:
            holders = [ml.Holder(h.run.run_id, self._need(h.run)) for h in state.running.values() if group in h.groups]
            holders += state.mem_reserved.get(group, ())
            card = next((self._memory[m] for m in topo.members(group) if m in self._memory), None)
            why = ml.admit(run.memory_mib, self._context_mib, card, holders, slot=slot)
            if why is not None and run.memory_mib is not None:
                why = ml.raised(why, run.raised_from_gib, run.memory_mib)
            if why is not None and first is None:
                first = why
        if first is not None and fixed:
            for _, group in groups:
                state.mem_reserved.setdefault(group, []).append(ml.Holder(run.run_id, self._need(run)))
        return first

    def _start(self, run: Run, choice: tuple[str, tuple[str, ...]], state: PassState) -> None:
        worker, slots = choice
        topo = self.topology()
        held = Held(run, worker, slots if run.lane == QUEUED else (),
                     tuple(topo.group(s) for s in slots) if run.lane == QUEUED else ())
        hold(held, state.used, state.group_used, state.running)
        state.started.append(held)
        if self._quotas is not None and run.lane == QUEUED:
            count = state.owner_running[run.owner] = state.owner_running.get(run.owner, 0) + 1
            if qt.capped(self._quotas, run.owner, count) is not None:
                state.capped.add(run.owner)
        if run.seeded and worker == LOCAL:
            state.seeded_running = run.run_id
        # On a dry pass the waiting runs are left alone; on a real one the run moves over.
        if state.commit:
            del self._waiting[run.run_id]
            if run.lane == INTERACTIVE:
                del self._interactive_waiting[run.run_id]
            offer = self._workers.get(worker)
            if offer is not None and offer.one_shot:
                self._one_shot_taken.add(worker)


said = Notice.worded  # a reason in the message catalog's words (wire/messages.json)


def behind(head: Run, why: Notice) -> Notice:
    """The reason of a run behind `head` in its queue, when the head waits for more than its turn:
    the run is not waiting for runs that can start, so it says which run it waits behind (by name)
    and why that one waits (`ahead`: the head's own reason; `code` kept for scripts)."""
    return said("behind_waiting_run", {"run_id": head.run_id, "name": head.name, "queue": head.queue_key,
                                       "code": why.code, "ahead": why.to_dict()})
