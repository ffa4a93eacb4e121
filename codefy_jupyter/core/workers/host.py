"""What the worker side may use of the run service: the one seam between core/workers/ and core/runs/.

The worker side (WorkerService, WorkerExecutor) is handed a `RunHost` and a `WorkerQueue` and
sees nothing else of the RunService: a change inside the run service that keeps these promises
cannot break the workers, and a reader learns here, in one screen, everything the two sides share.
The other direction is WorkerService's public methods.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Iterable, Protocol

from ...engine import NodeRegistry
from ..config import Settings
from ..contract.event_log import RunEvents
from ..scheduling.queue import Run, SlotInfo, WorkerOffer
from ..store.database import Store


class RunHost(Protocol):
    """The run service, as the worker side sees it."""

    store: Store
    events: RunEvents
    settings: Settings
    registry: NodeRegistry  # the node catalog the server offers workers (not the worker registry)
    clock: Callable[[], float]
    data_dir: Any  # the data folder (Path): the mount label's folder, transfer's runs/<run id>/

    def reschedule(self) -> Awaitable[None]:
        """Offer waiting runs to the scheduler again (a worker came, left, drained...)."""

    def keep(self, task: Any) -> None:
        """Hold a background task until it is done (and wait for it at shutdown)."""

    def fail_waiting(self, run_id: str, code: str, message: str, params: dict[str, Any]) -> Awaitable[None]:
        """A waiting run that can no longer run ends failed with `code`."""

    def release_slots(self, run_id: str) -> None:
        """A worker run's process is gone while its files upload: free its device slots (and card
        memory) for the next run; the run stays running. Idempotent."""

    def worker_run_status(self, run_id: str, status: str) -> None:
        """A worker run's connection dropped (`disconnected`) or came back (`running`)."""


class WorkerQueue(Protocol):
    """The run queue's worker-facing part: how workers stand, their slots, their waiting runs."""

    def set_worker(self, offer: WorkerOffer) -> None: ...

    def set_card_memory(self, name: str, cards: Any) -> None: ...

    def placement(self, run_id: str) -> Any: ...

    def get(self, run_id: str) -> Run | None: ...

    def slot_info(self, provider: str | None = None) -> list[SlotInfo]: ...

    def same_machine(self, name: str) -> bool: ...

    def topology(self) -> Any: ...

    def remove_worker(self, name: str) -> Iterable[Run]: ...


__all__ = ["RunHost", "WorkerQueue"]
