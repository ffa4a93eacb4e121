"""The control plane's side of worker agents, for the socket and REST handlers.

It ties together the WorkerRegistry (who is connected), the WorkerExecutor (their runs), worker
credentials (core/workers/enrollment.py) and the run queue, which learns every change of a worker
as a `WorkerOffer` (connected, draining, disconnected, offline, its devices and catalog) and then
reschedules. No tornado here: the handler gives each connection a `WorkerLink` and, as its sans-IO
session (core/workers/session.py) says, calls `hello`, `connected`, `frame`/`frames`, `warn` and
`closed`.

Runs without a target never reach this module.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable

from ..._version import __version__
from ..errors import BadRequest, NotFound
from ...wire.fingerprint import digest
from ..scheduling.memory_ledger import card_memory
from ..scheduling.placement import storage_backend
from ..scheduling.slot_groups import OfferedDevice, WorkerOffer, connect_notes
from ..storage.plan import StoragePlan, plan_for, with_s3
from .access import check_issue, check_manage
from .catalog_watch import CatalogWatch
from .enrollment import Enrollment, Issued
from ..contract.execution import RunSpec
from .worker_executor import RESUME, WorkerExecutor, WorkerRunHandle
from .handshake import (
    Credential, Refused, ServerSide, check_hello, compare_catalogs, graph_node_types, registered_name,
)
from ...wire.frames import Frame, Heartbeat, Hello, OutputAnswer, Reject, RunAlive, RunFrame, Welcome
from .outputs import WorkerOutputReads
from .host import RunHost, WorkerQueue
from .registry import Worker, WorkerLink, WorkerRegistry
from .session import (  # noqa: F401  (the close codes, re-exported)
    CLOSE_CREDENTIALS, CLOSE_HELLO_TIMEOUT, CLOSE_HOST_ORIGIN, CLOSE_REJECTED, CLOSE_REMOVED, CLOSE_REPLACED,
)

log = logging.getLogger("codefy.workers")



@dataclass(frozen=True)
class StartedRun:
    """A run handed to its worker: what the run service writes on its row when it starts."""

    handle: WorkerRunHandle
    facts: dict[str, Any] | None
    fingerprint: str | None


# How many agent names' last refusal GET workers lists.
REFUSALS_KEPT = 20


class WorkerService:
    """`host`: what the worker side may use of the run service (core/workers/host.py); `queue`: the
    run queue's worker-facing part. The run service, in turn, calls only the public methods here."""

    def __init__(self, host: RunHost, queue: WorkerQueue) -> None:
        self.host = host
        self.queue = queue
        settings = host.settings
        self.registry = WorkerRegistry(heartbeat_s=float(settings.worker_heartbeat_s), clock=host.clock)
        self.executor = WorkerExecutor(self.registry, host, resume_grace_s=float(settings.worker_resume_grace_s),
                                       cancel_grace_s=float(settings.worker_cancel_grace_s),
                                       heartbeat_s=float(settings.worker_heartbeat_s))
        self.enrollment = Enrollment(host.store, clock=host.clock)
        self.output_reads = WorkerOutputReads(self.registry, timeout_s=float(settings.worker_output_fetch_timeout_s))
        # Told the name of each worker that connected (the recorded outputs' missed drops).
        self.on_connected: Any = None
        self._link_ids = itertools.count(1)
        self._link_numbers: dict[int, int] = {}
        self._noted: set[tuple[str, ...]] = set()  # what was logged once (connect_notes)
        self.catalog_watch = CatalogWatch(host.registry, float(settings.node_catalog_check_s), self.recheck_catalogs)
        # The last refusal of each agent name, newest last, until that name connects: the Workers
        # panel shows why an agent did not come up (a version mismatch, a taken name) rather than
        # leaving it to the server log. Bounded: a misconfigured fleet cannot grow it without end.
        self.refusals: dict[str, dict[str, Any]] = {}

    # -- lifecycle ------------------------------------------------------------------------------
    async def load(self) -> None:
        """Enrolled workers load as offline, so runs can target them and wait."""
        self.registry.load_enrolled(await self.host.store.list_workers())
        for worker in self.registry.workers():
            self.offer(worker)
        self.executor.start_watchdog()
        self.catalog_watch.start()

    def shutting_down(self) -> None:
        """The server stops: cancels from now on get the short shutdown grace."""
        self.executor.graceful_shutdown()

    async def close(self) -> None:
        """After the run service's shutdown: timers, tasks and worker connections go."""
        self.catalog_watch.close()
        await self.executor.close()

    # -- the run service's runs on workers --------------------------------------------------------
    @staticmethod
    def resume_point(row: dict[str, Any]) -> dict[str, Any] | None:
        """The resume point a previous process stored on a worker run's row (None: not adoptable)."""
        return (row.get("execution_facts") or {}).get(RESUME)

    def adopt(self, row: dict[str, Any]) -> WorkerRunHandle:
        """A worker run a previous process left running (its row has a resume point): its worker is
        known (offline until it is back, with the run's devices) and the run waits for it."""
        resume = row["execution_facts"][RESUME]
        name = resume["worker"]
        worker = self.registry.get(name) or self.registry.placeholder(name)
        worker.runs.add(row["id"])
        if not worker.devices:
            uuids = resume.get("uuids") or {}
            worker.devices = [{"device": d, **({"uuid": uuids[d]} if uuids.get(d) else {})}
                              for d in resume.get("devices") or [resume["device"]]]
        self.offer(worker)
        return self.executor.adopt(row)

    def start_run(self, spec: RunSpec) -> StartedRun:
        """Hand a placed run to its worker (assign now, or when it connects)."""
        assert spec.worker is not None
        worker = self.registry.get(spec.worker)
        devices = set(spec.devices)
        uuids = {d.get("device"): d.get("uuid") for d in (worker.devices if worker else [])
                 if d.get("uuid") and d.get("device") in devices}
        handle = self.executor.start(spec, uuids=uuids, storage=self._storage_plan(spec, worker))
        fingerprint = (worker.info.get("fingerprint_digest") if worker else None) or None
        if worker is not None and worker.hello is not None and worker.hello.fingerprint:
            fingerprint = digest(worker.hello.fingerprint)
        return StartedRun(handle, self.executor.facts(spec.run_id), fingerprint)

    @staticmethod
    def _mounts(worker: Worker | None) -> dict[str, str]:
        """The folders the worker's agent declared (`--mount label=path`), when it negotiated `mounts`."""
        hello = worker.hello if worker is not None else None
        if hello is None or "mounts" not in worker.capabilities:  # type: ignore[union-attr]
            return {}
        return {str(k): str(v) for k, v in hello.mounts.items()}

    def _storage_plan(self, spec: RunSpec, worker: Worker | None) -> StoragePlan | None:
        """How the placed run reaches its files on `worker` (None: it uses none)."""
        if spec.files is None:
            return None
        files, need = spec.files
        mounts = self._mounts(worker)
        label = self.host.settings.mount_label
        backend = storage_backend(need.level, same_machine=self.queue.same_machine(spec.worker or ""),
                                  has_label=label in mounts,
                                  transfer=worker is not None and "transfer" in worker.capabilities)
        # The placement checked the worker could serve it; a worker that changed since gets none
        # and the run reports the missing file itself.
        plan = plan_for(backend or "none", run_id=spec.run_id, data_dir=str(Path(self.host.data_dir).resolve()),
                        label=label, mounts=mounts, inputs=files.inputs, relative=need.relative)
        s3 = self.executor.s3
        return with_s3(plan, run_id=spec.run_id, bucket=s3.config.bucket if s3 is not None else None,
                       worker_has_s3=worker is not None and "s3" in worker.capabilities)

    @property
    def s3(self) -> Any:
        """The S3 backend (core/storage/s3.py S3Storage), or None when it is off."""
        return self.executor.s3

    def run_closed(self, run_id: str) -> None:
        """The run's final status and closing event are committed: acknowledge all, forget it."""
        self.executor.closed(run_id)

    def log_failed(self, run_id: str, lost: dict[str, Any]) -> None:
        """The store refused some of the run's events: the run is stopped and ends failed."""
        self.executor.log_failed(run_id, lost)

    def is_one_shot(self, name: str | None) -> bool:
        worker = self.registry.get(name) if name else None
        return worker is not None and worker.hello is not None and bool(worker.hello.one_shot)

    def is_degraded(self, name: str) -> bool:
        """Connected with a node catalog that differs from the server's."""
        worker = self.registry.get(name)
        return worker is not None and worker.catalog is not None and not worker.catalog.matches

    @staticmethod
    def node_types(graph: dict[str, Any]) -> frozenset[str]:
        """Every node type a run of `graph` needs its worker to offer (handshake.graph_node_types)."""
        return graph_node_types(graph)

    def cpu_count(self, name: str) -> int | None:
        """The worker's cores as its hello reported them (None: unknown)."""
        worker = self.registry.get(name)
        hello = worker.hello if worker is not None else None
        return hello.cpu_count if hello else None

    def card_names(self, name: str) -> dict[str, str]:
        """The worker's device -> card name as its hello reported them (kept on its row while it is
        away), for a run's `cards` (core/runs/cards.py)."""
        worker = self.registry.get(name)
        return {d["device"]: d["name"] for d in (worker.devices if worker is not None else ())
                if isinstance(d, dict) and isinstance(d.get("device"), str) and isinstance(d.get("name"), str)}

    def server_side(self) -> ServerSide:
        catalog = self.host.registry.catalog()
        return ServerSide(version=__version__, catalog_hash=catalog["hash"], node_types=catalog["types"],
                          heartbeat_s=float(self.host.settings.worker_heartbeat_s),
                          grace_s=float(self.host.settings.worker_cancel_grace_s),
                          resume_grace_s=float(self.host.settings.worker_resume_grace_s),
                          max_instances=int(self.host.settings.worker_max_instances))

    def offer(self, worker: Worker) -> None:
        """Tell the run queue how this worker stands now."""
        hello = worker.hello
        devices = None
        if worker.devices:
            devices = tuple(OfferedDevice.coerce(d) for d in worker.devices if _valid_device(d))
        elif hello is not None:
            devices = ()
        offer = WorkerOffer(
            name=worker.name, state=worker.state, devices=devices,
            machine_id=hello.machine_id if hello else None, loopback=worker.loopback,
            missing_types=frozenset(worker.catalog.worker_lacks) if worker.catalog is not None else None,
            one_shot=bool(hello.one_shot) if hello else False,
            run_id=hello.one_shot_run_id if hello else None,
            has_label=self.host.settings.mount_label in self._mounts(worker),
            transfer="transfer" in worker.capabilities,
            shared_memory=_shared_memory(worker.devices))
        self.queue.set_worker(offer)
        self._card_memory(worker, ())

    def _card_memory(self, worker: Worker, running: Any) -> bool:
        """Pass the worker's memory figures of its cards shared by memory to the run queue's
        ledgers; whether it has any such card."""
        shared = _shared_memory(worker.devices)
        if not shared:
            return False
        self.queue.set_card_memory(worker.name, {
            d["device"]: card_memory(d, running) for d in worker.devices
            if isinstance(d, dict) and d.get("device") in shared})
        return True

    # -- a connection -----------------------------------------------------------------------------
    def link_number(self, link: WorkerLink) -> int:
        number = self._link_numbers.get(id(link))
        if number is None:
            number = self._link_numbers[id(link)] = next(self._link_ids)
        return number

    async def hello(self, hello: Hello, credential: Credential, link: WorkerLink, *,
                    loopback: bool) -> tuple[Frame, Worker | None]:
        """Judge a hello: (welcome, the worker) or (reject, None)."""
        held = self.registry.instances_held(hello.name, besides=registered_name(hello)) if hello.instance else 0
        judged = check_hello(hello, self.server_side(), credential=credential,
                             connected=self.registry.connected_identities(), instances_held=held)
        if isinstance(judged, Refused):
            log.warning("codefy: worker %r refused: %s", hello.name, judged.message)
            self._keep_refusal(hello.name, judged)
            return judged.frame(), None
        self.refusals.pop(hello.name, None)
        now = asyncio.get_running_loop().time()
        worker, old = self.registry.register(judged, hello, credential, link, now)
        worker.loopback = loopback
        if credential.kind == "worker":
            worker.enrolled = True
            worker.enrolled_by = credential.enrolled_by
            info = {"version": hello.version, "platform": hello.platform, "devices": worker.devices,
                    "capabilities": list(worker.capabilities), "machine_id": hello.machine_id,
                    "fingerprint_digest": digest(hello.fingerprint) if hello.fingerprint else None}
            worker.info = info
            self._background(self.host.store.worker_seen(worker.name, info))
        if hello.fingerprint:
            self._background(self.host.store.put_fingerprint(digest(hello.fingerprint), hello.fingerprint))
        if old is not None and old is not link:
            old.close(CLOSE_REPLACED, "replaced by a new connection of this worker")
            self.executor.dropped(worker, {"code": "replaced", "params": {}, "text": "replaced by a new connection"})
        welcome: Welcome = judged.welcome(worker.worker_id)
        log.info("codefy: worker %s connected from %s (%s)", worker.name, link.peer, judged.status)
        return welcome, worker

    def connected(self, worker: Worker) -> None:
        """The welcome is on its way: runs waiting for this worker may go."""
        self.executor.connected(worker)
        self.offer(worker)
        self._log_connect_notes(worker.name)
        self._reschedule()
        if self.on_connected is not None:
            self._background(self.on_connected(worker.name))

    def _log_connect_notes(self, name: str) -> None:
        once, lowered = connect_notes(self.queue.topology(), name)
        for key, text in once:
            if key not in self._noted:
                self._noted.add(key)
                log.info("codefy: %s", text)
        for text in lowered:
            log.warning("codefy: worker %s connected: %s", name, text)

    def recheck_catalogs(self) -> list[str]:
        """The server's node catalog changed (a pack installed or removed while it runs): compare
        every known worker's reported catalog again, so each is degraded or healthy as of now, and
        offer the changes to the queue. The names of the workers whose status changed."""
        side = self.server_side()
        changed = []
        for worker in self.registry.workers(listed_only=False):
            hello = worker.hello
            if hello is None or worker.catalog is None:
                continue
            before = worker.catalog.status
            worker.catalog = compare_catalogs(side.catalog_hash, side.node_types, hello.catalog_hash, hello.node_types)
            if worker.catalog.status != before:
                changed.append(worker.name)
                log.info("codefy: the node catalog changed: worker %s is %s now%s", worker.name, worker.catalog.status,
                         f" (it lacks {', '.join(worker.catalog.worker_lacks)})" if worker.catalog.worker_lacks else "")
            self.offer(worker)
        self._reschedule()
        return changed

    async def authenticate(self, token: str | None, *, loopback: bool, server_token: str | None) -> Credential | None:
        return await self.enrollment.authenticate(token, loopback=loopback, server_token=server_token)

    def warn(self, worker: Worker, run_id: str, code: str, message: str, params: dict[str, Any]) -> None:
        """A run_warning in the log of a run of `worker` that is still executing (else nothing)."""
        self.executor.warn(worker, run_id, code, message, params)

    def frame(self, worker: Worker, frame: Frame, link: WorkerLink) -> Awaitable[None] | None:
        now = asyncio.get_running_loop().time()
        if worker.link is not link:
            return None  # a replaced connection's last frames: the new one replays them
        if isinstance(frame, Heartbeat):
            self.registry.heartbeat(worker.name, frame, now)
            if self._card_memory(worker, frame.running):
                self._reschedule()  # a card shared by memory may have room now
            return None
        self.registry.alive(worker.name, now)
        if isinstance(frame, RunAlive):
            self.executor.run_alive(worker, frame, self.link_number(link))
            return None
        if isinstance(frame, RunFrame):
            return self.executor.frame(worker, frame, self.link_number(link))
        if isinstance(frame, OutputAnswer):
            self.output_reads.answer(worker.name, frame)
            return None
        if isinstance(frame, Hello):
            log.warning("codefy: worker %s sent a second hello; ignored", worker.name)
        return None

    def frames(self, worker: Worker, frames: list[RunFrame], link: WorkerLink) -> Awaitable[None] | None:
        """Per-run frames that came in one message (a batch): as `frame` for each, in order."""
        if worker.link is not link:
            return None
        self.registry.alive(worker.name, asyncio.get_running_loop().time())
        return self.executor.frames(worker, frames, self.link_number(link))

    def closed(self, name: str, link: WorkerLink, reason: dict[str, Any]) -> None:
        number = self._link_numbers.pop(id(link), None)
        if number is not None:
            self.executor.link_closed(number)
        worker = self.registry.drop(name, link, reason)
        if worker is None:
            return
        self.output_reads.closed(name)
        log.info("codefy: worker %s disconnected (%s)", name, reason.get("text"))
        self.executor.dropped(worker, reason)
        self.offer(worker)
        self._reschedule()

    # -- REST -------------------------------------------------------------------------------------
    def _slot_rows(self, provider: str) -> list[dict[str, Any]]:
        return [{"slot": s.slot, "device": s.device, "uuid": s.uuid,
                 "slots": {"limit": s.limit, "taken": s.taken, "limited_by": s.limited_by},
                 "same_card": list(s.same_card), **({"shared_with": "local"} if s.shared_with_local else {}),
                 **({"memory": s.memory} if s.memory is not None else {})}
                for s in self.queue.slot_info(provider)]

    def entry(self, worker: Worker) -> dict[str, Any]:
        """One worker as GET workers lists it: its view, with its slots."""
        view = worker.view()
        view["same_host"] = self.queue.same_machine(worker.name)
        view["slots"] = self._slot_rows(worker.name)
        # Each reported device carries its slot's figures too (as the listing is documented:
        # devices with their slots, same_card and shared_with).
        by_device = {s["device"]: s for s in view["slots"]}
        for device in view["devices"]:
            row = by_device.get(device.get("device"))
            if row is not None:
                device.update({k: v for k, v in row.items() if k in ("slots", "same_card", "shared_with", "memory")})
        return view

    def _keep_refusal(self, name: str, refused: Refused) -> None:
        if not isinstance(name, str) or not name:
            return
        self.refusals.pop(name, None)
        self.refusals[name] = {"name": name, "code": refused.code, "message": refused.message,
                               "params": dict(refused.params), "at": self.host.clock()}
        while len(self.refusals) > REFUSALS_KEPT:
            self.refusals.pop(next(iter(self.refusals)))

    def refused(self) -> list[dict[str, Any]]:
        """The kept refusals, newest first (copies)."""
        return [dict(r, params=dict(r["params"])) for r in reversed(self.refusals.values())]

    def list(self) -> dict[str, Any]:
        return {"workers": [self.entry(w) for w in self.registry.workers()], "local": self._slot_rows("local"),
                "refused": self.refused()}

    def one(self, name: str) -> dict[str, Any]:
        return self.entry(self._get(name))

    async def list_text(self, dumps: Callable[[Any], str]) -> str:
        """`list()` as JSON text (`dumps` encodes one part), rendered one worker at a time with a
        turn of the event loop between steps: however many workers there are, the loop is held
        for one worker's entry (or its encoding) at a time (a few ms at most within wire/hello_limits.py's bounds)."""
        parts = []
        for worker in self.registry.workers():
            if worker.listed and self.registry.get(worker.name) is worker:  # not removed during an earlier turn
                entry = self.entry(worker)
                await asyncio.sleep(0)  # the entry is a copy: encoding it may wait a turn
                parts.append(dumps(entry))
            await asyncio.sleep(0)
        return ('{"workers": [' + ", ".join(parts) + '], "local": ' + dumps(self._slot_rows("local"))
                + ', "refused": ' + dumps(self.refused()) + "}")

    def _get(self, name: str) -> Worker:
        worker = self.registry.get(name)
        if worker is None or not worker.listed:
            raise NotFound(f"no worker {name}", code="worker_not_found", params={"worker": name})
        return worker

    def _managed(self, name: str, user: str | None, admin: bool, action: str) -> Worker:
        worker = self._get(name)
        check_manage(name, worker.enrolled_by, user=user, admin=admin, action=action)
        return worker

    def set_draining(self, name: str, draining: bool, *, user: str | None = None,
                     admin: bool = True) -> dict[str, Any]:
        worker = self._managed(name, user, admin, "drain" if draining else "undrain")
        self.registry.set_draining(name, draining)
        if worker.link is not None:
            from ...wire.frames import Drain
            worker.link.send(Drain(draining=draining))
        self.offer(worker)
        self._reschedule()
        return worker.view()

    async def remove(self, name: str, *, user: str | None = None, admin: bool = True) -> None:
        """Revoke the worker's token, disconnect it, fail the runs queued for it and end its runs."""
        worker = self._managed(name, user, admin, "remove")
        await self.host.store.delete_worker(name)
        self.executor.remove_worker(worker)
        link = worker.link
        self.registry.remove(name)
        if link is not None:
            link.close(CLOSE_REMOVED, "this worker was removed")
        for run in self.queue.remove_worker(name):
            await self.host.fail_waiting(run.run_id, "worker_removed", f"worker {name} was removed",
                                         {"worker": name})
        self._reschedule()

    async def issue(self, body: Any, *, created_by: str | None, control_url: str,
                    admin: bool = True) -> dict[str, Any]:
        """A one-time token that `created_by` issues; the worker it enrolls is theirs to manage."""
        if body is None:
            body = {}
        if not isinstance(body, dict):
            raise BadRequest("expected an object {\"worker\"?, \"expires_in_s\"?}", code="invalid_request",
                             params={"field": ""})
        unknown = set(body) - {"worker", "expires_in_s"}
        if unknown:
            field = sorted(unknown)[0]
            raise BadRequest(f"{field}: unknown key (allowed: expires_in_s, worker)", code="invalid_request",
                             params={"field": field})
        enrolled = {w.name for w in self.registry.workers() if w.enrolled}
        reissue = body.get("worker")
        if isinstance(reissue, str) and reissue in enrolled:
            check_manage(reissue, self._get(reissue).enrolled_by, user=created_by, admin=admin, action="reissue")
        else:
            check_issue(user=created_by, admin=admin)
        issued: Issued = await self.enrollment.issue(worker=body.get("worker"), expires_in_s=body.get("expires_in_s"),
                                                     created_by=created_by, enrolled=enrolled)
        return {"token": issued.token, "expires_at": issued.expires_at, "worker": issued.worker,
                "command": f"codefy agent start --control {control_url} --token {issued.token}"}

    async def enroll(self, body: Any, *, peer: str) -> dict[str, Any]:
        row, token, replaced = await self.enrollment.enroll(body, peer=peer)
        worker = self.registry.enrolled(row["name"], row.get("info"), enrolled_by=row.get("enrolled_by"))
        if replaced is not None and worker.link is not None and worker.credential is not None \
                and worker.credential.kind == "worker":
            worker.link.close(CLOSE_CREDENTIALS, "this worker's token was re-issued")
        self.offer(worker)
        log.info("codefy: worker %s enrolled", row["name"])
        return {"worker_token": token, "name": row["name"], "worker_id": row["id"]}

    # -- helpers -----------------------------------------------------------------------------------
    def _reschedule(self) -> None:
        self._background(self.host.reschedule())

    def _background(self, aw: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(aw)
        self.host.keep(task)


def _valid_device(item: Any) -> bool:
    try:
        OfferedDevice.coerce(item)
    except (ValueError, TypeError):
        return False
    return True


__all__ = ["WorkerService", "StartedRun", "CLOSE_CREDENTIALS", "CLOSE_HOST_ORIGIN", "CLOSE_HELLO_TIMEOUT", "CLOSE_REJECTED",
           "CLOSE_REPLACED", "CLOSE_REMOVED", "Reject"]


def _shared_memory(devices: Any) -> frozenset[str]:
    """The CUDA cards a worker's hello marks `"share": "memory"` (codefy agent start --share-memory)."""
    return frozenset(d["device"] for d in devices or () if isinstance(d, dict) and d.get("share") == "memory"
                     and isinstance(d.get("device"), str) and d["device"].startswith("cuda:"))
