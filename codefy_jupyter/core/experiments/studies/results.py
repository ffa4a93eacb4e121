"""A study's results from its current attempts: each variant's aggregate, eligibility and rank,
the ranking, and (beyond the seed) paired comparisons against the best variant and average ranks.
Pure; the caller caches the answer per study revision (the comparisons cost ~20 ms a variant).

A variant is eligible only when every scheduled repetition's current attempt succeeded and
recorded a finite objective value. A failed repetition's value still shows in `values`.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from .. import statistics as stats
from . import state as st
from .plan import current_attempts


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _exactly(value: float | None) -> Any:
    """A key that tells -0.0 from 0.0 (equal, but shown apart in `values`)."""
    return value if value is None else (value, math.copysign(1.0, value))


def ineligible_reasons(repetitions: int, current: Mapping[int, Mapping[str, Any]]) -> list[dict[str, Any]]:
    reasons = []
    for r in range(repetitions):
        a = current.get(r)
        if a is None or a["status"] != st.A_SUCCEEDED:
            reasons.append({"repetition": r, "reason": "not_succeeded",
                            "status": a["status"] if a is not None else None})
        elif _finite(a.get("objective_value")) is None:
            reasons.append({"repetition": r, "reason": "no_objective_value", "status": a["status"]})
    return reasons


def study_results(labels: Sequence[str], repetitions: int, attempts: list[Mapping[str, Any]],
                  direction: str, *, comparisons: bool = True, memo: dict[Any, Any] | None = None) -> dict[str, Any]:
    """{"variants": {label: {aggregate, eligible, ineligible_reasons, rank, tie, tied_with,
    average_rank, comparison}}, "rankings": [{label, rank, tie, tied_with, mean}], "best": label|None}

    `memo` (a dict the caller keeps per study, for one computation at a time) holds what was
    computed for earlier revisions: each variant's aggregate and eligibility (keyed by its
    repetitions' statuses and values), the average ranks (keyed by the eligible variants' values)
    and the paired comparisons (each depends only on its variant's values and the best's). A
    running study changes a few repetitions between two reads, so a read recomputes those variants
    alone (the exact sums and the bootstrap are most of the cost), not all of them."""
    current = current_attempts(attempts)
    per_variant: dict[str, dict[str, Any]] = {}
    values: dict[str, list[float | None]] = {}
    means: dict[str, float | None] = {}
    known = memo.get("variants", {}) if memo is not None else {}
    live: dict[Any, Any] = {}
    for index, label in enumerate(labels):
        mine = {r: current[(index, r)] for r in range(repetitions) if (index, r) in current}
        # A repetition's value is its current attempt's, failed ones included (shown, not ranked).
        values[label] = [_finite(mine[r].get("objective_value")) if r in mine else None
                         for r in range(repetitions)]
        key = (label, tuple((mine[r]["status"], _exactly(values[label][r])) if r in mine else None
                            for r in range(repetitions)))
        found = live[key] = known.get(key) or (stats.aggregate(values[label]), ineligible_reasons(repetitions, mine))
        aggregate, reasons = found
        per_variant[label] = {"aggregate": aggregate, "eligible": not reasons, "ineligible_reasons": reasons}
        means[label] = aggregate["mean"] if not reasons else None
    if memo is not None:
        memo["variants"] = live  # what no variant has any more goes
    ranks = stats.competition_ranks(means, direction)  # type: ignore[arg-type]
    for label in labels:
        per_variant[label].update(ranks[label].to_json())
    eligible = [label for label in labels if per_variant[label]["eligible"]]
    average = _average_ranks({label: values[label] for label in eligible}, direction, memo) if eligible else {}
    best = stats.best_of({label: ranks[label] for label in eligible})
    compared = (_comparisons({label: values[label] for label in eligible}, best, memo)
                if comparisons and best is not None else {})
    for label in labels:
        per_variant[label]["average_rank"] = average.get(label)
        per_variant[label]["comparison"] = compared.get(label)
    rankings = sorted((label for label in labels if ranks[label].rank is not None),
                      key=lambda label: (ranks[label].rank, label))
    return {
        "variants": per_variant,
        "rankings": [{"label": label, "variant": labels.index(label), **ranks[label].to_json(),
                      "mean": means[label]} for label in rankings],
        "best": best,
    }


def _average_ranks(values: Mapping[str, list[float | None]], direction: str,
                   memo: dict[Any, Any] | None) -> dict[str, Any]:
    key = (direction, tuple((label, tuple(v)) for label, v in values.items()))
    if memo is not None and memo.get("average", (None,))[0] == key:
        return memo["average"][1]
    average = stats.average_ranks(values, direction)
    if memo is not None:
        memo["average"] = (key, average)
    return average


def _comparisons(values: Mapping[str, list[float | None]], best: str,
                 memo: dict[Any, Any] | None) -> dict[str, dict[str, Any]]:
    if memo is None:
        return stats.paired_comparisons(values, best)
    memo = memo.setdefault("comparisons", {})
    reference = tuple(values[best])
    out: dict[str, dict[str, Any]] = {}
    live = set()
    for label, mine in values.items():
        if label == best:
            continue
        key = (best, reference, tuple(mine))
        live.add(key)
        if key not in memo:
            memo[key] = stats.paired_comparisons({label: mine, best: values[best]}, best)[label]
        out[label] = memo[key]
    for key in [k for k in memo if k not in live]:  # what no variant has any more
        del memo[key]
    return out
