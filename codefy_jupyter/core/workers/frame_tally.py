"""What the worker executor counts of the per-run frames agents send (exported by
server/metrics.py): every frame by type, the frames an agent sent again from its spool after a
reconnect (up to the last seq its `run_alive` listed for the run), and the ones dropped because
their seq was already recorded."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...wire.frames import RunFrame
from ..telemetry import Counter

if TYPE_CHECKING:
    from .worker_run_record import WorkerRun


class FrameTally:
    def __init__(self) -> None:
        self.received_total = Counter(("type",))
        self.replayed_total = Counter()
        self.duplicate_total = Counter()

    def received(self, frame: RunFrame) -> None:
        self.received_total.inc((frame.type,))

    def accepted(self, run: "WorkerRun", frame: RunFrame, new: bool) -> None:
        """A frame of a run tracked here went through the run's inbox (`new`: not seen before)."""
        if frame.seq <= run.replay_until:
            self.replayed_total.inc()
        if not new:
            self.duplicate_total.inc()


__all__ = ["FrameTally"]
