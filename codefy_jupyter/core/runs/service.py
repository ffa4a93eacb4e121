"""RunService: submit, schedule, execute, cancel, delete, recover. The one owner of run state.

A submit is validated (schema 422, semantics 400, lane refusals 503), its SECRET values move to an
in-memory vault, the device is resolved, the row is written, and the run joins the pure
scheduler's queue. `_reschedule` starts whatever the scheduler places. When a graph ends, the slot
is released first (the next run may start at once), then the final status and the closing event
are written in one transaction.

Everything here runs on the server's event loop; the executor hops engine events over from run
threads (in batches) and calls `_on_engine_event` on it.

Worker runs (`options.target`: a worker's name, `any`, or the one-shot pool) are checked and placed
by the same scheduler; a placement on a worker starts through WorkerService's public methods
(`self.workers`, core/workers/service.py), which sees this service only as the `RunHost` of
core/workers/host.py and ends each run with an `ExecutionOutcome` filed here like an in-process
result. A run without a target, or with worker `local`, never reaches that code.

Each run held here has one `RunRecord` (core/runs/records.py); how a run ends is decided in
core/runs/endings.py, what becomes of a previous process's runs at start in core/runs/recovery.py
(a worker run with a resume point is adopted instead of retired).
"""

from __future__ import annotations

import asyncio
import os
import json
import logging
import time
import uuid
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any, Callable, Protocol

from ...engine import GraphError, NodeRegistry, RunResult, SessionCache, default_registry, validate_graph
from ...wire import run_events as ev
from . import state as rs
from ..config import Settings
from ..errors import BadRequest, Conflict, Forbidden, NotFound, ServiceError, StorageFull, Unavailable
from ...wire import cpu_threads
from . import endings, record_rules, recovery
from .event_log import EventLog
from .executors import ExecutionOutcome, InProcessExecutor, RunHandle, RunSpec
from .records import RunBook, RunRecord
from ...wire.fingerprint import digest, environment_document
from .requests import SubmitRequest, options_doc, parse_submit, strip_secrets
from .peak import in_process_peak
from .recorded import RecordedOutputs
from .retention import remove_run_files
from ..storage import plan as storage_plan, run_needs
from .summary import add_final_loss
from .unwritten import StorageWatch, UnwrittenEnding
from ..scheduling.device_sets import SubmitError, resolve_run_device
from ..scheduling.limits import build_limits
from .estimates import MemoryEstimates
from ..scheduling.memory_ledger import budget_mib
from ..scheduling.queue import RunQueue
from ..scheduling.quotas import Reservation, build_quotas
from ..scheduling.records import Placement, Run
from ..scheduling.slot_groups import LOCAL, LocalMachine
from ..store.database import Store
from ..workers.handshake import graph_node_types
from ..workers.service import WorkerService

log = logging.getLogger("codefy.runs")

SHUTDOWN_GRACE_S = 5.0
LIST_LIMIT = 50
OFFSET_MAX = 2**63 - 1  # SQLite's largest integer: a larger offset cannot even be bound
# Graphs with more nodes and edges than this are validated in a thread (a few ms of work inline).
VALIDATE_INLINE_ITEMS = 2000


# Run columns only the server's own submitters set (core/experiments): which sweep variant or study
# attempt a child run is.
LINK_FIELDS = frozenset({"sweep_id", "sweep_variant", "study_id", "study_attempt_id"})


class RunObserver(Protocol):
    """Told on the event loop; must not block (schedule work with `RunService.keep`)."""

    def run_started(self, run_id: str) -> None: ...

    def run_finished(self, run_id: str, status: str) -> None: ...


@dataclass(frozen=True)
class _Prepared:
    req: SubmitRequest
    seed: int | None
    resolved: Any
    worker: str | None
    pool: str | None
    node_types: Any
    device_field: str
    files: Any = None  # a worker run's (RunFiles, Need), or None: it uses no files


class RunService:
    def __init__(self, store: Store, settings: Settings, *, devices: list[str] | None = None,
                 executor: InProcessExecutor | None = None, registry: NodeRegistry | None = None,
                 clock: Callable[[], float] = time.time, data_dir: Path | None = None,
                 local_machine: LocalMachine | None = None, cpu_cores: int | None = None) -> None:
        self.store = store
        # This machine's usable cores, for the automatic CPU thread budget of runs executed here.
        self.cpu_cores = cpu_cores if cpu_cores is not None else cpu_threads.available_cores()
        self.settings = settings
        self.registry = registry or default_registry()
        self.estimates = MemoryEstimates(self.registry)
        self.clock = clock
        self.devices = ["cpu"] + [d for d in (devices or []) if d != "cpu"]
        self.executor = executor or InProcessExecutor()
        self.data_dir = data_dir or settings.resolved_data_dir()
        self.limits, self.config_warnings = build_limits(settings.run_queue_max_concurrent_gpu,
                                                    settings.run_queue_max_concurrent_cpu,
                                                    settings.run_queue_max_concurrent)
        for notice in self.config_warnings:
            log.warning("%s", notice.message)
        self.queue = RunQueue(self.limits, interactive_limit=max(1, settings.run_interactive_max_concurrent),
                              slots=self.devices, local=local_machine)
        self.queue.cuda_context_mib = settings.execution_cuda_context_mib
        self.queue.quotas, quota_warnings = build_quotas(settings.run_quota_max_running, settings.run_quota_max_queued,
                                                         settings.run_quota_exempt_users)
        for notice in quota_warnings:
            log.warning("%s", notice.message)
        self.events = EventLog(store, payload_cap_bytes=settings.run_event_payload_cap_bytes, clock=clock)
        self.events.on_write_failed = self._log_write_failed
        self._runs = RunBook()  # one record per run held here, and the recently finished ones
        self._tasks: set[asyncio.Task[None]] = set()
        self._order = 0
        self._session_caches: dict[str, SessionCache] = {}
        self._closing = False
        self._observers: list[RunObserver] = []
        self._room_listeners: list[Callable[[str | None], None]] = []
        self.fingerprint_digest: str | None = None
        # Worker agents, their connections and runs (runs without a target never touch it).
        self.workers = WorkerService(self, self.queue)
        # Recorded outputs (options.record_outputs), here or on workers, and the runs recording now.
        max_mb = settings.run_output_store_max_mb
        self.outputs = RecordedOutputs(store, self.workers.output_reads, clock=clock,
                                       max_bytes=max_mb * 1024 * 1024 if max_mb > 0 else None)
        self.workers.on_connected = self.outputs.connected
        self._recording: set[str] = set()
        # A full disk: endings kept until they can be written, waiting runs held (core/runs/unwritten.py).
        self.storage = StorageWatch(store, written=lambda e: self._ending_written(e.run_id, e.status, e.rows),
                                    resumed=self._storage_resumed)
        store.on_full = self.storage.start

    # -- lifecycle ------------------------------------------------------------------------------
    async def start(self) -> None:
        """Record this environment's fingerprint, retire what a dead process left behind, then
        apply retention."""
        document = environment_document(self.registry.catalog())
        self.fingerprint_digest = digest(document)
        await self.store.put_fingerprint(self.fingerprint_digest, document)
        await self.workers.load()
        for row in await self.store.active_runs():
            resume = self.workers.resume_point(row)
            fate = recovery.recover(row, await self.store.last_event(row["id"]), resume)
            if isinstance(fate, recovery.Repair):
                await self.store.update_run(row["id"], status=fate.status, finished_at=row.get("finished_at") or
                                            self.clock())
                continue
            self.events.track(row["id"], int(row["last_seq"]))
            if isinstance(fate, recovery.Adopt):
                assert resume is not None
                await self._adopt(row, resume, fate)
                continue
            await self._write_final(row["id"], rs.INTERRUPTED, fate.closing, error=None, from_state=row["status"])
            log.info("run %s was %s when the server stopped: interrupted", row["id"], row["status"])
        await self._retention()

    async def _adopt(self, row: dict[str, Any], resume: dict[str, Any], fate: recovery.Adopt) -> None:
        handle = self.workers.adopt(row)
        self._recording_options(row["id"], row)  # kept again once it ends (seed: restart)
        self._order += 1
        run, slots = recovery.adopted_run(row, resume, self._order)
        self.queue.adopt(run, fate.worker, slots)
        if "released_at" in (row.get("execution_facts") or {}):
            self.queue.release(row["id"])  # its process had exited before the restart: its cards stay free
        self._runs.add(row["id"], status=fate.status, started=fate.started or self.clock(), worker=fate.worker,
                       handle=handle)
        await self.store.update_run(row["id"], status=fate.status)
        self.keep(asyncio.get_running_loop().create_task(self._await_run(row["id"], handle)))
        log.info("run %s executes on worker %s: adopted, waiting for the worker", row["id"], fate.worker)

    async def shutdown(self) -> None:
        """Graceful stop: waiting runs are retired at once, executing ones get 5 s to stop."""
        self._closing = True
        self.workers.shutting_down()
        for run in self.queue.waiting():
            self.queue.cancel(run.run_id)
            await self._finish_unstarted(run.run_id, rs.INTERRUPTED, "server_shutdown",
                                         "the server shut down before this run started")
        handles = [r.handle for r in self._runs.all_executing() if r.handle is not None]
        for handle in handles:
            handle.cancel("server shutdown")
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=SHUTDOWN_GRACE_S)
        for run_id in [r.run_id for r in self._runs.all_executing()]:
            closing = ev.execution_stopped(run_id, status=rs.INTERRUPTED, code="server_shutdown",
                                           message="the server shut down while this run was executing")
            await self._write_final(run_id, rs.INTERRUPTED, closing, error=None)
        await self.storage.close()
        await self.workers.close()
        await self.events.close()

    @property
    def closing(self) -> bool:
        """Shutting down: runs that end now end because of it (a study waits for the next start)."""
        return self._closing

    def keep(self, task: asyncio.Future[Any]) -> None:
        """Hold a background task until it is done (and wait for it at shutdown)."""
        self._tasks.add(task)  # type: ignore[arg-type]
        task.add_done_callback(self._tasks.discard)  # type: ignore[arg-type]

    async def reschedule(self) -> None:
        await self._reschedule()

    def release_slots(self, run_id: str) -> None:
        """A worker run's cards are free before it ends (run_released): the next run may start."""
        if self._runs.executing(run_id) is None or not self.queue.release(run_id):
            return
        log.info("run %s: its worker process has exited; its cards are free while its files upload", run_id)
        self.keep(asyncio.get_running_loop().create_task(self._reschedule()))

    def worker_run_status(self, run_id: str, status: str) -> None:
        """A worker run's connection dropped (disconnected) or came back (running)."""
        record = self._runs.executing(run_id)
        if record is None:
            return
        status = rs.next_state(record.status, rs.DISCONNECT if status == rs.DISCONNECTED else rs.RECONNECT)
        record.status = status
        self.store.update_run(run_id, status=status, only_if_status=(rs.RUNNING, rs.DISCONNECTED)
                              ).add_done_callback(partial(_log_failed_write, f"marking run {run_id} {status}"))

    async def fail_waiting(self, run_id: str, code: str, message: str, params: dict[str, Any]) -> None:
        """A waiting run that can no longer run (its worker was removed): failed, with the code on
        its execution_error event."""
        info = {"code": code, "message": message, "params": params}
        await self._write_final(run_id, rs.FAILED, ev.execution_error(run_id, info), error=info,
                                from_state=rs.QUEUED)

    # -- submit -----------------------------------------------------------------------------------
    async def _prepare(self, body: Any) -> _Prepared:
        """Everything a submit decides before it takes a run id: the request's shape (422), the
        graph (400), the device or worker target (400), the lane's session. Writes nothing."""
        if self._closing:
            raise Unavailable("the server is shutting down; submit again once it is back",
                              code="shutting_down")
        req = parse_submit(body)  # SchemaError: 422
        graph = req.graph
        if _size(graph.get("nodes")) + _size(graph.get("edges")) > VALIDATE_INLINE_ITEMS:
            # A big graph is checked in a thread (pure code that yields the GIL): the loop serves on.
            problems = await asyncio.to_thread(validate_graph, graph, self.registry)
        else:
            problems = validate_graph(graph, self.registry)
        if problems:
            err = GraphError(problems)
            raise BadRequest(str(err), code="invalid_graph", params=err.to_dict()["params"])
        settings = graph.get("settings") or {}
        seed = req.options.seed if req.options.seed_given else settings.get("seed")
        req = self.estimates.check(req)
        target = req.options.target
        pool = getattr(target, "pool", None) if target is not None else None
        worker = target.worker if target is not None and target.worker not in (None, LOCAL) else None
        if req.options.record_outputs:
            self._check_recordable(worker, pool)
        if worker is None and pool is None:  # this server: exactly as without workers
            resolved = resolve_run_device(req.options.device, settings.get("device"),
                                          target.devices if target else (), self.devices)
        else:
            resolved = self.queue.resolve_target(worker, req.options.device, settings.get("device"),
                                                 target.devices if target else (), pool=pool)
        if req.options.record_outputs and (worker is not None or pool is not None):
            self._check_recordable_graph(graph, resolved.devices)
        if req.options.lane == "interactive" and not req.options.session:
            raise BadRequest("an interactive run needs options.session", code="session_required",
                             params={"field": "options.session"})
        node_types = None
        if worker not in (None, "any") and self.workers.is_degraded(worker):
            node_types = await asyncio.to_thread(graph_node_types, graph)
        device_field = "options.device" if req.options.device is not None else (
            "graph.settings.device" if settings.get("device") is not None else "options.device")
        files = None
        if worker is not None or pool is not None:
            files = await self._files(graph)
        return _Prepared(req, seed, resolved, worker, pool, node_types, device_field, files)

    def _check_recordable(self, worker: str | None, pool: str | None) -> None:
        """record_outputs on a target that could never be read back is refused at submit (seed:
        recorded outputs on a worker): a one-shot worker exits with its run, an agent without the
        capability cannot keep them."""
        if pool is not None or self.workers.is_one_shot(worker):
            what = "a one-shot worker pool" if pool is not None else f"one-shot worker {worker}"
            raise BadRequest(f"options.record_outputs: {what} exits when its run ends, so the outputs could "
                             "never be read", code="record_outputs_one_shot",
                             params={"field": "options.record_outputs", "worker": worker, "pool": pool})
        if worker not in (None, "any") and self.workers.output_reads.can_record(worker) is False:
            raise BadRequest(f"options.record_outputs: worker {worker}'s agent cannot keep recorded outputs "
                             "(it does not list the record_outputs capability)", code="record_outputs_unsupported",
                             params={"field": "options.record_outputs", "worker": worker})

    @staticmethod
    def _check_recordable_graph(graph: dict[str, Any], devices: Any) -> None:
        ddp = record_rules.unrecordable_ddp(graph, devices)
        if ddp is not None:
            raise BadRequest(f"options.record_outputs: node {ddp[0]} trains with DDP on {ddp[1]} cards, in rank "
                             "processes whose outputs cannot be recorded; record without strategy ddp, or run it "
                             "without record_outputs", code="record_outputs_ddp",
                             params={"field": "options.record_outputs", "node_id": ddp[0], "ranks": ddp[1]})

    async def _files(self, graph: dict[str, Any]) -> Any:
        """What a worker run needs for its files (core/storage/run_needs.py), or None: it uses none."""
        found = run_needs.run_files(graph, self.registry)
        if not found.uses_files:
            return None
        paths = [item.path for item in found.inputs]
        sizes = await asyncio.to_thread(_sizes, paths) if paths else {}
        data = str(self.data_dir.resolve())
        return found, run_needs.classify(found, data, sizes, self.settings.transfer_max_input_bytes)

    def _queue_run(self, prepared: _Prepared, run_id: str, order: int, owner: str | None = None) -> Run:
        req, resolved, worker, pool = prepared.req, prepared.resolved, prepared.worker, prepared.pool
        return Run(run_id=run_id, order=order, device=resolved.device, owner=owner,
                   devices=resolved.devices if (worker is None and pool is None) or len(resolved.devices) > 1 else (),
                   seeded=prepared.seed is not None, lane=req.options.lane, session=req.options.session,
                   **({} if worker is None and pool is None else {"worker": worker or "any", "pool": pool}),
                   files=prepared.files[1].level if prepared.files is not None else "none",
                   files_why=_why(prepared.files), **_memory(req.options.target))

    def _memory_budgets(self, row: dict[str, Any], worker: str, devices: list[str]) -> dict[str, int]:
        """The run's budget on each of its cards that its worker shares by memory."""
        gib = ((row.get("options") or {}).get("target") or {}).get("memory_gib")
        offer = self.queue.worker(worker)
        if gib is None or offer is None:
            return {}
        return {d: budget_mib(gib) for d in devices if d in offer.shared_memory}

    async def preflight(self, body: Any) -> None:
        """Refuse, as `submit` would, a run that could never be queued as asked; queue nothing.
        A sweep or a study checks its children's shared options this way before writing a row."""
        prepared = await self._prepare(body)
        run = self._queue_run(prepared, "preflight", 0)
        if not run.is_local or run.memory_mib is not None:
            self.queue.check_placeable(run, prepared.node_types, device_field=prepared.device_field)

    def reserve(self, owner: str | None, runs: int) -> Reservation:
        """Hold `runs` places of `owner`'s queued cap for children submitted later with
        `reservation=` (429 owner_queue_full when they do not fit): from here to their enqueue no
        other submit can take that room. `release` what is not used."""
        return self.queue.reserve_owner_room(owner, runs)

    def release(self, reservation: Reservation) -> None:
        """Give back the places `reservation` did not use; tell the room listeners if any went back."""
        if self.queue.release_owner_room(reservation):
            self._room_freed(reservation.owner)

    def has_room(self, owner: str | None) -> bool:
        """Whether one more run of `owner` would fit the queued cap now."""
        return self.queue.has_owner_room(owner)

    def add_room_listener(self, listener: Callable[[str | None], None]) -> None:
        """Call `listener(owner)` on the event loop when a reservation gave places of `owner`'s queued
        cap back. (A run starting or ending frees a place too: observers hear of those.)"""
        self._room_listeners.append(listener)

    def _room_freed(self, owner: str | None) -> None:
        for listener in self._room_listeners:
            try:
                listener(owner)
            except Exception:
                log.exception("codefy: a room listener failed")

    def add_observer(self, observer: RunObserver) -> None:
        """Tell `observer` when runs start and when their final status has committed (sweeps and
        studies follow their children this way, not by polling)."""
        self._observers.append(observer)

    def _notify(self, method: str, *args: Any) -> None:
        for observer in self._observers:
            try:
                getattr(observer, method)(*args)
            except Exception:
                log.exception("codefy: a run observer failed on %s", method)

    async def submit(self, body: Any, *, owner: str | None = None, run_id: str | None = None,
                     links: dict[str, Any] | None = None, reservation: Reservation | None = None) -> dict[str, Any]:
        """Queue a run. `run_id`, `links` and `reservation` are for the server's own submitters: a
        study chooses its child's id before submitting it (the stamp it relinks by after a crash),
        a sweep's or study's child records which one it belongs to (`LINK_FIELDS`) and takes a
        place its parent reserved (`reserve`)."""
        prepared = await self._prepare(body)
        req, seed, resolved, worker, pool = (prepared.req, prepared.seed, prepared.resolved, prepared.worker,
                                             prepared.pool)
        graph = req.graph
        unknown = set(links or ()) - LINK_FIELDS
        if unknown:
            raise ValueError(f"unknown run links: {sorted(unknown)}")
        run_id = run_id or uuid.uuid4().hex[:16]
        stored_graph = strip_secrets(graph, self.registry)
        self._order += 1
        run = self._queue_run(prepared, run_id, self._order, owner)
        # The lane's refusals (503), a worker target's (400) and the owner's queued cap (429) happen
        # before anything is written, checked and queued in one step (no await between them). A
        # sweep's or study's child takes the place reserved for it.
        if run.is_local:
            self.queue.submit(run, reservation=reservation)
        else:
            self.queue.submit(run, prepared.node_types, device_field=prepared.device_field, reservation=reservation)
        # Placed before its row exists? It starts once the row is written.
        record = self._runs.add(run_id, written=False)
        try:
            row = {
                "id": run_id, "name": req.name, "status": rs.QUEUED, "owner": owner, "device": resolved.device,
                "devices": list(resolved.devices or (resolved.device,)), "queue_key": run.queue_key,
                "worker_id": worker if worker != "any" else None,
                "lane": req.options.lane, "session": req.options.session, "seed": seed,
                "deterministic": req.options.deterministic, "options": options_doc(req, resolved),
                "graph": stored_graph, "submitted_at": self.clock(), **(links or {})}
            await self.store.create_run(row)
        except BaseException:
            self._runs.discard(run_id)
            if not self.queue.cancel(run_id) and self.queue.is_running(run_id):
                self.queue.finish(run_id)
                await self._reschedule()
            raise
        record.written = True
        self.events.track(run_id, 0)
        for notice in resolved.warnings:
            self.events.emit(run_id, ev.run_warning(run_id, notice.code, notice.message, notice.params))
        record.graph, record.row, record.files = graph, row, prepared.files
        if pool is not None or self.workers.is_one_shot(worker):
            self._time_out_one_shot(run_id)
        deferred, record.deferred = record.deferred, None
        if deferred is not None:
            await self._start(deferred)
        await self._reschedule()
        # The answer describes the run after this pass: started, or where it waits and why (a dry
        # scheduler pass, skipped for a run that started at once).
        view_row = {**row, "started_at": None, "finished_at": None, "error": None, "fingerprint_digest": None,
                    "last_seq": 0, "execution_facts": None}
        active = self._runs.executing(run_id)
        if active is None:
            return self._view(view_row)
        view = self._view({**view_row, "status": rs.RUNNING, "started_at": active.started})
        view.update(queue_position=None, queue_reason=None)
        if active.worker is not None:
            view["worker_id"] = active.worker
        return view

    def _time_out_one_shot(self, run_id: str) -> None:
        """A run for a one-shot worker fails if none takes it within the queue timeout."""
        seconds = self.settings.worker_one_shot_queue_timeout_s
        loop = asyncio.get_running_loop()

        async def expire() -> None:
            if self.queue.cancel(run_id):
                await self.fail_waiting(run_id, "one_shot_queue_timeout",
                                        f"no one-shot worker took this run within {seconds} s", {"seconds": seconds})
                await self._reschedule()

        loop.call_later(max(0, seconds), lambda: self.keep(loop.create_task(expire())))

    # -- scheduling and execution -----------------------------------------------------------------
    async def _reschedule(self) -> None:
        if self._closing or self.storage.holding:
            return  # a run started on a full disk could record nothing: it waits for room
        for placement in self.queue.schedule():
            await self._start(placement)

    async def _start(self, placement: Placement) -> None:
        run_id = placement.run_id
        record = self._runs.get(run_id) or self._runs.add(run_id)
        if not record.written:  # its submit is still writing the row
            record.deferred = placement
            return
        # A run submitted by this process: its row is in memory (no read back).
        row, graph, record.row, record.graph = record.row, record.graph, None, None
        row = row or await self.store.get_run(run_id)
        graph = graph or (row or {}).get("graph")
        record.status, record.started = rs.next_state(record.status, rs.START), self.clock()
        self._notify("run_started", run_id)
        if placement.worker != LOCAL:
            self._start_on_worker(placement, record, row, graph)
            return
        now = record.started
        budget = self._cpu_budget(row, None)
        # Not awaited: writes commit in call order, so the final write queued later can never land
        # before this one, and the submit that started the run answers after one commit, not two.
        record.device, record.facts = placement.device, ({"cpu_threads": budget.to_dict()} if budget else {})
        self.store.update_run(run_id, status=record.status, started_at=now,
                              fingerprint_digest=self.fingerprint_digest,
                              **({"execution_facts": dict(record.facts)} if budget else {})
                              ).add_done_callback(partial(_log_failed_write, f"marking run {run_id} running"))
        # Written with the engine's first events (which follow within a millisecond or so), not on
        # its own: one write and one frame per follower less for every run.
        self.events.emit(run_id, ev.execution_start(
            run_id, name=row.get("name"), device=placement.device, devices=list(row.get("devices") or []),
            seed=row.get("seed"), deterministic=bool(row.get("deterministic")), queue_key=placement.queue_key,
            started_at=now), with_next=True)
        loop = asyncio.get_running_loop()
        cache = self._session_caches.setdefault(row["session"], SessionCache()) if row.get("session") else None
        spec = RunSpec(run_id=run_id, graph=graph, device=placement.device, seed=row.get("seed"),
                       deterministic=bool(row.get("deterministic")),
                       max_parallel_nodes=self.settings.max_parallel_nodes,
                       data_dir=self.data_dir / "runs" / run_id, cache=cache, cpu=budget,
                       options=self._recording_options(run_id, row))
        handle = record.handle = self.executor.start(spec, partial(self._on_engine_event, run_id))
        task = loop.create_task(self._await_run(run_id, handle))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _start_on_worker(self, placement: Placement, record: RunRecord, row: dict[str, Any],
                         graph: dict[str, Any]) -> None:
        """The run goes to a worker: the WorkerExecutor sends the assign (with the SECRET values
        this process holds); execution_start is written when the worker says the run started."""
        run_id, name = placement.run_id, placement.worker
        now, record.worker = record.started, name
        devices = list(placement.devices)
        queue_key = f"{name}/{placement.device}"
        spec = RunSpec(run_id=run_id, graph=graph, device=placement.device, seed=row.get("seed"),
                       deterministic=bool(row.get("deterministic")),
                       max_parallel_nodes=self.settings.max_parallel_nodes, worker=name, devices=tuple(devices),
                       queue_key=queue_key, slots=placement.slots, name=row.get("name"),
                       cpu=self._cpu_budget(row, name), files=record.files,
                       memory_budgets=self._memory_budgets(row, name, devices),
                       options=self._recording_options(run_id, row))
        record.files = None
        started = self.workers.start_run(spec)
        self.store.update_run(run_id, status=record.status, started_at=now, worker_id=name,
                              devices=devices, queue_key=queue_key, fingerprint_digest=started.fingerprint,
                              execution_facts=started.facts
                              ).add_done_callback(partial(_log_failed_write, f"marking run {run_id} running"))
        handle = record.handle = started.handle
        self.keep(asyncio.get_running_loop().create_task(self._await_run(run_id, handle)))

    def _recording_options(self, run_id: str, row: dict[str, Any]) -> dict[str, Any]:
        if not (row.get("options") or {}).get("record_outputs"):
            return {}
        self._recording.add(run_id)
        return {"record_outputs": True}

    async def _keep_outputs(self, run_id: str, result: Any, worker: str | None) -> None:
        """A recording run ended: its captures here, or its place for the worker's."""
        self._recording.discard(run_id)
        try:
            if isinstance(result, RunResult):
                await self.outputs.keep_local(run_id, result.outputs)
            elif isinstance(result, ExecutionOutcome) and "worker_pid" in (result.facts or {}):
                # Only a run that started on its worker holds a place (one that failed before
                # cannot push another run's outputs out).
                await self.outputs.keep_worker(run_id, str(worker))
        except Exception:
            log.exception("codefy: keeping the recorded outputs of run %s failed", run_id)

    def _cpu_budget(self, row: dict[str, Any], worker: str | None) -> cpu_threads.CpuBudget | None:
        """The run's CPU thread budget on the machine it was placed on: this server's, or the
        worker's (its cores from its hello, its own cpu queue's slots)."""
        requested = (row.get("options") or {}).get("cpu_threads")
        if worker is None:
            cores, slots = self.cpu_cores, self.limits.limit("cpu")
        else:
            cores, slots = self.workers.cpu_count(worker), self.limits.limit(f"{worker}/cpu")
        return cpu_threads.decide(requested=requested, setting=self.settings.run_cpu_threads, cores=cores,
                                  cpu_slots=slots)

    def _on_engine_event(self, run_id: str, raw: dict[str, Any]) -> None:
        if self._runs.executing(run_id) is None:
            return  # a late event after the run was closed
        event = ev.from_engine(run_id, raw)
        if event is None:
            return
        self.events.emit(run_id, event)
        if event.type == "artifact":
            p = event.payload
            task = asyncio.get_running_loop().create_task(
                self.store.record_artifact(run_id, p.get("node_id"), p.get("kind", ""), p.get("path", ""),
                                           p.get("meta")))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _log_write_failed(self, run_id: str, lost: dict[str, Any]) -> None:
        """The store refused some of an executing run's events: a log with a hole is not the record
        of the run, so the run is stopped and ends failed (`event_log_write_failed`), its closing
        event saying which events were lost and why."""
        active = self._runs.executing(run_id)
        if active is None or active.handle is None:
            return
        if active.worker is not None:
            self.workers.log_failed(run_id, lost)
        else:
            active.handle.cancel("the run's event log could not be written")

    async def _await_run(self, run_id: str, handle: RunHandle) -> None:
        active = self._runs.get(run_id)
        assert active is not None and active.started is not None
        try:
            result: RunResult | None = await handle.done
            error: BaseException | None = None
        except BaseException as err:  # the engine refused the graph or crashed: the run fails
            result, error = None, err
        self.queue.finish(run_id)  # the slot first: the next run may start while we file this one
        if self._runs.executing(run_id) is not active:
            return  # shutdown already closed it (it outlived the grace period)
        await self._reschedule()
        duration = self.clock() - active.started
        if isinstance(result, ExecutionOutcome):
            ending = endings.of_outcome(run_id, result, duration=duration, shutting_down=self._closing)
        else:
            ending = endings.of_result(run_id, result, error, duration=duration, lost=self.events.lost.get(run_id),
                                       shutting_down=self._closing)
            peak = in_process_peak(active.device or "cpu")
            if peak:
                ending = replace(ending, facts={**(active.facts or {}), **(ending.facts or {}), "peak_memory": peak})
        if run_id in self._recording:  # kept before the final status shows: a read right after finds them
            await self._keep_outputs(run_id, result, active.worker)
        await self._write_final(run_id, ending.status, ending.closing, error=ending.error, facts=ending.facts)
        if isinstance(result, ExecutionOutcome):
            self.workers.run_closed(run_id)
        try:
            await self._retention()
        except StorageFull as full:  # pruning waits for the next run that ends with room on the disk
            log.warning("codefy: retention skipped after run %s: %s", run_id, full)

    async def _write_final(self, run_id: str, status: str, closing: ev.RunEvent, *, error: Any,
                           facts: dict[str, Any] | None = None, from_state: str | None = None) -> None:
        """Final status and closing event (with whatever is still queued) in one transaction.
        `from_state`: the run's status when this process does not hold it (a waiting run already
        taken out of the queue, a row left by a previous process). An ending the lifecycle does not
        allow (a second ending, say) raises IllegalTransition and writes nothing."""
        before = self._known_status(run_id) if from_state is None else from_state
        rs.finish(before if before is not None else "unknown", status)
        started = self._runs.finishing(run_id, before).started  # followers see `before` until the write commits
        rows = self.events.take_closing(run_id, closing)
        extra = {"execution_facts": facts} if facts is not None else {}
        try:
            try:
                await self.store.update_run(run_id, status=status, finished_at=self.clock(), error=error,
                                            events=rows, **extra)
            except StorageFull:
                raise
            except Exception as refused:
                # A write of the run's events failed ahead of this one (its seqs no longer follow), or
                # its own queued events were refused: the ending alone, once more. A run must end.
                rows = self.events.retake_closing(run_id, rows, refused)
                await self.store.update_run(run_id, status=status, finished_at=self.clock(), error=error,
                                            events=rows, **extra)
        except StorageFull:
            # The run ends all the same (in memory, for its followers); the disk gets it once it has room.
            rows = self.events.follow_durable(run_id, rows)
            self._runs.finished(run_id, status)
            self.storage.keep(UnwrittenEnding(run_id, status, rows, error, facts, self.clock(), started))
            self.events.announce(run_id, rows)
            return
        except BaseException:
            self._runs.discard(run_id)
            raise
        await self._ending_written(run_id, status, rows)

    async def _ending_written(self, run_id: str, status: str, rows: list[tuple[int, str, str, float]]) -> None:
        """A run's final write committed (now, or once a full disk had room): observers are told
        only now, as they read what it wrote."""
        self._runs.finished(run_id, status)
        await self.events.committed(run_id, rows)
        self._notify("run_finished", run_id, status)

    async def _storage_resumed(self) -> None:
        """The disk has room again: the runs held while it was full may start."""
        await self._reschedule()

    async def _finish_unstarted(self, run_id: str, status: str, code: str, message: str) -> None:
        closing = ev.execution_stopped(run_id, status=status, code=code, message=message)
        await self._write_final(run_id, status, closing, error=None, from_state=rs.QUEUED)

    async def _retention(self) -> None:
        """Keep the newest finished runs; a pruned run's files go too (checkpoints, logs), except
        the checkpoints of a run that ended interrupted: they are its resume point."""
        # Prune hooks harvest results from the runs' metric points, which are flushed apart from
        # the closing write: make them durable first.
        await self.events.flush()
        pruned = await self.store.prune_finished(self.settings.run_retention_keep_last)
        for item in pruned:
            self.events.forget(item.run["id"])
            folder = self.data_dir / "runs" / item.run["id"]
            keep = {"checkpoints"} if item.run["status"] == rs.INTERRUPTED else set()
            await asyncio.to_thread(remove_run_files, folder, keep)
            await self._remove_s3_objects(item.run)

    async def _remove_s3_objects(self, row: dict[str, Any]) -> None:
        """An S3 run's objects go with it, but for its output/ (and checkpoint/ when interrupted:
        wire/s3_keys.py). A bucket that fails is logged; the row is gone either way."""
        if ((row.get("execution_facts") or {}).get("storage") or {}).get("backend") != storage_plan.S3:
            return
        s3 = self.workers.s3
        if s3 is None:
            log.warning("codefy: run %s kept objects in S3, but S3 is off now: they stay", row["id"])
            return
        try:
            await s3.remove_run(row["id"], interrupted=row["status"] == rs.INTERRUPTED)
        except ServiceError as err:
            log.warning("codefy: run %s: its S3 objects could not be removed: %s", row["id"], err)

    # -- commands -------------------------------------------------------------------------------
    async def cancel(self, run_id: str, *, user: str | None = None, admin: bool = True) -> dict[str, Any]:
        row = await self._row(run_id)
        self._check_owner(row, user, admin, "stop")
        if self.queue.cancel(run_id):
            await self._finish_unstarted(run_id, rs.CANCELLED, "cancelled", "cancelled before it started")
            await self._reschedule()
        elif (record := self._runs.executing(run_id)) is not None and record.handle is not None:
            record.handle.cancel()
        elif row["status"] in rs.FINISHED:
            raise Conflict(f"run {run_id} has already {row['status']}", code="run_finished",
                           params={"status": row["status"]})
        return await self.get(run_id)

    def reachable(self, run_id: str) -> bool:
        """Whether a cancel of `run_id` can reach it from this process: it waits in this process's
        queue or executes under its control (a run another process started cannot be stopped here)."""
        if self.queue.get(run_id) is not None:
            return True
        record = self._runs.executing(run_id)
        return record is not None and record.handle is not None

    async def delete(self, run_id: str, *, user: str | None = None, admin: bool = True) -> None:
        row = await self._row(run_id)
        self._check_owner(row, user, admin, "delete")
        if row["status"] not in rs.FINISHED:
            raise Conflict(f"run {run_id} is {row['status']}; stop it before deleting it", code="run_active",
                           params={"status": row["status"]})
        await self.outputs.delete(run_id)
        await self.store.delete_run(run_id)
        self.events.forget(run_id)
        if row.get("worker_id") and ((row.get("execution_facts") or {}).get("storage") or {}).get("backend") == "transfer":
            # What the agent uploaded is a copy made for this run alone (seed: storage, transfer),
            # but Delete keeps checkpoint files on disk, as for any run (run queue: Delete).
            await asyncio.to_thread(remove_run_files, self.data_dir / "runs" / run_id, {"checkpoints"})
        await self._remove_s3_objects(row)

    async def delete_outputs(self, run_id: str, *, user: str | None = None, admin: bool = True) -> bool:
        """Give up a run's recorded outputs (here or on its worker); False when none are kept."""
        row = await self.store.get_run(run_id)
        if row is not None:
            self._check_owner(row, user, admin, "delete the recorded outputs of")
        return await self.outputs.delete(run_id)

    @staticmethod
    def _check_owner(row: dict[str, Any], user: str | None, admin: bool, action: str) -> None:
        if not admin and row.get("owner") not in (None, user):
            raise Forbidden(f"run {row['id']} belongs to {row['owner']}; only they or an admin may {action} it",
                            params={"owner": row["owner"]})

    # -- reads ----------------------------------------------------------------------------------
    async def _row(self, run_id: str) -> dict[str, Any]:
        row = await self.store.get_run(run_id)
        if row is None:
            raise NotFound(f"no run {run_id}", code="run_not_found", params={"run_id": run_id})
        return row

    async def get(self, run_id: str) -> dict[str, Any]:
        return (await add_final_loss(self.store, [self._view(await self._row(run_id))]))[0]

    async def list(self, *, status: str | list[str] | None = None, offset: int = 0,
                   limit: int = LIST_LIMIT) -> dict[str, Any]:
        statuses = [status] if isinstance(status, str) else status
        for s in statuses or ():
            if s not in rs.STATES:
                raise BadRequest(f"unknown status {s!r}", code="invalid_status",
                                 params={"field": "status", "allowed": sorted(rs.STATES)})
        if not 1 <= limit <= LIST_LIMIT:
            raise BadRequest(f"limit must be from 1 to {LIST_LIMIT}", code="invalid_limit", params={"field": "limit"})
        if not 0 <= offset <= OFFSET_MAX:
            raise BadRequest(f"offset must be from 0 to {OFFSET_MAX}", code="invalid_offset",
                             params={"field": "offset"})
        rows, total = await self.store.list_runs(statuses, offset=offset, limit=limit)
        runs = await add_final_loss(self.store, [self._view(r) for r in rows])
        return {"runs": runs, "total": total, "offset": offset, "limit": limit}

    def _view(self, row: dict[str, Any]) -> dict[str, Any]:
        view = self.storage.overlay({k: v for k, v in row.items() if k not in ("graph", "last_seq")})
        view["last_seq"] = row.get("last_seq")
        if row["status"] == rs.QUEUED:
            view["queue_position"] = self.queue.position(row["id"])
            reason = self.queue.reason(row["id"])
            view["queue_reason"] = reason.to_dict() if reason else None
        return view

    async def _status(self, run_id: str) -> tuple[str, int]:
        found = await self.store.run_status(run_id)
        if found is None:
            raise NotFound(f"no run {run_id}", code="run_not_found", params={"run_id": run_id})
        return found

    async def check_cursor(self, run_id: str, cursor: int) -> tuple[str, int]:
        """(status, last seq) of a run whose log reaches `cursor`; a cursor past its end is refused
        (400 cursor_past_end) the same way on REST and on /ws/execution."""
        status, last_seq = await self._status(run_id)
        last = max(last_seq, self.events.visible_seq(run_id) or 0)
        if cursor > last:
            raise BadRequest(f"cursor {cursor} is past the end of run {run_id}'s log ({last})",
                             code="cursor_past_end", params={"field": "cursor", "last_seq": last})
        return status, last

    async def events_page(self, run_id: str, cursor: int = 0, wait: float = 0.0) -> dict[str, Any]:
        status, last = await self.check_cursor(run_id, cursor)
        if wait > 0 and cursor >= last and status in rs.ACTIVE:
            await self.events.wait_beyond(run_id, cursor, min(wait, 60.0))
        # The status first, then the events: a run's closing event commits with its final status,
        # so a finished status read here guarantees the read below sees the whole log.
        status, _ = await self._status(run_id)
        events, next_cursor, more = await self.store.read_events(
            run_id, cursor, self.settings.run_events_response_cap_bytes)
        return {"run_id": run_id, "events": [_event_view(e) for e in events], "cursor": next_cursor, "more": more,
                "status": status}

    def _known_status(self, run_id: str) -> str | None:
        """The status from memory, consistent with the in-memory log: a run is final here only once
        its closing event is in it. None for runs this process does not know."""
        final = self._runs.finished_status(run_id)
        if final is not None:
            return final
        record = self._runs.get(run_id)
        if record is not None and (record.finishing or record.started is not None):
            return record.status
        if self.queue.get(run_id) is not None or (record is not None and not record.written):
            return rs.QUEUED
        return None

    async def live_page(self, run_id: str, cursor: int, wait: float) -> tuple[str, list[str], int, bool]:
        """For followers: (status, encoded events, next cursor, more). Served from the in-memory
        tail when it holds the events (all followers share its encoding), else from the store."""
        status = self._known_status(run_id)
        if status is not None:
            flushed = self.events.visible_seq(run_id) or 0
            if wait > 0 and cursor >= flushed and status in rs.ACTIVE:
                await self.events.wait_beyond(run_id, cursor, min(wait, 60.0))
                status = self._known_status(run_id) or status
                flushed = self.events.visible_seq(run_id) or 0
            page = self.events.tail_page(run_id, cursor, flushed, self.settings.run_events_response_cap_bytes)
            if page is not None:
                texts, next_cursor, more = page
                return status, texts, next_cursor, more
        full = await self.events_page(run_id, cursor, wait)
        texts = [json.dumps(e, allow_nan=False, separators=(",", ":")) for e in full["events"]]
        return full["status"], texts, full["cursor"], full["more"]

    async def metrics(self, run_id: str) -> list[dict[str, Any]]:
        await self._row(run_id)
        return await self.store.read_metrics(run_id)

    async def artifacts(self, run_id: str) -> list[dict[str, Any]]:
        """The run's artifact rows, worker paths mapped back to this server's (core/storage/plan.py)."""
        rows = await self._artifact_rows(run_id)
        return [storage_plan.read_view(row, self.data_dir, self.settings.mount_label) for row in rows]

    async def s3_artifact(self, run_id: str, artifact_id: str) -> tuple[Any, str]:
        """(the S3 backend, the object's key) of one of the run's S3 artifacts, for its download
        route; NotFound for another artifact, or when S3 is off now."""
        rows = await self._artifact_rows(run_id)
        row = next((r for r in rows if str(r["id"]) == artifact_id), None)
        if row is None or row.get("backend") != storage_plan.S3:
            raise NotFound(f"run {run_id} has no S3 artifact {artifact_id}", code="artifact_not_found",
                           params={"run_id": run_id, "artifact_id": artifact_id})
        s3 = self.workers.s3
        if s3 is None or row.get("mount_label") != s3.config.bucket:
            raise NotFound(f"artifact {artifact_id} is in bucket {row.get('mount_label')}, which this server does "
                           "not use now (settings s3_enabled, s3_bucket)", code="artifact_bucket_unknown",
                           params={"run_id": run_id, "artifact_id": artifact_id, "bucket": row.get("mount_label")})
        return s3, row["path"]

    async def _artifact_rows(self, run_id: str) -> list[dict[str, Any]]:
        await self._row(run_id)
        return await self.store.list_artifacts(run_id)

    def statistics(self) -> dict[str, Any]:
        stats = self.queue.statistics()
        return {"queues": [q.__dict__ for q in stats.queues], "interactive_running": stats.interactive_running,
                "active_runs": self._runs.executing_count()}

    @property
    def active_count(self) -> int:
        return self._runs.executing_count() + len(self.queue.waiting())


def _size(items: Any) -> int:
    return len(items) if isinstance(items, list) else 0


def _log_failed_write(what: str, future: asyncio.Future) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.error("codefy: %s failed: %s", what, future.exception())


def _event_view(e: Any) -> dict[str, Any]:
    return {"seq": e.seq, "type": e.type, "payload": e.payload, "created_at": e.created_at}


__all__ = ["RunService", "SubmitError", "ServiceError"]


def _why(files: Any) -> tuple[str, str] | None:
    why = files[1].why if files is not None else None
    return (why["code"], why["text"]) if why else None


def _sizes(paths: list[str]) -> dict[str, int | None]:
    out: dict[str, int | None] = {}
    for path in paths:
        try:
            out[path] = os.stat(os.path.expanduser(path)).st_size
        except OSError:
            out[path] = None
    return out


def _memory(target: Any) -> dict[str, Any]:
    """The scheduler's view of a run's memory budget (`Run.memory_mib`, `Run.wait`, `Run.raised_from_gib`)."""
    if target is None or target.memory_gib is None:
        return {}
    return {"memory_mib": budget_mib(target.memory_gib), "wait": target.wait,
            "raised_from_gib": target.raised_from_gib}

