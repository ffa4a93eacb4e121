"""WorkerExecutor: runs placed on a worker agent, behind the same seam as InProcessExecutor.

`start` sends an `assign` to the placed worker (at once, or when it connects) and returns a handle
like an in-process run's: `cancel()` forwards a `cancel` frame, `done` resolves to an
`ExecutionOutcome` that RunService files exactly as an in-process result (slot first, then the
final status and closing event in one transaction).

Frames become the same sink calls as an in-process run's engine callbacks: each per-run frame is
checked by the run's `RunInbox` (duplicates dropped by seq, gaps recorded as a run_warning), then
written to the run's log through RunService's EventLog (`event`, `metrics`, `artifact`, `warning`),
so the log's own seq stays gapless. `execution_start` is written on `run_started` and the closing
event on `run_finished`, by the control plane, as for in-process runs.

Acknowledgement (core/workers/acks.py): an ack is sent only for frames whose every effect is in
the store; the resume point, `execution_facts.worker_resume`, commits with each batch of the run's
events. How frames become log events and outcomes: core/workers/run_frames.py (pure).

A dropped connection (socket closed, or three heartbeats missed) leaves the worker's runs
`disconnected` with their slots held (run_warning worker_disconnected). The same worker listing a
run in `run_alive` within CODEFY_WORKER_RESUME_GRACE_S resumes it (worker_reconnected) and replays
its unacked frames; past the grace the run ends interrupted (worker_gone) and its slots free. A
`run_finished` that arrives after that is kept as `execution_facts.late_result`; nothing is added
after the closing event. A run the worker reports that is not tracked here gets a `cancel` with
grace 0 (core/workers/strays.py). What an assign checks and carries: core/workers/assign.py.

Released cards (capability `run_released`): a run whose process has exited while the agent
uploads its files sends `run_released`; its slots and card memory go back to the queue at once
(RunService.release_slots, once) and the run stays running until `run_finished`.

Adoption: after a hard stop of the control plane, `adopt` takes a row that has a resume point: the
run waits `disconnected` (no assign is sent) for its worker's `run_alive`, and ends interrupted
(worker_lost_after_restart) if the worker is not back within the grace.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable

from ...wire import messages as words
from ...wire import run_events as ev
from ...wire.fingerprint import digest
from ...wire.protocol import (
    INBOX_MAX_FRAMES, Cancel, Drain, RunAlive, RunFacts, RunFinished, RunFrame, RunInbox, RunReleased, RunStarted,
    should_pause_reading,
)
from ..contract import lifecycle as rs
from ..contract.execution import ExecutionOutcome, RunSpec
from ..storage.plan import S3, TRANSFER, StoragePlan
from ..storage.s3 import storage_from_settings
from ..storage.transfer import InputHashes
from .acks import Acks
from .assign import Assigner
from .frame_bounds import fact_kept
from .frame_tally import FrameTally
from .run_frames import events_of, outcome_of, start_event
from .host import RunHost
from .provenance import kept_input
from .worker_run_record import RESUME, WorkerRun, facts_doc
from .registry import Worker, WorkerRegistry
from .s3_credentials import CredentialRefresh
from .strays import Strays

log = logging.getLogger("codefy.workers")

SHUTDOWN_CANCEL_GRACE_S = 5.0


class WorkerRunHandle:
    """A started worker run (the RunHandle interface)."""

    def __init__(self, executor: "WorkerExecutor", run: WorkerRun) -> None:
        self.run_id = run.run_id
        self._executor = executor
        self._run = run
        self.done = run.done

    def cancel(self, reason: str = "cancel requested") -> None:
        self._executor.cancel(self.run_id, reason)

    @property
    def cancel_requested(self) -> bool:
        return self._run.cancel_requested


class WorkerExecutor:
    name = "worker"

    def __init__(self, registry: WorkerRegistry, host: RunHost, *, resume_grace_s: float = 300.0,
                 cancel_grace_s: float = 30.0, heartbeat_s: float = 10.0, max_inbox: int = INBOX_MAX_FRAMES) -> None:
        self.registry = registry
        self.host = host
        self.resume_grace_s = resume_grace_s
        self.cancel_grace_s = cancel_grace_s
        self.heartbeat_s = heartbeat_s
        self._acks = Acks(registry, host, max_inbox)
        self._runs: dict[str, WorkerRun] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._watchdog: asyncio.Task[None] | None = None
        self.strays = Strays(host, self._spawn, self._task_done)
        self.closing = False
        self.hashes = InputHashes(host.store)
        self.s3 = storage_from_settings(host.settings)
        self.credentials = CredentialRefresh(self.s3, registry, self._runs, self._spawn) if self.s3 else None
        self.assigner = Assigner(self.hashes, self.s3, self.credentials, cancel_grace_s, self._finish)
        self.tally = FrameTally()  # frames received, replayed, duplicated (core/workers/frame_tally.py)

    @property
    def max_inbox(self) -> int:
        """How many unprocessed frames of one run pause reading the worker's socket."""
        return self._acks.max_inbox

    @max_inbox.setter
    def max_inbox(self, value: int) -> None:
        self._acks.max_inbox = value

    # -- lifecycle ----------------------------------------------------------------------------------
    def start_watchdog(self) -> None:
        if self._watchdog is None:
            self._watchdog = asyncio.get_running_loop().create_task(self._watch_heartbeats())

    async def close(self) -> None:
        """After RunService's shutdown: stop timers and tasks, close every worker connection (the
        agents keep running and reconnect when the server is back)."""
        self.closing = True
        if self.credentials is not None:
            self.credentials.close()
        if self._watchdog is not None:
            self._watchdog.cancel()
        for run in list(self._runs.values()):
            if not run.done.done():  # RunService already filed it as interrupted: let its waiter end
                run.done.set_result(ExecutionOutcome(rs.INTERRUPTED, code="server_shutdown",
                                                     message="the server shut down"))
            self._forget(run)
        for worker in self.registry.workers(listed_only=False):
            if worker.link is not None:
                worker.link.close(1001, "the control plane is shutting down")
        for task in list(self._tasks):
            task.cancel()

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("codefy: worker task failed", exc_info=task.exception())

    # -- starting runs --------------------------------------------------------------------------------
    def is_tracked(self, run_id: str) -> bool:
        return run_id in self._runs

    def run_state(self, run_id: str) -> str | None:
        run = self._runs.get(run_id)
        return run.state if run is not None else None

    def facts(self, run_id: str) -> dict[str, Any] | None:
        run = self._runs.get(run_id)
        return facts_doc(run) if run is not None else None

    def start(self, spec: RunSpec, *, uuids: dict[str, str] | None = None,
              storage: StoragePlan | None = None) -> WorkerRunHandle:
        """`uuids`: the run's cards' NVML UUIDs, kept in the resume point so that after a restart
        its slots join their card groups before the worker is back. `storage`: how the run reaches
        its files on that worker (None: it uses none)."""
        assert spec.worker is not None
        loop = asyncio.get_running_loop()
        resume = {"worker": spec.worker, "seq": 0, "slots": list(spec.slots), "device": spec.device,
                  "devices": list(spec.devices or (spec.device,)), "queue_key": spec.queue_key,
                  "uuids": dict(uuids or {})}
        run = WorkerRun(run_id=spec.run_id, worker=spec.worker, spec=spec, done=loop.create_future(),
                         inbox=RunInbox(spec.run_id, clock=loop.time), facts={"worker": spec.worker, RESUME: resume},
                         started_at=self.host.clock())
        if spec.cpu is not None:
            run.facts["cpu_threads"] = spec.cpu.to_dict()
        if storage is not None:
            run.storage = storage
            run.facts["storage"] = storage.facts()
        self._track(run)
        worker = self.registry.get(spec.worker) or self.registry.placeholder(spec.worker)
        if worker.link is not None:
            self._spawn(self.assigner.assign(run, worker))
        return WorkerRunHandle(self, run)

    def adopt(self, row: dict[str, Any]) -> WorkerRunHandle:
        """Take over a run a previous control-plane process left on a worker (its row has a resume
        point). It waits disconnected for the worker's run_alive."""
        facts = dict(row.get("execution_facts") or {})
        resume = dict(facts[RESUME])
        loop = asyncio.get_running_loop()
        seq = int(resume.get("seq") or 0)
        run = WorkerRun(run_id=row["id"], worker=resume["worker"], spec=None, done=loop.create_future(),
                         inbox=RunInbox(row["id"], clock=loop.time, last_seq=seq), facts=facts,
                         state=rs.DISCONNECTED, assigned=True, started=bool(facts.get("started_at")), heard=True,
                         adopted=True,
                         recorded_seq=seq, facts_seq=seq, started_at=row.get("started_at") or self.host.clock())
        run.storage = StoragePlan.from_facts(facts.get("storage"))
        self._track(run)
        if run.storage is not None and run.storage.backend == S3 and self.credentials is not None:
            # The credentials its assign carried run out: the next ones go once the worker is back.
            self.credentials.arm(run.run_id, list((facts.get("storage") or {}).get("input_keys") or ()))
        self.host.events.emit(run.run_id, ev.run_warning(
            run.run_id, "worker_adopted", f"the control plane restarted; this run continues once worker "
            f"{run.worker} reconnects (within {self.resume_grace_s:g} s)",
            {"worker": run.worker, "seconds": self.resume_grace_s}))
        self._arm_grace(run)
        return WorkerRunHandle(self, run)

    def _track(self, run: WorkerRun) -> None:
        self._runs[run.run_id] = run
        worker = self.registry.get(run.worker) or self.registry.placeholder(run.worker)
        worker.runs.add(run.run_id)
        self.host.events.attach(run.run_id, lambda: self._acks.capture_facts(run))
        run.acker = asyncio.get_running_loop().create_task(self._acks.loop(run))

    # -- the connection's life ----------------------------------------------------------------------
    def connected(self, worker: Worker) -> None:
        """A hello was accepted and welcomed: send what waited for this worker."""
        if worker.draining and worker.link is not None:
            worker.link.send(Drain(draining=True))
        for run_id in sorted(worker.runs):
            run = self._runs.get(run_id)
            if run is not None and not run.assigned and not run.finished:
                self._spawn(self.assigner.assign(run, worker))

    def dropped(self, worker: Worker, reason: dict[str, Any]) -> None:
        """The worker's connection is gone (the registry already dropped it): its runs wait."""
        for run_id in sorted(worker.runs):
            run = self._runs.get(run_id)
            if run is None or run.finished or run.state == rs.DISCONNECTED:
                continue
            if not run.assigned:
                continue  # never reached it: it still waits for the worker to connect
            run.state = rs.DISCONNECTED
            self.host.worker_run_status(run_id, rs.DISCONNECTED)
            self._ensure_started(run)  # the log reads start ... end whatever happens in between
            self.host.events.emit(run_id, ev.run_warning(
                run_id, "worker_disconnected", f"lost the connection to worker {worker.name} "
                f"({reason.get('text', 'connection closed')}); the run waits up to {self.resume_grace_s:g} s "
                "for it to reconnect", {"worker": worker.name, "reason": reason, "seconds": self.resume_grace_s}))
            run.wake.set()
            self._arm_grace(run)

    def link_closed(self, link_id: int) -> None:
        self.strays.link_closed(link_id)

    def _arm_grace(self, run: WorkerRun) -> None:
        if run.grace is not None:
            run.grace.cancel()
        loop = asyncio.get_running_loop()
        run.grace = loop.call_later(max(0.0, self.resume_grace_s), self._grace_over, run.run_id)

    def _grace_over(self, run_id: str) -> None:
        run = self._runs.get(run_id)
        if run is None or run.finished or run.state != rs.DISCONNECTED:
            return
        seconds = self.resume_grace_s
        if run.adopted and not run.reconnected:
            code = "worker_lost_after_restart"
            reason = {"code": "no_reconnect_after_restart", "params": {"seconds": seconds},
                      "text": f"worker {run.worker} did not reconnect within {seconds:g} s after the control "
                              "plane restarted"}
        else:
            code = "worker_gone"
            reason = {"code": "no_reconnect", "params": {"seconds": seconds},
                      "text": f"worker {run.worker} did not reconnect within {seconds:g} s"}
        self._end_here(run, rs.INTERRUPTED, code, reason["text"], {"worker": run.worker, "reason": reason})

    def run_alive(self, worker: Worker, frame: RunAlive, link_id: int) -> None:
        """After a (re)connect: the runs still on the worker. Tracked ones resume; others are told
        to stop; this worker's disconnected runs it does not list are gone."""
        for run_id in frame.runs:
            run = self._runs.get(run_id)
            if run is None or run.worker != worker.name or run.finished:
                self.strays.stop(worker, run_id, link_id)
            else:
                run.replay_until = max(run.replay_until, int(frame.runs[run_id] or 0))
                self._resume(run, worker)
        for run_id in sorted(worker.runs):
            run = self._runs.get(run_id)
            if run is None or run.finished or run.state != rs.DISCONNECTED or run_id in frame.runs:
                continue
            if not run.heard and run.spec is not None:
                # The assign was lost with the connection (the worker would list a run it has): again.
                self._resume(run, worker)
                run.assigned = False
                self._spawn(self.assigner.assign(run, worker))
                continue
            self._end_here(run, rs.INTERRUPTED, "worker_gone", f"worker {worker.name} reconnected without this run",
                           {"worker": worker.name, "reason": {"code": "not_alive", "params": {},
                                                              "text": "the worker no longer has this run"}})

    def _resume(self, run: WorkerRun, worker: Worker) -> None:
        if run.grace is not None:
            run.grace.cancel()
            run.grace = None
        if run.state == rs.DISCONNECTED:
            run.state = rs.RUNNING
            run.reconnected = True
            self.host.worker_run_status(run.run_id, rs.RUNNING)
            self.host.events.emit(run.run_id, ev.run_warning(
                run.run_id, "worker_reconnected", f"worker {worker.name} reconnected; the run goes on",
                {"worker": worker.name}))
        # What is recorded already: the agent drops it and replays only the rest.
        self._acks.send(run, force=True)
        run.wake.set()

    # -- frames ------------------------------------------------------------------------------------
    def frame(self, worker: Worker, frame: RunFrame, link_id: int) -> Awaitable[None] | None:
        """Record one per-run frame. Returns something to await before reading the socket again
        when the run's inbox is over its bound (TCP then paces the agent), else None."""
        run = self._record(worker, frame, link_id)
        return run.drained.wait() if run is not None else None

    def frames(self, worker: Worker, frames: list[RunFrame], link_id: int) -> Awaitable[None] | None:
        """Record the per-run frames of one message (a batch), in order, as `frame` would one by one;
        what to await covers every run the batch filled past its bound."""
        paused: dict[str, WorkerRun] = {}
        record = self._record
        for frame in frames:
            run = record(worker, frame, link_id)
            if run is not None:
                paused[run.run_id] = run
        if not paused:
            return None
        return _all_drained(list(paused.values()))

    def _record(self, worker: Worker, frame: RunFrame, link_id: int) -> WorkerRun | None:
        """`frame`'s work; returns the run when its inbox is over its bound (reading must pause)."""
        self.tally.received(frame)
        run = self._runs.get(frame.run_id)
        if run is None or run.worker != worker.name:
            self.strays.frame(worker, frame, link_id)
            return None
        if run.state == rs.DISCONNECTED:  # frames before run_alive: it is back all the same
            self._resume(run, worker)
        run.heard = True
        got = run.inbox.accept(frame)
        self.tally.accepted(run, frame, got.new)
        if not got.new:
            run.wake.set()  # a replay of something acked may need the ack again
            return None
        if run.finished:
            run.recorded_seq = frame.seq
            run.wake.set()
            return None
        run.recorded_seq = frame.seq
        if got.gap is not None:
            first, last = got.gap
            run.facts.setdefault("gaps", []).append([first, last])
            self._ensure_started(run)
            self.host.events.emit(run.run_id, ev.run_warning(
                run.run_id, "worker_frames_lost", f"frames {first} to {last} of this run never arrived from "
                f"worker {worker.name}", {"worker": worker.name, "first": first, "last": last}))
        try:
            self._apply(run, frame)
        except Exception as err:  # one bad frame must not take the connection down
            log.exception("codefy: worker %s: could not record a %s frame of run %s", worker.name, frame.type,
                          run.run_id)
            # What stands in the log for it: the frame is acknowledged as recorded, so its loss is.
            self.host.events.emit(run.run_id, ev.run_warning(
                run.run_id, "worker_frame_unreadable", f"a {frame.type} frame (seq {frame.seq}) from worker "
                f"{worker.name} could not be recorded: {type(err).__name__}: {err}",
                {"worker": worker.name, "type": frame.type, "seq": frame.seq, "error": f"{type(err).__name__}: {err}"}))
        run.wake.set()
        if not run.paused and should_pause_reading(run.inbox.unprocessed, paused=False, limit=self.max_inbox):
            run.paused = True
            run.drained.clear()
        return run if run.paused else None

    def _ensure_started(self, run: WorkerRun) -> None:
        if run.started:
            return
        run.started = True
        now = self.host.clock()
        # Persisted with the event (the facts travel with each batch): an adopted run knows its log
        # already has its execution_start.
        run.facts["started_at"] = now
        self.host.events.emit(run.run_id, start_event(run, now))

    def _apply(self, run: WorkerRun, frame: RunFrame) -> None:
        if isinstance(frame, RunStarted):
            run.facts.update(visible_devices=list(frame.visible_devices), device_aliases=dict(frame.device_aliases))
            if frame.pid is not None:
                run.facts["worker_pid"] = frame.pid
            if frame.memory_cap is not None:  # the caps hold from the start (seed #788)
                run.facts["memory_cap"] = frame.memory_cap
            if frame.memory_limit:
                run.facts["memory_limit"] = frame.memory_limit
            self._ensure_started(run)
            if run.storage is not None and run.storage.fallback:
                self.host.events.emit(run.run_id, ev.run_warning(
                    run.run_id, "worker_storage_fallback", f"S3 is on, but worker {run.worker}'s agent does not "
                    "list s3 (no boto3 there): this run's files go through the transfer backend",
                    {"worker": run.worker, "backend": TRANSFER}))
            return
        self._ensure_started(run)
        if isinstance(frame, RunReleased):
            self._released(run, frame)
        elif isinstance(frame, RunFacts):
            self._run_facts(run, frame)
        elif isinstance(frame, RunFinished):
            if frame.peak_memory is not None:
                run.facts["peak_memory"] = frame.peak_memory
            if frame.memory_limit:
                run.facts["memory_limit"] = frame.memory_limit
            self._finish(run, outcome_of(frame, run.worker))
        else:
            for event in events_of(run.run_id, frame):
                self.host.events.emit(run.run_id, event)
                if event.type == "artifact":
                    self._record_artifact(run.run_id, event.payload, run.storage)

    def _released(self, run: WorkerRun, frame: RunReleased) -> None:
        """The run's process is gone while its files upload: its cards go to the next run now; the
        run stays running until run_finished. `released_at` persists with the facts, so a run
        adopted after a restart does not take its cards again."""
        if "released_at" in run.facts:
            return
        run.facts["released_at"] = self.host.clock()
        if frame.upload_bytes is not None:
            run.facts["released_upload_bytes"] = frame.upload_bytes
        self.host.release_slots(run.run_id)

    def _log(self, run_id: str, event: ev.RunEvent) -> None:
        self.host.events.emit(run_id, event)
        if event.type == "artifact":
            self._record_artifact(run_id, event.payload)

    def warn(self, worker: Worker, run_id: str, code: str, message: str, params: dict[str, Any]) -> None:
        """A run_warning in the log of a run of `worker` that is still executing (else nothing)."""
        run = self._runs.get(run_id)
        if run is not None and run.worker == worker.name and not run.finished:
            self._ensure_started(run)
            self.host.events.emit(run_id, ev.run_warning(run_id, code, message, params))

    def _record_artifact(self, run_id: str, payload: dict[str, Any], storage: StoragePlan | None = None) -> None:
        backend, label, path = (None, None, payload.get("path", ""))
        if storage is not None:
            backend, label, path = storage.artifact_row(str(path))
        # Queued now, so it commits before the flush that makes the artifact event durable.
        future = self.host.store.record_artifact(run_id, payload.get("node_id"), payload.get("kind", ""),
                                                 path, payload.get("meta"), backend=backend, mount_label=label)
        self._spawn(future)

    def _run_facts(self, run: WorkerRun, frame: RunFacts) -> None:
        refused = fact_kept(frame.kind, frame.facts, len(run.facts.get("run_facts", ())))
        if refused is not None:
            dropped = run.facts.setdefault("run_facts_dropped", {})
            dropped[refused] = dropped.get(refused, 0) + 1
            return
        if frame.kind == "fingerprint" and isinstance(frame.facts.get("document"), dict):
            document = frame.facts["document"]
            fingerprint = digest(document)
            run.facts["fingerprint_source"] = "worker-run"
            run.facts["numerics"] = frame.facts.get("numerics")
            self._spawn(self.host.store.put_fingerprint(fingerprint, document))
            self._spawn(self.host.store.update_run(run.run_id, fingerprint_digest=fingerprint))
        elif frame.kind == "system_metrics":  # what the agent sampled (agent/system_sampling.py)
            run.facts["system_metrics"] = frame.facts
        elif frame.kind == "provenance":  # each record is checked and stored (core/workers/provenance.py)
            if (write := kept_input(run, self.host.store, frame.facts)) is not None:
                self._spawn(write)
        else:
            run.facts.setdefault("run_facts", []).append({"kind": frame.kind, "facts": frame.facts})

    # -- ending ------------------------------------------------------------------------------------
    def _finish(self, run: WorkerRun, outcome: ExecutionOutcome) -> None:
        if run.finished:
            return
        run.finished = True
        if run.grace is not None:
            run.grace.cancel()
            run.grace = None
        if not run.started and run.assigned:
            # It held its slots since the placement: its log still reads start ... end.
            self._ensure_started(run)
        outcome.facts = facts_doc(run)
        if not run.done.done():
            run.done.set_result(outcome)

    def _end_here(self, run: WorkerRun, status: str, code: str, message: str, params: dict[str, Any]) -> None:
        """The control plane ends the run without the worker's word (it left, was removed, ...)."""
        run.facts["ended_here"] = True
        run.facts["error_reason"] = code
        error = {"code": code, "message": message, "params": params} if status == rs.FAILED else None
        self._finish(run, ExecutionOutcome(status, error=error, code=code, message=message, params=params))

    def closed(self, run_id: str) -> None:
        """RunService committed the run's final status and closing event: everything the worker
        sent for it is recorded; acknowledge it all and forget the run."""
        run = self._runs.get(run_id)
        if run is None:
            return
        if run.inbox.last_seq > run.inbox.persisted_seq and not run.log_broken:
            run.inbox.persisted(run.inbox.last_seq)
        self._acks.send(run, force=True)
        self._forget(run)

    def _forget(self, run: WorkerRun) -> None:
        self._runs.pop(run.run_id, None)
        if self.credentials is not None:
            self.credentials.forget(run.run_id)
        self.host.events.attach(run.run_id, None)
        if run.grace is not None:
            run.grace.cancel()
        if run.acker is not None:
            run.acker.cancel()
        run.drained.set()
        worker = self.registry.get(run.worker)
        if worker is not None:
            worker.runs.discard(run.run_id)

    def cancel(self, run_id: str, reason: str = "cancel requested") -> None:
        run = self._runs.get(run_id)
        if run is None or run.finished:
            return
        run.cancel_requested = True
        worker = self.registry.get(run.worker)
        if run.state == rs.DISCONNECTED or not run.assigned or worker is None or worker.link is None:
            # Nothing can reach the run now; if the worker comes back with it, it is told to stop.
            if run.assigned:  # its process may still be going out there: the log says the cancel did not reach it
                self._ensure_started(run)
                params = {"worker": run.worker}
                self.host.events.emit(run_id, ev.run_warning(run_id, "worker_unreachable",
                                                             words.message("worker_unreachable", params), params))
            self._end_here(run, rs.CANCELLED, "cancelled", reason, {"worker": run.worker})
            return
        grace = SHUTDOWN_CANCEL_GRACE_S if self.closing else float(self.cancel_grace_s)
        worker.link.send(Cancel(run_id=run_id, grace_s=grace, reason=reason))

    def log_failed(self, run_id: str, lost: dict[str, Any]) -> None:
        """The store refused some of this run's events: the worker is told to stop the run, and the
        run ends failed (event_log_write_failed). Frames after the last recorded one are never
        acknowledged: they stay in the agent's spool."""
        run = self._runs.get(run_id)
        if run is None or run.finished:
            return
        run.log_broken = True
        worker = self.registry.get(run.worker)
        if worker is not None and worker.link is not None and run.assigned:
            worker.link.send(Cancel(run_id=run_id, grace_s=0.0, reason="the control plane could not record "
                                    "this run's events"))
        run.facts["unrecorded_after"] = run.inbox.persisted_seq
        self._end_here(run, rs.FAILED, "event_log_write_failed",
                       f"the run's event log could not be written (events {lost['first_seq']} to {lost['last_seq']} "
                       f"were lost: {lost['error']}); the run was stopped", dict(lost))

    def remove_worker(self, worker: Worker) -> None:
        """The worker was deleted (its token revoked): its runs end failed (worker_removed)."""
        for run_id in sorted(worker.runs):
            run = self._runs.get(run_id)
            if run is None or run.finished:
                continue
            if worker.link is not None and run.assigned:
                worker.link.send(Cancel(run_id=run_id, grace_s=0.0, reason="the worker was removed"))
            self._end_here(run, rs.FAILED, "worker_removed", f"worker {worker.name} was removed",
                           {"worker": worker.name})

    # -- heartbeats ---------------------------------------------------------------------------------
    async def _watch_heartbeats(self) -> None:
        loop = asyncio.get_running_loop()
        period = max(0.05, min(1.0, self.heartbeat_s / 2))
        while True:
            await asyncio.sleep(period)
            for worker in self.registry.silent(loop.time()):
                seconds = round(worker.heartbeat_s * 3, 3)
                reason = {"code": "no_heartbeat", "params": {"seconds": seconds},
                          "text": f"no heartbeat for {seconds:g} s"}
                link = worker.link
                if link is None:
                    continue
                self.registry.drop(worker.name, link, reason)
                link.close(4408, "no heartbeat")
                self.dropped(worker, reason)

    def graceful_shutdown(self) -> None:
        self.closing = True


async def _all_drained(runs: list[WorkerRun]) -> None:
    for run in runs:
        await run.drained.wait()


