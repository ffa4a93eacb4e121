"""What the scheduler is given and what it answers: `Run` (a run as the scheduler sees it, with its
lane and target), `Placement` (start this run there), and the statistics views (`SlotInfo`,
`QueueStats`, `SchedulerStatistics`). Pure values; the rules that use them are in queue.py and
offer_pass.py."""

from __future__ import annotations

from dataclasses import dataclass

from codefy_jupyter.core.scheduling.device_sets import KIND_REQUESTS
from codefy_jupyter.core.scheduling.placement import ANY, POOLS
from codefy_jupyter.core.scheduling.slot_groups import LOCAL, split_slot
from codefy_jupyter.wire.names import WORKER_NAME

QUEUED = "queued"
INTERACTIVE = "interactive"
LANES = (QUEUED, INTERACTIVE)


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
    # What a worker run needs for its files (core/storage/run_needs.py levels): which workers can
    # serve it (placement.storage_backend). A local run has the files here whatever it says.
    files: str = "none"
    # Why transfer cannot serve it, for the wait reason: (code, text), e.g. ("inputs_too_big", ...).
    files_why: tuple[str, str] | None = None
    # On a worker card shared by memory (memory_ledger.py): the budget in MiB (None: the run takes
    # the card whole) and whether it may wait for the budget to fit (False: refused at submit).
    memory_mib: int | None = None
    wait: bool = True
    # Who submitted it (None: nobody identified): the per-owner quotas (quotas.py) count by it.
    owner: str | None = None
    # An accepted estimate the server raised (GiB it was raised from): its memory wait reads budget_raised.
    raised_from_gib: float | None = None
    # Its name, so that a wait reason naming this run says who is ahead in words (None: unnamed).
    name: str | None = None

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
    # A card shared by memory: its ledger ({free_mib, total_mib, committed_mib, room_mib, runs}).
    memory: dict | None = None


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
