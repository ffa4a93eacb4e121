"""How a study reads over the API (GET /codefy/api/studies/{id}, the list, the CSV export), built
from what the store holds and the results computed for its revision. Pure."""

from __future__ import annotations

import csv
import io
import json
from collections import Counter
from typing import Any, Mapping

from ....wire.provenance import identity_column
from ..children import child_placement
from . import state as st
from .plan import budget_usage, current_attempts
from .request import Budget

ATTEMPT_FIELDS = ("id", "attempt", "run_id", "status", "error", "created_at", "submitted_at", "started_at",
                  "finished_at", "objective_value", "final_metrics", "fingerprint_digest", "stop_reason")


def attempt_view(a: Mapping[str, Any], runs: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    view = {k: a.get(k) for k in ATTEMPT_FIELDS}
    view.update(repetition=a["repetition"], seed=a["seed"])
    run = runs.get(a["run_id"]) if a["status"] not in (st.PENDING, st.LOST) else None
    view["run_exists"] = run is not None
    if run is not None:  # where it runs while its child exists; a waiting `any` child shows `any`
        view.update(child_placement(run))
    return view


# What a poller needs of an attempt (progress, the values per repetition, Open run); the whole
# attempt is in the full form.
SUMMARY_ATTEMPT_FIELDS = ("attempt", "repetition", "seed", "run_id", "status", "objective_value", "stop_reason")


def summary_attempt(a: Mapping[str, Any], runs: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    view = {k: a.get(k) for k in SUMMARY_ATTEMPT_FIELDS}
    view["run_exists"] = a["status"] not in (st.PENDING, st.LOST) and runs.get(a["run_id"]) is not None
    return view


def counts(attempts: list[Mapping[str, Any]]) -> dict[str, int]:
    tally = Counter(a["status"] for a in current_attempts(attempts).values())
    return {status: tally.get(status, 0) for status in st.ATTEMPT_STATUSES}


def summary(study: Mapping[str, Any]) -> dict[str, Any]:
    return {k: study[k] for k in ("id", "name", "owner", "status", "revision", "objective", "seed", "repetitions",
                                  "options", "budget", "resume_policy", "halt", "error", "idempotency_key",
                                  "created_at", "updated_at")}


def variant_part(v: Mapping[str, Any], mine: list[Mapping[str, Any]], repetitions: int,
                 runs: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """A variant's entry without its results: `mine` are its attempts, by repetition and number."""
    current = current_attempts(mine)
    reps = []
    for r in range(repetitions):
        a = current.get((v["variant"], r))
        reps.append({"repetition": r, "seed": a["seed"] if a else None,
                     "current": attempt_view(a, runs) if a else None})
    return {"index": v["variant"], "label": v["label"], "ops": v["ops"], "repetitions": reps,
            "attempts": [attempt_view(a, runs) for a in mine]}


def study_head(study: Mapping[str, Any], attempts: list[Mapping[str, Any]], now: float) -> dict[str, Any]:
    out = summary(study)
    out["counts"] = counts(attempts)
    out["budget_usage"] = budget_usage(Budget(**study["budget"]), attempts, now)
    return out


def study_view(bundle: Mapping[str, Any], results: Mapping[str, Any], now: float) -> dict[str, Any]:
    study, variants, attempts, runs = bundle["study"], bundle["variants"], bundle["attempts"], bundle["runs"]
    out = study_head(study, attempts, now)
    by_variant: dict[int, list[Mapping[str, Any]]] = {}
    for a in attempts:
        by_variant.setdefault(a["variant"], []).append(a)
    out["variants"] = [{**variant_part(v, by_variant.get(v["variant"], []), study["repetitions"], runs),
                        **results["variants"][v["label"]]} for v in variants]
    out["rankings"] = results["rankings"]
    out["best"] = results["best"]
    return out


def study_summary_view(study: Mapping[str, Any], variants: list[Mapping[str, Any]], attempts: list[Mapping[str, Any]],
                       runs: Mapping[str, Mapping[str, Any]], results: Mapping[str, Any], now: float) -> dict[str, Any]:
    """GET studies/{id}?view=summary: the full view without each variant's `attempts` and with a
    repetition's `current` cut to SUMMARY_ATTEMPT_FIELDS and run_exists: what a client that
    follows a running study draws. A 1,024-attempt study is a tenth of the full view's size."""
    out = study_head(study, attempts, now)
    current = current_attempts(attempts)
    parts = []
    for v in variants:
        reps = []
        for r in range(study["repetitions"]):
            a = current.get((v["variant"], r))
            reps.append({"repetition": r, "seed": a["seed"] if a else None,
                         "current": summary_attempt(a, runs) if a else None})
        parts.append({"index": v["variant"], "label": v["label"], "ops": v["ops"], "repetitions": reps,
                      **results["variants"][v["label"]]})
    out["variants"] = parts
    out["rankings"] = results["rankings"]
    out["best"] = results["best"]
    return out


def encode(value: Any) -> str:
    return json.dumps(value, allow_nan=False, default=str)  # as the API handlers encode a payload


def study_text(head: Mapping[str, Any], parts: list[str], results: Mapping[str, Any],
               labels: list[str], kept: dict[str, tuple[Any, str]] | None = None) -> str:
    """The text `json.dumps(study_view(...))` gives, from its head, each variant's part already
    encoded (variant_part) and the results. A variant's results are computed again for every
    revision (a rank moves when any variant moves) but mostly come out equal: with `kept` (label
    -> the results last encoded and their text, updated here) only those that differ are encoded."""
    def result_text(label: str) -> str:
        mine = results["variants"][label]
        if kept is None:
            return encode(mine)
        last = kept.get(label)
        if last is None or last[0] != mine:
            last = kept[label] = (mine, encode(mine))
        return last[1]

    texts = [part[:-1] + ", " + result_text(label)[1:] for part, label in zip(parts, labels)]
    out = [f"{encode(key)}: {encode(value)}" for key, value in head.items()]
    out.append('"variants": [' + ", ".join(texts) + "]")
    out += [f'"rankings": {encode(results["rankings"])}', f'"best": {encode(results["best"])}']
    return "{" + ", ".join(out) + "}"


CSV_COLUMNS = ["variant", "label", "rank", "tie", "eligible", "mean", "std", "average_rank", "repetition", "seed",
               "attempt", "status", "objective_value", "run_id", "stop_reason"]


def study_csv(view: Mapping[str, Any], inputs: Mapping[str, Any] | None = None) -> str:
    """One row per variant and repetition (its current attempt), with the variant's standing; and,
    when any child ran with options.provenance, the data_identity column a sweep's export has
    (`inputs`: run id -> its records, as the store's inputs_of answers)."""
    out = io.StringIO()
    writer = csv.writer(out)
    identity, cells = identity_column(inputs or {})
    writer.writerow(["study_id", "objective_node_id", "objective_metric", "direction", *CSV_COLUMNS, *identity])
    objective = view["objective"]
    for v in view["variants"]:
        for rep in v["repetitions"]:
            a = rep["current"] or {}
            writer.writerow([view["id"], objective["node_id"], objective["metric"], objective["direction"],
                             v["index"], v["label"], v["rank"], v["tie"], v["eligible"], v["aggregate"]["mean"],
                             v["aggregate"]["std"], v["average_rank"], rep["repetition"], rep["seed"],
                             a.get("attempt"), a.get("status"), a.get("objective_value"), a.get("run_id"),
                             a.get("stop_reason"), *cells(a.get("run_id"))])
    return out.getvalue()
