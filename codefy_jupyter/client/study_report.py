"""A study as people read it, pure: progress (attempts done of total, the repetition under way,
what the budgets have used) and the ranking rows (rank with tie marks, mean ± std, n, eligibility
and why not, the paired difference against the best with its 95 % interval and p-value, the
average rank). `codefy study` prints these; `StudyView` shows them."""

from __future__ import annotations

from typing import Any, Mapping

from .numbers import format_average_rank, format_number, format_p

# A repetition with one of these as its current attempt is done: it is never run again.
DONE = frozenset({"succeeded", "failed", "timed_out"})
ACTIVE = frozenset({"queued", "running", "cancel_requested"})
REASONS = {"not_succeeded": "r{repetition} {status}", "no_objective_value": "r{repetition} no objective value"}


def number(value: Any, digits: int = 4) -> str:
    """The one number rule of every view (client/numbers.py, Lab's format.ts)."""
    return format_number(value, digits)


def smallest_p(repetitions: int) -> float | None:
    """The smallest p-value the paired comparison can give with n repetitions: the exact two-sided
    sign-flip test (core/experiments/statistics.py) can do no better than the observed sign
    pattern and its mirror out of 2**n, 2 / 2**n; None below 2 (no test)."""
    if repetitions < 2:
        return None
    return 2.0 / 2 ** repetitions


def p_floor_note(repetitions: int, alpha: float = 0.05) -> str:
    """'with 3 repetitions no p-value goes below 0.25: 0.05 needs 6 or more' when n cannot reach
    `alpha`; else 'with 8 repetitions the smallest p-value is 0.007812'; '' without a test."""
    floor = smallest_p(repetitions)
    if floor is None:
        return ""
    if floor <= alpha:
        return f"with {repetitions} repetitions the smallest p-value is {number(floor)}"
    needed = repetitions
    while (smallest_p(needed) or 1.0) > alpha:
        needed += 1
    return (f"with {repetitions} repetitions no p-value goes below {number(floor)}: "
            f"{number(alpha)} needs {needed} or more")


def progress(doc: Mapping[str, Any]) -> dict[str, Any]:
    """{done, total, repetition (the lowest one not done, None when all are), runs (attempts used,
    retries included), budget (each limit with its use), exhausted, status, revision}."""
    variants = doc.get("variants") or []
    repetitions = int(doc.get("repetitions") or 0)
    total = len(variants) * repetitions
    done = 0
    open_reps = []
    for v in variants:
        for rep in v.get("repetitions") or []:
            current = rep.get("current") or {}
            if current.get("status") in DONE:
                done += 1
            else:
                open_reps.append(rep["repetition"])
    usage = doc.get("budget_usage") or {}
    return {"done": done, "total": total, "repetition": min(open_reps) if open_reps else None,
            "repetitions": repetitions, "runs": (usage.get("max_runs") or {}).get("used"),
            "budget": {k: v for k, v in usage.items() if isinstance(v, Mapping)},
            "exhausted": usage.get("exhausted"), "status": doc.get("status"), "revision": doc.get("revision")}


def budget_text(usage: Mapping[str, Any]) -> str:
    """'runs 3/8 · parallel 1/2 · active 4.2/60 s' (a limit left unset shows as ∞)."""
    parts = []
    for key, short, unit in (("max_runs", "runs", ""), ("max_parallel_runs", "parallel", ""),
                             ("max_active_seconds", "active", " s")):
        entry = usage.get(key) or {}
        if "used" not in entry:
            continue
        limit = entry.get("limit")
        parts.append(f"{short} {number(entry['used'])}/{'∞' if limit is None else number(limit)}{unit}")
    return " · ".join(parts)


def progress_line(doc: Mapping[str, Any]) -> str:
    p = progress(doc)
    where = f"repetition {p['repetition'] + 1}/{p['repetitions']}" if p["repetition"] is not None else "all repetitions"
    line = f"[{p['done']}/{p['total']}] {p['status']} (rev {p['revision']}): {where}"
    budget = budget_text(p["budget"])
    if budget:
        line += f" · {budget}"
    if doc.get("halt"):
        halt = doc["halt"]
        line += f" · halted: {halt.get('budget')} {number(halt.get('used'))}/{number(halt.get('limit'))}"
    return line


def reason_text(reasons: list[Mapping[str, Any]]) -> str:
    """Why a variant is not ranked: 'r0 failed, r2 no objective value'."""
    texts = []
    for r in reasons:
        template = REASONS.get(r.get("reason"), "r{repetition} {reason}")
        texts.append(template.format(repetition=r.get("repetition"), status=r.get("status") or "not run",
                                     reason=r.get("reason")))
    return ", ".join(texts)


def rank_text(row: Mapping[str, Any]) -> str:
    """'1', or '1=' for a rank shared with others; '-' for an unranked variant."""
    if row.get("rank") is None:
        return "-"
    return f"{row['rank']}{'=' if row.get('tie') else ''}"


def comparison_text(comparison: Mapping[str, Any] | None) -> str:
    """'+0.12 [0.05, 0.2]' (variant - best, its 95 % interval); '' for the best itself."""
    if not comparison or comparison.get("mean_difference") is None:
        return ""
    text = f"{comparison['mean_difference']:+.4g}"
    ci = comparison.get("ci95")
    if ci:
        text += f" [{number(ci[0])}, {number(ci[1])}]"
    return text


def ranking_rows(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per variant, best first; unranked variants last, in their order."""
    rows = []
    for v in doc.get("variants") or []:
        agg = v.get("aggregate") or {}
        comparison = v.get("comparison")
        currents = [(rep.get("current") or {}) for rep in v.get("repetitions") or []]
        rows.append({
            "index": v["index"], "label": v["label"], "rank": v.get("rank"), "tie": bool(v.get("tie")),
            "tied_with": list(v.get("tied_with") or []), "rank_text": rank_text(v),
            "mean": agg.get("mean"), "std": agg.get("std"), "n": agg.get("count", 0),
            "values": list(agg.get("values") or []),
            "statuses": [c.get("status") or "pending" for c in currents],
            "eligible": bool(v.get("eligible")), "reason": reason_text(v.get("ineligible_reasons") or []),
            "best": doc.get("best") == v["label"],
            "diff": comparison.get("mean_difference") if comparison else None,
            "ci95": comparison.get("ci95") if comparison else None,
            "p_value": comparison.get("p_value") if comparison else None,
            "against": comparison.get("against") if comparison else None,
            "average_rank": v.get("average_rank"),
            "mean_text": _mean_std(agg), "diff_text": comparison_text(comparison),
        })
    rows.sort(key=lambda r: (r["rank"] is None, r["rank"] if r["rank"] is not None else 0, r["index"]))
    return rows


def _mean_std(agg: Mapping[str, Any]) -> str:
    if agg.get("mean") is None:
        return "-"
    if agg.get("std") is None:
        return number(agg["mean"])
    return f"{number(agg['mean'])} ± {number(agg['std'])}"


def table_lines(doc: Mapping[str, Any]) -> list[str]:
    """The ranking as a text table, with a header line and notes under it."""
    objective = doc.get("objective") or {}
    header = ["rank", "label", f"{objective.get('metric', 'objective')} mean ± std", "n", "eligible",
              "vs best [95% CI]", "p", "avg rank"]
    rows = [[r["rank_text"], r["label"], r["mean_text"], str(r["n"]),
             "yes" if r["eligible"] else f"no: {r['reason']}", r["diff_text"] or ("best" if r["best"] else "-"),
             format_p(r["p_value"]), format_average_rank(r["average_rank"])] for r in ranking_rows(doc)]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    where = f" of {objective['node_id']}" if objective.get("node_id") else ""
    lines = ["", f"study {doc.get('id')} {doc.get('status')} (rev {doc.get('revision')}), objective "
                 f"{objective.get('direction')} {objective.get('metric')}{where}, "
                 f"{doc.get('repetitions')} repetitions from seed {doc.get('seed')}"]
    lines += ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in [header, *rows]]
    floor = p_floor_note(int(doc.get("repetitions") or 0))
    if floor:
        lines.append(("warning: " if (smallest_p(int(doc.get("repetitions") or 0)) or 0) > 0.05 else "p: ") + floor)
    ties = [r for r in ranking_rows(doc) if r["tie"]]
    if ties:
        lines.append("= a rank shared with " + "; ".join(f"{r['label']}: {', '.join(r['tied_with'])}" for r in ties))
    if doc.get("best"):
        lines.append(f"best: {doc['best']}")
    if doc.get("halt"):
        halt = doc["halt"]
        lines.append(f"halted: {halt.get('budget')} used {number(halt.get('used'))} of {number(halt.get('limit'))}; "
                     f"`codefy study resume {doc.get('id')} --budget '{{...}}'` continues it")
    if doc.get("error"):
        lines.append(f"error: {doc['error']}")
    return lines
