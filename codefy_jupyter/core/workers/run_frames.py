"""Per-run frames from a worker as log events and outcomes. Pure: no store, no socket.

Every frame that carries something for the log becomes the same event an in-process run's engine
callback would have produced; `run_finished` becomes the `ExecutionOutcome` the run service files.
Events only the control plane writes (execution_start, the closing events) are never taken from a
worker: `start_event` is the execution_start it writes when a worker run starts.
"""

from __future__ import annotations

from ...wire import run_events as ev
from ...wire.protocol import AGENT_RESTARTED, AGENT_STOPPED, Artifact, Event, Metrics, RunFinished, RunFrame, RunWarning
from ..contract import lifecycle as rs
from ..contract.execution import ExecutionOutcome
from .frame_bounds import bounded_error
from .frame_events import event_of, events_of_report
from .worker_run_record import RESUME, WorkerRun

# Event types only the control plane writes into a run's log.
CONTROL_PLANE_TYPES = ev.CLOSING | {ev.EXECUTION_START}


def events_of(run_id: str, frame: RunFrame) -> list[ev.RunEvent]:
    """What an event, metrics, artifact or run_warning frame adds to the run's log, in order (the
    translation itself: frame_events.py)."""
    if isinstance(frame, Event):
        event = event_of(run_id, frame.event)
        return [event] if event is not None else []
    if isinstance(frame, (Metrics, Artifact, RunWarning)):
        return events_of_report(run_id, frame)
    return []


def start_event(run: WorkerRun, now: float) -> ev.RunEvent:
    """The execution_start the control plane writes when its worker says the run started."""
    spec = run.spec
    if spec is None:  # adopted before the worker said it started: the row has what we need
        resume = run.facts.get(RESUME) or {}
        return ev.execution_start(run.run_id, name=None, device=resume.get("device", ""),
                                  devices=list(resume.get("devices") or ()), seed=None, deterministic=False,
                                  queue_key=resume.get("queue_key", ""), started_at=now, worker=run.worker)
    return ev.execution_start(
        run.run_id, name=spec.name, device=spec.device, devices=list(spec.devices or (spec.device,)),
        seed=spec.options.seed, deterministic=spec.options.deterministic, queue_key=spec.queue_key, started_at=now,
        worker=run.worker)


def outcome_of(frame: RunFinished, worker: str) -> ExecutionOutcome:
    """A run_finished frame as the outcome the run service files (the peak memory is the caller's)."""
    error = bounded_error(frame.error) if frame.error else None
    if frame.status == rs.FAILED:
        error = error or {"message": "the run failed on the worker"}
        for key in ("output_tail", "exit_code", "signal"):
            value = getattr(frame, key)
            if value is not None:
                error.setdefault(key, value)
    message, params = None, {}
    if frame.status == rs.FAILED and error is not None and error.get("code") == AGENT_RESTARTED:
        # Its process ended with the agent before it (SIGKILL, a crash): the run itself did not fail.
        return ExecutionOutcome(rs.INTERRUPTED, executed=frame.executed, cached=frame.cached,
                                metrics=dict(frame.metrics), duration_s=frame.duration_s, code=AGENT_RESTARTED,
                                message=str(error.get("message") or "the worker agent stopped while the run executed"),
                                params={"worker": worker})
    if frame.status == rs.CANCELLED and error is not None and error.get("code") == AGENT_STOPPED:
        # Stopped because its agent was stopped (`codefy agent stop`, SIGTERM): nobody cancelled it.
        return ExecutionOutcome(rs.INTERRUPTED, executed=frame.executed, cached=frame.cached,
                                metrics=dict(frame.metrics), duration_s=frame.duration_s, code=AGENT_STOPPED,
                                message=str(error.get("message") or "the worker agent was stopped"),
                                params={"worker": worker})
    if frame.status == rs.CANCELLED:
        message = "cancel requested"
        if frame.signal is not None:  # it did not stop by itself: say how it was ended
            message += f"; the run's process did not stop in time and was ended with {signal_name(frame.signal)}"
            params = {"signal": frame.signal}
    return ExecutionOutcome(frame.status, error=error if frame.status == rs.FAILED else None,
                            executed=frame.executed, cached=frame.cached, metrics=dict(frame.metrics),
                            duration_s=frame.duration_s, code="cancelled" if frame.status == rs.CANCELLED else None,
                            message=message, params=params)


def signal_name(number: int) -> str:
    import signal

    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


__all__ = ["CONTROL_PLANE_TYPES", "event_of", "events_of", "outcome_of", "signal_name"]
