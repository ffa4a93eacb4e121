"""The run lifecycle table: every legal step, and every illegal one refused by name."""

from __future__ import annotations

import itertools

import pytest

from codefy_jupyter.core.runs import state as rs


@pytest.mark.parametrize("state,event,after", [
    ("queued", "start", "running"), ("queued", "cancel", "cancelled"), ("queued", "interrupt", "interrupted"),
    ("queued", "fail", "failed"), ("running", "succeed", "succeeded"), ("running", "fail", "failed"),
    ("running", "cancel", "cancelled"), ("running", "interrupt", "interrupted"),
    ("running", "disconnect", "disconnected"), ("disconnected", "reconnect", "running"),
    ("disconnected", "interrupt", "interrupted"), ("disconnected", "cancel", "cancelled"),
    ("disconnected", "fail", "failed"),
])
def test_legal_transitions(state, event, after):
    assert rs.next_state(state, event) == after


def test_every_other_pair_is_illegal_and_named():
    legal = set(rs.TRANSITIONS)
    for state, event in itertools.product(sorted(rs.STATES), rs.EVENTS):
        if (state, event) in legal:
            continue
        with pytest.raises(rs.IllegalTransition) as info:
            rs.next_state(state, event)
        assert info.value.state == state and info.value.event == event
        assert state in str(info.value) and event in str(info.value)


def test_finished_states_are_final():
    for state in rs.FINISHED:
        assert not any(s == state for s, _ in rs.TRANSITIONS)
        with pytest.raises(rs.IllegalTransition, match="is final"):
            rs.next_state(state, "start")


def test_a_full_life_step_by_step():
    state = "queued"
    for event, expected in [("start", "running"), ("disconnect", "disconnected"), ("reconnect", "running"),
                            ("succeed", "succeeded")]:
        state = rs.next_state(state, event)
        assert state == expected
        assert rs.is_active(state) == (state != "succeeded")


def test_unknown_names_are_programming_errors():
    with pytest.raises(ValueError, match="unknown run state"):
        rs.next_state("paused", "start")
    with pytest.raises(ValueError, match="unknown run event"):
        rs.next_state("queued", "pause")


def test_the_run_service_writes_no_ending_the_lifecycle_does_not_allow(tmp_path):
    """The service's one choke point for endings (`_write_final`) asks the table first: a second
    ending of a finished run raises and writes nothing, so the log keeps exactly one closing event."""
    import asyncio

    from codefy_jupyter.core.config import Settings
    from codefy_jupyter.core.runs.run_service import RunService
    from codefy_jupyter.core.workers.worker_service import WorkerService
    from codefy_jupyter.core.store.database import Store
    from codefy_jupyter.wire import run_events as ev

    async def main() -> None:
        store = await Store.open(tmp_path / "db.sqlite")
        service = RunService(store, Settings.load({"data_dir": str(tmp_path)}, env={}), data_dir=tmp_path, workers=WorkerService)
        await service.start()
        run = await service.submit({"graph": {"nodes": [{"id": "k", "type": "Float", "params": {"value": 1}}]}})
        for _ in range(200):
            if (await service.get(run["id"]))["status"] == "succeeded":
                break
            await asyncio.sleep(0.02)
        before = (await service.events_page(run["id"], 0))["events"]
        closing = ev.execution_stopped(run["id"], status="cancelled", code="cancelled", message="again")
        with pytest.raises(rs.IllegalTransition, match="a succeeded run cannot cancel; succeeded is final"):
            await service._write_final(run["id"], "cancelled", closing, error=None)
        after = (await service.events_page(run["id"], 0))["events"]
        assert after == before and (await service.get(run["id"]))["status"] == "succeeded"
        await service.shutdown()
        await store.close()

    asyncio.run(main())
