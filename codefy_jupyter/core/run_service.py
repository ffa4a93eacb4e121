"""RunService: submit, schedule, execute, cancel, delete, recover. The one owner of run state.

A submit is validated (schema 422, semantics 400, lane refusals 503), its SECRET values move to an
in-memory vault, the device is resolved, the row is written, and the run joins the pure
scheduler's queue. `_reschedule` starts whatever the scheduler places. When a graph ends, the slot
is released first (the next run may start at once), then the final status and the closing event
are written in one transaction.

Everything here runs on the server's event loop; engine events arrive from run threads and hop
onto it with `call_soon_threadsafe`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import time
import uuid
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable

from ..engine import GraphError, NodeRegistry, RunResult, SessionCache, default_registry, validate_graph
from . import run_events as ev
from . import run_state as rs
from .config import Settings
from .errors import BadRequest, Conflict, Forbidden, NotFound, ServiceError, Unavailable
from .event_log import EventLog
from .executors import InProcessExecutor, RunHandle, RunSpec
from .fingerprint import digest, environment_document
from .requests import SubmitRequest, parse_submit
from .scheduling import Placement, Run, RunQueue, SubmitError, build_limits, resolve_run_device
from .store import Store

log = logging.getLogger("codefy.runs")

SHUTDOWN_GRACE_S = 5.0
FINAL_STATUSES_KEPT = 10000
LIST_LIMIT = 50


@dataclass
class _Active:
    handle: RunHandle | None = None
    started: float = 0.0


class RunService:
    def __init__(self, store: Store, settings: Settings, *, devices: list[str] | None = None,
                 executor: InProcessExecutor | None = None, registry: NodeRegistry | None = None,
                 clock: Callable[[], float] = time.time, data_dir: Path | None = None) -> None:
        self.store = store
        self.settings = settings
        self.registry = registry or default_registry()
        self.clock = clock
        self.devices = ["cpu"] + [d for d in (devices or []) if d != "cpu"]
        self.executor = executor or InProcessExecutor()
        self.data_dir = data_dir or settings.resolved_data_dir()
        limits, self.config_warnings = build_limits(settings.run_queue_max_concurrent_gpu,
                                                    settings.run_queue_max_concurrent_cpu,
                                                    settings.run_queue_max_concurrent)
        for notice in self.config_warnings:
            log.warning("%s", notice.message)
        self.queue = RunQueue(limits, interactive_limit=max(1, settings.run_interactive_max_concurrent),
                              slots=self.devices)
        self.events = EventLog(store, payload_cap_bytes=settings.run_event_payload_cap_bytes, clock=clock)
        self._vault: dict[str, dict[str, dict[str, str]]] = {}  # run -> node -> secret param -> value
        self._graphs: dict[str, dict[str, Any]] = {}  # graphs of waiting runs (with secrets restored)
        self._active: dict[str, _Active] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._order = 0
        self._unwritten: set[str] = set()
        self._waiting_rows: dict[str, dict[str, Any]] = {}  # rows of runs not started yet
        self._final: dict[str, str] = {}  # recently finished runs, for followers (insertion order)
        self._deferred: dict[str, Placement] = {}
        self._session_caches: dict[str, SessionCache] = {}
        self._closing = False
        self.fingerprint_digest: str | None = None

    # -- lifecycle ------------------------------------------------------------------------------
    async def start(self) -> None:
        """Record this environment's fingerprint, retire what a dead process left behind, then
        apply retention."""
        document = environment_document(self.registry.catalog())
        self.fingerprint_digest = digest(document)
        await self.store.put_fingerprint(self.fingerprint_digest, document)
        for row in await self.store.active_runs():
            last = await self.store.last_event(row["id"])
            if last is not None and last.type in ev.CLOSING:
                status = ev.closing_status(last.type, last.payload) or rs.INTERRUPTED
                await self.store.update_run(row["id"], status=status, finished_at=row.get("finished_at") or
                                            self.clock())
                continue
            self.events.track(row["id"], int(row["last_seq"]))
            closing = ev.execution_stopped(row["id"], status=rs.INTERRUPTED, code="server_restart",
                                           message="the server stopped while this run was "
                                           f"{row['status']}; it did not resume")
            await self._write_final(row["id"], rs.INTERRUPTED, closing, error=None)
            log.info("run %s was %s when the server stopped: interrupted", row["id"], row["status"])
        await self._retention()

    async def shutdown(self) -> None:
        """Graceful stop: waiting runs are retired at once, executing ones get 5 s to stop."""
        self._closing = True
        for run in self.queue.waiting():
            self.queue.cancel(run.run_id)
            await self._finish_unstarted(run.run_id, rs.INTERRUPTED, "server_shutdown",
                                         "the server shut down before this run started")
        handles = [a.handle for a in self._active.values() if a.handle is not None]
        for handle in handles:
            handle.cancel("server shutdown")
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=SHUTDOWN_GRACE_S)
        for run_id in list(self._active):
            closing = ev.execution_stopped(run_id, status=rs.INTERRUPTED, code="server_shutdown",
                                           message="the server shut down while this run was executing")
            await self._write_final(run_id, rs.INTERRUPTED, closing, error=None)
        await self.events.close()

    # -- submit -----------------------------------------------------------------------------------
    async def submit(self, body: Any, *, owner: str | None = None) -> dict[str, Any]:
        if self._closing:
            raise Unavailable("the server is shutting down; submit again once it is back",
                              code="shutting_down")
        req = parse_submit(body)  # SchemaError: 422
        graph = req.graph
        problems = validate_graph(graph, self.registry)
        if problems:
            err = GraphError(problems)
            raise BadRequest(str(err), code="invalid_graph", params=err.to_dict()["params"])
        settings = graph.get("settings") or {}
        seed = req.options.seed if req.options.seed_given else settings.get("seed")
        target = req.options.target
        if target is not None and target.worker not in (None, "local"):
            raise BadRequest(f"worker targets are not available yet (got {target.worker!r}); use 'local'",
                             code="worker_unknown", params={"field": "options.target.worker",
                                                            "worker": target.worker})
        resolved = resolve_run_device(req.options.device, settings.get("device"),
                                      target.devices if target else (), self.devices)
        if req.options.lane == "interactive" and not req.options.session:
            raise BadRequest("an interactive run needs options.session", code="session_required",
                             params={"field": "options.session"})
        run_id = uuid.uuid4().hex[:16]
        stored_graph, secrets = self._strip_secrets(graph)
        self._order += 1
        run = Run(run_id=run_id, order=self._order, device=resolved.device, devices=resolved.devices,
                  seeded=seed is not None, lane=req.options.lane, session=req.options.session)
        self.queue.submit(run)  # the lane's refusals (503) happen before anything is written
        self._unwritten.add(run_id)  # placed before its row exists? it starts once the row is written
        try:
            row = {
                "id": run_id, "name": req.name, "status": rs.QUEUED, "owner": owner, "device": resolved.device,
                "devices": list(resolved.devices or (resolved.device,)), "queue_key": run.queue_key,
                "lane": req.options.lane, "session": req.options.session, "seed": seed,
                "deterministic": req.options.deterministic, "options": _options_doc(req, resolved),
                "graph": stored_graph, "submitted_at": self.clock()}
            await self.store.create_run(row)
        except BaseException:
            self._unwritten.discard(run_id)
            self._deferred.pop(run_id, None)
            if not self.queue.cancel(run_id) and self.queue.is_running(run_id):
                self.queue.finish(run_id)
                await self._reschedule()
            raise
        self._unwritten.discard(run_id)
        self.events.track(run_id, 0)
        for notice in resolved.warnings:
            self.events.emit(run_id, ev.run_warning(run_id, notice.code, notice.message, notice.params))
        if secrets:
            self._vault[run_id] = secrets
        self._graphs[run_id] = graph
        self._waiting_rows[run_id] = row
        view = self._view({**row, "started_at": None, "finished_at": None, "error": None,
                           "fingerprint_digest": None, "worker_id": None, "last_seq": 0})
        deferred = self._deferred.pop(run_id, None)
        if deferred is not None:
            await self._start(deferred)
        await self._reschedule()
        if run_id in self._active:  # it started at once: say so
            view.update(status=rs.RUNNING, started_at=self._active[run_id].started, queue_position=None,
                        queue_reason=None)
        return view

    def _strip_secrets(self, graph: dict[str, Any]) -> tuple[dict[str, Any], dict[str, dict[str, str]]]:
        """A copy of the graph with SECRET values blanked, and the values by node and param."""
        secrets: dict[str, dict[str, str]] = {}
        nodes = []
        for node in graph.get("nodes", []):
            nd = self.registry.get(node.get("type"))
            params = node.get("params") or {}
            hidden = {k: v for k, v in params.items() if nd and k in nd.params and nd.params[k].type == "secret"}
            if hidden:
                secrets[node["id"]] = hidden
                node = {**node, "params": {**params, **{k: "" for k in hidden}}}
            nodes.append(node)
        return {**graph, "nodes": nodes}, secrets

    # -- scheduling and execution -----------------------------------------------------------------
    async def _reschedule(self) -> None:
        if self._closing:
            return
        for placement in self.queue.schedule():
            await self._start(placement)

    async def _start(self, placement: Placement) -> None:
        run_id = placement.run_id
        if run_id in self._unwritten:  # its submit is still writing the row
            self._deferred[run_id] = placement
            return
        # A run submitted by this process: its row is in memory (no read back).
        row = self._waiting_rows.pop(run_id, None) or await self.store.get_run(run_id)
        graph = self._graphs.pop(run_id, None) or (row or {}).get("graph")
        now = self.clock()
        self._active[run_id] = _Active(started=now)
        # Not awaited: writes commit in call order, so the final write queued later can never land
        # before this one, and the submit that started the run answers after one commit, not two.
        self.store.update_run(run_id, status=rs.RUNNING, started_at=now,
                              fingerprint_digest=self.fingerprint_digest
                              ).add_done_callback(partial(_log_failed_write, f"marking run {run_id} running"))
        self.events.emit(run_id, ev.execution_start(
            run_id, name=row.get("name"), device=placement.device, devices=list(row.get("devices") or []),
            seed=row.get("seed"), deterministic=bool(row.get("deterministic")), queue_key=placement.queue_key,
            started_at=now))
        loop = asyncio.get_running_loop()
        cache = self._session_caches.setdefault(row["session"], SessionCache()) if row.get("session") else None
        spec = RunSpec(run_id=run_id, graph=graph, device=placement.device, seed=row.get("seed"),
                       deterministic=bool(row.get("deterministic")),
                       max_parallel_nodes=self.settings.max_parallel_nodes,
                       data_dir=self.data_dir / "runs" / run_id, cache=cache)
        handle = self.executor.start(spec, lambda e: loop.call_soon_threadsafe(self._on_engine_event, run_id, e))
        self._active[run_id].handle = handle
        task = loop.create_task(self._await_run(run_id, handle))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _on_engine_event(self, run_id: str, raw: dict[str, Any]) -> None:
        if run_id not in self._active:
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

    async def _await_run(self, run_id: str, handle: RunHandle) -> None:
        active = self._active[run_id]
        try:
            result: RunResult | None = await handle.done
            error: BaseException | None = None
        except BaseException as err:  # the engine refused the graph or crashed: the run fails
            result, error = None, err
        self.queue.finish(run_id)  # the slot first: the next run may start while we file this one
        self._vault.pop(run_id, None)
        if run_id not in self._active:
            return  # shutdown already closed it (it outlived the grace period)
        await self._reschedule()
        duration = self.clock() - active.started
        if error is not None:
            info = {"code": "execution_failed", "message": f"{type(error).__name__}: {error}",
                    "exception_type": type(error).__name__}
            await self._write_final(run_id, rs.FAILED, ev.execution_error(run_id, info, duration_s=duration),
                                    error=info)
        elif result.status == "succeeded":
            closing = ev.execution_complete(run_id, duration_s=duration, metrics=result.metrics,
                                            executed=len(result.executed), cached=len(result.cached))
            await self._write_final(run_id, rs.SUCCEEDED, closing, error=None)
        elif result.status == "cancelled":
            reason = "the server shut down" if self._closing else "cancel requested"
            closing = ev.execution_stopped(run_id, status=rs.INTERRUPTED if self._closing else rs.CANCELLED,
                                           code="server_shutdown" if self._closing else "cancelled",
                                           message=reason, duration_s=duration)
            await self._write_final(run_id, closing.payload["status"], closing, error=None)
        else:
            info = result.error.to_dict() if result.error else {"message": "failed"}
            await self._write_final(run_id, rs.FAILED, ev.execution_error(run_id, info, duration_s=duration),
                                    error=info)
        await self._retention()

    async def _write_final(self, run_id: str, status: str, closing: ev.RunEvent, *, error: Any) -> None:
        """Final status and closing event (with whatever is still queued) in one transaction."""
        self._active.pop(run_id, None)
        rows = self.events.take_closing(run_id, closing)
        await self.store.update_run(run_id, status=status, finished_at=self.clock(), error=error, events=rows)
        self._final[run_id] = status
        if len(self._final) > FINAL_STATUSES_KEPT:
            del self._final[next(iter(self._final))]
        await self.events.committed(run_id, rows)

    async def _finish_unstarted(self, run_id: str, status: str, code: str, message: str) -> None:
        self._graphs.pop(run_id, None)
        self._waiting_rows.pop(run_id, None)
        self._vault.pop(run_id, None)
        closing = ev.execution_stopped(run_id, status=status, code=code, message=message)
        await self._write_final(run_id, status, closing, error=None)

    async def _retention(self) -> None:
        """Keep the newest finished runs; a pruned run's files go too (checkpoints, logs), except
        the checkpoints of a run that ended interrupted: they are its resume point."""
        pruned = await self.store.prune_finished(self.settings.run_retention_keep_last)
        for item in pruned:
            self.events.forget(item.run["id"])
            folder = self.data_dir / "runs" / item.run["id"]
            keep = {"checkpoints"} if item.run["status"] == rs.INTERRUPTED else set()
            await asyncio.to_thread(_remove_run_files, folder, keep)

    # -- commands -------------------------------------------------------------------------------
    async def cancel(self, run_id: str, *, user: str | None = None, admin: bool = True) -> dict[str, Any]:
        row = await self._row(run_id)
        self._check_owner(row, user, admin, "stop")
        if self.queue.cancel(run_id):
            await self._finish_unstarted(run_id, rs.CANCELLED, "cancelled", "cancelled before it started")
            await self._reschedule()
        elif run_id in self._active and self._active[run_id].handle is not None:
            self._active[run_id].handle.cancel()
        elif row["status"] in rs.FINISHED:
            raise Conflict(f"run {run_id} has already {row['status']}", code="run_finished",
                           params={"status": row["status"]})
        return await self.get(run_id)

    async def delete(self, run_id: str, *, user: str | None = None, admin: bool = True) -> None:
        row = await self._row(run_id)
        self._check_owner(row, user, admin, "delete")
        if row["status"] not in rs.FINISHED:
            raise Conflict(f"run {run_id} is {row['status']}; stop it before deleting it", code="run_active",
                           params={"status": row["status"]})
        await self.store.delete_run(run_id)
        self.events.forget(run_id)

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
        return self._view(await self._row(run_id))

    async def list(self, *, status: str | list[str] | None = None, offset: int = 0,
                   limit: int = LIST_LIMIT) -> dict[str, Any]:
        statuses = [status] if isinstance(status, str) else status
        for s in statuses or ():
            if s not in rs.STATES:
                raise BadRequest(f"unknown status {s!r}", code="invalid_status",
                                 params={"field": "status", "allowed": sorted(rs.STATES)})
        if not 1 <= limit <= LIST_LIMIT:
            raise BadRequest(f"limit must be from 1 to {LIST_LIMIT}", code="invalid_limit", params={"field": "limit"})
        if offset < 0:
            raise BadRequest("offset must not be negative", code="invalid_offset", params={"field": "offset"})
        rows, total = await self.store.list_runs(statuses, offset=offset, limit=limit)
        return {"runs": [self._view(r) for r in rows], "total": total, "offset": offset, "limit": limit}

    def _view(self, row: dict[str, Any]) -> dict[str, Any]:
        view = {k: v for k, v in row.items() if k not in ("graph", "last_seq")}
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

    async def events_page(self, run_id: str, cursor: int = 0, wait: float = 0.0) -> dict[str, Any]:
        status, last_seq = await self._status(run_id)
        last = max(last_seq, self.events.flushed_seq(run_id) or 0)
        if cursor > last:
            raise BadRequest(f"cursor {cursor} is past the end of run {run_id}'s log ({last})",
                             code="cursor_past_end", params={"field": "cursor", "last_seq": last})
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
        if run_id in self._final:
            return self._final[run_id]
        if run_id in self._active:
            return rs.RUNNING
        if self.queue.get(run_id) is not None or run_id in self._unwritten:
            return rs.QUEUED
        return None

    async def live_page(self, run_id: str, cursor: int, wait: float) -> tuple[str, list[str], int, bool]:
        """For followers: (status, encoded events, next cursor, more). Served from the in-memory
        tail when it holds the events (all followers share its encoding), else from the store."""
        status = self._known_status(run_id)
        if status is not None:
            flushed = self.events.flushed_seq(run_id) or 0
            if wait > 0 and cursor >= flushed and status in rs.ACTIVE:
                await self.events.wait_beyond(run_id, cursor, min(wait, 60.0))
                status = self._known_status(run_id) or status
                flushed = self.events.flushed_seq(run_id) or 0
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
        await self._row(run_id)
        return await self.store.list_artifacts(run_id)

    def statistics(self) -> dict[str, Any]:
        stats = self.queue.statistics()
        return {"queues": [q.__dict__ for q in stats.queues], "interactive_running": stats.interactive_running,
                "active_runs": len(self._active)}

    @property
    def active_count(self) -> int:
        return len(self._active) + len(self.queue.waiting())


def _log_failed_write(what: str, future: asyncio.Future) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.error("codefy: %s failed: %s", what, future.exception())


def _remove_run_files(folder: Path, keep: set[str]) -> None:
    if not folder.is_dir():
        return
    for entry in folder.iterdir():
        if entry.name in keep:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)
    if not keep:
        try:
            folder.rmdir()
        except OSError:  # something new appeared in it: leave it
            pass


def _event_view(e: Any) -> dict[str, Any]:
    return {"seq": e.seq, "type": e.type, "payload": e.payload, "created_at": e.created_at}


def _options_doc(req: SubmitRequest, resolved: Any) -> dict[str, Any]:
    o = req.options
    doc: dict[str, Any] = {"lane": o.lane, "record_outputs": o.record_outputs, "requested_device": resolved.requested}
    if o.target is not None:
        doc["target"] = {"worker": o.target.worker or "local", "devices": list(o.target.devices)}
    return doc


__all__ = ["RunService", "SubmitError", "ServiceError"]
