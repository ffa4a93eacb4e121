"""The event log as a run's producers see it: the one sink every run's events go through, with a
per-run gapless seq (core/runs/event_log.py `EventLog` is the implementation). The worker side
writes a worker run's events through this and no more, so it never imports the run service's log."""

from __future__ import annotations

from typing import Any, Callable, Protocol

from ...wire.run_events import RunEvent


class RunEvents(Protocol):
    def emit(self, run_id: str, event: RunEvent, *, with_next: bool = False) -> int:
        """Queue an event; returns its seq (durable once flushed)."""

    def attach(self, run_id: str, fields: Callable[[], dict[str, Any]] | None) -> None:
        """Write `fields()` (run columns) with each batch of the run's events; None detaches."""

    def next_seq(self, run_id: str) -> int:
        """The seq the run's next event gets."""

    async def flush(self) -> None:
        """Make everything emitted so far durable."""

    def flushed_seq(self, run_id: str) -> int | None:
        """The run's last durable seq."""
