"""What a finished child leaves on its attempt, so that the study's results outlive the run:
the objective value read from the exact node, the final metrics, start and finish times, and the
environment digest. Pure: a run row and its metric points in, attempt fields out."""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from ..objective import final_metrics, read_objective


def evidence(run: Mapping[str, Any], points: Iterable[Mapping[str, Any]],
             objective: Mapping[str, str]) -> dict[str, Any]:
    points = list(points)
    reading = read_objective(points, objective["metric"], objective["node_id"])
    return {
        "objective_value": reading.value,
        "final_metrics": final_metrics(points, objective["node_id"]),
        "started_at": run.get("started_at"),
        "finished_at": run.get("finished_at"),
        "fingerprint_digest": run.get("fingerprint_digest"),
        "evidence_copied": 1,
    }
