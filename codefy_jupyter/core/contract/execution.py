"""What an executor is handed and what it answers: the part of running a run that the run service,
the worker side and the in-process executor all stand on. `RunSpec` is one run to execute,
`RunHandle` a started one, `ExecutionOutcome` how a run that executed outside this process ended,
and `Executor` what every executor offers (core/runs/in_process_executor.py `InProcessExecutor`,
core/workers/worker_executor.py `WorkerExecutor`)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

from ...engine import CancelToken, OutputCache, RunResult
from ...wire.cpu_threads import CpuBudget
from ...wire.run_options import ExecutionOptions


@dataclass
class RunSpec:
    """What an executor needs to run one graph."""

    run_id: str
    graph: dict[str, Any]
    device: str
    # What the run executes with (seed, deterministic, max_parallel_nodes, record_outputs,
    # provenance): built once when it starts; a worker run's assign carries it as it is.
    options: ExecutionOptions = field(default_factory=ExecutionOptions)
    data_dir: Path | None = None
    cache: OutputCache | None = None
    # Worker runs only: the worker, the run's devices in order, its queue key and slots, its name.
    worker: str | None = None
    devices: tuple[str, ...] = ()
    queue_key: str = ""
    slots: tuple[str, ...] = ()
    name: str | None = None
    # The run's CPU thread budget (wire/cpu_threads.py); None: torch's own defaults.
    cpu: CpuBudget | None = None
    # A worker run that uses files: what it needs (core/storage/run_needs.py `RunFiles` and `Need`);
    # the worker side turns it into a StoragePlan for the worker it was placed on.
    files: Any = None
    # A worker run on cards shared by memory: its budget in MiB per card (the run's own device
    # names); the child caps its allocator to it (assign.memory_budgets).
    memory_budgets: dict[str, int] = field(default_factory=dict)


@dataclass
class ExecutionOutcome:
    """How a run that executed outside this process ended. `status`: succeeded, failed, cancelled
    or interrupted. `code`/`message`/`params`: why a run stopped or failed without a node error
    (worker_gone, worker_removed, ...). `facts`: the run's execution_facts to write with its final
    status."""

    status: str
    error: dict[str, Any] | None = None
    executed: int = 0
    cached: int = 0
    metrics: dict[str, Any] = field(default_factory=dict)
    duration_s: float | None = None
    code: str | None = None
    message: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    facts: dict[str, Any] | None = None


class RunHandle:
    """A run that was started: cancel it, await its result."""

    def __init__(self, run_id: str, token: CancelToken, done: asyncio.Future[RunResult]) -> None:
        self.run_id = run_id
        self._token = token
        self.done = done

    def cancel(self, reason: str = "cancel requested") -> None:
        self._token.cancel(reason)

    @property
    def cancel_requested(self) -> bool:
        return self._token.cancelled



class Executor(Protocol):
    """Where a placed run executes."""

    name: str

    def start(self, spec: RunSpec, on_event: Callable[[dict[str, Any]], None]) -> RunHandle:
        """Start the run; its events reach `on_event` (or the run's log), then `done` settles."""
