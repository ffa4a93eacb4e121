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
- Refusals at submit (`check_placeable`, SubmitError 400, params name the field):
  worker_interactive (options.lane), worker_unknown (options.target.worker: never enrolled or
  seen), pool_with_worker (options.target.pool), device_not_offered (the device field: the named
  worker's last report lacks it; for `any`, neither this server nor any seen worker offers it, or
  only this server does and would renumber it), worker_missing_node_types (a named degraded worker
  lacks node types the graph uses), device_auto_unknown (`auto` for a worker that never reported).
- `remove_worker` takes the runs waiting for that worker out of the queue and returns them (the
  caller fails them); executing runs keep their slots until `finish`.

Wait reasons (`reason(run_id)`), only for a run that waits for more than its turn; a run behind
others in its queue, or a head whose own device is full, is waiting its turn and has none:
  seeded_run_executing     {run_id}          a seeded run executes here; nothing else may start
  waiting_for_seeded_run   {run_id}          an earlier seeded run waits to execute alone
  waiting_to_run_alone     {running}         this seeded run waits for `running` runs to end
  device_reserved          {device, run_id}  an earlier waiting run holds the room left on device
  waiting_for_set_devices  {devices}         other devices of this run's set are busy
  worker_disconnected      {worker}          "waiting for worker X to reconnect" (away or offline)
  worker_draining          {worker}          "worker X is draining"
  waiting_for_offer        {devices, worker[, draining]}
                           `any`: "waiting for a worker that offers cuda:0, cuda:1", and when those
                           that would are draining "waiting for a worker that offers cuda: gpu-box
                           is draining"; a named worker that no longer reports the device: "waiting
                           for worker X to offer cuda:1"
  one_shot_pool            {devices, pool}   no one-shot worker offering the device is free
  one_shot_taken           {worker}          the named one-shot worker has taken its run
  one_shot_run_id          {worker, run_id}  the named one-shot worker was started for another run

API for the control plane (RunService, WorkerRegistry):
  RunQueue(limits, interactive_limit=2, slots=(), local=LocalMachine(machine_id, devices))
  set_local_machine(LocalMachine)        this server's machine-id digest and cards with UUIDs
  set_worker(WorkerOffer) / remove_worker(name) -> [Run]   then schedule()
  resolve_target(worker, option_device, graph_device, target_devices, pool=None) -> ResolvedDevice
  check_placeable(run, node_types=None, device_field=...)   (also done by submit(run, node_types))
  adopt(run, worker, slots)              a run already executing on a worker (after a restart)
  placement(run_id), slot_info(provider=None) -> [SlotInfo], same_machine(name), workers()
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field
from typing import Iterable, Mapping, NamedTuple

from codefy_jupyter.core.scheduling import placement as wp
from codefy_jupyter.core.scheduling.device_sets import (  # noqa: F401  (re-exported: one import point for callers)
    KIND_REQUESTS, Notice, ResolvedDevice, SubmitError, device_kind, parse_device_set, resolve_run_device,
    resolve_worker_device,
)
from codefy_jupyter.core.scheduling.limits import (  # noqa: F401  (re-exported)
    Limits, build_limits, parse_concurrency_overrides, slot_device,
)
from codefy_jupyter.core.scheduling.slot_groups import (  # noqa: F401  (re-exported)
    CONNECTED, DISCONNECTED, DRAINING, LOCAL, OFFLINE, WORKER_NAME, LocalMachine, OfferedDevice, Topology,
    WorkerOffer, slot_name, split_slot,
)
from codefy_jupyter.core.scheduling.placement import ANY, ONE_SHOT, POOLS  # noqa: F401  (re-exported)

QUEUED = "queued"
INTERACTIVE = "interactive"
LANES = (QUEUED, INTERACTIVE)



# --- runs, placements, statistics -------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """What the scheduler needs to know about a run. `order` is the submit order (strictly
    increasing across submits); `devices` is the device set, `()` or `(device,)` without one."""

    run_id: str
    order: int
    device: str
    devices: tuple[str, ...] = ()
    seeded: bool = False
    lane: str = QUEUED
    session: str | None = None
    worker: str = LOCAL
    pool: str | None = None

    def __post_init__(self) -> None:
        if self.lane not in LANES:
            raise ValueError(f"lane must be one of {LANES}, got {self.lane!r}")
        if self.worker not in (LOCAL, ANY) and not WORKER_NAME.match(self.worker):
            raise ValueError(f"worker must be 'local', 'any' or a worker name, got {self.worker!r}")
        if self.pool is not None and self.pool not in POOLS:
            raise ValueError(f"pool must be one of {POOLS} or None, got {self.pool!r}")
        if self.pool is not None and self.worker == LOCAL:
            object.__setattr__(self, "worker", ANY)  # a pool run goes to a worker, never here
        # Asked on every offer: computed once (not fields, so equality and repr are unchanged).
        local = self.worker == LOCAL and self.pool is None
        object.__setattr__(self, "_local", local)
        object.__setattr__(self, "_key", self.device if local else f"pool:{self.pool}/{self.device}"
                           if self.pool is not None else f"{self.worker}/{self.device}")
        if self.device in KIND_REQUESTS and (local or self.devices):
            raise ValueError(f"only a worker run without a device set may ask for the kind {self.device!r}")
        if self.devices and self.devices[0] != self.device:
            raise ValueError(f"a device-set run's device must be its set's first device: "
                             f"{self.device!r} vs {self.devices!r}")
        if len(set(self.devices)) != len(self.devices):
            raise ValueError(f"duplicate devices in {self.devices!r}")

    @property
    def is_local(self) -> bool:
        """No target, or `worker: local`: exactly the rules without workers."""
        return self._local  # type: ignore[attr-defined]

    @property
    def slots(self) -> tuple[str, ...]:
        """Every slot a local run holds while it executes (queued lane). A worker run's slots are
        chosen when it starts: `()` here, `RunQueue.placement(run_id).slots` once it runs."""
        if not self.is_local:
            return ()
        return self.devices or (self.device,)

    @property
    def queue_key(self) -> str:
        """`cuda:0` (local), `<worker>/<device>`, `any/<device>`, `pool:one-shot/<device>`; a
        device-set run waits in its first device's queue. Devices never contain `/`."""
        return self._key  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Placement:
    """Start this run now: it holds one unit on each of `slots` until `finish` (queued lane).
    `worker` is `local` (this server's process, on `device`) or the worker's name; then `device`
    and `devices` are in the worker's numbering (`slots` `gpu-box/cuda:1`... → `cuda:1`...)."""

    run_id: str
    queue_key: str
    device: str
    slots: tuple[str, ...]
    lane: str
    seeded: bool
    worker: str = LOCAL

    @property
    def devices(self) -> tuple[str, ...]:
        """The run's devices on its provider, in order (the assign frame's `devices`)."""
        return tuple(split_slot(s)[1] for s in self.slots) or (self.device,)


@dataclass(frozen=True)
class SlotInfo:
    """One device of one provider, for GET /api/workers. `limit`/`taken` are its group's (every
    provider of the same physical device counts), `limited_by` the slot whose limit applies,
    `same_card` the group's other slots, `shared_with_local` a worker slot that is one of this
    server's devices (count it once when adding up usage)."""

    slot: str
    provider: str
    device: str
    uuid: str | None
    limit: int
    taken: int
    limited_by: str
    same_card: tuple[str, ...]
    shared_with_local: bool


@dataclass(frozen=True)
class QueueStats:
    """One slot/queue: runs waiting in its FIFO, queued-lane units taken (set runs from other
    queues included), its limit, and interactive runs executing on the device (not limited)."""

    key: str
    waiting: int
    running: int
    limit: int
    interactive: int = 0


@dataclass(frozen=True)
class SchedulerStatistics:
    queues: tuple[QueueStats, ...]
    interactive_running: int
    interactive_waiting: int
    interactive_limit: int
    seeded_running: str | None  # the seeded run executing here (it runs alone), if any

    def queue(self, key: str) -> QueueStats | None:
        return next((q for q in self.queues if q.key == key), None)


# --- the queue --------------------------------------------------------------------------------


class _Held(NamedTuple):
    """An executing run: where it runs, the slots it holds, and the groups those counted against
    when it started (kept, so a worker that changes or leaves cannot unbalance the counts). A
    tuple: one is made per start, and a frozen dataclass costs several times more to build."""

    run: Run
    worker: str
    slots: tuple[str, ...]
    groups: tuple[str, ...]


@dataclass
class _Pass:
    """Bookkeeping of one offer pass; reason() runs the same pass on a copy and throws it away."""

    used: dict[str, int]  # slot -> units
    group_used: dict[str, int]  # group -> units
    running: dict[str, _Held]
    commit: bool
    holding: Mapping[str, Iterable[str]]  # group -> slots with a run on them when the pass began
    reserved: dict[str, list[str]] = field(default_factory=dict)  # group -> earlier waiting heads
    gate_claim: str | None = None
    seeded_running: str | None = None
    started: list[_Held] = field(default_factory=list)
    reasons: dict[str, Notice | None] = field(default_factory=dict)
    limits: dict[str, int] = field(default_factory=dict)  # group -> limit, computed once a pass


def _holding(running: dict[str, _Held]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for held in running.values():
        for slot, group in zip(held.slots, held.groups):
            out.setdefault(group, set()).add(slot)
    return out


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
        self._running: dict[str, _Held] = {}
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
        self._topo = None
        self._one_shot_taken.discard(name)
        gone = [r for r in self.waiting() if r.worker == name]
        for run in gone:
            self.cancel(run.run_id)
        return gone

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
        """The device and set a run asks for, or SubmitError. Local (`worker` None or `local`, no
        pool): `resolve_run_device` against this server's slots, exactly as without workers. Else
        `resolve_worker_device`, with `auto` resolved against the named worker's last report (`any`:
        this server's and every seen worker's devices; a pool: its workers'). An unknown worker name
        is refused here already (`worker_unknown`)."""
        local = self.topology().local_slots
        if pool is None and worker in (None, LOCAL):
            return resolve_run_device(option_device, graph_device, target_devices, local)
        offered: Iterable[str] | None
        name = worker if worker not in (None, LOCAL) else ANY
        if pool is not None:
            found = [d for o in self.workers() if o.one_shot and o.devices is not None for d in o.device_names()]
            offered = found or None
        elif name == ANY:
            offered = [*local, *(d for o in self.workers() if not o.one_shot for d in o.device_names())]
        else:
            offer = self._workers.get(name)
            if offer is None:
                raise wp.refuse_unknown_worker(name)
            offered = offer.device_names() if offer.devices is not None else None
        return resolve_worker_device(option_device, graph_device, target_devices, offered, worker=name)

    def check_placeable(self, run: Run, node_types: Iterable[str] | None = None, *,
                        device_field: str = "options.device") -> None:
        """SubmitError (400) for a worker run that could never run as asked; nothing for a run that
        may wait (a known worker that is away, a device only an away worker offers). `node_types`:
        the graph's (worker_handshake.graph_node_types), checked against a named degraded worker.
        `device_field` names where a single device came from (a set is `options.target.devices`).
        Local runs pass (their checks are `resolve_run_device`'s)."""
        if run.is_local:
            return
        if run.lane == INTERACTIVE:
            raise wp.refuse_interactive(run.worker, run.pool)
        field_name = "options.target.devices" if len(run.devices) > 1 else device_field
        need = wp.wanted(run.device, run.devices)
        if run.pool is not None:
            if run.worker != ANY:
                raise wp.refuse_pool_with_worker(run.worker, run.pool)
            return  # it waits for a one-shot worker that offers the device (RunService times it out)
        local = self.topology().local_slots
        if run.worker == ANY:
            if wp.local_choice(run.device, run.devices, local) is not None:
                return
            if any(not o.one_shot and o.devices is not None and wp.device_choices(run.device, run.devices,
                                                                                     o.device_names())
                   for o in self._workers.values()):
                return
            raise wp.refuse_not_offered(field_name, ANY, need, None, wp.renumbered(run.device, run.devices, local))
        offer = self._workers.get(run.worker)
        if offer is None:
            raise wp.refuse_unknown_worker(run.worker)
        if offer.devices is not None and not wp.device_choices(run.device, run.devices, offer.device_names()):
            raise wp.refuse_not_offered(field_name, offer.name, need, offer.device_names())
        if node_types is not None:
            err = wp.refuse_missing_types(offer.name, node_types, offer.missing_types)
            if err is not None:
                raise err

    # -- changes --

    def submit(self, run: Run, node_types: Iterable[str] | None = None, *, device_field: str = "options.device") -> None:
        """Queue a run (queued lane: back of its queue). A worker run is checked first
        (`check_placeable`). An interactive run is admitted or refused at once: SubmitError
        `interactive_busy` / `session_busy`, status 503."""
        if run.run_id in self._waiting or run.run_id in self._running:
            raise ValueError(f"run {run.run_id!r} is already in the queue")
        if self._last_order is not None and run.order <= self._last_order:
            raise ValueError(f"submit order must increase: {run.order} after {self._last_order}")
        self.check_placeable(run, node_types, device_field=device_field)
        if run.lane == INTERACTIVE:
            self._admit_interactive(run)
            self._interactive_waiting[run.run_id] = run
        else:
            self._queues.setdefault(run.queue_key, deque()).append(run)
        self._waiting[run.run_id] = run
        self._last_order = run.order

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
        if run.run_id in self._waiting or run.run_id in self._running:
            raise ValueError(f"run {run.run_id!r} is already in the queue")
        slots = tuple(slots)
        if run.lane == QUEUED and (not slots or any(split_slot(s)[0] != worker for s in slots)):
            raise ValueError(f"slots {slots!r} are not slots of worker {worker!r}")
        held = _Held(run, worker, slots, tuple(self.topology().group(s) for s in slots))
        self._hold(held, self._used, self._group_used, self._running)
        self._note_holding(held, 1)
        if self._workers.get(worker) is not None and self._workers[worker].one_shot:
            self._one_shot_taken.add(worker)
        self._last_order = max(self._last_order or run.order, run.order)

    def finish(self, run_id: str) -> Run:
        """An executing run ended: give its slots back. KeyError for a run that is not executing."""
        held = self._running.pop(run_id)
        for slot, group in zip(held.slots, held.groups):
            for counts, key in ((self._used, slot), (self._group_used, group)):
                counts[key] -= 1
                if not counts[key]:
                    del counts[key]
        self._note_holding(held, -1)
        return held.run

    def _note_holding(self, held: _Held, change: int) -> None:
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
        return True

    def schedule(self) -> list[Placement]:
        """Start every run the rules allow now, in start order."""
        state = self._offer(self._used, self._group_used, self._running, commit=True, holding=self._holding_now)
        for held in state.started:  # after the pass: it judged every run by the holding it began with
            self._note_holding(held, 1)
        return [self._placement(h) for h in state.started]

    @staticmethod
    def _placement(held: _Held) -> Placement:
        run = held.run
        device = split_slot(held.slots[0])[1] if held.slots and not run.is_local else run.device
        return Placement(run.run_id, run.queue_key, device, held.slots if run.lane == QUEUED else (), run.lane,
                         run.seeded, held.worker)

    # -- questions --

    def get(self, run_id: str) -> Run | None:
        held = self._running.get(run_id)
        return self._waiting.get(run_id) or (held.run if held else None)

    def placement(self, run_id: str) -> Placement | None:
        """Where an executing run runs (None for a waiting or unknown run)."""
        held = self._running.get(run_id)
        return self._placement(held) if held else None

    def is_waiting(self, run_id: str) -> bool:
        return run_id in self._waiting

    def is_running(self, run_id: str) -> bool:
        return run_id in self._running

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
        return self.reasons().get(run_id)

    def reasons(self) -> dict[str, Notice]:
        """`reason` of every waiting run that has one, from one dry pass."""
        state = self._offer(dict(self._used), dict(self._group_used), dict(self._running), commit=False,
                            holding=self._holding_now)
        return {rid: why for rid, why in state.reasons.items() if why is not None}

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
        for offer in self.workers():
            if provider in (None, offer.name):
                slots += [slot_name(offer.name, d) for d in offer.device_names()]
        uuids = {d.device: d.uuid for d in self._local.devices}
        rows = []
        for slot in slots:
            who, device = split_slot(slot)
            group = topo.group(slot)
            gl = topo.group_limit(group, holding.get(group, ()))
            uuid = uuids.get(device) if who == LOCAL else self._workers[who].uuid(device)
            rows.append(SlotInfo(slot, who, device, uuid, gl.limit, self._group_used.get(group, 0), gl.limited_by,
                                 tuple(s for s in topo.members(group) if s != slot), topo.shares_local(slot)))
        return rows

    # -- the offer pass --

    def _offer(self, used: dict[str, int], group_used: dict[str, int], running: dict[str, _Held],
               commit: bool, holding: Mapping[str, Iterable[str]] | None = None) -> _Pass:
        """Offer candidates in priority order, one start at a time (module docstring). With
        commit=False this is a dry run on copies, used to explain waits. `holding`: that of
        `running` (`_holding`), which the pass only reads."""
        holding = _holding(running) if holding is None else holding
        state = _Pass(used=used, group_used=group_used, running=running, commit=commit, holding=holding,
                      seeded_running=next((h.run.run_id for h in running.values()
                                           if h.run.seeded and h.worker == LOCAL), None))
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
            why, choice = self._evaluate(run, state)
            state.reasons[run.run_id] = why
            if choice is None:
                continue
            self._start(run, choice, state)
            if rank == 1:
                queue = self._queues[ref]
                i = self._next_waiting(queue, at[ref] + 1, state)
                if i < len(queue):
                    at[ref] = i
                    heapq.heappush(heap, (1, queue[i].order, ref))
        if commit:
            self._drop_started(state)
        return state

    @staticmethod
    def _next_waiting(queue: deque[Run], i: int, state: _Pass) -> int:
        while i < len(queue) and queue[i].run_id in state.running:  # started out of turn
            i += 1
        return i

    def _drop_started(self, state: _Pass) -> None:
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

    def _out_of_turn(self, state: _Pass) -> None:
        """A one-shot agent started with --run-id takes its run out of turn, before anything else."""
        if not self._workers:
            return
        for offer in self.workers():
            run = self._waiting.get(offer.run_id or "")
            if not (offer.one_shot and run is not None and run.lane == QUEUED and run.run_id not in state.running):
                continue
            if run.pool is None and run.worker != offer.name:
                continue
            choices = self._one_shot_choices(run, [offer], state)
            for choice in choices:
                why, ok = self._check(run, choice[1], state, here=False, fixed=False)
                if ok:
                    self._start(run, choice, state)
                    break

    def _limit(self, group: str, state: _Pass) -> int:
        if group not in state.limits:
            state.limits[group] = self.topology().group_limit(group, state.holding.get(group, ())).limit
        return state.limits[group]

    def _evaluate(self, run: Run, state: _Pass) -> tuple[Notice | None, tuple[str, tuple[str, ...]] | None]:
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

    def _choices(self, run: Run, state: _Pass) -> tuple[list[tuple[str, tuple[str, ...]]], Notice | None, bool]:
        """(where the run could go now, best first; why nowhere; whether its slots are fixed, so that
        it reserves them while it waits at the front: a named worker's concrete device or set)."""
        need = wp.wanted(run.device, run.devices)
        if run.pool is not None:
            offers = [o for o in self.workers() if o.one_shot and (o.run_id is None or o.run_id == run.run_id)]
            choices = self._one_shot_choices(run, offers, state)
            return choices, (None if choices else wp.reason_one_shot_pool(need)), False
        if run.worker == ANY:
            choices, draining = [], []
            for offer in self.workers():
                if offer.one_shot or not offer.catalog_complete:
                    continue
                devs = wp.device_choices(run.device, run.devices, offer.device_names())
                if devs and offer.state == DRAINING:
                    draining.append(offer.name)
                elif devs and offer.accepting:
                    choices += [(offer.name, tuple(slot_name(offer.name, d) for d in ds)) for ds in devs]
            here = wp.local_choice(run.device, run.devices, self.topology().local_slots)
            if here is not None:
                choices.append((LOCAL, here))
            return choices, (None if choices else wp.reason_no_offer(need, ANY, draining)), False
        offer = self._workers.get(run.worker)
        if offer is None or offer.state in (DISCONNECTED, OFFLINE):
            return [], wp.reason_disconnected(run.worker), False
        if offer.state == DRAINING:
            return [], wp.reason_draining(run.worker), False
        if offer.one_shot:
            if offer.run_id is not None and offer.run_id != run.run_id:
                return [], wp.reason_one_shot_run_id(offer.name, offer.run_id), False
            choices = self._one_shot_choices(run, [offer], state)
            if not choices and self._one_shot_busy(offer, state):
                return [], wp.reason_one_shot_taken(offer.name), False
            return choices, (None if choices else wp.reason_no_offer(need, offer.name)), False
        devs = wp.device_choices(run.device, run.devices, offer.device_names())
        if not devs:
            return [], wp.reason_no_offer(need, offer.name), False
        return ([(offer.name, tuple(slot_name(offer.name, d) for d in ds)) for ds in devs], None,
                run.device not in KIND_REQUESTS)

    def _one_shot_busy(self, offer: WorkerOffer, state: _Pass) -> bool:
        return offer.name in self._one_shot_taken or any(h.worker == offer.name for h in state.running.values())

    def _one_shot_choices(self, run: Run, offers: list[WorkerOffer],
                          state: _Pass) -> list[tuple[str, tuple[str, ...]]]:
        """A one-shot worker takes one run, ever: connected, not draining, nothing taken yet."""
        return [(o.name, tuple(slot_name(o.name, d) for d in ds)) for o in offers
                if o.one_shot and o.accepting and not self._one_shot_busy(o, state)
                for ds in wp.device_choices(run.device, run.devices, o.device_names())]

    def _check(self, run: Run, slots: tuple[str, ...], state: _Pass, *, here: bool,
               fixed: bool) -> tuple[Notice | None, bool]:
        """(wait reason, may start now) for one run on one choice of slots. `here`: the choice is
        this server's process (the seeded gate applies). `fixed`: the run's only choice, so a
        blocked run records its hold (reservations, the gate claim)."""
        if here and state.seeded_running is not None:
            return Notice("seeded_run_executing",
                          f"waiting for seeded run {state.seeded_running} to finish: a seeded run executes alone",
                          {"run_id": state.seeded_running}), False
        if here and state.gate_claim is not None:
            return Notice("waiting_for_seeded_run",
                          f"waiting for seeded run {state.gate_claim}, which must execute alone, to start",
                          {"run_id": state.gate_claim}), False
        topo = self.topology()
        reserved_by: tuple[str, str] | None = None
        busy_set: list[str] = []
        own_full = False
        for slot in slots:
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
            return Notice("device_reserved",
                          f"{slot} is reserved for run {holder}, which waits ahead of this run",
                          {"device": slot, "run_id": holder}), False
        if busy_set:
            return Notice("waiting_for_set_devices",
                          f"waiting for {', '.join(busy_set)}: a device-set run starts when every device is free",
                          {"devices": busy_set}), False
        if alone_blocked and (not own_full or any(slots[0] not in h.slots or h.run.lane == INTERACTIVE
                                                  for h in local_running)):
            n = len(local_running)
            return Notice("waiting_to_run_alone",
                          f"a seeded run executes alone: waiting for {n} run{'s' if n != 1 else ''} to finish",
                          {"running": n}), False
        return None, not (own_full or alone_blocked)

    def _start(self, run: Run, choice: tuple[str, tuple[str, ...]], state: _Pass) -> None:
        worker, slots = choice
        topo = self.topology()
        held = _Held(run, worker, slots if run.lane == QUEUED else (),
                     tuple(topo.group(s) for s in slots) if run.lane == QUEUED else ())
        self._hold(held, state.used, state.group_used, state.running)
        state.started.append(held)
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

    @staticmethod
    def _hold(held: _Held, used: dict[str, int], group_used: dict[str, int], running: dict[str, _Held]) -> None:
        running[held.run.run_id] = held
        for slot, group in zip(held.slots, held.groups):
            used[slot] = used.get(slot, 0) + 1
            group_used[group] = group_used.get(group, 0) + 1
