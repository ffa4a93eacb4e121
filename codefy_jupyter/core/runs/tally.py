"""What the run service counts as runs start and end (exported by server/metrics.py): runs started
by queue with how long they waited, runs finished by status and reason with how long they ran.
Fed at the two places a run changes state for good: `RunService._start` and the final write."""

from __future__ import annotations

from typing import Any

from ...wire import run_events as ev
from ..telemetry import LONG_S, Counter, Histogram, code_label, queue_label
from ..contract import lifecycle as rs

COMPLETED = "completed"  # the reason of a run that succeeded


class RunTally:
    def __init__(self) -> None:
        self.started_total = Counter(("queue",))
        self.wait_seconds = Histogram(LONG_S, ("queue",))
        self.finished_total = Counter(("status", "reason"))
        self.duration_seconds = Histogram(LONG_S, ("status",))

    def started(self, queue_key: str, started_at: float, submitted_at: float | None) -> None:
        """A run left its queue (`submitted_at` None: unknown, its wait is not observed)."""
        queue = queue_label(queue_key)
        self.started_total.inc((queue,))
        if submitted_at is not None:
            self.wait_seconds.observe(max(0.0, started_at - submitted_at), (queue,))

    def finished(self, status: str, closing: ev.RunEvent, error: Any, duration_s: float | None) -> None:
        """`duration_s`: None for a run that never started (cancelled while it waited, say)."""
        self.finished_total.inc((status, reason(status, closing, error)))
        if duration_s is not None:
            self.duration_seconds.observe(max(0.0, duration_s), (status,))


def reason(status: str, closing: ev.RunEvent, error: Any) -> str:
    """Why a run ended, as a bounded label: `completed`; a failure's code (`node_failed` when a node
    raised, `execution_failed`, `worker_gone`...); a stop's reason code (`cancelled`,
    `server_shutdown`...); `other` when there is none."""
    if status == rs.SUCCEEDED:
        return COMPLETED
    if isinstance(error, dict):
        return code_label(error.get("code"))
    why = closing.payload.get("reason")
    return code_label(why.get("code") if isinstance(why, dict) else None)


__all__ = ["COMPLETED", "RunTally", "reason"]
