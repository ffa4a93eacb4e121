"""The run scheduler: per-slot limits, FIFO queues, device sets, the seeded gate, lanes, workers.

Pure and synchronous: no I/O, no asyncio, no clock. `RunService` owns one `RunQueue`, calls
`submit`, `finish` and `cancel` as things happen (and `set_worker` / `remove_worker` as workers
connect, report, drain, disconnect or leave), then `schedule()` and starts what it answers.
The same sequence of calls always gives the same placements.

Words
- A *slot* is one device on one machine, named by a string. This server's slots are its bare
  canonical devices (`cpu`, `cuda:0`, `mps:0`); a worker's are `<worker>/<device>` in the worker's
  own numbering. A slot admits `Limits.limit(slot)` queued-lane runs at once (GPU 1, CPU 2, or an
  override; a worker slot see core/scheduling/slot_groups.py).
- A *group* is the slots of one physical device (core/scheduling/slot_groups.py): a CUDA card by NVML UUID
  across this server and every worker offering it, and the cpu/mps:0 of a same-machine worker with
  this server's. Runs count against the group and the group's limit is its smallest. Without
  workers every slot is its own group, so the rules below read the same with "slot".
- A *queue* is a FIFO keyed by `Run.queue_key`: the device for a local run; `<worker>/<device>`,
  `any/<device>` or `pool:one-shot/<device>` for a worker run (the device asked for, which may be
  the kind `cuda`). A device-set run waits in its first device's queue and needs one unit on every
  slot of its set; it takes them together and `finish` gives them all back.
- A *head* is the first waiting run of a queue.

How `schedule()` decides (one pass, one start at a time)
Candidates are offered in priority order: waiting interactive runs by submit order, then queue
heads by submit order. When a head starts, its queue's next run becomes a head and joins the
offer at its own submit order. So a freed slot goes to the earliest-submitted head among the
queues that need it, and a long line in one queue cannot starve another.

- Reservations. A head that cannot start keeps one unit on each slot it needs against every
  candidate offered after it (that is, submitted later): a later run may start on such a slot only
  if it leaves a unit free for each earlier waiting head. For a limit of 1 this is the seed's rule
  that a device-set run waiting at the front of its queue reserves its cards, first come, first
  served. A reserved card that is free stays idle until the set's other cards free (the seed's
  stated cost). Runs submitted earlier than the set run are offered before it anyway (the
  oldest-head rule), so they are never held back by its reservation. Priorities are fixed by submit
  order, so nothing waits on a later run: no deadlock, and the oldest waiting run starts once the
  runs executing when it became oldest have finished (only interactive runs, bounded by their
  lane's limits, go ahead of it). Within a queue the order is strict FIFO, set runs included.
- The seeded gate. A seeded run executes alone in this process (nothing else alongside it,
  whatever its lane or device; `Placement.seeded` tells the executor to run one node at a time). It starts only when nothing executes here, and
  while it executes nothing else starts. A seeded head whose own slots have room but which waits
  for other runs to finish *claims* the gate: nothing offered after it starts until it has run.
  (A seeded head whose own slots are full only reserves them, like any head, so other devices keep
  working meanwhile; it claims the gate once its turn on its own device comes.)
- Interactive lane (canvas / notebook session runs). Decisions from the seed's Lanes table:
  * It skips the FIFO and does not count against, or wait for, device slots: "an interactive run
    can push a card past that device's queued-lane limit". Queued runs do not wait for it either.
  * Admission refusals are immediate `SubmitError`s with status 503: `interactive_busy` (already
    `interactive_limit` admitted) and `session_busy` (the session already has one). An admitted
    interactive run counts against both until `finish` or `cancel`.
  * The seeded gate still applies ("a seeded sweep ... holds up canvas runs"): while a seeded run
    executes here, an admitted interactive run waits (reason `seeded_run_executing`) and starts
    first when it ends. A seeded *queued* run that is only waiting to run alone does not hold
    interactive runs back: they are offered before every queued run.

Workers (seed: run-queue "Workers", execution architecture "Scheduling"). A run with no target
or `worker: local` is a local run: everything above, and nothing below, applies to it.
- Where a worker run may go (`Placement.worker`, `.slots`, `.device`, `.devices`):
  * a worker by name: that worker's slots for the set, the device, or, for the kind `cuda`, the
    first of its cards with room. It waits while the worker is draining, disconnected or offline.
  * `any`: the first connected, non-draining, catalog-complete (`missing_types` empty) worker in
    name order with room, then this server last; one-shot workers never. This server takes cpu,
    mps:0, `cuda` (= cuda:0) and [cuda:0] only: never a CUDA set that a worker would renumber
    (several cards, or one card other than cuda:0).
  * `pool: one-shot`: a connected one-shot worker that has not taken a run yet, name order. A
    one-shot worker takes exactly one run; one started for a run (`WorkerOffer.run_id`) takes that
    run out of turn, at the start of a pass, and no other.
- Reservations: a head whose slots are fixed (a local run, or a named worker's device or set)
  reserves them while they are busy, as above. A head that could go to several slots (the kind
  `cuda`, `any`, a pool) reserves nothing, and neither does a head waiting for its worker.
- The seeded gate guards this server's process only: a seeded run on a worker neither takes it,
  nor waits for it, nor counts as "running here"; an `any` run that lands here is a run here.
- Refusals at submit (`check_placeable`, target_checks.py; SubmitError 400, params name the field):
  worker_interactive (options.lane), worker_unknown (options.target.worker: never enrolled or
  seen), pool_with_worker (options.target.pool), device_not_offered (the device field: the named
  worker's last report lacks it; for `any`, neither this server nor any seen worker offers it, or
  only this server does and would renumber it), worker_missing_node_types (a named degraded worker
  lacks node types the graph uses), device_auto_unknown (`auto` for a worker that never reported),
  worker_storage_unavailable (a run reading a file outside the data folder, for a named worker on
  another machine).
- `remove_worker` takes the runs waiting for that worker out of the queue and returns them (the
  caller fails them); executing runs keep their slots until `finish`.

Wait reasons (`reason(run_id)`), only for a run that waits for more than its turn; a head whose own
device is full, and a run behind such a head in its queue, is waiting its turn and has none. A run
behind a head that has a reason waits for that too and says so (`behind_waiting_run`):
  seeded_run_executing     {run_id, name}    a seeded run executes here; nothing else may start
  waiting_for_seeded_run   {run_id, name}    an earlier seeded run waits to execute alone
  waiting_to_run_alone     {running}         this seeded run waits for `running` runs to end
  device_reserved          {device, run_id, name}  an earlier waiting run holds the room left on device
  waiting_for_set_devices  {devices}         other devices of this run's set are busy
  worker_disconnected      {worker}          "waiting for worker X to reconnect" (away or offline)
  worker_draining          {worker}          "worker X is draining"
  waiting_for_offer        {devices, worker[, draining]}
                           `any`: "waiting for a worker that offers cuda:0, cuda:1", and when those
                           that would are draining "waiting for a worker that offers cuda: gpu-box
                           is draining"; a named worker that no longer reports the device: "waiting
                           for worker X to offer cuda:1"
  one_shot_pool            {devices, pool}   no one-shot worker offering the device is free
  one_shot_start           {worker}          the named one-shot worker is not connected (it left after its run)
  one_shot_taken           {worker}          the named one-shot worker has taken its run
  one_shot_run_id          {worker, run_id}  the named one-shot worker was started for another run
  behind_waiting_run       {run_id, name, queue, code, ahead}  behind head run_id, which waits with ahead
  waiting_for_storage      {worker, need, label[, why, detail]}  the run uses files (`Run.files`) that the named
                           worker, or every worker that would take it, cannot reach: no mount
                           label, no transfer, not this machine (placement.storage_backend)
  memory_wait              {device, need_mib, free_mib}  a card shared by memory has no room for the
                           run's budget + CUDA context now (memory_ledger.py; free_mib None: no report yet)
  memory_no_budget         {device, whole, running}  a run without a budget waits for the shared card
                           to empty (whole), or a budgeted run waits while such a run has it
  owner_quota              {owner, running, limit}  its owner has `limit` queued-lane runs executing
                           (quotas.py); it holds nothing, and the runs behind it are offered past it
  budget_raised            {device, estimate_gib, memory_gib, need_mib, free_mib}  memory_wait of a run
                           whose accepted estimate was raised at submit (memory_estimate.py)
Cards shared by memory (memory_ledger.py): a worker's CUDA card its agent shares (`WorkerOffer.
shared_memory`), where every online provider of the card shares it, admits runs by `Run.memory_mib`
against the card's ledger (`set_card_memory`, from heartbeats) instead of its count limit. Refusals:
memory_budget_local (a budget with a local run), memory_over_card (more than the named worker's card
holds), memory_unavailable (409: `Run.wait` false and the run would not start in this pass).

API for the control plane (RunService, WorkerRegistry):
  RunQueue(limits, interactive_limit=2, slots=(), local=LocalMachine(machine_id, devices))
  set_local_machine(LocalMachine)        this server's machine-id digest and cards with UUIDs
  set_worker(WorkerOffer) / remove_worker(name) -> [Run]   then schedule()
  resolve_target(worker, option_device, graph_device, target_devices, pool=None) -> ResolvedDevice
  check_placeable(run, node_types=None, device_field=...)   (also done by submit(run, node_types))
  quotas = Quotas(...); reserve_owner_room(owner, n) / release_owner_room(r), has_owner_room(owner),
  owner_counts(owner)                    per-owner caps (submit(run, reservation=r) takes a reserved place)
  adopt(run, worker, slots)              a run already executing on a worker (after a restart)
  release(run_id) -> bool                a worker run whose process exited while its files upload:
                                         slots and card memory free, the run still executing until finish
  placement(run_id), slot_info(provider=None) -> [SlotInfo], same_machine(name), workers()
"""

from __future__ import annotations

from collections import deque
from typing import Iterable, Mapping

from codefy_jupyter.core.scheduling import memory_ledger as ml
from codefy_jupyter.core.scheduling import quotas as qt
from codefy_jupyter.core.scheduling import target_checks as tc
from codefy_jupyter.core.scheduling.device_sets import (  # noqa: F401  (re-exported: one import point for callers)
    KIND_REQUESTS, Notice, ResolvedDevice, SubmitError, device_kind, parse_device_set, resolve_run_device,
    resolve_worker_device,
)
from codefy_jupyter.core.scheduling.limits import (  # noqa: F401  (re-exported)
    Limits, build_limits, parse_concurrency_overrides, slot_device,
)
from codefy_jupyter.core.scheduling.offer_pass import Held, OfferPass, PassState, behind, hold
from codefy_jupyter.core.scheduling.placement import ANY, ONE_SHOT, POOLS  # noqa: F401  (re-exported)
from codefy_jupyter.core.scheduling.scheduler_values import (  # noqa: F401  (re-exported)
    INTERACTIVE, LANES, QUEUED, Placement, QueueStats, Run, SchedulerStatistics, SlotInfo,
)
from codefy_jupyter.core.scheduling.slot_groups import (  # noqa: F401  (re-exported)
    CONNECTED, DISCONNECTED, DRAINING, LOCAL, OFFLINE, WORKER_NAME, LocalMachine, OfferedDevice, Topology,
    WorkerOffer, slot_name, split_slot,
)


class RunQueue:
    """Waiting and executing runs of this server and its workers; see the module docstring."""

    def __init__(self, limits: Limits | None = None, interactive_limit: int = 2, slots: Iterable[str] = (),
                 local: LocalMachine | None = None) -> None:
        if interactive_limit < 1:
            raise ValueError(f"interactive_limit must be at least 1, got {interactive_limit!r}")
        self.limits = limits or Limits()
        self.interactive_limit = interactive_limit
        self._known_slots = tuple(dict.fromkeys(slots))  # always listed by statistics()
        self._queues: dict[str, deque[Run]] = {}
        self._interactive_waiting: dict[str, Run] = {}
        self._waiting: dict[str, Run] = {}
        self._running: dict[str, Held] = {}
        # Worker runs whose process has exited while their files upload (`release`): executing, but
        # holding no device slot or card memory.
        self._released: dict[str, Held] = {}
        # group -> slot -> executing runs on it: `_holding(self._running)` kept up to date as runs
        # start and finish rather than rebuilt on every pass.
        self._holding_now: dict[str, dict[str, int]] = {}
        self._used: dict[str, int] = {}
        self._group_used: dict[str, int] = {}
        self._last_order: int | None = None
        self._local = local or LocalMachine()
        self._workers: dict[str, WorkerOffer] = {}
        self._one_shot_taken: set[str] = set()
        self._topo: Topology | None = None
        self.mount_label = "data"  # CODEFY_MOUNT_LABEL, for wait reasons of runs that use files
        self.cuda_context_mib = ml.DEFAULT_CUDA_CONTEXT_MIB  # CODEFY_EXECUTION_CUDA_CONTEXT_MIB
        self._memory: dict[str, ml.CardMemory] = {}  # worker slot -> its latest memory report
        self.quotas = qt.Quotas()  # CODEFY_RUN_QUOTA_* (quotas.py)
        # owner -> queued-lane runs executing, kept as runs move (the running cap counts them); the
        # waiting ones and reserved places are counted by the admission (the queued cap)
        self._owner_running: dict[str | None, int] = {}
        self._admission = qt.Admission()

    # -- workers --

    def set_local_machine(self, local: LocalMachine) -> None:
        """This server's machine id digest and cards (with NVML UUIDs), for same-card grouping."""
        self._local = local
        self._topo = None

    def set_worker(self, offer: WorkerOffer) -> None:
        """Add or replace a worker as it connects, reports, drains, disconnects or goes offline.
        Call `schedule()` after. Runs already executing keep the slots and groups they started with."""
        self._workers[offer.name] = offer
        self._topo = None

    def remove_worker(self, name: str) -> list[Run]:
        """Forget a worker (deleted, revoked). Its waiting runs (those naming it) leave the queue and
        are returned in submit order for the caller to fail; runs executing on it keep their slots
        until `finish`. Unknown names return []."""
        if self._workers.pop(name, None) is None:
            return []
        self._memory = {k: v for k, v in self._memory.items() if split_slot(k)[0] != name}
        self._topo = None
        self._one_shot_taken.discard(name)
        gone = [r for r in self.waiting() if r.worker == name]
        for run in gone:
            self.cancel(run.run_id)
        return gone

    def set_card_memory(self, name: str, cards: Mapping[str, ml.CardMemory | None]) -> None:
        """A worker's latest memory report per device (heartbeat or hello), for the ledgers of its
        cards shared by memory. A device mapped to None forgets its report."""
        for device, card in cards.items():
            slot = slot_name(name, device)
            if card is None:
                self._memory.pop(slot, None)
            else:
                self._memory[slot] = card

    def worker(self, name: str) -> WorkerOffer | None:
        return self._workers.get(name)

    def workers(self) -> list[WorkerOffer]:
        return [self._workers[k] for k in sorted(self._workers)]

    def topology(self) -> Topology:
        if self._topo is None:
            self._topo = Topology(self._local, self._workers, self.limits, self._known_slots)
        return self._topo

    def same_machine(self, name: str) -> bool:
        """The worker is on this server's machine (loopback peer AND the same machine id)."""
        offer = self._workers.get(name)
        return offer is not None and self.topology().same_machine(offer)

    # -- submit-time --

    def resolve_target(self, worker: str | None, option_device: str | None, graph_device: str | None,
                       target_devices: Iterable[str] | None, pool: str | None = None) -> ResolvedDevice:
        """The device and set a run asks for, or SubmitError (core/scheduling/target_checks.py)."""
        return tc.resolve_target(self.topology(), self._workers, worker, option_device, graph_device, target_devices,
                                 pool)

    def check_placeable(self, run: Run, node_types: Iterable[str] | None = None, *,
                        device_field: str = "options.device") -> None:
        """SubmitError (400) for a worker run that could never run as asked (core/scheduling/
        target_checks.py); nothing for a run that may wait, or a local run without a budget."""
        tc.check_placeable(run, self.topology(), self._workers, self._memory, node_types=node_types,
                           device_field=device_field, mount_label=self.mount_label, context_mib=self.cuda_context_mib)

    # -- changes --

    def submit(self, run: Run, node_types: Iterable[str] | None = None, *, device_field: str = "options.device",
               reservation: qt.Reservation | None = None) -> None:
        """Queue a run (queued lane: back of its queue). A worker run is checked first
        (`check_placeable`). An interactive run is admitted or refused at once: SubmitError
        `interactive_busy` / `session_busy`, status 503. A queued-lane run past its owner's
        `max_queued` is refused (429 `owner_queue_full`), counted and queued in this one call; with
        a `reservation` of its owner that holds a place (`reserve_owner_room`) it takes that place."""
        if run.run_id in self._waiting or run.run_id in self._running or run.run_id in self._released:
            raise ValueError(f"run {run.run_id!r} is already in the queue")
        if self._last_order is not None and run.order <= self._last_order:
            raise ValueError(f"submit order must increase: {run.order} after {self._last_order}")
        self.check_placeable(run, node_types, device_field=device_field)
        if run.lane == INTERACTIVE:
            self._admit_interactive(run)
            self._interactive_waiting[run.run_id] = run
        else:
            self._admission.admit(self.quotas, run.owner, reservation)
            self._queues.setdefault(run.queue_key, deque()).append(run)
        self._waiting[run.run_id] = run
        self._last_order = run.order
        if run.memory_mib is not None and not run.wait:
            self._refuse_unless_starts(run)

    def reserve_owner_room(self, owner: str | None, adding: int) -> qt.Reservation:
        """Hold `adding` places of `owner`'s queued cap for runs submitted later (a sweep's or a
        study's children): SubmitError 429 `owner_queue_full` when they do not fit. Give back what
        is not used with `release_owner_room`."""
        return self._admission.reserve(self.quotas, owner, adding)

    def release_owner_room(self, reservation: qt.Reservation) -> int:
        """The places `reservation` still holds go back; how many."""
        return self._admission.release(reservation)

    def has_owner_room(self, owner: str | None, adding: int = 1) -> bool:
        return self._admission.has_room(self.quotas, owner, adding)

    def owner_counts(self, owner: str | None) -> tuple[int, int]:
        """(executing, waiting) queued-lane runs of `owner`."""
        return self._owner_running.get(owner, 0), self._admission.waiting.get(owner, 0)

    def _refuse_unless_starts(self, run: Run) -> None:
        """`wait: false`: a run that the next pass would not start leaves the queue, refused (409)."""
        state = self._dry_pass()
        if any(h.run.run_id == run.run_id for h in state.started):
            return
        why = state.reasons.get(run.run_id) or self._behind(run, state) or Notice(
            "waiting_for_turn", "runs ahead of it hold the device", {})
        self.cancel(run.run_id)
        raise ml.refuse_no_wait(why)

    def _admit_interactive(self, run: Run) -> None:
        admitted = [r for r in (*(h.run for h in self._running.values()), *self._interactive_waiting.values())
                    if r.lane == INTERACTIVE]
        if run.session is not None:
            same = next((r for r in admitted if r.session == run.session), None)
            if same is not None:
                raise SubmitError(
                    "session_busy", f"session {run.session} already has run {same.run_id} in flight; "
                    "an editor session runs one graph at a time", {"session": run.session, "run_id": same.run_id},
                    status=503)
        if len(admitted) >= self.interactive_limit:
            raise SubmitError(
                "interactive_busy", f"{len(admitted)} interactive runs are already in flight "
                f"(at most {self.interactive_limit} at once); try again when one ends",
                {"limit": self.interactive_limit, "running": len(admitted)}, status=503)

    def adopt(self, run: Run, worker: str, slots: Iterable[str]) -> None:
        """Record a run that already executes on `worker` holding `slots` (`<worker>/<device>`), as
        after a control-plane restart. Call `set_worker` for it first (state `disconnected`, its
        devices with UUIDs from the resume point) so the slots join their groups."""
        if run.run_id in self._waiting or run.run_id in self._running or run.run_id in self._released:
            raise ValueError(f"run {run.run_id!r} is already in the queue")
        slots = tuple(slots)
        if run.lane == QUEUED and (not slots or any(split_slot(s)[0] != worker for s in slots)):
            raise ValueError(f"slots {slots!r} are not slots of worker {worker!r}")
        held = Held(run, worker, slots, tuple(self.topology().group(s) for s in slots))
        hold(held, self._used, self._group_used, self._running)
        self._note_holding(held, 1)
        if run.lane == QUEUED:
            _count(self._owner_running, run.owner, 1)
        if self._workers.get(worker) is not None and self._workers[worker].one_shot:
            self._one_shot_taken.add(worker)
        self._last_order = max(self._last_order or run.order, run.order)

    def finish(self, run_id: str) -> Run:
        """An executing run ended: give its slots back (if `release` has not already). KeyError for
        a run that is not executing."""
        held = self._released.pop(run_id, None)
        if held is None:
            held = self._running.pop(run_id)
            self._give_back(held)
        if held.run.lane == QUEUED:
            _count(self._owner_running, held.run.owner, -1)
        return held.run

    def release(self, run_id: str) -> bool:
        """A worker run's process has exited but the run has not ended (its files still upload):
        its device slots and card memory go back now, while it stays executing (`is_running`,
        `placement`, its owner's quota count) until `finish`. Only a worker run holding slots is
        released, once; False otherwise (a local run, a second release, an unknown run). Call
        `schedule()` after a True."""
        held = self._running.get(run_id)
        if held is None or held.worker == LOCAL or held.run.lane != QUEUED:
            return False
        del self._running[run_id]
        self._give_back(held)
        self._released[run_id] = held
        return True

    def is_released(self, run_id: str) -> bool:
        return run_id in self._released

    def _give_back(self, held: Held) -> None:
        for slot, group in zip(held.slots, held.groups):
            for counts, key in ((self._used, slot), (self._group_used, group)):
                counts[key] -= 1
                if not counts[key]:
                    del counts[key]
        self._note_holding(held, -1)

    def _note_holding(self, held: Held, change: int) -> None:
        for slot, group in zip(held.slots, held.groups):
            slots = self._holding_now.setdefault(group, {})
            slots[slot] = slots.get(slot, 0) + change
            if not slots[slot]:
                del slots[slot]
                if not slots:
                    del self._holding_now[group]

    def cancel(self, run_id: str) -> bool:
        """Remove a waiting run at once (and with it any reservation or gate claim it held).
        False for an executing or unknown run: stopping one is cooperative, and the caller calls
        `finish` when it ends."""
        run = self._waiting.pop(run_id, None)
        if run is None:
            return False
        if run.lane == INTERACTIVE:
            del self._interactive_waiting[run_id]
        else:
            queue = self._queues[run.queue_key]
            queue.remove(run)
            if not queue:
                del self._queues[run.queue_key]
            self._admission.left_queue(run.owner)
        return True

    def schedule(self) -> list[Placement]:
        """Start every run the rules allow now, in start order."""
        state = self._offer(self._used, self._group_used, self._running, commit=True, holding=self._holding_now)
        for held in state.started:  # after the pass: it judged every run by the holding it began with
            self._note_holding(held, 1)
            if held.run.lane == QUEUED:
                self._admission.left_queue(held.run.owner)
                _count(self._owner_running, held.run.owner, 1)
        return [self._placement(h) for h in state.started]

    @staticmethod
    def _placement(held: Held) -> Placement:
        run = held.run
        device = split_slot(held.slots[0])[1] if held.slots and not run.is_local else run.device
        return Placement(run.run_id, run.queue_key, device, held.slots if run.lane == QUEUED else (), run.lane,
                         run.seeded, held.worker)

    # -- questions --

    def get(self, run_id: str) -> Run | None:
        held = self._running.get(run_id) or self._released.get(run_id)
        return self._waiting.get(run_id) or (held.run if held else None)

    def placement(self, run_id: str) -> Placement | None:
        """Where an executing run runs (None for a waiting or unknown run)."""
        held = self._running.get(run_id) or self._released.get(run_id)
        return self._placement(held) if held else None

    def is_waiting(self, run_id: str) -> bool:
        return run_id in self._waiting

    def is_running(self, run_id: str) -> bool:
        return run_id in self._running or run_id in self._released

    def waiting(self) -> list[Run]:
        return sorted(self._waiting.values(), key=lambda r: r.order)

    def running(self) -> list[Run]:
        return sorted((h.run for h in self._running.values()), key=lambda r: r.order)

    def position(self, run_id: str) -> int | None:
        """1-based place in its own queue; None for a run that is not waiting in a queue."""
        run = self._waiting.get(run_id)
        if run is None or run.lane != QUEUED:
            return None
        queue = self._queues[run.queue_key]
        # From the back: the run asked about most is the one just submitted, at the end of a queue
        # that may be long.
        for i, other in enumerate(reversed(queue)):
            if other.run_id == run_id:
                return len(queue) - i
        raise AssertionError("waiting run missing from its queue")  # pragma: no cover

    def positions(self) -> dict[str, int]:
        """`position` of every queued waiting run, in one pass over the queues."""
        return {r.run_id: i for q in self._queues.values() for i, r in enumerate(q, 1)}

    def reason(self, run_id: str) -> Notice | None:
        """Why a waiting run waits for more than its turn, or None (see the module docstring)."""
        state = self._dry_pass()
        why = state.reasons.get(run_id)
        run = self._waiting.get(run_id)
        if why is not None or run is None or run.lane != QUEUED:
            return why
        return self._behind(run, state)

    def reasons(self) -> dict[str, Notice]:
        """`reason` of every waiting run that has one, from one dry pass."""
        state = self._dry_pass()
        out = {rid: why for rid, why in state.reasons.items() if why is not None}
        if state.capped:  # the pass offered none of these runs: their owners are at the cap
            offer = self._offer_pass()
            for run in self._waiting.values():
                if run.owner in state.capped and run.lane == QUEUED and run.run_id not in state.running \
                        and run.run_id not in out:
                    out[run.run_id] = offer.over_quota(run, state)
        for key, head_id in state.heads.items():
            head_why = state.reasons.get(head_id)
            if head_why is None:
                continue
            head = self._waiting[head_id]
            for run in self._queues[key]:
                if run.order > head.order and run.run_id not in state.running and run.run_id not in out:
                    out[run.run_id] = behind(head, head_why)
        return out

    def _dry_pass(self) -> PassState:
        return self._offer(dict(self._used), dict(self._group_used), dict(self._running), commit=False,
                           holding=self._holding_now)

    def _behind(self, run: Run, state: PassState) -> Notice | None:
        """A run the pass did not offer: its owner's quota, else the reason of the head it waits
        behind, if that has one."""
        if run.owner in state.capped:
            return self._offer_pass().over_quota(run, state)
        head_id = state.heads.get(run.queue_key)
        head_why = state.reasons.get(head_id) if head_id is not None else None
        if head_why is None or run.run_id in state.running:
            return None
        head = self._waiting[head_id]
        return behind(head, head_why) if run.order > head.order else None

    def statistics(self) -> SchedulerStatistics:
        """Per slot and queue key. A slot's `running` and `limit` are its group's (one physical
        device: every provider's runs count), so for local-only slots they are the slot's own."""
        topo = self.topology()
        holding = self._holding_now
        keys = dict.fromkeys((*self._known_slots, *sorted(self._queues), *sorted(self._used)))
        interactive_on: dict[str, int] = {}
        for held in self._running.values():
            if held.run.lane == INTERACTIVE:
                interactive_on[held.run.device] = interactive_on.get(held.run.device, 0) + 1
        keys.update(dict.fromkeys(sorted(interactive_on)))
        queues = []
        for key in keys:
            group = topo.group(key)
            queues.append(QueueStats(key, len(self._queues.get(key, ())), self._group_used.get(group, 0),
                                     topo.group_limit(group, holding.get(group, ())).limit,
                                     interactive_on.get(key, 0)))
        seeded = next((h.run.run_id for h in self._running.values() if h.run.seeded and h.worker == LOCAL), None)
        return SchedulerStatistics(
            queues=tuple(queues),
            interactive_running=sum(interactive_on.values()),
            interactive_waiting=len(self._interactive_waiting),
            interactive_limit=self.interactive_limit,
            seeded_running=seeded,
        )

    def slot_info(self, provider: str | None = None) -> list[SlotInfo]:
        """Every device of this server (`local`) and of each worker that reported devices, or of one
        provider: its group's limit and units taken, `limited_by`, `same_card`, `shared_with_local`."""
        topo = self.topology()
        holding = self._holding_now
        slots = [*topo.local_slots] if provider in (None, LOCAL) else []
        if provider is None:
            offers = self.workers()
        else:  # one provider's: found directly, GET workers asks once per worker
            one = self._workers.get(provider)
            offers = [one] if one is not None else []
        for offer in offers:
            slots += [slot_name(offer.name, d) for d in offer.device_names()]
        uuids = {d.device: d.uuid for d in self._local.devices}
        rows = []
        for slot in slots:
            who, device = split_slot(slot)
            group = topo.group(slot)
            gl = topo.group_limit(group, holding.get(group, ()))
            uuid = uuids.get(device) if who == LOCAL else self._workers[who].uuid(device)
            rows.append(SlotInfo(slot, who, device, uuid, gl.limit, self._group_used.get(group, 0), gl.limited_by,
                                 tuple(s for s in topo.members(group) if s != slot), topo.shares_local(slot),
                                 self._ledger(group) if topo.shared_by_memory(group) else None))
        return rows

    def _ledger(self, group: str) -> dict:
        """A card shared by memory as the scheduler counts it (for GET /api/workers)."""
        topo = self.topology()
        holders = [ml.Holder(h.run.run_id, None if h.run.memory_mib is None else h.run.memory_mib + self.cuda_context_mib)
                   for h in self._running.values() if group in h.groups]
        card = next((self._memory[m] for m in topo.members(group) if m in self._memory), None)
        return {"free_mib": card.free_mib if card else None, "total_mib": card.total_mib if card else None,
                "committed_mib": sum(h.need_mib or 0 for h in holders),
                "room_mib": ml.room_mib(card, holders) if card else None, "runs": len(holders)}

    def _offer(self, used: dict[str, int], group_used: dict[str, int], running: dict[str, Held],
               commit: bool, holding: Mapping[str, Iterable[str]] | None = None) -> PassState:
        return self._offer_pass().run(used, group_used, running, commit, holding)

    def _offer_pass(self) -> OfferPass:
        return OfferPass(queues=self._queues, interactive_waiting=self._interactive_waiting, waiting=self._waiting,
                         workers=self._workers, one_shot_taken=self._one_shot_taken,
                         topology=self.topology(), mount_label=self.mount_label, memory=self._memory,
                         context_mib=self.cuda_context_mib, quotas=self.quotas, owner_running=self._owner_running)


def _count(counts: dict[str | None, int], key: str | None, change: int) -> None:
    counts[key] = counts.get(key, 0) + change
    if not counts[key]:
        del counts[key]
