"""RunService: submit, schedule, execute, cancel, delete, recover. The one owner of run state.

A submit is checked first (core/runs/submit.py: schema 422, semantics 400; lane refusals 503 come
from the queue), its SECRET values move to an in-memory vault, the row is written, and the run
joins the pure scheduler's queue. `_reschedule` starts whatever the scheduler places. When a graph
ends, the slot is released first (the next run may start at once), then the final status and the closing
event are written in one transaction (final_writes.py). Reads of runs: reads.py; what goes with a pruned
or deleted run: retention.py; a run's recorded inputs (options.provenance): provenance.py.

Everything here runs on the server's loop; the executor hops engine events over (in batches).

Worker runs (`options.target`: a worker's name, `any`, or the one-shot pool) are checked and placed
by the same scheduler; a placement on a worker starts through the worker side the server hands in
(`workers`: core/contract/worker_side.py, WorkerService implements it), which sees this service only
as the `RunHost` of core/workers/host.py and ends each run with an `ExecutionOutcome` filed here like
an in-process result. A run without a target, or with worker `local`, never reaches that code.

One `RunRecord` a run held here (run_records.py); how a run ends: endings.py; a previous process's runs at
start: recovery.py (adopted instead of retired when a worker run has a resume point).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from ...engine import NodeRegistry, RunResult, SessionCache, default_registry
from ...wire import cpu_threads
from ...wire import run_events as ev
from ...wire.fingerprint import digest, environment_document
from ...wire.run_options import RunOptions
from ..config import Settings
from ..contract import lifecycle as rs
from ..contract.execution import ExecutionOutcome, RunHandle
from ..contract.worker_side import WorkerSideFactory
from ..errors import Conflict, Forbidden, ServiceError, StorageFull, Unavailable
from ..scheduling.device_sets import SubmitError
from ..scheduling.limits import build_limits
from ..scheduling.queue import RunQueue
from ..scheduling.quotas import Reservation, build_quotas
from ..scheduling.scheduler_values import Placement
from ..scheduling.slot_groups import LOCAL, LocalMachine
from ..store.database import Store
from . import endings, provenance, recovery, system_sampling
from .estimates import MemoryEstimates
from .event_log import EventLog
from .in_process_executor import InProcessExecutor
from .final_writes import FinalWrites
from .listeners import Listeners, RunObserver
from .peak import in_process_peak
from .reads import LIST_LIMIT, RunReads
from .recorded import RecordedOutputs
from .run_records import RunBook, RunRecord
from .requests import secret_fields, strip_secrets
from .retention import RunRemoval
from .starts import StartSpecs
from .submit import Prepared, SubmitChecks
from .unwritten import StorageWatch

if TYPE_CHECKING:  # a type only (the server hands the class in); route_codes.py follows it
    from ..workers.worker_service import WorkerService
log = logging.getLogger("codefy.runs")

SHUTDOWN_GRACE_S = 5.0


# Run columns only the server's own submitters set (core/experiments): which sweep variant or study
# attempt a child run is.
LINK_FIELDS = frozenset({"sweep_id", "sweep_variant", "study_id", "study_attempt_id"})


class RunService:
    def __init__(self, store: Store, settings: Settings, *, devices: list[str] | None = None,
                 executor: InProcessExecutor | None = None, registry: NodeRegistry | None = None,
                 clock: Callable[[], float] = time.time, data_dir: Path | None = None,
                 local_machine: LocalMachine | None = None, cpu_cores: int | None = None,
                 workers: WorkerSideFactory, card_names: dict[str, str] | None = None) -> None:
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
        self.listeners = Listeners()
        self.fingerprint_digest: str | None = None
        # Worker agents, their connections and runs (runs without a target never touch it).
        self.workers: WorkerService = workers(self, self.queue)  # type: ignore[assignment]
        # Recorded outputs (options.record_outputs), here or on workers, and the runs recording now.
        max_mb = settings.run_output_store_max_mb
        self.outputs = RecordedOutputs(store, self.workers.output_reads, clock=clock,
                                       max_bytes=max_mb * 1024 * 1024 if max_mb > 0 else None)
        self.workers.on_connected = self.outputs.connected
        # A full disk: endings kept until they can be written, waiting runs held (core/runs/unwritten.py).
        self.storage = StorageWatch(store, written=lambda e: self.final.written(e.run_id, e.status, e.rows),
                                    resumed=self._storage_resumed)
        store.on_full = self.storage.start
        self.checks = SubmitChecks(settings, self.registry, self.estimates, self.queue, self.workers, self.devices,
                                   self.data_dir)
        self.reads = RunReads(store, settings, self.queue, self._runs, self.events, self.storage, self.workers,
                              self.data_dir, card_names)  # card_names: this server's, for runs' `cards`
        self.final = FinalWrites(store, self.events, self._runs, self.storage, self.reads, clock,
                                 partial(self.listeners.notify, "run_finished"))
        self.removal = RunRemoval(store, self.events, self.outputs, self.workers, self.data_dir, settings)
        self.starts = StartSpecs(settings, self.limits, self.queue, self.workers, self.outputs, self.data_dir,
                                 self.cpu_cores)

    # -- lifecycle ------------------------------------------------------------------------------
    async def start(self) -> None:
        """Record this environment's fingerprint, retire what a dead process left behind, then
        apply retention."""
        document = environment_document(self.registry.catalog())
        self.fingerprint_digest = digest(document)
        await self.store.put_fingerprint(self.fingerprint_digest, document)
        await self.workers.load()
        for row in await self.store.active_runs():  # in submit order: requeued runs keep theirs
            resume = self.workers.resume_point(row)
            fate = recovery.recover(row, await self.store.last_event(row["id"]), resume, self.store.taken_over)
            if isinstance(fate, recovery.Repair):
                await self.store.update_run(row["id"], status=fate.status, finished_at=row.get("finished_at") or
                                            self.clock())
                continue
            self.events.track(row["id"], int(row["last_seq"]))
            if isinstance(fate, recovery.Adopt):
                assert resume is not None
                await self._adopt(row, resume, fate)
                continue
            if isinstance(fate, recovery.Requeue):
                why = await self._requeue(row, fate.body)
                if why is None:
                    continue
                fate = recovery.not_requeued(row, why)
            await self._write_final(row["id"], rs.INTERRUPTED, fate.closing, error=None, from_state=row["status"])
            log.info("run %s was %s when the server stopped: interrupted", row["id"], row["status"])
        await self.removal.prune()

    async def _adopt(self, row: dict[str, Any], resume: dict[str, Any], fate: recovery.Adopt) -> None:
        handle = self.workers.adopt(row)
        self.outputs.options(row["id"], row)  # kept again once it ends (seed: restart)
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

    async def _requeue(self, row: dict[str, Any], body: dict[str, Any]) -> str | None:
        """Queue a previous leader's queued run again (call `reschedule` once experiments follow
        it); None, or why it cannot be."""
        secrets = secret_fields(body["graph"], self.registry)
        if secrets:
            return f"its SECRET values ({', '.join(secrets)}) were only in the memory of the server it was sent to"
        try:
            prepared = await self.checks.prepare(body)
            self._order += 1
            run = self.checks.queue_run(prepared, row["id"], self._order, row.get("owner"))
            self.queue.submit(run, prepared.node_types, device_field=prepared.device_field)
        except ServiceError as err:
            return str(err)
        self._runs.add(row["id"]).files = prepared.files
        if prepared.pool is not None or self.workers.is_one_shot(prepared.worker):
            self._time_out_one_shot(row["id"])
        log.info("run %s was queued when the previous server stopped: queued again", row["id"])
        return None

    async def shutdown(self) -> None:
        """Graceful stop: running runs get 5 s; waiting ones end now, or stay queued for the next leader."""
        self._closing = True
        self.workers.shutting_down()
        waiting, hand_over = self.queue.waiting(), self.store.hands_the_queue_over
        for run in waiting:
            self.queue.cancel(run.run_id)
            if not hand_over:
                await self._finish_unstarted(run.run_id, rs.INTERRUPTED, "server_shutdown",
                                             "the server shut down before this run started")
        if hand_over and waiting:
            log.info("codefy: %d queued run(s) stay queued for the replica that leads next", len(waiting))
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
    async def _prepare(self, body: Any) -> Prepared:
        """Everything a submit decides before it takes a run id (core/runs/submit.py). Writes nothing."""
        if self._closing:
            raise Unavailable("the server is shutting down; submit again once it is back",
                              code="shutting_down")
        return await self.checks.prepare(body)

    async def preflight(self, body: Any) -> None:
        """Refuse, as `submit` would, a run that could never be queued as asked; queue nothing.
        A sweep or a study checks its children's shared options this way before writing a row."""
        prepared = await self._prepare(body)
        run = self.checks.queue_run(prepared, "preflight", 0)
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
            self.listeners.room_freed(reservation.owner)

    def has_room(self, owner: str | None) -> bool:
        """Whether one more run of `owner` would fit the queued cap now."""
        return self.queue.has_owner_room(owner)

    def add_room_listener(self, listener: Callable[[str | None], None]) -> None:
        """Call `listener(owner)` on the event loop when a reservation gave places of `owner`'s queued
        cap back. (A run starting or ending frees a place too: observers hear of those.)"""
        self.listeners.room_listeners.append(listener)

    def add_observer(self, observer: RunObserver) -> None:
        """Tell `observer` when runs start and when their final status has committed (sweeps and
        studies follow their children this way, not by polling)."""
        self.listeners.observers.append(observer)

    async def submit(self, body: Any, *, owner: str | None = None, run_id: str | None = None,
                     links: dict[str, Any] | None = None, reservation: Reservation | None = None) -> dict[str, Any]:
        """Queue a run. `run_id`, `links` and `reservation` are for the server's own submitters: a
        study chooses its child's id before submitting it (the stamp it relinks by after a crash),
        a sweep's or study's child records which one it belongs to (`LINK_FIELDS`) and takes a
        place its parent reserved (`reserve`)."""
        prepared = await self._prepare(body)
        req, resolved, worker, pool = prepared.req, prepared.resolved, prepared.worker, prepared.pool
        graph = req.graph
        unknown = set(links or ()) - LINK_FIELDS
        if unknown:
            raise ValueError(f"unknown run links: {sorted(unknown)}")
        run_id = run_id or uuid.uuid4().hex[:16]
        stored_graph = strip_secrets(graph, self.registry)
        self._order += 1
        run = self.checks.queue_run(prepared, run_id, self._order, owner)
        # Refusals of the lane (503), a worker target (400) and the owner's queued cap (429) come before
        # anything is written, checked and queued in one step (no await between); a child takes its place.
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
                "worker_id": worker if worker != "any" else None, **req.options.to_row(resolved.requested),
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
            return self.reads.view(view_row)
        view = self.reads.view({**view_row, "status": rs.RUNNING, "started_at": active.started})
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
        if self._closing or self.storage.holding or not self.store.leading:
            return  # a run started on a full disk (or by a leader woken past its lease) records nothing
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
        self.listeners.notify("run_started", run_id)
        self.final.tally.started(placement.queue_key, record.started, (row or {}).get("submitted_at"))
        if placement.worker != LOCAL:
            self._start_on_worker(placement, record, row, graph)
            return
        now = record.started
        options = RunOptions.from_row(row)
        budget = self.starts.cpu_budget(options, None)
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
            seed=options.seed, deterministic=options.deterministic, queue_key=placement.queue_key,
            started_at=now), with_next=True)
        loop = asyncio.get_running_loop()
        cache = self._session_caches.get(row["session"]) if row.get("session") else None
        if row.get("session") and cache is None:
            cache = self._session_caches[row["session"]] = self.starts.session_cache()
        spec = self.starts.local(placement, options, graph, cache, budget)
        handle = record.handle = self.executor.start(spec, partial(self._on_engine_event, run_id))
        record.sampler = system_sampling.start(self.settings.system_metrics_interval_s, run_id, placement.device,
                                               partial(self._on_engine_event, run_id))
        task = loop.create_task(self._await_run(run_id, handle))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _start_on_worker(self, placement: Placement, record: RunRecord, row: dict[str, Any],
                         graph: dict[str, Any]) -> None:
        """The run goes to a worker: the WorkerExecutor sends the assign (with the SECRET values
        this process holds); execution_start is written when the worker says the run started."""
        run_id, name = placement.run_id, placement.worker
        now, record.worker = record.started, name
        spec = self.starts.on_worker(placement, row, graph, record.files)
        record.files = None
        started = self.workers.start_run(spec)
        self.store.update_run(run_id, status=record.status, started_at=now, worker_id=name,
                              devices=list(spec.devices), queue_key=spec.queue_key,
                              fingerprint_digest=started.fingerprint, execution_facts=started.facts
                              ).add_done_callback(partial(_log_failed_write, f"marking run {run_id} running"))
        handle = record.handle = started.handle
        self.keep(asyncio.get_running_loop().create_task(self._await_run(run_id, handle)))

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
        sampled = system_sampling.stop(active.sampler)
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
            measured = {key: value for key, value in (("peak_memory", peak), ("system_metrics", sampled)) if value}
            if measured:
                ending = replace(ending, facts={**(active.facts or {}), **(ending.facts or {}), **measured})
        if run_id in self.outputs.recording:  # kept before the final status shows: a read right after finds them
            await self.outputs.keep_ending(run_id, result, active.worker)
        await provenance.keep_inputs(self.store, run_id, result)
        await self._write_final(run_id, ending.status, ending.closing, error=ending.error, facts=ending.facts)
        if isinstance(result, ExecutionOutcome):
            self.workers.run_closed(run_id)
        try:
            await self.removal.prune()
        except StorageFull as full:  # pruning waits for the next run that ends with room on the disk
            log.warning("codefy: retention skipped after run %s: %s", run_id, full)

    async def _write_final(self, run_id: str, status: str, closing: ev.RunEvent, *, error: Any,
                           facts: dict[str, Any] | None = None, from_state: str | None = None) -> None:
        """Final status and closing event in one transaction (core/runs/final_writes.py)."""
        await self.final.write(run_id, status, closing, error=error, facts=facts, from_state=from_state)

    async def _storage_resumed(self) -> None:
        """The disk has room again: the runs held while it was full may start."""
        await self._reschedule()

    async def _finish_unstarted(self, run_id: str, status: str, code: str, message: str) -> None:
        closing = ev.execution_stopped(run_id, status=status, code=code, message=message)
        await self._write_final(run_id, status, closing, error=None, from_state=rs.QUEUED)

    # -- commands -------------------------------------------------------------------------------
    async def cancel(self, run_id: str, *, user: str | None = None, admin: bool = True) -> dict[str, Any]:
        row = await self.reads.row(run_id)
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
        row = await self.reads.row(run_id)
        self._check_owner(row, user, admin, "delete")
        if row["status"] not in rs.FINISHED:
            raise Conflict(f"run {run_id} is {row['status']}; stop it before deleting it", code="run_active",
                           params={"status": row["status"]})
        await self.removal.delete(row)

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

    # -- reads (core/runs/reads.py) ----------------------------------------------------------------
    async def get(self, run_id: str) -> dict[str, Any]:
        return await self.reads.get(run_id)

    async def list(self, *, status: str | list[str] | None = None, offset: int = 0, limit: int = LIST_LIMIT,
                   after: str | None = None) -> dict[str, Any]:
        return await self.reads.list(status=status, offset=offset, limit=limit, after=after)

    async def check_cursor(self, run_id: str, cursor: int) -> tuple[str, int]:
        return await self.reads.check_cursor(run_id, cursor)

    async def events_page(self, run_id: str, cursor: int = 0, wait: float = 0.0) -> dict[str, Any]:
        return await self.reads.events_page(run_id, cursor, wait)

    async def live_page(self, run_id: str, cursor: int, wait: float) -> tuple[str, list[str], int, bool]:
        return await self.reads.live_page(run_id, cursor, wait)

    async def metrics(self, run_id: str) -> list[dict[str, Any]]:
        return await self.reads.metrics(run_id)

    async def artifacts(self, run_id: str) -> list[dict[str, Any]]:
        return await self.reads.artifacts(run_id)

    async def s3_artifact(self, run_id: str, artifact_id: str) -> tuple[Any, str]:
        return await self.reads.s3_artifact(run_id, artifact_id)

    def statistics(self) -> dict[str, Any]:
        stats = self.queue.statistics()
        return {"queues": [q.__dict__ for q in stats.queues], "interactive_running": stats.interactive_running,
                "active_runs": self._runs.executing_count()}

    @property
    def active_count(self) -> int:
        return self._runs.executing_count() + len(self.queue.waiting())


def _log_failed_write(what: str, future: asyncio.Future) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.error("codefy: %s failed: %s", what, future.exception())


__all__ = ["RunService", "SubmitError", "ServiceError"]
