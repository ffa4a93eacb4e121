"""Who hears of runs without polling: observers of runs starting and of final statuses committed
(sweeps and studies follow their children so), and listeners for places of an owner's queued cap
that a reservation gave back. A listener that fails is logged; the others are told all the same."""

from __future__ import annotations

import logging
from typing import Any, Callable, Protocol

log = logging.getLogger("codefy.runs")


class RunObserver(Protocol):
    """Told on the event loop; must not block (schedule work with `RunService.keep`)."""

    def run_started(self, run_id: str) -> None: ...

    def run_finished(self, run_id: str, status: str) -> None: ...


class Listeners:
    def __init__(self) -> None:
        self.observers: list[RunObserver] = []
        self.room_listeners: list[Callable[[str | None], None]] = []

    def notify(self, method: str, *args: Any) -> None:
        for observer in self.observers:
            try:
                getattr(observer, method)(*args)
            except Exception:
                log.exception("codefy: a run observer failed on %s", method)

    def room_freed(self, owner: str | None) -> None:
        for listener in self.room_listeners:
            try:
                listener(owner)
            except Exception:
                log.exception("codefy: a room listener failed")
