"""Pure translations between the run process's messages (`pipe.py`) and protocol frames."""

from __future__ import annotations

from typing import Any

from ..wire.frames import Event, RunFacts, RunFinished, RunFrame, RunReleased, RunStarted, RunWarning
from .isolation import Visibility

FINISHED_STATUSES = ("succeeded", "failed", "cancelled")


def _opt_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def message_frame(run_id: str, kind: str, body: dict[str, Any], *, facts: bool,
                  released: bool = False) -> RunFrame | None:
    """The frame for one message of a run's process, or None for one that is not sent (`facts`
    when the control plane did not negotiate run_facts, `released` when it did not negotiate
    run_released, a malformed body). An event travels as the run process built it: the same
    `{"type", "payload"}`, for the control plane to log as is."""
    if kind == "released":
        return RunReleased(run_id=run_id, upload_bytes=_int(body.get("upload_bytes"))) if released else None
    if kind == "event":
        if not isinstance(body.get("type"), str) or not isinstance(body.get("payload"), dict):
            return None
        return Event(run_id=run_id, event={"type": body["type"], "payload": body["payload"]})
    if kind == "facts":
        if not facts or not isinstance(body.get("kind"), str):
            return None
        return RunFacts(run_id=run_id, kind=body["kind"], facts=_dict(body.get("facts")))
    return None


def started_frame(run_id: str, pid: int, view: Visibility, capped: dict[str, Any] | None = None) -> RunStarted:
    """`capped`: the run process's cap report (budgeted runs only; see runner.py)."""
    capped = capped or {}
    limit = capped.get("memory_limit")
    return RunStarted(run_id=run_id, pid=pid, visible_devices=list(view.visible_devices),
                      device_aliases=dict(view.aliases), memory_limit=limit if isinstance(limit, dict) else None,
                      memory_cap=_opt_str(capped.get("reason")))


def finished_frame(run_id: str, body: dict[str, Any]) -> RunFinished:
    """run_finished from the runner's body (the run's own report, or the runner's account of a crash)."""
    status = body.get("status") if body.get("status") in FINISHED_STATUSES else "failed"
    error = body.get("error") if isinstance(body.get("error"), dict) else None
    if status == "failed" and error is None:
        error = {"type": "RunFailed", "message": "the run failed on the worker"}
    duration = body.get("duration_s")
    metrics = body.get("metrics")
    return RunFinished(
        run_id=run_id, status=status, error=error,
        peak_memory=body.get("peak_memory") if isinstance(body.get("peak_memory"), dict) else None,
        memory_limit=body.get("memory_limit") if isinstance(body.get("memory_limit"), dict) else None,
        output_tail=_opt_str(body.get("output_tail")), exit_code=_int(body.get("exit_code")),
        signal=_int(body.get("signal")), executed=_int(body.get("executed")) or 0,
        cached=_int(body.get("cached")) or 0, metrics=metrics if isinstance(metrics, dict) else {},
        duration_s=float(duration) if isinstance(duration, (int, float)) and not isinstance(duration, bool) else None)


def refused_frame(run_id: str, error: dict[str, Any]) -> RunFinished:
    return RunFinished(run_id=run_id, status="failed", error=error, duration_s=0.0)


def too_large_warning(run_id: str, frame: RunFrame, size_error: str) -> RunWarning:
    """What replaces a frame too large to send (the run goes on; the log says what was lost)."""
    return RunWarning(run_id=run_id, code="worker_frame_too_large",
                      message=f"a {frame.type} frame of this run was too large to send and was dropped: {size_error}",
                      params={"frame_type": frame.type, "error": size_error})
