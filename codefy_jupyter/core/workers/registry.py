"""WorkerRegistry: the worker agents this control plane knows, in memory.

For each worker: its devices and capabilities as its last hello reported them, its node catalog
diff, heartbeats, state, the runs it executes, and the link (socket) to reach it. Nothing here does
I/O: the /codefy/ws/worker handler owns the socket and hands the registry a `WorkerLink` whose
`send` queues a frame and whose `close` ends the connection; the WorkerExecutor decides what the
worker's runs do when its state changes.

States (GET /codefy/api/workers):
    offline       enrolled, not connected since this server started (runs may target it and wait)
    connected     connected and taking runs
    draining      connected, taking no new runs (its runs go on)
    disconnected  its connection dropped (or it missed HEARTBEAT_MISSES heartbeats in a row); its
                  runs wait CODEFY_WORKER_RESUME_GRACE_S for it to come back

A restart starts with no connected worker: enrolled workers load as offline, every agent registers
again on its next connection. A run adopted after a restart may name a worker nobody enrolled (an
agent that connected with the server's own token): it gets a placeholder that is not listed until
that worker connects.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Protocol

from .handshake import Accepted, CatalogDiff, Credential
from ...wire.frames import HEARTBEAT_MISSES, Frame, Heartbeat, Hello
from ...wire.hello_limits import HELLO_MAX_DEVICE_CHARS, HELLO_MAX_TEXT_CHARS, bounded_devices, json_chars

OFFLINE, CONNECTED, DRAINING, DISCONNECTED = "offline", "connected", "draining", "disconnected"
STATES = (OFFLINE, CONNECTED, DRAINING, DISCONNECTED)
# GET workers lists at most this many of a worker's `extra_types` (the types only it has: up to
# HELLO_MAX_NODE_TYPES names it chose), and how many there are in `extra_types_count`.
VIEW_MAX_EXTRA_TYPES = 100


class WorkerLink(Protocol):
    """One worker connection, as the socket handler exposes it."""

    peer: str  # the client address

    def send(self, frame: Frame) -> None: ...

    def close(self, code: int, reason: str) -> None: ...


@dataclass
class Worker:
    name: str
    enrolled: bool = False
    listed: bool = True  # False for a placeholder of an adopted run's unknown worker
    link: WorkerLink | None = None
    credential: Credential | None = None
    hello: Hello | None = None
    capabilities: tuple[str, ...] = ()
    catalog: CatalogDiff | None = None
    devices: list[dict[str, Any]] = field(default_factory=list)  # as last reported
    draining: bool = False
    seen: bool = False  # connected since this server started
    loopback: bool = False  # its connection comes from a loopback peer
    heartbeat_s: float = 10.0
    last_frame_at: float | None = None  # monotonic, for the heartbeat watchdog
    last_seen_at: float | None = None  # wall clock, for people
    connected_at: float | None = None
    disconnected_at: float | None = None
    disconnect_reason: dict[str, Any] | None = None
    runs: set[str] = field(default_factory=set)
    info: dict[str, Any] = field(default_factory=dict)  # what the workers row remembers
    enrolled_by: str | None = None  # who issued the token that enrolled it (core/workers/access.py)

    @property
    def worker_id(self) -> str:
        return self.name

    @property
    def connected(self) -> bool:
        return self.link is not None

    @property
    def state(self) -> str:
        if self.link is None:
            # An adopted run's worker is away, not merely offline: a run holds slots on it.
            return DISCONNECTED if self.seen or self.runs else OFFLINE
        return DRAINING if self.draining else CONNECTED

    @property
    def device_names(self) -> list[str]:
        return [d["device"] for d in self.devices if isinstance(d, dict) and isinstance(d.get("device"), str)]

    @property
    def node_types(self) -> dict[str, str] | None:
        return self.hello.node_types if self.hello is not None else None

    def view(self) -> dict[str, Any]:
        hello = self.hello
        catalog = self.catalog
        return {
            "id": self.worker_id, "name": self.name, "state": self.state, "enrolled": self.enrolled,
            "enrolled_by": self.enrolled_by,
            "draining": self.draining, "status": catalog.status if catalog else None,
            "missing_types": list(catalog.worker_lacks) if catalog else [],
            "extra_types": list(catalog.server_lacks[:VIEW_MAX_EXTRA_TYPES]) if catalog else [],
            "extra_types_count": len(catalog.server_lacks) if catalog else 0,
            "devices": [dict(d) for d in self.devices], "capabilities": list(self.capabilities),
            "version": hello.version if hello else self.info.get("version"),
            "platform": hello.platform if hello else self.info.get("platform"),
            "one_shot": bool(hello.one_shot) if hello else False,
            "runs": sorted(self.runs), "connected_at": self.connected_at, "last_seen_at": self.last_seen_at,
            "disconnected_at": self.disconnected_at, "disconnect_reason": self.disconnect_reason,
            "peer": self.link.peer if self.link is not None else None,
        }


def _merged(device: dict[str, Any], update: dict[str, Any] | None, reported: dict[str, Any]) -> dict[str, Any]:
    """A device with a heartbeat's figures. Each heartbeat entry is bounded, but fields it adds pile
    up across heartbeats: past twice an entry's bound the device starts again from its hello."""
    if not update:
        return device
    merged = {**device, **update}
    if len(merged) > len(device) and json_chars(merged) > 2 * HELLO_MAX_DEVICE_CHARS:
        merged = {**reported, **update}
    return merged


def _bounded_info(info: dict[str, Any]) -> dict[str, Any]:
    """A stored workers row's info as this version keeps it: an older one stored any hello."""
    kept = dict(info)
    devices = kept.get("devices")
    kept["devices"] = bounded_devices(devices if isinstance(devices, list) else [])
    for key in ("version", "platform"):
        if isinstance(kept.get(key), str):
            kept[key] = kept[key][:HELLO_MAX_TEXT_CHARS]
    return kept


class WorkerRegistry:
    """`now` arguments are monotonic seconds (heartbeats); `clock` gives the wall-clock times shown."""

    def __init__(self, *, heartbeat_s: float = 10.0, clock: Callable[[], float] = time.time) -> None:
        self.heartbeat_s = heartbeat_s
        self.clock = clock
        self._workers: dict[str, Worker] = {}

    # -- questions --------------------------------------------------------------------------------
    def get(self, name: str) -> Worker | None:
        return self._workers.get(name)

    def workers(self, *, listed_only: bool = True) -> list[Worker]:
        return [w for _, w in sorted(self._workers.items()) if w.listed or not listed_only]

    def connected_identities(self) -> dict[str, str]:
        """Registered name -> credential identity of each connected worker (for `check_hello`)."""
        return {w.name: w.credential.identity for w in self._workers.values()
                if w.link is not None and w.credential is not None}

    def known(self, name: str) -> bool:
        """A worker a run may target: enrolled, or connected since this server started."""
        worker = self._workers.get(name)
        return worker is not None and (worker.enrolled or worker.seen)

    # -- changes ----------------------------------------------------------------------------------
    def load_enrolled(self, rows: Iterable[dict[str, Any]]) -> None:
        """Enrolled workers from the store, offline until they connect."""
        for row in rows:
            worker = self._workers.setdefault(row["name"], Worker(name=row["name"]))
            worker.enrolled = True
            worker.listed = True
            worker.info = _bounded_info(row.get("info") or {})
            worker.enrolled_by = row.get("enrolled_by")
            if not worker.devices:
                worker.devices = list(worker.info.get("devices") or [])

    def enrolled(self, name: str, info: dict[str, Any] | None = None, *, enrolled_by: str | None = None) -> Worker:
        worker = self._workers.setdefault(name, Worker(name=name))
        worker.enrolled = True
        worker.listed = True
        worker.enrolled_by = enrolled_by
        if info:
            worker.info = dict(info)
        return worker

    def placeholder(self, name: str) -> Worker:
        """An adopted run's worker nobody enrolled: known, but not listed until it connects."""
        worker = self._workers.get(name)
        if worker is None:
            worker = self._workers[name] = Worker(name=name, listed=False)
        return worker

    def register(self, accepted: Accepted, hello: Hello, credential: Credential, link: WorkerLink,
                 now: float) -> tuple[Worker, WorkerLink | None]:
        """The hello was accepted: the worker is connected over `link`. Returns it and the link it
        replaces (the same credential reconnecting while its old socket is still registered)."""
        worker = self._workers.setdefault(accepted.name, Worker(name=accepted.name))
        old = worker.link
        worker.link = link
        worker.credential = credential
        worker.hello = hello
        worker.capabilities = tuple(accepted.capabilities)
        worker.catalog = accepted.catalog
        worker.devices = [dict(d) for d in hello.devices]
        worker.heartbeat_s = accepted.heartbeat_s
        worker.seen = True
        worker.listed = True
        worker.last_frame_at = now
        worker.connected_at = worker.last_seen_at = self.clock()
        worker.disconnected_at = None
        worker.disconnect_reason = None
        return worker, old

    def drop(self, name: str, link: WorkerLink, reason: dict[str, Any]) -> Worker | None:
        """`link` closed. The worker, if that link was its current one (a replaced link's close
        changes nothing)."""
        worker = self._workers.get(name)
        if worker is None or worker.link is not link:
            return None
        worker.link = None
        worker.disconnected_at = self.clock()
        worker.disconnect_reason = reason
        return worker

    def alive(self, name: str, now: float) -> None:
        """Any frame from the worker counts as a sign of life."""
        worker = self._workers.get(name)
        if worker is not None:
            worker.last_frame_at = now
            worker.last_seen_at = self.clock()

    def heartbeat(self, name: str, frame: Heartbeat, now: float) -> None:
        worker = self._workers.get(name)
        if worker is None:
            return
        worker.last_frame_at = now
        worker.last_seen_at = self.clock()
        if frame.devices:
            by_name = {d.get("device"): d for d in frame.devices if isinstance(d, dict)}
            reported = worker.hello.devices if worker.hello is not None else worker.devices
            worker.devices = [_merged(d, by_name.get(d.get("device")), first)
                              for d, first in zip(worker.devices, reported)]

    def silent(self, now: float) -> list[Worker]:
        """Connected workers that missed HEARTBEAT_MISSES heartbeats in a row."""
        return [w for w in self._workers.values()
                if w.link is not None and w.last_frame_at is not None
                and now - w.last_frame_at > HEARTBEAT_MISSES * w.heartbeat_s]

    def set_draining(self, name: str, draining: bool) -> Worker | None:
        worker = self._workers.get(name)
        if worker is not None:
            worker.draining = draining
        return worker

    def remove(self, name: str) -> Worker | None:
        return self._workers.pop(name, None)

    def instances_held(self, name: str, *, besides: str) -> int:
        """How many instances of worker `name` (`<name>.<instance>`) other than `besides` are held
        after forgetting the idle ones: disconnected, with no runs waiting for them. Forgetting them
        is what lets one-shot agents come and go under one token without ever reaching the cap."""
        prefix = name + "."
        held = 0
        for key in [k for k in self._workers if k.startswith(prefix) and k != besides]:
            worker = self._workers[key]
            if worker.link is None and worker.listed and not worker.runs:
                del self._workers[key]
            else:
                held += 1
        return held
