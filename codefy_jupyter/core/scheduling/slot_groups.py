"""Workers as the scheduler sees them, and which slots are one physical device. Pure, no I/O.

A *provider* is this server (`local`) or a worker by name. A *slot* is one device of one provider:
this server's are bare (`cpu`, `cuda:0`), a worker's are `<worker>/<device>` in the worker's own
numbering (`gpu-box-1/cuda:0`). Every slot keeps its own name, but slots of one physical device
form a *group*, and the run queue counts runs and limits per group (seed: "One device, many slots"):

- A CUDA card with an NVML UUID groups with every other slot reporting that UUID: this server's
  card (the group is then named after this server's slot, `cuda:0`) and any worker's, whatever
  number each side gives it; a card only workers offer is the group `card:<uuid>`. A card without a
  UUID keeps a group of its own.
- The `cpu` and `mps:0` of a *same-machine* worker group with this server's. Same machine means the
  agent connected from a loopback peer AND reported this server's machine-id digest; neither alone
  counts (an SSH reverse tunnel is loopback too, and the digest is self-reported). Two workers that
  report the same machine id (not this server's) share their `cpu`/`mps:0` as `machine:<id>/<dev>`.
- A group's limit is the smallest limit among its *online* providers (this server always; a
  connected or draining worker) and any provider that still holds a run there (`holding`). A
  worker slot's own limit: the `<worker>/<device>` override of the run-queue setting, else the
  worker's own per-device override (`WorkerOffer.limits`), else, for a same-machine worker's slot
  grouped with one of this server's, this server's limit for that slot, else the default by kind.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from codefy_jupyter.core.scheduling.device_sets import device_kind
from codefy_jupyter.core.scheduling.memory_ledger import shared_group
from codefy_jupyter.wire.devices import DeviceError, canonical_device
from codefy_jupyter.wire.names import RESERVED_WORKER_NAMES, WORKER_NAME

LOCAL = "local"
CONNECTED = "connected"
DRAINING = "draining"
DISCONNECTED = "disconnected"
OFFLINE = "offline"  # enrolled (or known) but not connected since this server started
WORKER_STATES = (CONNECTED, DRAINING, DISCONNECTED, OFFLINE)

# `<name>` or `<name>.<instance>`; reserved names (wire/names.py) are never worker names.
RESERVED = RESERVED_WORKER_NAMES
_SHARED_BY_MACHINE = ("cpu", "mps:0")


def slot_name(provider: str, device: str) -> str:
    return device if provider == LOCAL else f"{provider}/{device}"


def split_slot(slot: str) -> tuple[str, str]:
    """`gpu-box-1/cuda:0` → (`gpu-box-1`, `cuda:0`); `cuda:0` → (`local`, `cuda:0`)."""
    provider, sep, device = slot.rpartition("/")
    return (provider, device) if sep else (LOCAL, device)


def _device_index(device: str) -> tuple[int, int]:
    kind = device_kind(device)
    rank = ("cpu", "cuda", "mps").index(kind) if kind in ("cpu", "cuda", "mps") else 3
    return rank, int(device.split(":", 1)[1]) if ":" in device else 0


@dataclass(frozen=True)
class OfferedDevice:
    """One device a provider offers, in its own numbering, with the NVML UUID when known."""

    device: str
    uuid: str | None = None

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "device", canonical_device(self.device))
        except DeviceError as exc:
            raise ValueError(str(exc)) from None
        if self.uuid is not None and (not isinstance(self.uuid, str) or not self.uuid.strip()):
            raise ValueError(f"uuid must be a non-empty string or None, got {self.uuid!r}")

    @classmethod
    def coerce(cls, item: Any) -> OfferedDevice:
        """From an `OfferedDevice`, a device name, or a hello/inventory dict (`device` or `key`)."""
        if isinstance(item, OfferedDevice):
            return item
        if isinstance(item, str):
            return cls(item)
        if isinstance(item, Mapping):
            uuid = item.get("uuid") or None
            return cls(item.get("device") or item.get("key"), uuid)
        raise ValueError(f"not a device: {item!r}")


def _devices(items: Iterable[Any]) -> tuple[OfferedDevice, ...]:
    """Canonical devices, the CPU included (every machine has one), each once, in kind/index order."""
    found: dict[str, OfferedDevice] = {"cpu": OfferedDevice("cpu")}
    for item in items:
        dev = OfferedDevice.coerce(item)
        if dev.device not in found or found[dev.device].uuid is None:
            found[dev.device] = dev
    return tuple(sorted(found.values(), key=lambda d: _device_index(d.device)))


@dataclass(frozen=True)
class WorkerOffer:
    """A worker as the scheduler sees it; `RunQueue.set_worker` replaces the previous one whole.

    state: `connected`, `draining` (connected, takes no new runs), `disconnected` (was connected,
      away now; its runs hold their slots) or `offline` (enrolled, not connected since start).
    devices: what it last reported (CPU implied), or None when it never reported any.
    machine_id / loopback: for same-machine detection (both needed, see the module docstring).
    missing_types: node types this server has and the worker lacks (`CatalogDiff.worker_lacks`);
      None when unknown (never connected). `any` only uses a worker whose set is known and empty.
    limits: the worker's own per-device limit overrides (`{"cuda:0": 2}`).
    one_shot: a `--one-shot` agent (takes exactly one run; `any` never uses it); run_id: the run it
      was started for (`--run-id`), which it takes out of turn, and no other.
    has_label: its hello mounts this server's data folder under CODEFY_MOUNT_LABEL; transfer: its
      agent takes runs through the transfer backend (both: which runs that use files it may take).
    """

    name: str
    state: str = CONNECTED
    devices: tuple[OfferedDevice, ...] | None = None
    machine_id: str | None = None
    loopback: bool = False
    missing_types: frozenset[str] | None = frozenset()
    limits: Mapping[str, int] = field(default_factory=dict)
    one_shot: bool = False
    run_id: str | None = None
    has_label: bool = False
    transfer: bool = False
    shared_memory: frozenset[str] = frozenset()  # its CUDA cards shared by memory (--share-memory)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not WORKER_NAME.match(self.name) or self.name in RESERVED:
            raise ValueError(f"not a worker name: {self.name!r}")
        if self.state not in WORKER_STATES:
            raise ValueError(f"state must be one of {WORKER_STATES}, got {self.state!r}")
        if self.devices is not None:
            object.__setattr__(self, "devices", _devices(self.devices))
        if self.missing_types is not None:
            object.__setattr__(self, "missing_types", frozenset(self.missing_types))
        limits: dict[str, int] = {}
        for key, value in dict(self.limits).items():
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"limit for {self.name}/{key} must be an integer of at least 1, got {value!r}")
            try:
                limits[canonical_device(key)] = value
            except DeviceError as exc:
                raise ValueError(str(exc)) from None
        object.__setattr__(self, "limits", limits)
        shared = frozenset(canonical_device(d) for d in self.shared_memory)
        if any(device_kind(d) != "cuda" for d in shared):
            raise ValueError(f"only CUDA cards are shared by memory, got {sorted(shared)!r}")
        object.__setattr__(self, "shared_memory", shared)
        # Asked once per device on every topology rebuild and GET workers: a scan per call would be
        # quadratic in the worker's devices.
        object.__setattr__(self, "_uuids", {d.device: d.uuid for d in self.devices or ()})

    @property
    def online(self) -> bool:
        """Connected now (draining included): its limits count for the cards it shares."""
        return self.state in (CONNECTED, DRAINING)

    @property
    def accepting(self) -> bool:
        return self.state == CONNECTED

    @property
    def catalog_complete(self) -> bool:
        return self.missing_types is not None and not self.missing_types

    def device_names(self) -> tuple[str, ...]:
        return tuple(d.device for d in self.devices or ())

    def uuid(self, device: str) -> str | None:
        return self._uuids.get(device)  # type: ignore[attr-defined]


@dataclass(frozen=True)
class LocalMachine:
    """This server's machine id digest and devices (with UUIDs when known; the CPU is implied)."""

    machine_id: str | None = None
    devices: tuple[OfferedDevice, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "devices", _devices(self.devices))


@dataclass(frozen=True)
class GroupLimit:
    limit: int
    limited_by: str  # the slot whose limit applies


class Topology:
    """Slot groups and their limits for one set of providers (rebuilt when a worker changes).

    `limit_of(slot)` is a provider's own limit (`Limits.limit` for this server's slots).
    `local_slots` are this server's slots (its devices, plus any slot the queue was told of).
    """

    def __init__(self, local: LocalMachine, workers: Mapping[str, WorkerOffer], limits: Any,
                 local_slots: Iterable[str] = ()) -> None:
        self.local = local
        self.workers = dict(sorted(workers.items()))
        self.limits = limits
        self.local_slots = tuple(dict.fromkeys((*(d.device for d in local.devices), *local_slots)))
        self._local_by_uuid: dict[str, str] = {}
        for dev in local.devices:
            if dev.uuid and device_kind(dev.device) == "cuda":
                self._local_by_uuid.setdefault(dev.uuid, dev.device)
        self._groups: dict[str, str] = {}
        self._members: dict[str, list[str]] = {}
        self._single: dict[str, GroupLimit] = {}
        self._shared: dict[str, bool] = {}
        for slot in self.local_slots:
            self._add(slot, slot)
        for offer in self.workers.values():
            for dev in offer.device_names():
                slot = slot_name(offer.name, dev)
                self._add(slot, self._group_of_worker_slot(offer, dev))

    def _add(self, slot: str, group: str) -> None:
        self._groups[slot] = group
        self._members.setdefault(group, []).append(slot)

    # -- which device is which --

    def same_machine(self, offer: WorkerOffer) -> bool:
        return bool(offer.loopback and offer.machine_id and offer.machine_id == self.local.machine_id)

    def _group_of_worker_slot(self, offer: WorkerOffer, device: str) -> str:
        uuid = offer.uuid(device)
        if device_kind(device) == "cuda" and uuid:
            return self._local_by_uuid.get(uuid, f"card:{uuid}")
        if device in _SHARED_BY_MACHINE and offer.machine_id:
            if self.same_machine(offer):
                return device
            if offer.machine_id != self.local.machine_id:
                return f"machine:{offer.machine_id}/{device}"
        return slot_name(offer.name, device)

    def group(self, slot: str) -> str:
        """The group a slot counts against (a slot nobody offers now is its own group)."""
        return self._groups.get(slot, slot)

    def shared_by_memory(self, group: str) -> bool:
        """Every online provider of the card shares it by memory (memory_ledger.shared_group)."""
        if group not in self._shared:
            rows = []
            for slot in self.members(group):
                provider, device = split_slot(slot)
                offer = self.workers.get(provider)
                rows.append((provider, offer is not None and offer.online,
                             offer is not None and device in offer.shared_memory))
            self._shared[group] = shared_group(rows)
        return self._shared[group]

    def members(self, group: str) -> tuple[str, ...]:
        return tuple(self._members.get(group, (group,)))

    def shares_local(self, slot: str) -> bool:
        """A worker slot that is one of this server's devices."""
        provider, _ = split_slot(slot)
        return provider != LOCAL and any(split_slot(s)[0] == LOCAL for s in self.members(self.group(slot)))

    # -- limits --

    def slot_limit(self, slot: str) -> int:
        provider, device = split_slot(slot)
        if provider == LOCAL or slot in self.limits.overrides:
            return self.limits.limit(slot)
        offer = self.workers.get(provider)
        if offer is not None and device in offer.limits:
            return offer.limits[device]
        group = self.group(slot)
        if offer is not None and self.same_machine(offer) and split_slot(group)[0] == LOCAL and group in self._groups:
            return self.limits.limit(group)
        return self.limits.limit(slot)

    def _counts(self, slot: str, holding: Iterable[str]) -> bool:
        provider, _ = split_slot(slot)
        if provider == LOCAL or slot in holding:
            return True
        offer = self.workers.get(provider)
        return offer is not None and offer.online

    def group_limit(self, group: str, holding: Iterable[str] = ()) -> GroupLimit:
        """Smallest limit among the group's online providers and those holding a run in it
        (`holding`: slots of the group with a run on them); all members when none counts."""
        members = self.members(group)
        if len(members) == 1 and all(s == members[0] for s in holding):  # one provider: its own limit
            if group not in self._single:
                self._single[group] = GroupLimit(self.slot_limit(members[0]), members[0])
            return self._single[group]
        holding = set(holding)
        members = tuple(dict.fromkeys((*members, *sorted(holding))))
        counted = [s for s in members if self._counts(s, holding)] or members
        best: GroupLimit | None = None
        for slot in counted:  # this server's slot first, then workers by name: ties go to the first
            limit = self.slot_limit(slot)
            if best is None or limit < best.limit:
                best = GroupLimit(limit, slot)
        assert best is not None
        return best


def connect_notes(topo: Topology, name: str) -> tuple[list[tuple[tuple[str, ...], str]], list[str]]:
    """What the server logs when worker `name` connects: (notes to log once, each with the key that
    makes it once; warnings to log on every connect). Once: a CUDA card without a UUID, and a card
    of a same-machine worker with a UUID this server lacks (either keeps a slot of its own). Every
    connect: a limit the worker's slot was given (the `<worker>/<device>` override, or the worker's
    own) that the card's rule lowers, because a smaller limit of another provider of it applies."""
    offer = topo.workers.get(name)
    once: list[tuple[tuple[str, ...], str]] = []
    lowered: list[str] = []
    if offer is None:
        return once, lowered
    same = topo.same_machine(offer)
    for dev in offer.devices or ():
        slot = slot_name(name, dev.device)
        if device_kind(dev.device) == "cuda":
            if dev.uuid is None:
                once.append((("no_uuid", slot), f"worker {name}'s {dev.device} reports no UUID: it keeps a slot "
                             "of its own and shares no limit with another provider of the same physical card"))
            elif same and dev.uuid not in topo._local_by_uuid:
                once.append((("unknown_uuid", slot, dev.uuid), f"worker {name} is on this machine but its "
                             f"{dev.device} ({dev.uuid}) is not one of this server's cards: it keeps a slot of its own"))
        own = topo.limits.overrides.get(slot, offer.limits.get(dev.device))
        if own is None:
            continue
        applies = topo.group_limit(topo.group(slot))
        if applies.limit < own:
            lowered.append(f"run queue limit {slot}={own} is lowered to {applies.limit}: {applies.limited_by} is the "
                           f"same physical device and its limit is smaller (the smallest limit of a shared card applies)")
    return once, lowered
