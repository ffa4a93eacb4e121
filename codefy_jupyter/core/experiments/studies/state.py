"""A study's lifecycle and its attempts' statuses, in one place.

    queued --start--> running --finish--> succeeded
    running --halt--> halted                (a budget ran out with repetitions still to run)
    running --fail--> failed                (a child could not be submitted)
    queued|running --interrupt--> interrupted   (a restart, a child cancelled or interrupted directly)
    queued|running|interrupted|halted|failed --cancel--> cancel_requested --settle--> cancelled
                                            (children still in flight)
    queued|running|interrupted|halted|failed --cancel_now--> cancelled   (nothing left to stop)
    cancel_requested --interrupt--> cancelled   (a restart: the children it waited on are gone)
    interrupted|cancelled|failed|halted --resume--> running

An illegal transition raises Conflict (409) naming the status and the event.
"""

from __future__ import annotations

from ...errors import Conflict

QUEUED, RUNNING, CANCEL_REQUESTED = "queued", "running", "cancel_requested"
CANCELLED, SUCCEEDED, FAILED, INTERRUPTED, HALTED = "cancelled", "succeeded", "failed", "interrupted", "halted"
STATUSES = (QUEUED, RUNNING, CANCEL_REQUESTED, CANCELLED, SUCCEEDED, FAILED, INTERRUPTED, HALTED)
ACTIVE = frozenset({QUEUED, RUNNING, CANCEL_REQUESTED})
RESUMABLE = frozenset({INTERRUPTED, CANCELLED, FAILED, HALTED})

_TABLE: dict[tuple[str, str], str] = {
    (QUEUED, "start"): RUNNING,
    (RUNNING, "finish"): SUCCEEDED,
    (RUNNING, "halt"): HALTED,
    (RUNNING, "fail"): FAILED,
    (QUEUED, "fail"): FAILED,
    (QUEUED, "interrupt"): INTERRUPTED,
    (RUNNING, "interrupt"): INTERRUPTED,
    (CANCEL_REQUESTED, "interrupt"): CANCELLED,
    # A study that stopped scheduling may still have children in flight (an interrupted one whose
    # other children run on): cancelling it waits for them too.
    **{(s, "cancel"): CANCEL_REQUESTED for s in (QUEUED, RUNNING, INTERRUPTED, HALTED, FAILED)},
    (CANCEL_REQUESTED, "settle"): CANCELLED,
    **{(s, "cancel_now"): CANCELLED for s in (QUEUED, RUNNING, INTERRUPTED, HALTED, FAILED)},
    **{(s, "resume"): RUNNING for s in RESUMABLE},
}


def next_status(status: str, event: str) -> str:
    try:
        return _TABLE[(status, event)]
    except KeyError:
        raise Conflict(f"a {status} study cannot {event.replace('_', ' ')}", code="illegal_study_transition",
                       params={"status": status, "event": event}) from None


# Attempt statuses. A repetition's current attempt is its latest one.
PENDING, SUBMITTING = "pending", "submitting"
A_QUEUED, A_RUNNING = "queued", "running"
A_SUCCEEDED, A_FAILED, TIMED_OUT = "succeeded", "failed", "timed_out"
A_CANCELLED, A_INTERRUPTED, LOST = "cancelled", "interrupted", "lost"
ATTEMPT_STATUSES = (PENDING, SUBMITTING, A_QUEUED, A_RUNNING, A_SUCCEEDED, A_FAILED, TIMED_OUT, A_CANCELLED,
                    A_INTERRUPTED, LOST)
IN_FLIGHT = frozenset({SUBMITTING, A_QUEUED, A_RUNNING})
RESULTS = frozenset({A_SUCCEEDED, A_FAILED, TIMED_OUT})  # kept as they are, never run again
RETRIED_ON_RESUME = frozenset({A_CANCELLED, A_INTERRUPTED, LOST})


def attempt_status_of_run(run_status: str, stop_reason: str | None) -> str:
    """An attempt's status once its child run ended. A child the study stopped for
    max_run_seconds timed out (a result); one stopped for max_active_seconds was cancelled (a
    raised budget runs it again)."""
    if run_status == "cancelled" and stop_reason == "max_run_seconds":
        return TIMED_OUT
    if run_status in ("succeeded", "failed", "cancelled", "interrupted"):
        return run_status
    return A_INTERRUPTED  # disconnected and the like never end a run; anything unknown is not a result
