"""`StudyView(study_id)`: a study in a notebook — status, revision, budget use or halt, a table of
variants (label, mean ± std, n, values per repetition, rank with ties, why a variant is not
ranked, the paired difference against the best with its 95 % interval and p, average rank)
sortable by its headers, the objective values per repetition as a chart, Cancel / Resume and
Download CSV.

It follows the study by long-poll (`GET studies/{id}?view=summary&revision=&wait=`: one read per
change, twice a second at most while the study is busy) until the study stops."""

from __future__ import annotations

from typing import Any

import traitlets as t

from ...client.client import STUDY_ACTIVE, Client
from ...client.study_report import budget_text, progress
from ._base import esm
from ._experiment import ExperimentView
from .experiment_rows import STUDY_SORTS, study_rows, study_series


class StudyView(ExperimentView):
    _esm = esm("run_view_draw.js", "experiment_draw.js", "study_view.js")
    kind = "study"
    actions = ("refresh", "csv", "cancel", "resume")
    sorts = STUDY_SORTS

    study_id = t.Unicode("").tag(sync=True)
    name = t.Unicode("").tag(sync=True)
    status = t.Unicode("").tag(sync=True)
    revision = t.Int(0).tag(sync=True)
    objective = t.Unicode("").tag(sync=True)
    progress = t.Dict().tag(sync=True)  # study_report.progress
    budget_text = t.Unicode("").tag(sync=True)
    halt = t.Dict(default_value=None, allow_none=True).tag(sync=True)
    series = t.Dict().tag(sync=True)  # label -> [[repetition, value], ...]

    def __init__(self, study_id: str, client: Client | None = None) -> None:
        if not isinstance(study_id, str) or not study_id.strip():
            raise ValueError(f"study_id must be a study id (a non-empty string), got {study_id!r}")
        super().__init__(client, study_id=study_id.strip())

    def _ident(self) -> str:
        return self.study_id

    def refresh(self) -> None:
        self._apply(self._client.get_study(self.study_id))

    def cancel(self, expected_revision: int | None = None) -> dict[str, Any]:
        """Cancel the study; with `expected_revision`, only if it has not moved past it (else 409).
        The button sends none: a live study moves on between the draw and the click."""
        doc = self._client.cancel_study(self.study_id, expected_revision=expected_revision)
        self.message = f"cancelling study {self.study_id}: stopped {len(doc.get('cancelled_runs') or [])} runs"
        self._apply(doc)
        return doc

    def resume(self, budget: dict[str, Any] | None = None, expected_revision: int | None = None) -> dict[str, Any]:
        """Resume a stopped study (optionally with a new budget); following starts again."""
        doc = self._client.resume_study(self.study_id, budget=budget, expected_revision=expected_revision)
        self.message = f"resumed study {self.study_id}"
        self._apply(doc)
        if self.done:
            self._restart()
        return doc

    def csv_text(self) -> str:
        return self._client.study_csv(self.study_id)

    def _apply(self, doc: dict[str, Any]) -> None:
        objective = doc.get("objective") or {}
        p = progress(doc)
        # The follow thread and a button's action both apply documents: one at a time.
        with self._lock, self.hold_sync():
            self.name = doc.get("name") or ""
            self.status = doc.get("status") or ""
            self.revision = int(doc.get("revision") or 0)
            self.objective = (f"{objective.get('direction', '')} {objective.get('metric', '')} of "
                              f"{objective.get('node_id', '')}")
            self.progress = p
            self.budget_text = budget_text(p["budget"])
            self.halt = doc.get("halt")
            self.series = study_series(doc)
            self._set_rows(study_rows(doc))
        self._notify()

    def _restart(self) -> None:
        import threading

        with self._cond:
            self._done = False
        self.following = True
        self.follow_error = ""
        self._thread = threading.Thread(target=self._follow_loop, name="codefy-study-view", daemon=True)
        self._thread.start()

    def _follow(self) -> None:
        doc = self._call(self._client.get_study, self.study_id)
        self._apply(doc)
        while not self._closing.is_set() and doc["status"] in STUDY_ACTIVE:
            # What the view draws is in the summary form, a quarter of a large study's full form.
            doc = self._call(self._client.get_study, self.study_id, view="summary", revision=doc["revision"],
                             wait=self.poll_s)
            self._apply(doc)  # also at an unchanged revision: budget use counts running seconds
