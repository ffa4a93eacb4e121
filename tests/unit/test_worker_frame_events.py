"""What a worker's per-run frame writes into the run's log (core/workers/frame_events.py): the
run process's own (type, payload) as is, and the frames older agents send as the same events."""

from __future__ import annotations

from codefy_jupyter.core.workers.frame_events import event_of, events_of_report
from codefy_jupyter.wire import run_events as ev
from codefy_jupyter.wire.frames import Artifact, Metrics, RunWarning

METRIC = {"event": "metric", "node_id": "n", "name": "loss", "value": 0.5, "step": 3}
ARTIFACT = {"event": "artifact", "node_id": "n", "kind": "checkpoint", "path": "ckpt/1.pt", "meta": {"epoch": 1}}
WARNING = {"event": "warning", "node_id": "n", "code": "environ", "message": "hi", "params": {"a": 1}}


def built(raw: dict) -> dict:
    """What the run process sends for an engine event: its log event, once."""
    event = ev.from_engine("r1", raw)
    return {"type": event.type, "payload": event.payload}


def test_the_run_process_event_is_logged_as_is():
    for raw in (METRIC, ARTIFACT, WARNING, {"event": "node_status", "node_id": "n", "status": "running"}):
        sent = built(raw)
        event = event_of("r1", sent)
        assert event == ev.RunEvent(sent["type"], sent["payload"])
        assert event.payload is sent["payload"]  # not rebuilt, not copied


def test_the_control_plane_names_the_run_and_keeps_its_own_events():
    assert event_of("r2", built(METRIC)).payload["run_id"] == "r2"
    for kind in ("execution_start", "execution_complete", "execution_error", "execution_stopped"):
        assert event_of("r1", {"type": kind, "payload": {"run_id": "r1"}}) is None


def test_older_agents_frames_become_the_same_events():
    assert event_of("r1", METRIC) == ev.from_engine("r1", METRIC)  # a raw engine event in an event frame
    points = [{k: v for k, v in METRIC.items() if k != "event"}, {"value": 1.0}, "junk"]
    assert events_of_report("r1", Metrics(run_id="r1", points=points)) == [ev.from_engine("r1", METRIC)]
    artifact = Artifact(run_id="r1", kind="checkpoint", path="ckpt/1.pt", meta={"epoch": 1}, node_id="n")
    assert events_of_report("r1", artifact) == [ev.from_engine("r1", ARTIFACT)]


def test_an_agent_warning_is_a_run_warning():
    (event,) = events_of_report("r1", RunWarning(run_id="r1", message="too big", params={"x": 1}))
    assert event == ev.run_warning("r1", "worker_warning", "too big", {"x": 1})
    (event,) = events_of_report("r1", RunWarning(run_id="r1", message="hi", code="environ", params={"a": 1},
                                                 node_id="n"))
    assert event == ev.from_engine("r1", WARNING)
