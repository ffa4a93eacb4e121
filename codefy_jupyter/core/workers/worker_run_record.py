"""The worker side's record of one run on a worker, and its resume point.

`facts` becomes the row's `execution_facts`; its `worker_resume` entry (RESUME) is the resume point
= {worker, seq, slots, devices, device, queue_key, uuids}, whose seq is always what the log holds.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from ...wire.protocol import RunInbox
from ..contract import lifecycle as rs
from ..contract.execution import ExecutionOutcome, RunSpec

RESUME = "worker_resume"


@dataclass
class WorkerRun:
    """The worker side's record of one run on a worker."""

    run_id: str
    worker: str
    spec: RunSpec | None
    done: asyncio.Future[ExecutionOutcome]
    inbox: RunInbox
    facts: dict[str, Any]
    state: str = rs.RUNNING  # running | disconnected
    assigned: bool = False
    started: bool = False  # execution_start is in the log
    heard: bool = False  # the worker sent a frame of this run: it has it
    finished: bool = False  # `done` is resolved: nothing more goes into the log
    adopted: bool = False
    reconnected: bool = False
    cancel_requested: bool = False
    recorded_seq: int = 0  # highest frame seq whose effects are in the sink
    replay_until: int = 0  # the last seq the agent had sent when it reconnected (run_alive): what it replays
    facts_seq: int = 0  # recorded_seq as of the last execution_facts write handed to the store
    started_at: float = 0.0
    grace: asyncio.TimerHandle | None = None
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    drained: asyncio.Event = field(default_factory=asyncio.Event)
    paused: bool = False
    acker: asyncio.Task[None] | None = None
    log_broken: bool = False  # the store refused some of its events: nothing more is acknowledged
    storage: Any = None  # its StoragePlan (core/storage/plan.py); None: no files


def facts_doc(run: WorkerRun, seq: int | None = None) -> dict[str, Any]:
    """The run's execution_facts, its resume point naming `seq` (default: what is recorded)."""
    doc = dict(run.facts)
    doc[RESUME] = {**doc[RESUME], "seq": run.recorded_seq if seq is None else seq} if RESUME in doc else None
    if doc[RESUME] is None:
        del doc[RESUME]
    return doc


__all__ = ["RESUME", "WorkerRun", "facts_doc"]
