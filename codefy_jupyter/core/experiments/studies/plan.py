"""What a study does next, decided from its attempts alone: which pending repetitions to submit,
whether a budget ran out (halt), whether it is done. Pure; attempts are dicts with `variant`,
`repetition`, `attempt`, `status`, `started_at`, `finished_at`.

Order is repetition-major: every variant's repetition 0, then every variant's repetition 1, so a
study that stops part-way has compared every variant on the same seeds.
"""

from __future__ import annotations

from bisect import insort
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


class Tally:
    """A study's attempts with the counts `decide` needs, kept in step change by change, so that a
    decision costs O(1) amortised instead of a pass over every attempt (which made a study of n
    attempts O(n^2)). `apply` takes what a committed change wrote; the attempt dicts it holds are
    updated in place."""

    def __init__(self, attempts: Iterable[Mapping[str, Any]]) -> None:
        self.attempts: dict[str, dict[str, Any]] = {}
        self.by_run: dict[str, dict[str, Any]] = {}  # child run id -> its attempt
        self.current: dict[tuple[int, int], dict[str, Any]] = {}
        self.pending_count = self.in_flight = self.used_runs = self.without_result = 0
        self._pending: list[tuple[int, int]] = []  # (repetition, variant), sorted; stale entries skipped
        self._listed: set[tuple[int, int]] = set()  # what _pending holds, so that a key is listed once
        self._timed = 0  # attempts with a started_at: active_seconds only then needs a pass
        self.apply({}, attempts)

    def _count(self, a: Mapping[str, Any], sign: int) -> None:
        """Add (sign 1) or remove (-1) a current attempt's part in the counts."""
        status = a["status"]
        self.pending_count += sign * (status == st.PENDING)
        self.in_flight += sign * (status in st.IN_FLIGHT)
        self.without_result += sign * (status not in st.RESULTS)

    def apply(self, updates: Mapping[str, Mapping[str, Any]], new: Iterable[Mapping[str, Any]] = ()) -> None:
        for attempt_id, fields in updates.items():
            a = self.attempts.get(attempt_id)
            if a is None or not fields:
                continue
            current = self.current.get((a["variant"], a["repetition"])) is a
            was = a["status"]
            if current:
                self._count(a, -1)
            self._timed -= a.get("started_at") is not None
            a.update(fields)
            self._timed += a.get("started_at") is not None
            self.used_runs += (a["status"] != st.PENDING) - (was != st.PENDING)
            if current:
                self._count(a, 1)
                if a["status"] == st.PENDING and was != st.PENDING:
                    self._list((a["repetition"], a["variant"]))
        for row in new:
            a = dict(row)
            self.attempts[a["id"]] = a
            if a.get("run_id") is not None:
                self.by_run[a["run_id"]] = a
            self._timed += a.get("started_at") is not None
            self.used_runs += a["status"] != st.PENDING
            key = (a["variant"], a["repetition"])
            old = self.current.get(key)
            if old is not None and old["attempt"] >= a["attempt"]:
                continue
            if old is not None:
                self._count(old, -1)
            self.current[key] = a
            self._count(a, 1)
            if a["status"] == st.PENDING:
                self._list((key[1], key[0]))

    def _list(self, entry: tuple[int, int]) -> None:
        if entry not in self._listed:
            self._listed.add(entry)
            insort(self._pending, entry)

    def pending(self, limit: int) -> list[tuple[int, int]]:
        """The first `limit` (variant, repetition) whose current attempt is pending, repetition-major."""
        out: list[tuple[int, int]] = []
        stale = 0
        for i, (r, v) in enumerate(self._pending):
            if len(out) >= limit:
                break
            if self.current[(v, r)]["status"] != st.PENDING:
                if stale == i:  # a stale prefix (submitted ones): dropped below
                    stale += 1
                continue
            out.append((v, r))
        self._listed.difference_update(self._pending[:stale])
        del self._pending[:stale]
        return out

    def active_seconds(self, now: float) -> float:
        return active_seconds(self.attempts.values(), now) if self._timed else 0.0


def decide(budget: Budget, attempts: list[Mapping[str, Any]] | Tally, now: float) -> Decision:
    t = attempts if isinstance(attempts, Tally) else Tally(attempts)
    if not t.pending_count:
        if t.in_flight or not t.without_result:
            return Decision(done=t.in_flight == 0)
        # Nothing left to submit, yet a repetition has no result: a budget stopped its child
        # (max_active_seconds). The study halts on that budget; a resume retries the repetition.
        return Decision(halt=_exhausted(budget, t.used_runs, lambda: t.active_seconds(now)))
    if budget.max_runs is not None and t.used_runs >= budget.max_runs:
        return Decision(halt=None if t.in_flight else
                        {"budget": "max_runs", "limit": budget.max_runs, "used": t.used_runs})
    if budget.max_active_seconds is not None:
        seconds = t.active_seconds(now)
        if seconds >= budget.max_active_seconds:
            return Decision(halt=None if t.in_flight else
                            {"budget": "max_active_seconds", "limit": budget.max_active_seconds,
                             "used": round(seconds, 3)})
    room = budget.max_parallel_runs - t.in_flight
    if budget.max_runs is not None:
        room = min(room, budget.max_runs - t.used_runs)
    return Decision(submit=t.pending(max(0, room)))


def _exhausted(budget: Budget, used_runs: int, seconds: Any) -> dict[str, Any] | None:
    if budget.max_runs is not None and used_runs >= budget.max_runs:
        return {"budget": "max_runs", "limit": budget.max_runs, "used": used_runs}
    if budget.max_active_seconds is not None:
        used = seconds()
        if used >= budget.max_active_seconds:
            return {"budget": "max_active_seconds", "limit": budget.max_active_seconds, "used": round(used, 3)}
    return None


def exhausted_budget(budget: Budget, attempts: list[Mapping[str, Any]], now: float) -> dict[str, Any] | None:
    """{budget, limit, used} of the first budget used up, or None."""
    return _exhausted(budget, runs_used(attempts), lambda: active_seconds(attempts, now))


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
