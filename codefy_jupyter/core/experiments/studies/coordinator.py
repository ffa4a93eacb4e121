"""The study coordinator: submits a study's children, follows them, and copies their evidence onto
their attempts. Putting every study a previous process left active back in order at start-up is
reconcile.py's (`Reconciler`, the coordinator with that pass; StudyService stands on it).

Exactly once. Each attempt's child run id is chosen when the attempt is created (the stamp) and
written with `attempt_submitting` before the child is submitted; the child carries the attempt's
id in `study_attempt_id`. A process that dies between the submit and `attempt_submitted` leaves
the attempt `submitting`: the next start (reconcile.py) finds the child by its stamp and links it
back (`attempt_relinked`), or, when no run carries the stamp, marks the attempt lost and gives the
repetition a new attempt (`attempt_added`). No repetition is ever submitted twice for one attempt.

The owner's queued cap (core/scheduling/quotas.py). A child takes a place of its owner's queued
cap before its stamp is written: one the study's create reserved for its first children, else one
reserved just then. When none is free the attempt is not stamped: it stays pending, the study
records `study_waiting` (once for each time it is held back, with the refusal as its reason) and
keeps running, and it is advanced again when a place may have come back (a run started or ended, a
reservation gave places back). So a study never leaves its owner past the cap, and a child is
still submitted once.

One asyncio lock per study serializes its decisions: a child's start or end, a cancel, a resume
and the submit loop never interleave, so each decision reads what the previous one wrote.

Test-only fault hooks (core/experiments/studies/crash_hooks.py) end the process around a child's
submit: the windows the stamp exists for.
"""

from __future__ import annotations

import asyncio
import logging
import os
from functools import partial
from typing import Any, Mapping

from ...errors import ServiceError, SubmitError
from ...runs.run_service import RunService
from ...scheduling.quotas import OWNER_QUEUE_FULL, Reservation
from ...store import studies as db
from ..children import study_child_name
from . import state as st
from .attempts import new_attempt, where as _where
from .crash_hooks import CRASH_AFTER_SUBMIT_ENV, CRASH_BEFORE_SUBMIT_ENV, crash_hook as _crash_hook
from .evidence import evidence
from .harvest import StudyHarvest
from .plan import Tally, active_seconds, current_attempts, decide, to_retry, would_halt_at_once
from .request import Budget
from .results import study_results

log = logging.getLogger(__name__)

RUN_NAME_MAX = 200  # the run API's limit on a name


def _log_failed_change(study_id: str, task: asyncio.Task) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("study %s: a record could not be written", study_id, exc_info=task.exception())


class Coordinator:
    def __init__(self, runs: RunService) -> None:
        self.runs = runs
        self.store = runs.store
        self.clock = runs.clock
        self._locks: dict[str, asyncio.Lock] = {}
        self._graphs: dict[str, list[dict[str, Any]]] = {}  # SECRET values included: memory only
        self._children: dict[str, str] = {}  # child run id -> study id
        self._timers: dict[str, asyncio.TimerHandle] = {}  # attempt id -> max_run_seconds stop
        self._active_timers: dict[str, asyncio.TimerHandle] = {}  # study id -> max_active_seconds check
        self._changed: dict[str, asyncio.Event] = {}  # study id -> set on its next committed change
        self._results: dict[str, tuple[int, dict[str, Any]]] = {}  # study id -> (revision, results)
        # An active study's attempts and labels in memory, kept in step by _change (every change to
        # a study's attempts goes through it, under the study's lock), so that a scheduling
        # decision does not read and decode every attempt again.
        self._tallies: dict[str, Tally] = {}
        self._rows: dict[str, dict[str, Any]] = {}  # study id -> its row, beside its tally
        self._memos: dict[str, dict[Any, Any]] = {}  # study id -> its paired comparisons (results.py)
        self._results_locks: dict[str, asyncio.Lock] = {}
        self._labels: dict[str, list[str]] = {}
        self._submitting = self._submitted = 0
        self._crash_before = _crash_hook(CRASH_BEFORE_SUBMIT_ENV)
        self._crash_after = _crash_hook(CRASH_AFTER_SUBMIT_ENV)
        self._reserved: dict[str, Reservation] = {}  # study id -> places its create reserved
        self._held: dict[str, str | None] = {}  # study id -> owner: held back by the queued cap
        self._announced: set[str] = set()  # held studies whose study_waiting is written
        runs.add_observer(self)
        runs.add_room_listener(self._wake_held)
        self.store.add_prune_hook(StudyHarvest(self.clock))  # retention copies children's evidence first

    # -- plumbing -----------------------------------------------------------------------------------
    def lock(self, study_id: str) -> asyncio.Lock:
        return self._locks.setdefault(study_id, asyncio.Lock())

    async def _change(self, study_id: str, c: db.Change, expected_revision: int | None = None) -> int | None:
        try:
            revision = await self.store.write(partial(db.change, study_id=study_id, c=c, now=self.clock(),
                                                      expected_revision=expected_revision))
        except BaseException:
            # advance() may have applied part of this change to the tally ahead of the write
            # (see `ahead`): read it again rather than decide on what never committed.
            self._tallies.pop(study_id, None)
            self._rows.pop(study_id, None)
            raise
        if revision is not None:
            tally, row = self._tallies.get(study_id), self._rows.get(study_id)
            if c.study.get("status") is not None and c.study["status"] not in st.ACTIVE:
                self._tallies.pop(study_id, None)  # stopped scheduling: a resume reads it again
                self._rows.pop(study_id, None)
            elif tally is not None and row is not None:
                tally.apply(c.attempts, c.new_attempts)
                row.update(c.study, revision=revision)
            event = self._changed.pop(study_id, None)
            if event is not None:
                event.set()
        return revision

    async def _tally(self, study_id: str) -> Tally:
        """Call with the study's lock held (what _change applies must follow this read)."""
        await self._study_row(study_id)
        return self._tallies.get(study_id) or Tally(await self._attempts(study_id))

    async def _study_row(self, study_id: str) -> dict[str, Any] | None:
        """The study row, from memory while its tally is held (lock held, as for _tally). Its
        `error` may lag a retention harvest's note; nothing here decides on it."""
        row = self._rows.get(study_id)
        if row is None or study_id not in self._tallies:
            row = await self.store.read(db.get_study, study_id)
            if row is None:
                return None
            self._tallies[study_id] = Tally(await self._attempts(study_id))
            self._rows[study_id] = row
        return row

    async def _label_list(self, study_id: str) -> list[str]:
        labels = self._labels.get(study_id)
        if labels is None:
            labels = self._labels[study_id] = [v["label"] for v in await self.store.read(db.get_variants, study_id)]
        return labels

    def changed(self, study_id: str) -> asyncio.Event:
        return self._changed.setdefault(study_id, asyncio.Event())

    async def _attempts(self, study_id: str) -> list[dict[str, Any]]:
        return await self.store.read(db.get_attempts, study_id)

    async def _attempts_now(self, study_id: str) -> list[dict[str, Any]]:
        """The attempts as the tally holds them (with a record still being written, see
        _change_soon), else as stored. Lock held."""
        tally = self._tallies.get(study_id)
        return [dict(a) for a in tally.attempts.values()] if tally is not None else await self._attempts(study_id)

    async def results(self, study: Mapping[str, Any], labels: list[str],
                      attempts: list[dict[str, Any]]) -> dict[str, Any]:
        """Cached per revision: the paired comparisons cost ~20 ms a variant."""
        study_id = study["id"]
        # One computation at a time per study: readers arriving together wait for it, and the
        # memo of paired comparisons is never used by two threads at once.
        async with self._results_locks.setdefault(study_id, asyncio.Lock()):
            cached = self._results.get(study_id)
            if cached is not None and cached[0] == study["revision"]:
                return cached[1]
            results = await asyncio.to_thread(study_results, labels, study["repetitions"], attempts,
                                              study["objective"]["direction"], memo=self._memos.setdefault(study_id, {}))
            if cached is None or cached[0] < study["revision"]:
                self._results[study_id] = (study["revision"], results)
            return results

    async def _ranking(self, study_id: str) -> list[dict[str, Any]]:
        study = await self.store.read(db.get_study, study_id)
        labels = [v["label"] for v in await self.store.read(db.get_variants, study_id)]
        attempts = await self._attempts(study_id)
        return study_results(labels, study["repetitions"], attempts, study["objective"]["direction"],
                             comparisons=False)["rankings"]

    # -- scheduling (call with the study's lock held) -----------------------------------------------
    async def advance(self, study_id: str, ahead: db.Change | None = None) -> None:
        """`ahead`: a change to attempts (no new ones, no study fields) the caller has not
        written yet, a child's ending: the decision is taken as if it had committed, and it is
        written in one transaction with the first stamp of that decision (one write per attempt
        less), or alone first when the decision submits nothing."""
        study = await self._study_row(study_id)
        if study is None:
            if ahead is not None:
                await self._change(study_id, ahead)
            return
        if ahead is not None:
            tally = self._tallies.get(study_id)
            if tally is None or study["status"] != st.RUNNING or self.runs.closing:
                await self._change(study_id, ahead)
                ahead = None
            else:
                tally.apply(ahead.attempts)  # _change applies it again once written (idempotent)
        if study["status"] == st.QUEUED:
            await self._change(study_id, db.Change(study={"status": st.next_status(st.QUEUED, "start")},
                                                   events=[("study_started", {})]))
            study["status"] = st.RUNNING
        while study["status"] == st.RUNNING and not self.runs.closing:
            tally = await self._tally(study_id)
            decision = decide(Budget(**study["budget"]), tally, self.clock())
            if ahead is not None and not decision.submit:
                await self._change(study_id, ahead)  # the ranking below reads it
                ahead = None
            if decision.done:
                ranking = await self._ranking(study_id)
                await self._change(study_id, db.Change(study={"status": st.next_status(st.RUNNING, "finish")},
                                                       events=[("study_finished", {"ranking": ranking})]))
                return
            if decision.halt is not None:
                ranking = await self._ranking(study_id)
                await self._change(study_id, db.Change(
                    study={"status": st.next_status(st.RUNNING, "halt"), "halt": decision.halt},
                    events=[("study_halted", {"halt": decision.halt, "ranking": ranking})]))
                return
            if not decision.submit:
                return
            for key in decision.submit:
                submitted = await self._submit(study, tally.current[key], ahead)
                ahead = None
                if not submitted:
                    return
            return

    async def _submit(self, study: Mapping[str, Any], a: Mapping[str, Any], ahead: db.Change | None = None) -> bool:
        study_id = study["id"]
        reservation = self._reserved.get(study_id)
        own = reservation is None or reservation.left == 0
        if own:  # a later child: its place is taken now, before any await, or the study waits
            try:
                reservation = self.runs.reserve(study["owner"], 1)
            except SubmitError as err:
                if err.code != OWNER_QUEUE_FULL:
                    raise
                await self._hold(study, err, ahead)
                return False
        self._held.pop(study_id, None)
        self._announced.discard(study_id)
        try:
            return await self._submit_with(study, a, ahead, reservation)
        finally:
            if own:
                self.runs.release(reservation)  # unused when the submit failed before the queue took it

    async def _hold(self, study: Mapping[str, Any], err: SubmitError, ahead: db.Change | None) -> None:
        """No room for the next child: it stays pending and the study waits for its owner's room."""
        study_id = study["id"]
        self._held[study_id] = study["owner"]
        change = db.Change(attempts=dict(ahead.attempts), events=list(ahead.events)) if ahead else db.Change()
        if study_id not in self._announced:
            self._announced.add(study_id)
            change.events.append(("study_waiting", {"reason": err.to_dict()}))
            log.info("study %s: waiting for room under the queued cap: %s", study_id, err)
        if change.attempts or change.events:
            await self._change(study_id, change)

    def _wake_held(self, *_: Any) -> None:
        """Advance again every held study whose owner has room now."""
        for study_id, who in list(self._held.items()):
            if self.runs.has_room(who):
                del self._held[study_id]
                self.runs.keep(asyncio.get_running_loop().create_task(self._advance_held(study_id)))

    async def _advance_held(self, study_id: str) -> None:
        async with self.lock(study_id):
            await self.advance(study_id)

    async def _submit_with(self, study: Mapping[str, Any], a: Mapping[str, Any], ahead: db.Change | None,
                           reservation: Reservation) -> bool:
        study_id = study["id"]
        stamp = db.Change(attempts={a["id"]: {"status": st.SUBMITTING}}, events=[("attempt_submitting", _where(a))])
        if ahead is not None:  # written with the stamp: one transaction
            stamp = db.Change(attempts={**ahead.attempts, **stamp.attempts}, events=ahead.events + stamp.events)
        await self._change(study_id, stamp)
        self._submitting += 1
        if self._crash_before is not None and self._submitting >= self._crash_before:
            os._exit(17)  # test-only (crash_hooks.py): the stamp is written, no child exists
        graphs = self._graphs.get(study_id)
        if graphs is None:  # received by an earlier process: SECRET values are blank now
            graphs = [v["graph"] for v in await self.store.read(db.get_variants, study_id)]
            self._graphs[study_id] = graphs
        labels = await self._label_list(study_id)
        body = {"graph": graphs[a["variant"]],
                "name": study_child_name(study["name"], labels[a["variant"]], a["repetition"])[:RUN_NAME_MAX],
                "options": {**study["options"], "seed": a["seed"]}}
        self._children[a["run_id"]] = study_id  # before the submit: the child may start inside it
        try:
            view = await self.runs.submit(body, owner=study["owner"], run_id=a["run_id"],
                                          links={"study_id": study_id, "study_attempt_id": a["id"]},
                                          reservation=reservation)
        except Exception as err:
            self._children.pop(a["run_id"], None)
            info = err.to_dict() if isinstance(err, ServiceError) else {
                "code": "submit_failed", "message": str(err) or type(err).__name__, "params": {}}
            if not isinstance(err, ServiceError):
                log.exception("study %s: submitting %s failed", study_id, a["run_id"])
            # The child was never created, so the attempt is lost (a resume runs the repetition
            # again); a refusal while the server shuts down leaves the study to the next start.
            shutting_down = isinstance(err, ServiceError) and err.status == 503
            change = db.Change(attempts={a["id"]: {"status": st.LOST, "error": info}},
                               events=[("attempt_lost", {**_where(a), "error": info})])
            if not shutting_down:
                change.study = {"status": st.next_status(st.RUNNING, "fail"), "error": info}
                change.events.append(("study_failed", {"error": info}))
            await self._change(study_id, change)
            return False
        self._submitted += 1
        if self._crash_after is not None and self._submitted >= self._crash_after:
            os._exit(17)  # test-only (crash_hooks.py): between the submit and its record
        record = db.Change(attempts={a["id"]: {"status": st.A_QUEUED, "submitted_at": self.clock()}},
                           events=[("attempt_submitted", _where(a))])
        started = view.get("started_at") if view.get("status") == "running" else None
        if started is not None:
            # It started inside the submit (a free slot): its start is recorded with the submit,
            # one write instead of two; _started, which waits for this lock, then finds it running.
            record.attempts[a["id"]].update(status=st.A_RUNNING, started_at=started)
            record.events.append(("attempt_started", _where(a)))
        if study_id in self._tallies:
            self._change_soon(study_id, record)
        else:  # nothing in memory to take it ahead of the commit: _started would read it stored
            await self._change(study_id, record)
        if started is not None:
            self._arm_run_timer(study, a, max(0.0, self.clock() - started))
            await self._arm_active_timer(study)
        return True

    def _change_soon(self, study_id: str, c: db.Change) -> None:
        """`_change` without waiting for the commit (the study's tally held): for a record nothing
        waits on (a child's submit and start, once the child exists; a crash before it commits
        relinks the child by its stamp). The tally takes it at once, as if committed (what the
        next decision reads); the store commits it ahead of any later change (writes commit in
        call order), often in the same transaction, so the next decision does not wait on a
        commit of its own for it."""
        self._tallies[study_id].apply(c.attempts)  # _change applies it again once written (idempotent)
        task = asyncio.get_running_loop().create_task(self._change(study_id, c))
        task.add_done_callback(partial(_log_failed_change, study_id))
        self.runs.keep(task)

    # -- following children (RunObserver) -----------------------------------------------------------
    def run_started(self, run_id: str) -> None:
        study_id = self._children.get(run_id)
        if study_id is not None:
            self.runs.keep(asyncio.get_running_loop().create_task(self._started(study_id, run_id)))
        if self._held:  # a waiting run left the queue: a place may be free
            self._wake_held()

    def run_finished(self, run_id: str, status: str) -> None:
        study_id = self._children.get(run_id)
        if study_id is not None:
            self.runs.keep(asyncio.get_running_loop().create_task(self._finished(study_id, run_id, status)))
        if self._held:
            self._wake_held()

    async def _attempt_of(self, study_id: str, run_id: str) -> dict[str, Any] | None:
        tally = self._tallies.get(study_id)
        a = tally.by_run.get(run_id) if tally is not None else await self.store.read(db.attempt_by_run, run_id)
        return a if a is not None and a["study_id"] == study_id else None

    async def _started(self, study_id: str, run_id: str) -> None:
        async with self.lock(study_id):
            a = await self._attempt_of(study_id, run_id)
            if a is None or a["status"] not in (st.SUBMITTING, st.A_QUEUED):
                return
            await self._change(study_id, db.Change(attempts={a["id"]: {"status": st.A_RUNNING,
                                                                         "started_at": self.clock()}},
                                                   events=[("attempt_started", _where(a))]))
            study = await self._study_row(study_id)
            self._arm_run_timer(study, a, 0.0)
            await self._arm_active_timer(study)

    def _arm_run_timer(self, study: Mapping[str, Any], a: Mapping[str, Any], elapsed: float) -> None:
        """max_run_seconds: stop the child once it has executed that long."""
        limit = study["budget"].get("max_run_seconds")
        if limit is None:
            return
        loop = asyncio.get_running_loop()
        self._timers[a["id"]] = loop.call_later(max(0.0, limit - elapsed), lambda: self.runs.keep(
            loop.create_task(self._stop_for_budget(study["id"], [a], "max_run_seconds", limit))))

    async def _arm_active_timer(self, study: Mapping[str, Any]) -> None:
        """max_active_seconds: look again when the running children would use up what is left
        (the sum grows as fast as the number of children running)."""
        limit = study["budget"].get("max_active_seconds")
        if limit is None:
            return
        study_id = study["id"]
        old = self._active_timers.pop(study_id, None)
        if old is not None:
            old.cancel()
        attempts = await self._attempts_now(study_id)
        running = [a for a in current_attempts(attempts).values() if a["status"] == st.A_RUNNING]
        if not running:
            return
        left = limit - active_seconds(attempts, self.clock())
        loop = asyncio.get_running_loop()
        self._active_timers[study_id] = loop.call_later(max(0.0, left / len(running)) + 0.01, lambda: self.runs.keep(
            loop.create_task(self._check_active(study_id))))

    async def _check_active(self, study_id: str) -> None:
        async with self.lock(study_id):
            self._active_timers.pop(study_id, None)
            study = await self.store.read(db.get_study, study_id)
            limit = study["budget"].get("max_active_seconds")
            if study["status"] != st.RUNNING or limit is None:
                return
            attempts = await self._attempts_now(study_id)
            if active_seconds(attempts, self.clock()) < limit:
                await self._arm_active_timer(study)
                return
            running = [a for a in current_attempts(attempts).values()
                       if a["status"] in st.IN_FLIGHT and a["stop_reason"] is None]
        await self._stop_for_budget(study_id, running, "max_active_seconds", limit)

    async def _stop_for_budget(self, study_id: str, attempts: list[Mapping[str, Any]], budget: str,
                               limit: float) -> None:
        stopping = []
        async with self.lock(study_id):
            for a in attempts:
                if budget == "max_run_seconds":
                    self._timers.pop(a["id"], None)
                current = await self._attempt_of(study_id, a["run_id"])
                if current is None or current["status"] not in st.IN_FLIGHT or current["stop_reason"] is not None:
                    continue
                await self._change(study_id, db.Change(
                    attempts={a["id"]: {"stop_reason": budget}},
                    events=[("attempt_stop_requested", {**_where(a), "budget": budget, "limit": limit})]))
                stopping.append(a["run_id"])
        for run_id in stopping:
            try:
                await self.runs.cancel(run_id)
            except ServiceError:
                pass  # it ended meanwhile: its ending is recorded as it came

    async def _finished(self, study_id: str, run_id: str, run_status: str) -> None:
        # The evidence is read before taking the lock: the run has ended, and the study's other
        # decisions need not wait on these reads. No flush first: run_finished follows the commit
        # of the run's final write, and its buffered metric points were handed to the store ahead
        # of that write (EventLog.take_closing), so they are committed already.
        found = await self.store.read(db.read_run_and_points, run_id)
        async with self.lock(study_id):
            self._children.pop(run_id, None)
            a = await self._attempt_of(study_id, run_id)
            if a is None or a["status"] not in st.IN_FLIGHT:
                return
            timer = self._timers.pop(a["id"], None)
            if timer is not None:
                timer.cancel()
            study = await self._study_row(study_id)
            assert study is not None
            status = st.attempt_status_of_run(run_status, a["stop_reason"])
            copied = {} if found is None or a["evidence_copied"] else evidence(found[0], found[1], study["objective"])
            change = db.Change(attempts={a["id"]: {"status": status, **copied}})
            change.events.append(("attempt_finished", {**_where(a), "status": status,
                                                       "objective_value": change.attempts[a["id"]].get(
                                                           "objective_value", a["objective_value"])}))
            if self.runs.closing:  # the next start reconciles the study
                await self._change(study_id, change)
                return
            direct = status in (st.A_CANCELLED, st.A_INTERRUPTED) and a["stop_reason"] is None
            resume_after = False
            if study["status"] == st.CANCEL_REQUESTED:
                others = [o for o in current_attempts(await self._attempts(study_id)).values()
                          if o["status"] in st.IN_FLIGHT and o["id"] != a["id"]]
                if not others:
                    change.study = {"status": st.next_status(st.CANCEL_REQUESTED, "settle")}
                    change.events.append(("study_cancelled", {}))
            elif study["status"] == st.RUNNING and direct:
                change.study = {"status": st.next_status(st.RUNNING, "interrupt")}
                reason = "child_cancelled" if status == st.A_CANCELLED else "child_interrupted"
                change.events.append(("study_interrupted", {"reason": reason, "run_id": run_id}))
                resume_after = status == st.A_INTERRUPTED and study["resume_policy"] == "auto"
            if study["status"] == st.RUNNING and not direct and not change.study:
                await self.advance(study_id, ahead=change)  # written with the next stamp
                return
            await self._change(study_id, change)
            if resume_after:
                await self.resume_locked(study_id, None)

    # -- resume (call with the lock held) -----------------------------------------------------------
    async def resume_locked(self, study_id: str, budget: Budget | None, *, expected_revision: int | None = None,
                            halt_instead: bool = False) -> int | None:
        """Retried repetitions get a new attempt (same seed, next number); the study runs again.
        Raises Conflict when the budget is already used up, unless `halt_instead` (an auto study
        after a restart), which halts it. Returns the revision, or None when it had moved."""
        from ...errors import Conflict
        study = await self.store.read(db.get_study, study_id)
        old = Budget(**study["budget"])
        new = budget or old
        attempts = await self._attempts(study_id)
        retry = to_retry(attempts)
        now = self.clock()
        halt = would_halt_at_once(new, attempts, now, len(retry))
        if halt is not None:
            if not halt_instead:
                raise Conflict(f"the study's {halt['budget']} budget is used up ({halt['used']} of {halt['limit']}); "
                               "resume with a raised budget", code="budget_used_up", params={"halt": halt})
            ranking = await self._ranking(study_id)
            return await self._change(study_id, db.Change(
                study={"status": st.HALTED, "halt": halt},
                events=[("study_halted", {"halt": halt, "ranking": ranking})]), expected_revision)
        added = [new_attempt(study_id, a["variant"], a["repetition"], a["attempt"] + 1, a["seed"], now) for a in retry]
        payload: dict[str, Any] = {"retried": len(added)}
        if budget is not None:
            payload.update(old_budget=old.to_json(), new_budget=new.to_json())
        change = db.Change(study={"status": st.next_status(study["status"], "resume"), "halt": None, "error": None,
                                  "budget": new.to_json()},
                           new_attempts=added,
                           events=[("study_resumed", payload)] + [
                               ("attempt_added", {**_where(a), "replaces": old_a["id"]})
                               for a, old_a in zip(added, retry)])
        revision = await self._change(study_id, change, expected_revision)
        if revision is not None:
            await self.advance(study_id)
        return revision
