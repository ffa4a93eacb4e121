"""The loss-checker's verdicts (`benchmarks/chaos.py`), pure: what was read from the API in, counts out.

A run's log is checked two ways. Its seqs: the control plane numbers every event of a run 1, 2, 3, ...
with no gap, so a missing number is a lost event, a number seen twice a duplicate. Its content: every
run the checker submits is the same chain (List -> Sleep x K -> Mean), whose events are known in
advance and each happen once (`expected_keys`). A frame the control plane acknowledged and then lost,
or one written twice under two seqs (a replay not dropped by its frame seq), leaves the seqs gapless
but shows here: an expected event missing before the last one seen is lost, one seen twice is a
duplicate. A run that was stopped part-way (interrupted) has a prefix of the chain; a run that
succeeded has all of it.

A study is checked per repetition: exactly one of its runs succeeded (the exactly-once rule), and
the runs its interrupted or lost attempts left are counted apart, as retries. A second run carrying
the same attempt's stamp would be a double submission.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Iterable

CLOSING = ("execution_complete", "execution_error", "execution_stopped")
TERMINAL = ("succeeded", "failed", "cancelled", "interrupted")


def expected_keys(chain: Iterable[tuple[str, str]], metric: tuple[str, str]) -> list[tuple[str, ...]]:
    """The events a run of the chain logs, in order, as keys. `chain`: (node id, type) in execution
    order; `metric`: the (node id, name) that logs the one metric, just before that node is done."""
    keys: list[tuple[str, ...]] = [("execution_start",)]
    for node_id, _ in chain:
        keys.append(("node_status", node_id, "running"))
        if node_id == metric[0]:
            keys.append(("metric", node_id, metric[1]))
        keys.append(("node_status", node_id, "done"))
    return keys


def event_key(event: dict[str, Any]) -> tuple[str, ...] | None:
    """An event's key in `expected_keys`, or None for another kind (a warning, a closing event, a
    system metric)."""
    kind, payload = event.get("type"), event.get("payload") or {}
    if kind == "execution_start":
        return ("execution_start",)
    if kind == "node_status" and payload.get("status") in ("running", "done", "cached"):
        status = "running" if payload["status"] == "running" else "done"  # cached: done without running
        return ("node_status", str(payload.get("node_id")), status)
    if kind == "metric":
        if str(payload.get("name")).startswith("system/"):
            return None  # sampled while the run ran (wire/system_metrics.py): their number varies, their seqs are checked
        return ("metric", str(payload.get("node_id")), str(payload.get("name")))
    return None


def audit_run(run: dict[str, Any], events: list[dict[str, Any]], expected: list[tuple[str, ...]]) -> dict[str, Any]:
    """One run's log against its status and the chain's events. Counts, and the seqs and keys
    behind any that is not zero."""
    seqs = [int(e["seq"]) for e in events]
    seen = Counter(seqs)
    dup_seqs = sorted(s for s, n in seen.items() if n > 1)
    top = max(seqs, default=0)
    missing_seqs = sorted(set(range(1, top + 1)) - set(seqs))
    # A log that stops short of what the run row says it wrote has lost its tail.
    last_seq = run.get("last_seq")
    if isinstance(last_seq, int) and last_seq > top:
        missing_seqs += list(range(top + 1, last_seq + 1))
    ordered = sorted(events, key=lambda e: int(e["seq"]))
    keys = [k for k in (event_key(e) for e in ordered) if k is not None]
    counts = Counter(keys)
    dup_keys = sorted("/".join(k) for k, n in counts.items() if n > 1)
    index = {k: i for i, k in enumerate(expected)}
    unknown = sorted("/".join(k) for k in counts if k not in index)
    positions = [index[k] for k in keys if k in index]
    reach = len(expected) if run.get("status") == "succeeded" else (max(positions) + 1 if positions else 0)
    lost_keys = ["/".join(k) for k in expected[:reach] if k not in counts]
    out_of_order = sum(1 for a, b in zip(positions, positions[1:]) if b < a)
    closing = [e for e in ordered if e.get("type") in CLOSING]
    closing_problem = None
    if run.get("status") in TERMINAL:
        if len(closing) != 1:
            closing_problem = f"{len(closing)} closing events"
        elif ordered[-1] is not closing[0]:
            closing_problem = f"closing event at seq {closing[0]['seq']}, not last ({ordered[-1]['seq']})"
    elif closing:
        closing_problem = f"a closing event while {run.get('status')}"
    ending = (closing[-1].get("payload") or {}) if closing else {}
    reason = ending.get("reason") or ending.get("error") or run.get("error") or {}
    return {
        "run_id": run["id"], "status": run.get("status"), "worker_id": run.get("worker_id"), "events": len(events),
        "end_code": reason.get("code") if isinstance(reason, dict) else None,
        "lost": len(missing_seqs) + len(lost_keys), "duplicated": len(dup_seqs) + sum(counts[k] - 1 for k in counts
                                                                                     if counts[k] > 1),
        "gaps": len(missing_seqs), "missing_seqs": missing_seqs, "duplicate_seqs": dup_seqs,
        "lost_events": lost_keys, "duplicate_events": dup_keys, "unexpected_events": unknown,
        "out_of_order": out_of_order, "first_seq": min(seqs, default=None), "closing_problem": closing_problem,
        "terminal": run.get("status") in TERMINAL,
    }


def run_ok(audit: dict[str, Any]) -> bool:
    return (audit["terminal"] and audit["lost"] == 0 and audit["duplicated"] == 0 and audit["gaps"] == 0
            and audit["out_of_order"] == 0 and not audit["unexpected_events"] and audit["closing_problem"] is None
            and audit["first_seq"] == 1)


def audit_study(study: dict[str, Any], runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per repetition of every variant: its attempts by status, the runs carrying their stamps, and
    how many of those succeeded (the rule: exactly one). `runs`: every run row whose study_id is
    this study's (GET runs)."""
    by_attempt: dict[str, list[dict[str, Any]]] = {}
    for run in runs:
        by_attempt.setdefault(run.get("study_attempt_id") or "", []).append(run)
    repetitions: list[dict[str, Any]] = []
    problems: list[str] = []
    for variant in study.get("variants", []):
        attempts_of: dict[int, list[dict[str, Any]]] = {}
        for attempt in variant.get("attempts", []):
            attempts_of.setdefault(int(attempt["repetition"]), []).append(attempt)
        for rep in variant.get("repetitions", []):
            r = int(rep["repetition"])
            attempts = sorted(attempts_of.get(r, []), key=lambda a: a["attempt"])
            rep_runs = [run for a in attempts for run in by_attempt.get(a["id"], [])]
            doubles = [a["id"] for a in attempts if len(by_attempt.get(a["id"], [])) > 1]
            succeeded = [run["id"] for run in rep_runs if run.get("status") == "succeeded"]
            current = (rep.get("current") or {}).get("status")
            row = {"variant": variant.get("label"), "repetition": r, "attempts": len(attempts),
                   "attempt_statuses": dict(Counter(a["status"] for a in attempts)), "runs": len(rep_runs),
                   "succeeded_runs": len(succeeded), "retried": len(attempts) - 1, "current": current,
                   "double_submissions": doubles}
            repetitions.append(row)
            where = f"{variant.get('label')} r{r}"
            if len(succeeded) != 1:
                problems.append(f"{where}: {len(succeeded)} succeeded runs ({', '.join(succeeded) or 'none'})")
            if current != "succeeded":
                problems.append(f"{where}: current attempt {current}")
            if doubles:
                problems.append(f"{where}: attempts with more than one run: {', '.join(doubles)}")
    stamped = {a["id"] for v in study.get("variants", []) for a in v.get("attempts", [])}
    strays = [run["id"] for run in runs if run.get("study_attempt_id") not in stamped]
    if strays:
        problems.append(f"runs of the study that no attempt knows: {', '.join(strays)}")
    return {"study_id": study.get("id"), "status": study.get("status"), "repetitions": repetitions,
            "exactly_one_per_repetition": sum(1 for row in repetitions if row["succeeded_runs"] == 1),
            "repetition_count": len(repetitions), "retried_attempts": sum(row["retried"] for row in repetitions),
            "stray_runs": strays, "problems": problems}


def audit_sweep(sweep: dict[str, Any], runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Every variant has one run, and no second run carries its index."""
    per_index = Counter(run.get("sweep_variant") for run in runs)
    problems = [f"variant {i}: {n} runs" for i, n in sorted(per_index.items(), key=lambda x: str(x[0])) if n != 1]
    unsubmitted = [v["index"] for v in sweep.get("variants", []) if not v.get("run_id")]
    if unsubmitted:
        problems.append(f"variants never submitted: {unsubmitted}")
    return {"sweep_id": sweep.get("sweep_id"), "state": sweep.get("state"), "variants": len(sweep.get("variants", [])),
            "runs": len(runs), "statuses": dict(Counter(run.get("status") for run in runs)), "problems": problems}


def totals(run_audits: list[dict[str, Any]]) -> dict[str, Any]:
    bad = [a for a in run_audits if not run_ok(a)]
    return {"runs": len(run_audits), "events": sum(a["events"] for a in run_audits),
            "lost": sum(a["lost"] for a in run_audits), "duplicated": sum(a["duplicated"] for a in run_audits),
            "gaps": sum(a["gaps"] for a in run_audits), "not_terminal": sum(1 for a in run_audits if not a["terminal"]),
            "statuses": dict(Counter(a["status"] for a in run_audits)),
            "placement": dict(Counter(a["worker_id"] or "local" for a in run_audits)),
            "bad_runs": bad}
