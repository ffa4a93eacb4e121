"""The run lifecycle table, where the run service has always read it; it stands on the ground floor
(core/contract/lifecycle.py) so the store and the workers read it without importing runs/."""

from __future__ import annotations

from ..contract.lifecycle import (  # noqa: F401 (re-exported)
    ACTIVE, CANCEL, CANCELLED, DISCONNECT, DISCONNECTED, EVENTS, FAIL, FAILED, FINISHED, INTERRUPT, INTERRUPTED,
    QUEUED, RECONNECT, RUNNING, START, STATES, SUCCEED, SUCCEEDED, TRANSITIONS, IllegalTransition, finish, is_active,
    next_state,
)
