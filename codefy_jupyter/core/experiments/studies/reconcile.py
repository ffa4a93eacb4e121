"""Start-up reconciliation: puts every study a previous process left active back in order.

Each attempt a previous process left in flight is found again by its stamp (the child run id chosen
when the attempt was created): a child still running is taken over, one that ended meanwhile gets
its ending and evidence recorded, and an attempt whose submit never created a run is marked lost
and its repetition given a new attempt (`attempt_added`). Then the study itself: finished when its
budget says so, else interrupted (an auto study resumes at once) or, while cancelling, cancelled.
The scheduling and the bookkeeping of children are the coordinator's (coordinator.py).
"""

from __future__ import annotations

import logging
from typing import Any, Mapping

from ...errors import ServiceError
from ...store import studies as db
from . import state as st
from .attempts import new_attempt, where as _where
from .coordinator import Coordinator
from .evidence import evidence
from .plan import current_attempts, decide
from .request import Budget
from .results import study_results

log = logging.getLogger(__name__)

ACTIVE_RUN_STATUSES = frozenset({"queued", "running", "disconnected"})


class Reconciler(Coordinator):
    """The coordinator, with the start-up pass that puts a previous process's studies in order."""

    async def reconcile(self) -> None:
        ids = await self.store.read(db.active_study_ids, sorted(st.ACTIVE))
        # A study that had stopped scheduling may still have had children in flight.
        ids += [i for i in await self.store.read(db.studies_with_attempts_in, sorted(st.IN_FLIGHT)) if i not in ids]
        for study_id in ids:
            try:
                async with self.lock(study_id):
                    await self._reconcile(study_id)
            except Exception:
                log.exception("study %s: reconciling after the restart failed", study_id)

    async def _reconcile(self, study_id: str) -> None:
        study = await self.store.read(db.get_study, study_id)
        attempts = await self._attempts(study_id)
        now = self.clock()
        change = db.Change()
        adopted: list[str] = []
        for a in current_attempts(attempts).values():
            if a["status"] not in st.IN_FLIGHT:
                continue
            run = await self.store.read(db.run_by_stamp, a["id"])
            if run is None:  # the submission never created a run
                again = new_attempt(study_id, a["variant"], a["repetition"], a["attempt"] + 1, a["seed"], now)
                change.attempts[a["id"]] = {"status": st.LOST}
                change.new_attempts.append(again)
                change.events += [("attempt_lost", _where(a)),
                                  ("attempt_added", {**_where(again), "replaces": a["id"]})]
                continue
            if a["status"] == st.SUBMITTING:
                change.events.append(("attempt_relinked", {**_where(a), "run_status": run["status"]}))
            if run["status"] in ACTIVE_RUN_STATUSES:  # taken over from a worker: it runs on
                self._children[a["run_id"]] = study_id
                adopted.append(a["run_id"])
                if a["started_at"] is not None:
                    self._arm_run_timer(study, a, now - a["started_at"])
                change.attempts[a["id"]] = {"status": st.A_RUNNING if run["status"] != "queued" else st.A_QUEUED}
                continue
            status = st.attempt_status_of_run(run["status"], a["stop_reason"])
            change.attempts[a["id"]] = {"status": status, **await self._evidence(study, a)}
            change.events.append(("attempt_finished", {**_where(a), "status": status,
                                                       "objective_value": change.attempts[a["id"]].get(
                                                           "objective_value")}))
        resume = False
        if study["status"] not in st.ACTIVE:  # its attempts put right; its status stays
            await self._change(study_id, change)
            return
        # A child the restart retired beside one taken over from a worker: nothing would ever retry
        # it, so the study is interrupted as without one (an auto study resumes at once).
        retired = any(change.attempts.get(a["id"], {}).get("status") in (st.A_INTERRUPTED, st.A_CANCELLED)
                      for a in current_attempts(attempts).values())
        if adopted and retired and study["status"] in (st.RUNNING, st.QUEUED):
            change.study = {"status": st.next_status(study["status"], "interrupt")}
            change.events.append(("study_interrupted", {"reason": "server_restart"}))
            resume = study["resume_policy"] == "auto"
        elif not adopted:
            if study["status"] == st.CANCEL_REQUESTED:
                change.study = {"status": st.next_status(st.CANCEL_REQUESTED, "interrupt")}
                change.events.append(("study_cancelled", {"reason": "server_restart"}))
            else:
                after = [{**a, **change.attempts.get(a["id"], {})} for a in attempts] + change.new_attempts
                if decide(Budget(**study["budget"]), after, now).done and study["status"] == st.RUNNING:
                    change.study = {"status": st.next_status(st.RUNNING, "finish")}
                    labels = [v["label"] for v in await self.store.read(db.get_variants, study_id)]
                    ranking = study_results(labels, study["repetitions"], after, study["objective"]["direction"],
                                            comparisons=False)["rankings"]
                    change.events.append(("study_finished", {"ranking": ranking}))
                else:
                    change.study = {"status": st.next_status(study["status"], "interrupt")}
                    change.events.append(("study_interrupted", {"reason": "server_restart"}))
                    resume = study["resume_policy"] == "auto"
        await self._change(study_id, change)
        if resume:
            await self.resume_locked(study_id, None, halt_instead=True)
        elif adopted and study["status"] == st.CANCEL_REQUESTED:
            for run_id in adopted:
                try:
                    await self.runs.cancel(run_id)
                except ServiceError:
                    pass
        elif adopted and not change.study and study["status"] in (st.RUNNING, st.QUEUED):
            await self.advance(study_id)

    async def _evidence(self, study: Mapping[str, Any], a: Mapping[str, Any]) -> dict[str, Any]:
        """The child's evidence, unless retention already copied it (the run is gone then)."""
        # Metric points are flushed apart from the closing write that run_finished follows: make
        # every point the child logged durable before reading them.
        await self.runs.events.flush()
        found = await self.store.read(db.read_run_and_points, a["run_id"])
        if found is None or a["evidence_copied"]:
            return {}
        return evidence(found[0], found[1], study["objective"])
