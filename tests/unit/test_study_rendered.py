"""A study rendered change by change for pollers (RenderedStudy) reads byte for byte as the pure
views render it whole, in both forms, after every change; and results computed with the per-study
memo equal results computed from scratch."""

from __future__ import annotations

import json

from codefy_jupyter.core.experiments.studies.rendered import RenderedStudy
from codefy_jupyter.core.experiments.studies.results import study_results
from codefy_jupyter.core.experiments.studies.views import encode, study_summary_view, study_view

V, R = 4, 3
LABELS = [f"v{i}" for i in range(V)]


def bundle():
    study = {"id": "s", "name": "n", "owner": None, "status": "running", "revision": 10,
             "objective": {"node_id": "m", "metric": "mean", "direction": "minimize"}, "seed": 7, "repetitions": R,
             "options": {}, "budget": {"max_runs": None, "max_parallel_runs": 4, "max_run_seconds": None,
                                       "max_active_seconds": None},
             "resume_policy": "explicit", "halt": None, "error": None, "idempotency_key": None, "created_at": 1.0,
             "updated_at": 1.0, "last_cursor": 10}
    variants = [{"variant": i, "label": LABELS[i], "ops": [] if i else None} for i in range(V)]
    attempts = [{"id": f"a{i}{r}", "study_id": "s", "variant": i, "repetition": r, "attempt": 1, "seed": 7 + r,
                 "run_id": f"run{i}{r}", "status": "pending", "error": None, "created_at": 1.0, "submitted_at": None,
                 "started_at": None, "finished_at": None, "objective_value": None, "final_metrics": None,
                 "fingerprint_digest": None, "stop_reason": None, "evidence_copied": False}
                for r in range(R) for i in range(V)]
    return {"study": study, "variants": variants, "attempts": attempts, "runs": {}}


def step(rendered, changes, revision, runs=None):
    study = {**rendered.study, "revision": revision, "last_cursor": revision}
    attempts = [{**rendered.attempts[attempt_id], **fields} for attempt_id, fields in changes.items()]
    rendered.apply({"study": study, "attempts": attempts, "runs": runs or {}})


def check(rendered, memo):
    attempts = rendered.attempt_list()
    fresh = study_results(LABELS, R, attempts, "minimize")
    results = study_results(LABELS, R, attempts, "minimize", memo=memo)
    assert results == fresh
    stored = sorted(attempts, key=lambda a: (a["variant"], a["repetition"], a["attempt"]))  # as the store reads them
    whole = {"study": rendered.study, "variants": rendered.variants, "attempts": stored, "runs": rendered.runs}
    body, etag = rendered.render(results, 5.0)
    assert body == encode(study_view(whole, results, 5.0)).encode()
    summary, summary_tag = rendered.render_summary(results, 5.0)
    assert summary == encode(study_summary_view(rendered.study, rendered.variants, attempts, rendered.runs,
                                                results, 5.0)).encode()
    assert etag != summary_tag and len(summary) < len(body)
    return json.loads(summary)


def test_both_forms_match_the_whole_rendering_after_every_change():
    rendered, memo = RenderedStudy(bundle(), 0), {}
    check(rendered, memo)
    revision = 10
    for r in range(R):
        revision += 1
        step(rendered, {f"a{i}{r}": {"status": "running", "started_at": 2.0 + r} for i in range(V)}, revision,
             runs={f"run{i}{r}": {"worker_id": None, "devices": ["cpu"], "queue_key": "cpu"} for i in range(V)})
        check(rendered, memo)
        revision += 1
        # v1 and v2 tie; v3 fails its second repetition; -0.0 and 0.0 stay apart in values
        values = {0: -0.0 if r == 0 else 0.0, 1: 1.0, 2: 1.0, 3: 2.0}
        step(rendered, {f"a{i}{r}": {"status": "failed" if (i, r) == (3, 1) else "succeeded", "finished_at": 3.0 + r,
                                     "objective_value": values[i], "final_metrics": {"mean": values[i]}}
                        for i in range(V)}, revision)
        doc = check(rendered, memo)
    assert [(v["label"], v["rank"], v["tie"]) for v in doc["variants"]] == [("v0", 1, False), ("v1", 2, True),
                                                                           ("v2", 2, True), ("v3", None, False)]
    assert doc["variants"][0]["aggregate"]["values"] == [-0.0, 0.0, 0.0]
    assert all("attempts" not in v for v in doc["variants"])
    # A retry: a new attempt of v3 r1 becomes the current one.
    retry = {**rendered.attempts["a31"], "id": "a31-2", "attempt": 2, "status": "succeeded", "objective_value": 2.0,
             "run_id": "run31-2"}
    rendered.apply({"study": {**rendered.study, "revision": revision + 1}, "attempts": [retry], "runs": {}})
    doc = check(rendered, memo)
    assert doc["variants"][3]["repetitions"][1]["current"]["attempt"] == 2 and doc["variants"][3]["eligible"]


def test_a_settled_rendering_is_served_again_until_the_revision_moves():
    rendered, memo = RenderedStudy(bundle(), 0), {}
    step(rendered, {a: {"status": "succeeded", "objective_value": 1.0} for a in list(rendered.attempts)}, 11)
    check(rendered, memo)
    first = rendered.reusable("summary")
    assert first is not None and rendered.reusable("full") is not None
    step(rendered, {}, 12)
    assert rendered.reusable("summary") is None
