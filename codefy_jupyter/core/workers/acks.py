"""Acknowledging a worker run's frames: an ack is a promise that the agent may forget them, so it is
sent only for frames whose every effect is in the store.

A per-run task (`loop`) persists what arrived (one EventLog flush) and sends `ack` when the run's
inbox says one is due (every 64 frames or 1 s). The resume point is written in the same transaction
as each batch of the run's events (`capture_facts`, called by EventLog.attach), so the seq it names
is exactly what the log holds; frames that wrote no event get a facts write of their own.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from ...wire.protocol import INBOX_MAX_FRAMES, should_pause_reading
from ..contract import lifecycle as rs
from .host import RunHost
from .worker_run_record import WorkerRun, facts_doc
from .registry import WorkerRegistry

log = logging.getLogger("codefy.workers")


class Acks:
    def __init__(self, registry: WorkerRegistry, host: RunHost, max_inbox: int = INBOX_MAX_FRAMES) -> None:
        self.registry = registry
        self.host = host
        self.max_inbox = max_inbox

    def capture_facts(self, run: WorkerRun) -> dict[str, Any]:
        """Called by the EventLog as it hands a batch of the run's events to the store."""
        run.facts_seq = run.recorded_seq
        return {"execution_facts": facts_doc(run)}

    async def persist(self, run: WorkerRun, seq: int) -> None:
        """Make the run's frames up to `seq` durable; raises unless every event they produced is
        in the store (an ack is a promise that the agent may forget the frames)."""
        events = self.host.events
        produced = events.next_seq(run.run_id) - 1
        await events.flush()
        if run.log_broken or (events.flushed_seq(run.run_id) or 0) < produced:
            raise RuntimeError(f"events of run {run.run_id} up to {produced} are not in the store")
        if run.facts_seq < seq and not run.finished:  # frames that wrote no event (run_facts, ...)
            run.facts_seq = seq
            await self.host.store.update_run(run.run_id, execution_facts=facts_doc(run, seq))

    def send(self, run: WorkerRun, *, force: bool = False) -> None:
        worker = self.registry.get(run.worker)
        if worker is None or worker.link is None:
            return  # an ack nobody receives is an ack the agent never got: keep it owed
        ack = run.inbox.take_ack(force=force)
        if ack is not None:
            worker.link.send(ack)

    async def loop(self, run: WorkerRun) -> None:
        loop = asyncio.get_running_loop()
        inbox = run.inbox
        try:
            while True:
                run.wake.clear()
                seq = run.recorded_seq
                if seq > inbox.persisted_seq and not run.finished:
                    try:
                        await self.persist(run, seq)
                    except Exception:
                        if run.log_broken:
                            return  # the run is ending failed; what was not recorded is never acked
                        log.exception("codefy: recording frames of worker run %s failed", run.run_id)
                        await asyncio.sleep(0.5)
                        continue
                    inbox.persisted(seq)
                    if run.paused and not should_pause_reading(inbox.unprocessed, paused=True, limit=self.max_inbox):
                        run.paused = False
                        run.drained.set()
                if run.state == rs.RUNNING:
                    self.send(run)
                if run.recorded_seq > inbox.persisted_seq and not run.finished:
                    continue
                at = inbox.next_ack_at()
                timeout = None if at is None else max(0.0, at - loop.time())
                try:
                    await asyncio.wait_for(run.wake.wait(), timeout)
                except asyncio.TimeoutError:
                    pass
        except asyncio.CancelledError:
            return


__all__ = ["Acks"]
