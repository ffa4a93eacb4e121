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
