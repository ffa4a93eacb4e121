"""A sweep's results table from what is stored: harvest decisions, each variant's live status,
objective and rank, the per-status counts, `best`, `objective_warning`, and when a sweep settles.
Pure: the service reads the rows and the children's runs and metric points, and writes what
`harvest_fields` and `settled_state` decide.

A variant's status is its run's while the run exists; after retention removed it, the status
harvested before the delete; "missing" for a child deleted before anything harvested it; and
"not_submitted" for a variant the broken submit loop never reached. A variant is ranked once its
run has ended and recorded the objective (a run that failed after logging it still ranks).
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Iterable, Mapping, Sequence

from ...contract import lifecycle as rs
from ..children import child_placement
from ..objective import RUN_LEVEL, final_metrics, read_objective, series_names
from ..statistics import competition_ranks

MISSING = "missing"
NOT_SUBMITTED = "not_submitted"
RUNNING, CANCELLING, FINISHED, FAILED = "running", "cancelling", "finished", "failed"
STATES = (RUNNING, CANCELLING, FINISHED, FAILED)


def harvest_fields(objective: Mapping[str, Any], status: str, points: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What a finished child's variant row keeps once its run may be gone."""
    reading = read_objective(points, objective["metric"], objective.get("node_id"))
    return {"status": status, "objective": reading.value, "objective_node_id": reading.node_id,
            "ambiguous_producers": reading.ambiguous_producers or None, "objective_logged": reading.logged,
            "series": series_names(points)}


def variant_status(variant: Mapping[str, Any], run: Mapping[str, Any] | None) -> str:
    if variant.get("run_id") is None:
        return NOT_SUBMITTED
    if run is not None:
        return str(run["status"])
    if variant.get("harvested"):
        return str(variant["status"])
    return MISSING


def is_active(status: str) -> bool:
    return status in rs.ACTIVE


def settled_state(state: str, statuses: Iterable[str]) -> str:
    """A running or cancelling sweep is finished once no child is queued or running (never
    "cancelled"); a failed one stays failed."""
    if state in (RUNNING, CANCELLING) and not any(is_active(s) for s in statuses):
        return FINISHED
    return state


def params_view(params: Sequence[Mapping[str, Any]], values: Sequence[Any]) -> list[dict[str, Any]]:
    return [{"node_id": p["node_id"], "param": p["param"], "value": v} for p, v in zip(params, values)]


def variant_view(sweep: Mapping[str, Any], variant: Mapping[str, Any], run: Mapping[str, Any] | None,
                 points: Sequence[Mapping[str, Any]] | None) -> dict[str, Any]:
    """One row of the table, without its rank. `run` is the child's run row while it exists;
    `points` its metric points (read for existing runs only)."""
    objective = sweep["objective"]
    status = variant_status(variant, run)
    view: dict[str, Any] = {"index": variant["index"], "run_id": variant.get("run_id"), "status": status,
                            "params": params_view(sweep["params"], variant["params"]), "seed": variant.get("seed")}
    if variant.get("harvested"):
        reading = {k: variant.get(k) for k in ("objective", "objective_node_id", "ambiguous_producers",
                                                "objective_logged", "series")}
    elif run is not None:
        reading = harvest_fields(objective, status, points or ())
    else:
        reading = {"objective": None, "objective_node_id": None, "ambiguous_producers": None,
                   "objective_logged": False, "series": []}
    view.update(objective=reading["objective"], objective_node_id=reading["objective_node_id"],
                ambiguous_producers=reading["ambiguous_producers"], rank=None, run_exists=run is not None)
    view["_logged"] = bool(reading["objective_logged"])
    view["_series"] = list(reading["series"] or ())
    view["_ranked"] = status in rs.FINISHED and reading["objective"] is not None
    if run is not None:
        node = objective.get("node_id")
        if node is None and variant.get("harvested") and not reading["ambiguous_producers"]:
            node = reading["objective_node_id"] if reading["objective_node_id"] != RUN_LEVEL else None
        view.update(final_metrics=final_metrics(points or (), node), final_metrics_node_id=node,
                    **child_placement(run))
    return view


def table(sweep: Mapping[str, Any], views: list[dict[str, Any]]) -> dict[str, Any]:
    """Rank the rows (best first, unranked in index order), count them, name the best, and warn
    when the objective cannot rank anything."""
    objective = sweep["objective"]
    ranks = competition_ranks({v["index"]: (v["objective"] if v["_ranked"] else None) for v in views},
                              objective["direction"])
    for v in views:
        info = ranks[v["index"]]
        v["rank"] = info.rank
        v["tied_with"] = list(info.tied_with)
    ordered = sorted(views, key=lambda v: (v["rank"] is None, v["rank"] or 0, v["index"]))
    warning = objective_warning(objective, ordered)
    for v in ordered:
        for key in ("_logged", "_series", "_ranked"):
            v.pop(key)
    best = next((v for v in ordered if v["rank"] == 1), None)
    return {"variants": ordered, "counts": dict(Counter(v["status"] for v in ordered)),
            "best": None if best is None else {k: best[k] for k in ("index", "run_id", "objective", "params")},
            "objective_warning": warning}


def objective_warning(objective: Mapping[str, Any], views: Sequence[Mapping[str, Any]]) -> str | None:
    metric = objective["metric"]
    ambiguous = sorted({p for v in views for p in (v["ambiguous_producers"] or ())})
    if ambiguous:
        return (f"several nodes log {metric!r} in the same run ({', '.join(ambiguous)}), so those variants have no "
                "objective; choose one with objective.node_id")
    ended = [v for v in views if v["status"] in rs.FINISHED]
    if ended and not any(v["_logged"] for v in views):
        where = f" by node {objective['node_id']!r}" if objective.get("node_id") else ""
        series = sorted({s for v in views for s in v["_series"]})
        return (f"no variant recorded {metric!r}{where}; the runs recorded: "
                + (", ".join(series) if series else "no series at all"))
    return None
