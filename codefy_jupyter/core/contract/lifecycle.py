"""The run lifecycle as one transition table.

    queued ──start──▶ running ──succeed──▶ succeeded
      │                 │  ▲ ──fail─────▶ failed
      │                 │  │ ──cancel───▶ cancelled
      │        disconnect  reconnect
      │                 ▼  │
      │              disconnected ──interrupt──▶ interrupted
      └──cancel / interrupt / fail──▶ cancelled / interrupted / failed

Every room reads it here, on the ground floor. The run service changes a run's status only through
`next_state` / `finish`, so every status it writes was reached by a legal step from the one before.

`disconnected` belongs to runs on a worker whose connection dropped: the run may still be going
there, so it is neither finished nor running here. Every other state change is illegal and raises
`IllegalTransition`, naming the state and the event, so a bug shows up where it happens instead of
as a row in an impossible state.
"""

from __future__ import annotations

QUEUED, RUNNING, DISCONNECTED = "queued", "running", "disconnected"
SUCCEEDED, FAILED, CANCELLED, INTERRUPTED = "succeeded", "failed", "cancelled", "interrupted"

ACTIVE = frozenset({QUEUED, RUNNING, DISCONNECTED})
FINISHED = frozenset({SUCCEEDED, FAILED, CANCELLED, INTERRUPTED})
STATES = ACTIVE | FINISHED

START, SUCCEED, FAIL, CANCEL, INTERRUPT, DISCONNECT, RECONNECT = (
    "start", "succeed", "fail", "cancel", "interrupt", "disconnect", "reconnect")
EVENTS = (START, SUCCEED, FAIL, CANCEL, INTERRUPT, DISCONNECT, RECONNECT)

TRANSITIONS: dict[tuple[str, str], str] = {
    (QUEUED, START): RUNNING,
    (QUEUED, CANCEL): CANCELLED,  # leaves the line at once, never started
    (QUEUED, INTERRUPT): INTERRUPTED,  # server shutdown / restart recovery
    (QUEUED, FAIL): FAILED,  # e.g. its worker was removed before it started
    (RUNNING, SUCCEED): SUCCEEDED,
    (RUNNING, FAIL): FAILED,
    (RUNNING, CANCEL): CANCELLED,
    (RUNNING, INTERRUPT): INTERRUPTED,
    (RUNNING, DISCONNECT): DISCONNECTED,
    (DISCONNECTED, RECONNECT): RUNNING,
    (DISCONNECTED, INTERRUPT): INTERRUPTED,  # the worker did not come back in time
    (DISCONNECTED, CANCEL): CANCELLED,
    (DISCONNECTED, FAIL): FAILED,
}


class IllegalTransition(Exception):
    def __init__(self, state: str, event: str) -> None:
        self.state, self.event = state, event
        allowed = sorted(e for (s, e) in TRANSITIONS if s == state)
        hint = f"; from {state} only {', '.join(allowed)}" if allowed else f"; {state} is final"
        super().__init__(f"a {state} run cannot {event}{hint}")


def next_state(state: str, event: str) -> str:
    """The state after `event`, or IllegalTransition."""
    if state not in STATES:
        raise ValueError(f"unknown run state {state!r}")
    if event not in EVENTS:
        raise ValueError(f"unknown run event {event!r}")
    try:
        return TRANSITIONS[(state, event)]
    except KeyError:
        raise IllegalTransition(state, event) from None


_ENDING = {SUCCEEDED: SUCCEED, FAILED: FAIL, CANCELLED: CANCEL, INTERRUPTED: INTERRUPT}


def finish(state: str, final: str) -> str:
    """`final` when a run in `state` may end that way, else IllegalTransition (ValueError for a final
    status that is not one)."""
    if final not in _ENDING:
        raise ValueError(f"{final!r} is not a final run status")
    return next_state(state, _ENDING[final])


def is_active(state: str) -> bool:
    return state in ACTIVE
