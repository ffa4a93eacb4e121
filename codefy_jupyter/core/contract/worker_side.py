"""The worker side as the run service sees it: what runs/ may ask of worker agents and their runs.
core/workers/worker_service.py `WorkerService` implements it; the server hands its class to the run
service (`RunService(..., workers=WorkerService)`), so runs/ and workers/ never import each other.
The other direction, what the worker side may use of the run service, is core/workers/host.py.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Mapping, Protocol

from ...wire.output_reads import Answer
from .execution import RunHandle, RunSpec


class WorkerOutputs(Protocol):
    """Recorded outputs that stay on the worker that ran the run."""

    def can_record(self, name: str) -> bool | None:
        """Whether worker `name` records outputs (None: not known, e.g. it is offline)."""

    def send_drop(self, name: str, run_id: str) -> bool:
        """Ask worker `name` to drop a run's recorded outputs; False when it cannot be told now."""

    def read(self, name: str, run_id: str, kind: str, query: dict[str, Any]) -> Awaitable[Answer]:
        """Read a run's recorded outputs from worker `name`."""


class StartedWorkerRun(Protocol):
    """A run handed to its worker: what the run service writes on its row when it starts."""

    handle: RunHandle
    facts: dict[str, Any] | None
    fingerprint: str | None


class WorkerSide(Protocol):
    output_reads: WorkerOutputs
    s3: Any  # the S3 backend for worker runs' files (core/storage/s3.py), None when S3 is off
    on_connected: Any  # called with a worker's name when it connects (set by the run service)

    def load(self) -> Awaitable[None]:
        """Read the enrolled workers at start."""

    def shutting_down(self) -> None: ...

    def close(self) -> Awaitable[None]: ...

    def resume_point(self, row: dict[str, Any]) -> dict[str, Any] | None:
        """A worker run's resume point on its row, if a previous process left one."""

    def adopt(self, row: dict[str, Any]) -> RunHandle:
        """Take back a worker run a previous process left running."""

    def start_run(self, spec: RunSpec) -> StartedWorkerRun: ...

    def run_closed(self, run_id: str) -> None: ...

    def log_failed(self, run_id: str, lost: dict[str, Any]) -> None: ...

    def is_one_shot(self, name: str | None) -> bool: ...

    def is_degraded(self, name: str) -> bool: ...

    def cpu_count(self, name: str) -> int | None: ...

    def card_names(self, name: str) -> Mapping[str, str]:
        """Worker `name`'s device -> card name, as its hello reported them (empty when unknown)."""

    def node_types(self, graph: Mapping[str, Any]) -> frozenset[str]:
        """Every node type a run of `graph` needs its worker to offer."""


# (run host, worker queue) -> the worker side; core/workers/worker_service.py `WorkerService` is one.
WorkerSideFactory = Callable[[Any, Any], WorkerSide]
