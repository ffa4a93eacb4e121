"""The run scheduler: per-slot limits, FIFO queues, device sets, the seeded gate, lanes.

Pure and synchronous: no I/O, no asyncio, no clock. `RunService` owns one `RunQueue`, calls
`submit`, `finish` and `cancel` as things happen, then `schedule()` and starts what it answers.
The same sequence of calls always gives the same placements.

Words
- A *slot* is one device on one machine, named by a string. This server's slots are its bare
  canonical devices (`cpu`, `cuda:0`, `mps:0`); a worker's will be `<worker>/<device>`. A slot
  admits `Limits.limit(slot)` queued-lane runs at once (GPU 1, CPU 2, or an override).
- A *queue* is a FIFO keyed by the run's device. A device-set run waits in its first device's
  queue and needs one unit on every slot of its set; it takes them together and `finish` gives them
  all back.
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

Wait reasons (`reason(run_id)`), only for a run that waits for more than its turn; a run behind
others in its queue, or a head whose own device is full, is waiting its turn and has none:
  seeded_run_executing     {run_id}          a seeded run executes here; nothing else may start
  waiting_for_seeded_run   {run_id}          an earlier seeded run waits to execute alone
  waiting_to_run_alone     {running}         this seeded run waits for `running` runs to end
  device_reserved          {device, run_id}  an earlier waiting run holds the room left on device
  waiting_for_set_devices  {devices}         other devices of this run's set are busy
"""

from __future__ import annotations

import heapq
import re
from collections import deque
from dataclasses import dataclass, field
from typing import Iterable

from codefy_jupyter.core.device_sets import (  # noqa: F401  (re-exported: one import point for callers)
    Notice, ResolvedDevice, SubmitError, device_kind, parse_device_set, resolve_run_device,
)
from codefy_jupyter.core.devices import DeviceError, canonical_device

QUEUED = "queued"
INTERACTIVE = "interactive"
LANES = (QUEUED, INTERACTIVE)

# Worker names as the worker registry will accept them (`<name>` or `<name>.<instance>`).
_WORKER = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}(?:\.[a-z0-9][a-z0-9-]{0,62})?$")
_RESERVED_WORKERS = ("any", "local")


# --- limits -----------------------------------------------------------------------------------


def slot_device(slot: str) -> str:
    """`gpu-box-1/cuda:0` → `cuda:0`; a bare device is its own device."""
    return slot.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class Limits:
    """Queued-lane runs a slot admits at once: `overrides[slot]`, else `cpu` for a CPU slot and
    `gpu` for an accelerator."""

    gpu: int = 1
    cpu: int = 2
    overrides: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, value in (("gpu", self.gpu), ("cpu", self.cpu), *self.overrides.items()):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"limit for {name} must be an integer of at least 1, got {value!r}")

    def limit(self, slot: str) -> int:
        if slot in self.overrides:
            return self.overrides[slot]
        return self.cpu if device_kind(slot_device(slot)) == "cpu" else self.gpu


def _override_key(key: str) -> str | None:
    """Canonical slot for an override key, or None when malformed."""
    worker, sep, device = key.rpartition("/")
    try:
        dev = canonical_device(device)
    except DeviceError:
        return None
    if not sep or worker == "local":
        return dev
    if worker in _RESERVED_WORKERS or not _WORKER.match(worker):
        return None
    return f"{worker}/{dev}"


def parse_concurrency_overrides(text: str | None) -> tuple[dict[str, int], tuple[Notice, ...]]:
    """`"cuda:0=2,cpu=8,local/cuda:1=3,gpu-box-1/cuda:0=3"` → per-slot limits and warnings.

    A bare device (or `local/<device>`) is this server's slot, canonicalised (`cuda` → `cuda:0`);
    `<worker>/<device>` is kept under that key and never applies to this server. A malformed entry
    is ignored with a warning naming it, a limit below 1 becomes 1 with a warning (a queue that
    cannot drain is a hang, not a policy), and a repeated slot keeps its last value with a warning.
    """
    limits: dict[str, int] = {}
    warnings: list[Notice] = []
    for raw in (text or "").split(","):
        entry = raw.strip()
        if not entry:
            continue  # "cpu=2," or an empty setting: nothing asked, nothing to warn about
        key, sep, value = entry.partition("=")
        slot = _override_key(key.strip()) if sep else None
        number = value.strip()
        if slot is None or not re.fullmatch(r"[+-]?\d+", number):
            warnings.append(Notice(
                "concurrency_override_malformed",
                f"ignoring run queue limit override {entry!r}: expected <device>=<count> or "
                f"<worker>/<device>=<count>, e.g. cuda:0=2", {"entry": entry}))
            continue
        count = int(number)
        if count < 1:
            warnings.append(Notice(
                "concurrency_override_below_one",
                f"run queue limit override {entry!r} is below 1; using 1",
                {"entry": entry, "slot": slot, "value": count}))
            count = 1
        if slot in limits:
            warnings.append(Notice(
                "concurrency_override_repeated",
                f"run queue limit override {entry!r} repeats {slot}; the last value wins",
                {"entry": entry, "slot": slot}))
        limits[slot] = count
    return limits, tuple(warnings)


def build_limits(gpu: int = 1, cpu: int = 2, overrides: str | None = "") -> tuple[Limits, tuple[Notice, ...]]:
    """Limits from the three settings; any limit below 1 becomes 1 with a warning."""
    warnings: list[Notice] = []
    defaults = {}
    for setting, value in (("run_queue_max_concurrent_gpu", gpu), ("run_queue_max_concurrent_cpu", cpu)):
        if value < 1:
            warnings.append(Notice("concurrency_limit_below_one", f"{setting}={value} is below 1; using 1",
                                   {"setting": setting, "value": value}))
            value = 1
        defaults[setting] = value
    parsed, override_warnings = parse_concurrency_overrides(overrides)
    limits = Limits(gpu=defaults["run_queue_max_concurrent_gpu"], cpu=defaults["run_queue_max_concurrent_cpu"],
                    overrides=parsed)
    return limits, (*warnings, *override_warnings)


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

    def __post_init__(self) -> None:
        if self.lane not in LANES:
            raise ValueError(f"lane must be one of {LANES}, got {self.lane!r}")
        if self.devices and self.devices[0] != self.device:
            raise ValueError(f"a device-set run's device must be its set's first device: "
                             f"{self.device!r} vs {self.devices!r}")
        if len(set(self.devices)) != len(self.devices):
            raise ValueError(f"duplicate devices in {self.devices!r}")

    @property
    def slots(self) -> tuple[str, ...]:
        """Every slot the run holds while it executes (queued lane)."""
        return self.devices or (self.device,)

    @property
    def queue_key(self) -> str:
        return self.device


@dataclass(frozen=True)
class Placement:
    """Start this run now: it holds one unit on each of `slots` until `finish` (queued lane), and
    executes in this server's process on `device`."""

    run_id: str
    queue_key: str
    device: str
    slots: tuple[str, ...]
    lane: str
    seeded: bool


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


@dataclass
class _Pass:
    """Bookkeeping of one offer pass; reason() runs the same pass on a copy and throws it away."""

    used: dict[str, int]
    running: dict[str, Run]
    commit: bool
    reserved: dict[str, list[str]] = field(default_factory=dict)  # slot -> earlier waiting heads
    gate_claim: str | None = None
    seeded_running: str | None = None
    started: list[Run] = field(default_factory=list)
    reasons: dict[str, Notice | None] = field(default_factory=dict)


class RunQueue:
    """Waiting and executing runs of this server; see the module docstring for the rules."""

    def __init__(self, limits: Limits | None = None, interactive_limit: int = 2, slots: Iterable[str] = ()) -> None:
        if interactive_limit < 1:
            raise ValueError(f"interactive_limit must be at least 1, got {interactive_limit!r}")
        self.limits = limits or Limits()
        self.interactive_limit = interactive_limit
        self._known_slots = tuple(dict.fromkeys(slots))  # always listed by statistics()
        self._queues: dict[str, deque[Run]] = {}
        self._interactive_waiting: dict[str, Run] = {}
        self._waiting: dict[str, Run] = {}
        self._running: dict[str, Run] = {}
        self._used: dict[str, int] = {}
        self._last_order: int | None = None

    # -- changes --

    def submit(self, run: Run) -> None:
        """Queue a run (queued lane: back of its device's FIFO). An interactive run is admitted or
        refused at once: SubmitError `interactive_busy` / `session_busy`, status 503."""
        if run.run_id in self._waiting or run.run_id in self._running:
            raise ValueError(f"run {run.run_id!r} is already in the queue")
        if self._last_order is not None and run.order <= self._last_order:
            raise ValueError(f"submit order must increase: {run.order} after {self._last_order}")
        if run.lane == INTERACTIVE:
            self._admit_interactive(run)
            self._interactive_waiting[run.run_id] = run
        else:
            self._queues.setdefault(run.queue_key, deque()).append(run)
        self._waiting[run.run_id] = run
        self._last_order = run.order

    def _admit_interactive(self, run: Run) -> None:
        admitted = [r for r in (*self._running.values(), *self._interactive_waiting.values())
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

    def finish(self, run_id: str) -> Run:
        """An executing run ended: give its slots back. KeyError for a run that is not executing."""
        run = self._running.pop(run_id)
        if run.lane == QUEUED:
            for slot in run.slots:
                self._used[slot] -= 1
                if not self._used[slot]:
                    del self._used[slot]
        return run

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
        state = self._offer(self._used, self._running, commit=True)
        return [Placement(r.run_id, r.queue_key, r.device, r.slots if r.lane == QUEUED else (), r.lane, r.seeded)
                for r in state.started]

    # -- questions --

    def get(self, run_id: str) -> Run | None:
        return self._waiting.get(run_id) or self._running.get(run_id)

    def is_waiting(self, run_id: str) -> bool:
        return run_id in self._waiting

    def is_running(self, run_id: str) -> bool:
        return run_id in self._running

    def waiting(self) -> list[Run]:
        return sorted(self._waiting.values(), key=lambda r: r.order)

    def running(self) -> list[Run]:
        return sorted(self._running.values(), key=lambda r: r.order)

    def position(self, run_id: str) -> int | None:
        """1-based place in its own queue; None for a run that is not waiting in a queue."""
        run = self._waiting.get(run_id)
        if run is None or run.lane != QUEUED:
            return None
        for i, other in enumerate(self._queues[run.queue_key], 1):
            if other.run_id == run_id:
                return i
        raise AssertionError("waiting run missing from its queue")  # pragma: no cover

    def positions(self) -> dict[str, int]:
        """`position` of every queued waiting run, in one pass over the queues."""
        return {r.run_id: i for q in self._queues.values() for i, r in enumerate(q, 1)}

    def reason(self, run_id: str) -> Notice | None:
        """Why a waiting run waits for more than its turn, or None (see the module docstring)."""
        return self.reasons().get(run_id)

    def reasons(self) -> dict[str, Notice]:
        """`reason` of every waiting run that has one, from one dry pass."""
        state = self._offer(dict(self._used), dict(self._running), commit=False)
        return {rid: why for rid, why in state.reasons.items() if why is not None}

    def statistics(self) -> SchedulerStatistics:
        keys = dict.fromkeys((*self._known_slots, *sorted(self._queues), *sorted(self._used)))
        interactive_on: dict[str, int] = {}
        for r in self._running.values():
            if r.lane == INTERACTIVE:
                interactive_on[r.device] = interactive_on.get(r.device, 0) + 1
        keys.update(dict.fromkeys(sorted(interactive_on)))
        queues = tuple(QueueStats(key, len(self._queues.get(key, ())), self._used.get(key, 0),
                                  self.limits.limit(key), interactive_on.get(key, 0)) for key in keys)
        seeded = next((r.run_id for r in self._running.values() if r.seeded), None)
        return SchedulerStatistics(
            queues=queues,
            interactive_running=sum(interactive_on.values()),
            interactive_waiting=len(self._interactive_waiting),
            interactive_limit=self.interactive_limit,
            seeded_running=seeded,
        )

    # -- the offer pass --

    def _offer(self, used: dict[str, int], running: dict[str, Run], commit: bool) -> _Pass:
        """Offer candidates in priority order, one start at a time (module docstring). With
        commit=False this is a dry run on copies, used to explain waits."""
        state = _Pass(used=used, running=running, commit=commit,
                      seeded_running=next((r.run_id for r in running.values() if r.seeded), None))
        # (lane rank, submit order): interactive runs first, then queue heads, oldest first.
        heap: list[tuple[int, int, str]] = [(0, r.order, r.run_id) for r in self._interactive_waiting.values()]
        heap += [(1, q[0].order, key) for key, q in self._queues.items()]
        heapq.heapify(heap)
        depth: dict[str, int] = {}  # how many of a queue's runs started in this pass
        while heap:
            rank, _, ref = heapq.heappop(heap)
            if rank == 0:
                run = self._interactive_waiting[ref]
            else:
                run = self._queues[ref][depth.get(ref, 0)]
            why, can_start = self._evaluate(run, state)
            state.reasons[run.run_id] = why
            if not can_start:
                continue
            self._start(run, state)
            if rank == 1:
                depth[ref] = depth.get(ref, 0) + 1
                queue = self._queues[ref]
                if depth[ref] < len(queue):
                    heapq.heappush(heap, (1, queue[depth[ref]].order, ref))
        if commit:
            for key, n in depth.items():
                queue = self._queues[key]
                for _ in range(n):
                    queue.popleft()
                if not queue:
                    del self._queues[key]
        return state

    def _evaluate(self, run: Run, state: _Pass) -> tuple[Notice | None, bool]:
        """(wait reason, may start now) for one candidate; a blocked head records its hold."""
        if state.seeded_running is not None:
            return Notice("seeded_run_executing",
                          f"waiting for seeded run {state.seeded_running} to finish: a seeded run executes alone",
                          {"run_id": state.seeded_running}), False
        if state.gate_claim is not None:
            return Notice("waiting_for_seeded_run",
                          f"waiting for seeded run {state.gate_claim}, which must execute alone, to start",
                          {"run_id": state.gate_claim}), False
        reserved_by: tuple[str, str] | None = None
        busy_set: list[str] = []
        own_full = False
        if run.lane == QUEUED:
            for slot in run.slots:
                room = self.limits.limit(slot) - state.used.get(slot, 0)
                holders = state.reserved.get(slot, ())
                if room - len(holders) >= 1:
                    continue
                if room >= 1 and reserved_by is None:
                    reserved_by = (slot, holders[0])
                elif room < 1 and slot == run.device:
                    own_full = True
                elif room < 1:
                    busy_set.append(slot)
        blocked = reserved_by is not None or busy_set or own_full
        alone_blocked = run.seeded and bool(state.running)
        if blocked or alone_blocked:
            if run.lane == QUEUED:
                for slot in run.slots:
                    state.reserved.setdefault(slot, []).append(run.run_id)
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
        if alone_blocked and (not own_full or any(run.device not in r.slots or r.lane == INTERACTIVE
                                                  for r in state.running.values())):
            n = len(state.running)
            return Notice("waiting_to_run_alone",
                          f"a seeded run executes alone: waiting for {n} run{'s' if n != 1 else ''} to finish",
                          {"running": n}), False
        return None, not (own_full or alone_blocked)

    def _start(self, run: Run, state: _Pass) -> None:
        state.running[run.run_id] = run
        state.started.append(run)
        if run.lane == QUEUED:
            for slot in run.slots:
                state.used[slot] = state.used.get(slot, 0) + 1
        if run.seeded:
            state.seeded_running = run.run_id
        # On a dry pass the waiting runs are left alone; on a real one the run moves over.
        if state.commit:
            del self._waiting[run.run_id]
            if run.lane == INTERACTIVE:
                del self._interactive_waiting[run.run_id]
