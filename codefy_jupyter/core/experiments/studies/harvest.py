"""Retention's hook for studies (core/store/queries.py PruneHook): inside retention's transaction,
on the writer thread, the evidence of each child about to be deleted is copied onto its attempt;
when that fails, the study says how many of its runs went without it."""

from __future__ import annotations

import logging
from typing import Any, Callable

from ...store import studies as db
from .evidence import evidence

# The coordinator's logger: the harvest logged there before it had a room of its own.
log = logging.getLogger("codefy_jupyter.core.experiments.studies.coordinator")


class StudyHarvest:
    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock

    def harvest(self, conn: Any, run_ids: Any) -> None:
        by_study: dict[str, db.Change] = {}
        for a in db.attempts_for_runs(conn, list(run_ids)):
            if a["evidence_copied"]:
                continue
            study = db.get_study(conn, a["study_id"])
            found = db.run_and_points(conn, a["run_id"])
            if study is None or found is None:
                continue
            by_study.setdefault(a["study_id"], db.Change()).attempts[a["id"]] = evidence(found[0], found[1],
                                                                                        study["objective"])
        for study_id, change in by_study.items():
            db.change(conn, study_id, change, self.clock())

    def harvest_failed(self, conn: Any, run_ids: Any, error: Exception) -> None:
        """Retention deleted children whose evidence could not be copied: say so on each study,
        counting that study's runs across passes (a pass may hold one child). A study that
        already carries another error (a failed submit) keeps it; the log has the harvest's."""
        log.error("codefy: retention could not copy study evidence before deleting runs: %s", error)
        counts: dict[str, int] = {}
        for a in db.attempts_for_runs(conn, list(run_ids)):
            if not a["evidence_copied"]:
                counts[a["study_id"]] = counts.get(a["study_id"], 0) + 1
        for study_id, n in counts.items():
            study = db.get_study(conn, study_id)
            before = study["error"] if study is not None else None
            if before is not None and before.get("code") != "harvest_failed":
                continue
            total = n + (before["params"]["runs"] if before is not None else 0)
            info = {"code": "harvest_failed", "params": {"runs": total},
                    "message": f"retention deleted {total} run{'s' if total != 1 else ''} of this study on schedule "
                               f"before their evidence could be copied onto it ({type(error).__name__}: {error}); "
                               "a value the study had not read as its child ended is lost"}
            db.change(conn, study_id, db.Change(study={"error": info}), self.clock())
