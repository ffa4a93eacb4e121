"""Frames of runs that are not tracked here (ended here, or never known), and runs a worker lists
that are not: the worker is told once per connection to stop such a run (grace 0), a late
`run_finished` is kept as the run's `execution_facts.late_result`, and a frame is acknowledged, so
that the agent can drop it, only once the store confirms that nothing will ever record it."""

from __future__ import annotations

import asyncio
import logging
from functools import partial
from typing import Any, Awaitable, Callable

from ...wire.protocol import Ack, Cancel, RunFinished, RunFrame
from ..contract import lifecycle as rs
from .host import RunHost
from .registry import Worker

log = logging.getLogger("codefy.workers")


class Strays:
    def __init__(self, host: RunHost, spawn: Callable[[Awaitable[Any]], None],
                 task_done: Callable[[asyncio.Task[Any]], None]) -> None:
        self.host = host
        self._spawn = spawn
        self._task_done = task_done
        self._cancelled: set[tuple[int, str]] = set()  # (link id, run id) told to stop
        # (link id, run id) -> whether the store says frames of that untracked run may be dropped
        self._verdicts: dict[tuple[int, str], asyncio.Future[bool]] = {}

    def link_closed(self, link_id: int) -> None:
        self._cancelled = {key for key in self._cancelled if key[0] != link_id}
        self._verdicts = {key: v for key, v in self._verdicts.items() if key[0] != link_id}

    def stop(self, worker: Worker, run_id: str, link_id: int) -> None:
        key = (link_id, run_id)
        if key in self._cancelled or worker.link is None:
            return
        self._cancelled.add(key)
        worker.link.send(Cancel(run_id=run_id, grace_s=0.0, reason="this run is not tracked by the control plane"))

    def frame(self, worker: Worker, frame: RunFrame, link_id: int) -> None:
        """Keep a late result as a fact, tell the worker to stop the run, and acknowledge the frame
        once the store says it may be dropped (see `_droppable`)."""
        if isinstance(frame, RunFinished):
            self._spawn(self._late_result(worker, frame))
        else:
            self.stop(worker, frame.run_id, link_id)
        key = (link_id, frame.run_id)
        verdict = self._verdicts.get(key)
        if verdict is None:
            verdict = self._verdicts[key] = asyncio.ensure_future(self._droppable(frame.run_id))
            verdict.add_done_callback(self._task_done)
        verdict.add_done_callback(partial(self._ack, worker, link_id, frame.run_id, frame.seq))

    async def _droppable(self, run_id: str) -> bool:
        """Frames of an untracked run may be dropped when the run is unknown to the store, or
        finished with its log whole; never while its row is active (that would be frames lost), nor
        when its log could not be written (they stay in the agent's spool)."""
        row = await self.host.store.get_run(run_id)
        if row is None:
            return True
        if row["status"] not in rs.FINISHED:
            log.error("codefy: frames of run %s (%s) arrived but the run is not tracked; they are not "
                      "acknowledged", run_id, row["status"])
            return False
        return "unrecorded_after" not in (row.get("execution_facts") or {})

    def _ack(self, worker: Worker, link_id: int, run_id: str, seq: int, verdict: asyncio.Future[bool]) -> None:
        if verdict.cancelled() or verdict.exception() is not None or not verdict.result():
            return
        # Only on the connection the frame came by (a verdict is forgotten when its link closes).
        if (link_id, run_id) in self._verdicts and worker.link is not None:
            worker.link.send(Ack(run_id=run_id, seq=seq))

    async def _late_result(self, worker: Worker, frame: RunFinished) -> None:
        row = await self.host.store.get_run(frame.run_id)
        if row is None or row.get("worker_id") != worker.name or row["status"] not in rs.FINISHED:
            return
        facts = dict(row.get("execution_facts") or {})
        if not facts.get("ended_here") or "late_result" in facts:
            return
        facts["late_result"] = {"status": frame.status, "error": frame.error, "exit_code": frame.exit_code,
                                "duration_s": frame.duration_s, "received_at": self.host.clock()}
        await self.host.store.update_run(frame.run_id, execution_facts=facts)
