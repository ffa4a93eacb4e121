"""What a study does next, decided from its attempts alone: which pending repetitions to submit,
whether a budget ran out (halt), whether it is done. Pure; attempts are dicts with `variant`,
`repetition`, `attempt`, `status`, `started_at`, `finished_at`.

Order is repetition-major: every variant's repetition 0, then every variant's repetition 1, so a
study that stops part-way has compared every variant on the same seeds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from . import state as st
from .request import Budget


def current_attempts(attempts: Iterable[Mapping[str, Any]]) -> dict[tuple[int, int], Mapping[str, Any]]:
    """(variant, repetition) -> its latest attempt."""
    current: dict[tuple[int, int], Mapping[str, Any]] = {}
    for a in attempts:
        key = (a["variant"], a["repetition"])
        if key not in current or a["attempt"] > current[key]["attempt"]:
            current[key] = a
    return current


def runs_used(attempts: Iterable[Mapping[str, Any]]) -> int:
    """Attempts the study submitted (or was about to): every one that left pending, retries
    included; a lost one counts, since its submit was spent."""
    return sum(1 for a in attempts if a["status"] != st.PENDING)


def active_seconds(attempts: Iterable[Mapping[str, Any]], now: float) -> float:
    """The children's summed execution time so far (a running child up to `now`)."""
    total = 0.0
    for a in attempts:
        started = a.get("started_at")
        if started is None:
            continue
        finished = a.get("finished_at")
        if finished is None and a["status"] not in st.IN_FLIGHT:
            continue  # ended without a recorded finish (lost with the run): nothing measurable
        total += max(0.0, (finished if finished is not None else now) - started)
    return total


def budget_usage(budget: Budget, attempts: list[Mapping[str, Any]], now: float) -> dict[str, Any]:
    """What each budget has used, and which one ran out (`exhausted`, or None)."""
    in_flight = sum(1 for a in current_attempts(attempts).values() if a["status"] in st.IN_FLIGHT)
    used_runs = runs_used(attempts)
    seconds = active_seconds(attempts, now)
    exhausted = None
    if budget.max_runs is not None and used_runs >= budget.max_runs:
        exhausted = "max_runs"
    elif budget.max_active_seconds is not None and seconds >= budget.max_active_seconds:
        exhausted = "max_active_seconds"
    return {
        "max_parallel_runs": {"limit": budget.max_parallel_runs, "used": in_flight},
        "max_runs": {"limit": budget.max_runs, "used": used_runs},
        "max_run_seconds": {"limit": budget.max_run_seconds},
        "max_active_seconds": {"limit": budget.max_active_seconds, "used": round(seconds, 3)},
        "exhausted": exhausted,
    }


@dataclass(frozen=True)
class Decision:
    submit: list[tuple[int, int]] = field(default_factory=list)  # (variant, repetition), in order
    halt: dict[str, Any] | None = None  # {budget, limit, used}
    done: bool = False  # every repetition has a result and nothing is in flight


def decide(budget: Budget, attempts: list[Mapping[str, Any]], now: float) -> Decision:
    current = current_attempts(attempts)
    pending = sorted((key for key, a in current.items() if a["status"] == st.PENDING),
                     key=lambda key: (key[1], key[0]))
    in_flight = sum(1 for a in current.values() if a["status"] in st.IN_FLIGHT)
    if not pending:
        if in_flight or all(a["status"] in st.RESULTS for a in current.values()):
            return Decision(done=in_flight == 0)
        # Nothing left to submit, yet a repetition has no result: a budget stopped its child
        # (max_active_seconds). The study halts on that budget; a resume retries the repetition.
        return Decision(halt=exhausted_budget(budget, attempts, now))
    used_runs = runs_used(attempts)
    if budget.max_runs is not None and used_runs >= budget.max_runs:
        return Decision(halt=None if in_flight else
                        {"budget": "max_runs", "limit": budget.max_runs, "used": used_runs})
    seconds = active_seconds(attempts, now)
    if budget.max_active_seconds is not None and seconds >= budget.max_active_seconds:
        return Decision(halt=None if in_flight else
                        {"budget": "max_active_seconds", "limit": budget.max_active_seconds,
                         "used": round(seconds, 3)})
    room = budget.max_parallel_runs - in_flight
    if budget.max_runs is not None:
        room = min(room, budget.max_runs - used_runs)
    return Decision(submit=pending[:max(0, room)])


def exhausted_budget(budget: Budget, attempts: list[Mapping[str, Any]], now: float) -> dict[str, Any] | None:
    """{budget, limit, used} of the first budget used up, or None."""
    used_runs = runs_used(attempts)
    if budget.max_runs is not None and used_runs >= budget.max_runs:
        return {"budget": "max_runs", "limit": budget.max_runs, "used": used_runs}
    seconds = active_seconds(attempts, now)
    if budget.max_active_seconds is not None and seconds >= budget.max_active_seconds:
        return {"budget": "max_active_seconds", "limit": budget.max_active_seconds, "used": round(seconds, 3)}
    return None


def would_halt_at_once(budget: Budget, attempts: list[Mapping[str, Any]], now: float,
                       retried: int) -> dict[str, Any] | None:
    """For a resume: the halt a study with `retried` more pending repetitions would meet before
    submitting anything (its budget is used up), or None."""
    current = current_attempts(attempts)
    pending = retried + sum(1 for a in current.values() if a["status"] == st.PENDING)
    if not pending:
        return None
    return exhausted_budget(budget, attempts, now)


def to_retry(attempts: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The current attempts a resume replaces: cancelled, interrupted or lost ones."""
    current = current_attempts(attempts)
    return [current[key] for key in sorted(current, key=lambda k: (k[1], k[0]))
            if current[key]["status"] in st.RETRIED_ON_RESUME]
