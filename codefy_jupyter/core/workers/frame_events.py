"""What a worker's per-run frame writes into the run's log. Pure: frames in, log events out.

A current agent sends every event of a run the way its run process built it with
wire/run_events.py: an `event` frame holding `{"type", "payload"}`, written as is (EventLog.emit
still makes the payload storable). What older agents send is still recorded, as the same log
events: a raw engine event inside an `event` frame, and `metrics` / `artifact` frames.
"""

from __future__ import annotations

from typing import Any

from ...wire import run_events as ev
from ...wire.frames import Artifact, Metrics, RunWarning

# Event types only the control plane writes into a run's log: a worker's copy would be a second one.
CONTROL_PLANE_TYPES = ev.CLOSING | {ev.EXECUTION_START}


def event_of(run_id: str, raw: dict[str, Any]) -> ev.RunEvent | None:
    """An `event` frame's content as a log event, or None for one the log does not take from a
    worker. The run is named by the control plane's own id (the child's builders name it already:
    no copy then)."""
    if isinstance(raw.get("type"), str) and isinstance(raw.get("payload"), dict):
        if raw["type"] in CONTROL_PLANE_TYPES:
            return None
        payload = raw["payload"]
        if payload.get("run_id") != run_id:
            payload = {**payload, "run_id": run_id}
        return ev.RunEvent(raw["type"], payload)
    return ev.from_engine(run_id, raw)  # an older agent's raw engine event


def events_of_report(run_id: str, frame: Metrics | Artifact | RunWarning) -> list[ev.RunEvent]:
    """The log events of a `metrics` or `artifact` frame (older agents) or of an agent's own
    `warning` frame. A metric point without a name is dropped."""
    if isinstance(frame, Metrics):
        return [ev.metric(run_id, node_id=p.get("node_id"), name=p["name"], value=p.get("value"), step=p.get("step"))
                for p in frame.points if isinstance(p, dict) and isinstance(p.get("name"), str)]
    if isinstance(frame, Artifact):
        return [ev.artifact(run_id, node_id=frame.node_id, kind=frame.kind, path=frame.path, meta=frame.meta)]
    return [ev.run_warning(run_id, frame.code or "worker_warning", frame.message, frame.params, frame.node_id)]
