"""The pure decision of what becomes, at start, of a run a previous process left active
(core/runs/recovery.py; seed: When the server stops). Without servers: every branch of `recover`."""

from __future__ import annotations

import pytest

from codefy_jupyter.core.runs import recovery
from codefy_jupyter.wire import run_events as ev


def row(status, **extra):
    return {"id": "r1", "status": status, "started_at": 10.0 if status != "queued" else None, **extra}


@pytest.mark.parametrize("closing, status", [
    (ev.execution_complete("r1", duration_s=1.0, metrics={}, executed=2, cached=0), "succeeded"),
    (ev.execution_error("r1", {"code": "boom", "message": "boom"}), "failed"),
    (ev.execution_stopped("r1", status="cancelled", code="cancelled", message="asked"), "cancelled"),
    (ev.execution_stopped("r1", status="interrupted", code="server_shutdown", message="stopped"), "interrupted"),
])
@pytest.mark.parametrize("was", ["queued", "running", "disconnected"])
def test_a_log_that_already_ends_with_a_closing_event_repairs_the_row_to_its_status(closing, status, was):
    # The log is the record: no second closing event, whatever the row still says.
    assert recovery.recover(row(was), closing, None) == recovery.Repair(status)
    assert recovery.recover(row(was), closing, {"worker": "box", "device": "cuda:0"}) == recovery.Repair(status)


def test_a_running_worker_run_with_a_resume_point_is_adopted_disconnected():
    fate = recovery.recover(row("running"), ev.RunEvent("metric", {}), {"worker": "box", "device": "cuda:0"})
    assert fate == recovery.Adopt(worker="box", status="disconnected", started=10.0)


def test_a_disconnected_worker_run_with_a_resume_point_stays_disconnected():
    fate = recovery.recover(row("disconnected"), None, {"worker": "box", "device": "cpu"})
    assert fate == recovery.Adopt(worker="box", status="disconnected", started=10.0)


@pytest.mark.parametrize("was, resume", [
    ("queued", None),
    ("queued", {"worker": "box", "device": "cpu"}),  # a waiting run has nothing to resume
    ("running", None),  # a run here, or on a worker that left no resume point
    ("disconnected", None),
])
def test_anything_else_is_retired_interrupted_with_a_server_restart_stop_event(was, resume):
    fate = recovery.recover(row(was), ev.RunEvent("node_status", {}), resume)
    assert isinstance(fate, recovery.Retire)
    assert fate.closing.type == ev.EXECUTION_STOPPED
    payload = fate.closing.payload
    assert payload["status"] == "interrupted" and payload["run_id"] == "r1"
    assert payload["reason"]["code"] == "server_restart"
    assert f"while this run was {was}" in payload["reason"]["message"]


def test_an_adopted_run_keeps_its_slots_and_its_memory_budget():
    resume = {"worker": "box", "device": "cuda:0", "devices": ["cuda:0", "cuda:1"], "slots": ["box/cuda:0", "box/cuda:1"]}
    run, slots = recovery.adopted_run(row("running", seed=3, options={"target": {"memory_gib": 2}}), resume, 7)
    assert slots == ["box/cuda:0", "box/cuda:1"]
    assert (run.run_id, run.order, run.device, run.devices, run.seeded, run.worker) == (
        "r1", 7, "cuda:0", ("cuda:0", "cuda:1"), True, "box")
    assert run.memory_mib == 2048
    single, slots = recovery.adopted_run(row("running"), {"worker": "box", "device": "cpu"}, 1)
    assert slots == ["box/cpu"] and single.devices == () and single.memory_mib is None and not single.seeded
