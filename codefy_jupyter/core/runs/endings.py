"""How a run that ran here ends: its final status, closing event and error, decided from what its
executor returned. Pure; the run service writes what this answers (core/runs/run_service.py
and core/runs/final_writes.py, which asks the lifecycle table first).

An in-process run ends with the engine's `RunResult` (or the exception the engine raised); a worker
run with the `ExecutionOutcome` the WorkerExecutor made of its frames. A run whose log lost events
ends failed whatever the engine said: a log with a hole is not the record of the run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...engine import RunResult
from ...wire import run_events as ev
from ..contract import lifecycle as rs
from ..contract.execution import ExecutionOutcome


@dataclass(frozen=True)
class Ending:
    status: str
    closing: ev.RunEvent
    error: Any = None
    facts: dict[str, Any] | None = None


def failed(run_id: str, info: dict[str, Any], duration: float | None = None,
           facts: dict[str, Any] | None = None) -> Ending:
    return Ending(rs.FAILED, ev.execution_error(run_id, info, duration_s=duration), info, facts)


def of_result(run_id: str, result: RunResult | None, error: BaseException | None, *, duration: float,
              lost: dict[str, Any] | None, shutting_down: bool) -> Ending:
    """An in-process run's end."""
    if lost is not None:
        return failed(run_id, {"code": "event_log_write_failed", "message": "the run's event log could not be "
                               f"written (events {lost['first_seq']} to {lost['last_seq']} were lost: "
                               f"{lost['error']}); the run was stopped", "params": lost}, duration)
    if error is not None or result is None:
        return failed(run_id, {"code": "execution_failed", "message": f"{type(error).__name__}: {error}",
                               "exception_type": type(error).__name__}, duration)
    if result.status == "succeeded":
        return Ending(rs.SUCCEEDED, ev.execution_complete(run_id, duration_s=duration, metrics=result.metrics,
                                                          executed=len(result.executed), cached=len(result.cached)))
    if result.status == "cancelled":
        closing = ev.execution_stopped(run_id, status=rs.INTERRUPTED if shutting_down else rs.CANCELLED,
                                       code="server_shutdown" if shutting_down else "cancelled",
                                       message="the server shut down" if shutting_down else "cancel requested",
                                       duration_s=duration)
        return Ending(closing.payload["status"], closing)
    return failed(run_id, result.error.to_dict() if result.error else {"message": "failed"}, duration)


def of_outcome(run_id: str, outcome: ExecutionOutcome, *, duration: float, shutting_down: bool) -> Ending:
    """A worker run's end, filed like an in-process result (with the facts the executor gathered)."""
    duration = outcome.duration_s if outcome.duration_s is not None else duration
    facts = outcome.facts
    if outcome.status == rs.SUCCEEDED:
        return Ending(rs.SUCCEEDED, ev.execution_complete(run_id, duration_s=duration, metrics=outcome.metrics,
                                                          executed=outcome.executed, cached=outcome.cached),
                      facts=facts)
    if outcome.status == rs.FAILED:
        info = outcome.error or {"code": outcome.code, "message": outcome.message, "params": outcome.params}
        return failed(run_id, info, duration, facts)
    if outcome.status == rs.CANCELLED and shutting_down:
        return Ending(rs.INTERRUPTED, ev.execution_stopped(run_id, status=rs.INTERRUPTED, code="server_shutdown",
                                                           message="the server shut down", duration_s=duration),
                      facts=facts)
    return Ending(outcome.status, ev.execution_stopped(run_id, status=outcome.status,
                                                      code=outcome.code or outcome.status,
                                                      message=outcome.message or outcome.status,
                                                      params=outcome.params, duration_s=duration), facts=facts)


__all__ = ["Ending", "failed", "of_outcome", "of_result"]
