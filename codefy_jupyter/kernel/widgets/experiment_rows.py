"""The sweep and study views' rules, pure: rows, sorting (an empty value always sinks to the
bottom, whichever way the column is sorted), the objective curves drawn per variant, and how an
action message from the browser is checked. `sweep_view.py` and `study_view.py` only fetch and
sync; tests/unit/test_experiment_rows.py covers these rules on plain API documents."""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping

from ...client.numbers import format_average_rank, format_p
from ...client.study_report import number, ranking_rows
from .runs_rows import ActionError

ACTIVE_RUN = frozenset({"queued", "running", "disconnected"})
SWEEP_SORTS = ("rank", "status", "objective", "index")
STUDY_SORTS = ("rank", "label", "mean", "average_rank", "diff", "p_value")
# Status order when sorting by status: what still moves first, then how it ended.
STATUS_ORDER = {s: i for i, s in enumerate(("running", "disconnected", "queued", "succeeded", "failed", "cancelled",
                                            "interrupted", "missing", "not_submitted"))}
MAX_POINTS = 200  # a curve with more points is thinned to this many for the chart


def _sort_value(row: Mapping[str, Any], key: str) -> Any:
    value = row.get(key)
    if key == "status":
        return STATUS_ORDER.get(value, len(STATUS_ORDER)) if value else None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def sort_rows(rows: Iterable[Mapping[str, Any]], key: str, descending: bool = False) -> list[dict[str, Any]]:
    """Rows sorted on `key`; rows without a value last either way; ties keep index order."""
    rows = [dict(r) for r in rows]
    filled = [r for r in rows if _sort_value(r, key) is not None]
    empty = [r for r in rows if _sort_value(r, key) is None]
    filled.sort(key=lambda r: r.get("index", 0))
    filled.sort(key=lambda r: _sort_value(r, key), reverse=descending)
    empty.sort(key=lambda r: r.get("index", 0))
    return filled + empty


# -- sweeps ---------------------------------------------------------------------------------------
def sweep_counts_text(counts: Mapping[str, int]) -> str:
    return " · ".join(f"{status} {n}" for status, n in sorted(counts.items()) if n)


def sweep_rows(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per variant, in variant order (the view sorts them)."""
    rows = []
    for v in doc.get("variants") or []:
        final = v.get("final_metrics") or {}
        rows.append({
            "index": v["index"], "number": v["index"] + 1, "run_id": v.get("run_id") or "",
            "params": [f"{p['node_id']}.{p['param']}={_value(p['value'])}" for p in v.get("params") or []],
            "objective": v.get("objective"), "objective_text": number(v.get("objective")),
            "rank": v.get("rank"), "rank_text": "-" if v.get("rank") is None else
            f"{v['rank']}{'=' if v.get('tied_with') else ''}",
            "status": v.get("status") or "", "worker": v.get("worker_id") or "",
            "devices": ", ".join(v.get("devices") or []),
            "final_metrics": ", ".join(f"{k} {number(val)}" for k, val in sorted(final.items())),
            "can_open": bool(v.get("run_id")) and v.get("run_exists", True),
        })
    return rows


def _value(value: Any) -> str:
    return number(value) if isinstance(value, float) else str(value)


def curve(points: Iterable[Mapping[str, Any]], metric: str, node_id: str | None) -> list[list[float]]:
    """The objective's [step, value] points of one child run (its metric points from GET
    runs/{id}/metrics), in order; a point without a step takes its position."""
    out: list[list[float]] = []
    for i, p in enumerate(points):
        if p.get("name") != metric or (node_id and p.get("node_id") != node_id):
            continue
        value = p.get("value")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            continue
        step = p.get("step")
        out.append([step if isinstance(step, (int, float)) else len(out), value])
    if len(out) > MAX_POINTS:
        stride = math.ceil(len(out) / MAX_POINTS)
        out = out[::stride] + ([out[-1]] if (len(out) - 1) % stride else [])
    return out


def sweep_state(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The synced traits from one read of the sweep (rows unsorted)."""
    objective = doc.get("objective") or {}
    where = f" of {objective['node_id']}" if objective.get("node_id") else ""
    return {"state": doc.get("state") or "", "name": doc.get("name") or "",
            "objective": f"{objective.get('direction', '')} {objective.get('metric', '')}{where}".strip(),
            "counts": dict(doc.get("counts") or {}), "counts_text": sweep_counts_text(doc.get("counts") or {}),
            "warning": doc.get("objective_warning") or doc.get("error") or doc.get("failure") or ""}


# -- studies --------------------------------------------------------------------------------------
def study_rows(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per variant (study_report.ranking_rows) with its values per repetition as text."""
    rows = []
    for r in ranking_rows(doc):
        rows.append({**r, "values_text": [number(v) for v in r["values"]],
                     "p_text": format_p(r["p_value"]), "average_rank_text": format_average_rank(r["average_rank"])})
    return rows


def study_series(doc: Mapping[str, Any]) -> dict[str, list[list[float]]]:
    """label -> [[repetition, objective value], ...] of the repetitions that recorded one."""
    series = {}
    for v in doc.get("variants") or []:
        points = []
        for rep in v.get("repetitions") or []:
            value = (rep.get("current") or {}).get("objective_value")
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                points.append([rep["repetition"], value])
        series[v["label"]] = points
    return series


# -- actions --------------------------------------------------------------------------------------
def check_action(content: Any, actions: tuple[str, ...], sorts: tuple[str, ...],
                 runs: Iterable[str] = ()) -> tuple[str, Any]:
    """(action, argument) of a message from the browser: one of `actions`, "sort" with a key of
    `sorts`, "open" with a run id among `runs`."""
    if not isinstance(content, Mapping):
        raise ActionError("an action message must be an object", "action")
    action = content.get("action")
    if action == "sort":
        key = content.get("key")
        if key not in sorts:
            raise ActionError(f"unknown sort key {key!r}; one of {', '.join(sorts)}", "key")
        return "sort", key
    if action == "open":
        run_id = content.get("run_id")
        if not isinstance(run_id, str) or run_id not in set(runs):
            raise ActionError(f"open needs the run id of a variant, got {run_id!r}", "run_id")
        return "open", run_id
    if action not in actions:
        raise ActionError(f"unknown action {action!r}; one of sort, open, {', '.join(actions)}", "action")
    return action, None


def csv_filename(kind: str, ident: str) -> str:
    return f"{kind}-{ident[:12]}.csv"
