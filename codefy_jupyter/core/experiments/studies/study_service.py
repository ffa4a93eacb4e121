"""The studies the server owns: submit (idempotent), read, list, follow the audit log, cancel and
resume. The coordinator (coordinator.py) does the scheduling and the bookkeeping of children."""

from __future__ import annotations

import asyncio
import secrets
from functools import partial
from typing import Any

from ....wire.run_options import SEED_MAX
from ...errors import BadRequest, Conflict, Forbidden, NotFound, SchemaError, ServiceError
from ...runs.run_service import RunService
from ...scheduling.quotas import Reservation
from ...store import studies as db
from . import state as st
from .attempts import new_attempt, new_id
from .reconcile import Reconciler
from .request import check_budget_covers, parse_budget, parse_study, seed_of
from .rendered import FULL, SUMMARY, RenderedStudy
from .views import study_csv, study_view, summary

EVENTS_PAGE = 500
EVENTS_BATCH_S = 0.25  # how long a long-poll that found events waits for more (see events)
# How long a GET long-poll waits, once the study is past the caller's revision, for the changes
# that follow (see wait_past): a follower reads a busy study at most twice a second, each read a
# whole document; a progress view needs no more.
READ_BATCH_S = 0.5
RENDERED_KEPT = 8  # studies whose rendered reads are kept (the ones being followed)
WAIT_MAX_S = 60.0
VIEWS = (FULL, SUMMARY)  # GET studies/{id}?view=
LIST_LIMIT = 50
INT64_MAX = 2**63 - 1  # SQLite's largest integer: a larger offset or cursor cannot even be bound


class StudyService(Reconciler):
    def __init__(self, runs: RunService) -> None:
        super().__init__(runs)
        self._rendered: dict[str, RenderedStudy] = {}  # the studies read last, most recent last
        self._render_locks: dict[str, asyncio.Lock] = {}

    async def start(self) -> None:
        """Called once the run service has recovered, before anything is served: reconciles the
        studies a previous process left active."""
        await self.reconcile()

    # -- submit -------------------------------------------------------------------------------------
    async def create(self, body: Any, *, owner: str | None = None,
                     header_key: str | None = None) -> tuple[bool, dict[str, Any]]:
        """(created, the study as GET returns it). A retry with the same idempotency key and the
        same request returns the existing study (created False) and submits nothing."""
        req = parse_study(body, registry=self.runs.registry, max_variants=self.runs.settings.max_sweep_runs,
                          header_key=header_key)
        if req.idempotency_key is not None:
            found = await self.store.read(db.find_by_key, req.idempotency_key)
            if found is not None:
                return False, await self._same_request(found[0], found[1], req.digest)
        # Only now the children's shared options and each variant's graph, as a submit would check
        # them: a retry with the same key must get its study (or 409) before any of this.
        graphs = [("base_graph", req.base_graph)] if req.base_graph is not None else []
        for i, variant in enumerate(req.variants):
            graphs.append((f"variants[{i}].graph", variant.graph))
        for where, graph in graphs:
            try:
                await self.runs.preflight({"graph": graph, "options": {**req.options, "seed": 0}})
            except ServiceError as err:
                # The graph is the run's `graph`: name the study's field instead.
                field = err.params.get("field")
                if field is None or (isinstance(field, str) and field.startswith("graph")):
                    named = where + (field or "graph")[len("graph"):]
                    err.params = {**err.params, "field": named}
                    if isinstance(err, SchemaError):
                        err.field = named
                raise
        # At most max_parallel_runs children are in flight at once: that many must fit the owner's
        # queued cap now (429 otherwise), and are reserved for the first children; a later child
        # takes its own place, or waits for one (coordinator.py).
        attempts_total = req.repetitions * len(req.variants)
        width = min(req.budget.max_parallel_runs, attempts_total, req.budget.max_runs or attempts_total)
        reservation = self.runs.reserve(owner, width)
        try:
            return await self._create(req, owner, reservation)
        finally:
            self.runs.release(reservation)

    async def _create(self, req: Any, owner: str | None, reservation: Reservation) -> tuple[bool, dict[str, Any]]:
        study_id = new_id()
        now = self.clock()
        seed = req.seed if req.seed is not None else secrets.randbelow(SEED_MAX + 1)
        row = {"id": study_id, "name": req.name, "owner": owner, "status": st.QUEUED,
               "request_digest": req.digest, "idempotency_key": req.idempotency_key, "objective": req.objective,
               "seed": seed, "repetitions": req.repetitions, "options": req.options,
               "budget": req.budget.to_json(), "resume_policy": req.resume_policy, "halt": None, "error": None,
               "created_at": now, "updated_at": now}
        from ...runs.requests import strip_secrets
        variants = [{"variant": i, "label": v.label, "graph": strip_secrets(v.graph, self.runs.registry),
                     "ops": v.ops} for i, v in enumerate(req.variants)]
        attempts = [new_attempt(study_id, i, r, 1, seed_of(seed, r), now)
                    for r in range(req.repetitions) for i in range(len(req.variants))]
        created = {"name": req.name, "seed": seed, "repetitions": req.repetitions,
                   "variants": [v.label for v in req.variants], "budget": req.budget.to_json()}
        holder = await self.store.write(partial(db.insert_study, study=row, variants=variants, attempts=attempts,
                                                event=("study_created", created)))
        if holder is not None:  # another request with the key won the race
            found = await self.store.read(db.find_by_key, req.idempotency_key)
            assert found is not None
            return False, await self._same_request(found[0], found[1], req.digest)
        self._graphs[study_id] = [v.graph for v in req.variants]
        self._reserved[study_id] = reservation
        try:
            async with self.lock(study_id):
                await self.advance(study_id)
        finally:
            del self._reserved[study_id]
        return True, await self.get(study_id)

    async def _same_request(self, study_id: str, digest: str, mine: str) -> dict[str, Any]:
        if digest != mine:
            raise Conflict(f"the idempotency key was already used for study {study_id} with a different request",
                           code="idempotency_conflict", params={"field": "idempotency_key", "study_id": study_id})
        return await self.get(study_id)

    # -- reads --------------------------------------------------------------------------------------
    async def _bundle(self, study_id: str) -> dict[str, Any]:
        bundle = await self.store.read(db.study_bundle, study_id)
        if bundle is None:
            raise NotFound(f"no study {study_id}", code="study_not_found", params={"study_id": study_id})
        return bundle

    async def get(self, study_id: str) -> dict[str, Any]:
        bundle = await self._bundle(study_id)
        labels = [v["label"] for v in bundle["variants"]]
        results = await self.results(bundle["study"], labels, bundle["attempts"])
        return study_view(bundle, results, self.clock())

    async def get_json(self, study_id: str, view: str = FULL, *, revision: int | None = None,
                       wait: float = 0.0) -> tuple[bytes, str]:
        """GET studies/{id} as a JSON body and its ETag: what `get` gives (view "full"), or its
        summary form (view "summary", views.study_summary_view), encoded. Pollers read it while the
        study runs, so a read brings the study's RenderedStudy up to date with what changed since
        the previous read (one reader hop) and encodes again only the variants that moved, in a
        thread; a study with nothing in flight at an unchanged revision is the text served before.
        With `revision` (the one the caller holds) and `wait`, a long-poll: see wait_past."""
        check_read(view, wait, revision)
        if revision is not None and wait > 0:
            await self.wait_past(study_id, revision, wait)
        async with self._render_locks.setdefault(study_id, asyncio.Lock()):
            deleted = self.store.runs_deleted
            rendered = self._rendered.pop(study_id, None)
            if rendered is None or rendered.runs_deleted != deleted:
                bundle = await self.store.read(db.study_snapshot, study_id)
                if bundle is None:
                    raise NotFound(f"no study {study_id}", code="study_not_found", params={"study_id": study_id})
                rendered = RenderedStudy(bundle, deleted)
            else:
                delta = await self.store.read(db.study_delta, study_id, rendered.cursor)
                if delta is None:
                    raise NotFound(f"no study {study_id}", code="study_not_found", params={"study_id": study_id})
                rendered.apply(delta)
            self._rendered[study_id] = rendered  # most recently read last
            while len(self._rendered) > RENDERED_KEPT:
                self._rendered.pop(next(iter(self._rendered)))
            body = rendered.reusable(view)
            if body is not None:
                return body
            results = await self.results(rendered.study, rendered.labels, rendered.attempt_list())
            render = rendered.render if view == FULL else rendered.render_summary
            return await asyncio.to_thread(render, results, self.clock())

    async def wait_past(self, study_id: str, revision: int, wait: float) -> None:
        """Return once the study is past `revision`, or is not active, or `wait` seconds have gone
        by. Past it while it runs, READ_BATCH_S more for the changes that follow: a busy study
        changes every few ms, so a follower that comes back finds it moved already, and answered
        at once it would read the whole document for every one or two attempts (those reads
        were what slowed a study two readers followed)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        while True:
            changed = self.changed(study_id)  # before the read: a change committed after it sets this
            row = self._rows.get(study_id) if study_id in self._tallies else None
            study = row if row is not None else await self.store.read(db.get_study, study_id)
            if study is None:
                self._changed.pop(study_id, None)
                raise NotFound(f"no study {study_id}", code="study_not_found", params={"study_id": study_id})
            active = study["status"] in st.ACTIVE
            left = deadline - loop.time()
            # Past it, not merely other than it: the row held in memory may lag the stored one by a
            # retention harvest (written outside _change) until the study's next change.
            if study["revision"] > revision or not active:
                if active and left > 0:
                    await asyncio.sleep(min(READ_BATCH_S, left))
                return
            if left <= 0:
                return
            try:
                await asyncio.wait_for(changed.wait(), left)
            except asyncio.TimeoutError:
                return

    async def csv(self, study_id: str, view: str = "full", wait: float = 0.0, revision: int | None = None) -> str:
        """The table of the study as it stands. The JSON form's arguments are checked as there (a
        client that switches format keeps its query), though the table has one view and no poll."""
        check_read(view, wait, revision)
        study = await self.get(study_id)
        runs = [rep["current"]["run_id"] for v in study["variants"] for rep in v["repetitions"]
                if rep["current"] and rep["current"].get("run_id")]
        return study_csv(study, await self.store.inputs_of(runs))

    async def list(self, *, status: list[str] | None = None, offset: int = 0,
                   limit: int = LIST_LIMIT) -> dict[str, Any]:
        for s in status or ():
            if s not in st.STATUSES:
                raise BadRequest(f"unknown status {s!r}", code="invalid_status",
                                 params={"field": "status", "allowed": list(st.STATUSES)})
        if not 0 <= offset <= INT64_MAX or not 1 <= limit <= 500:
            raise BadRequest("offset must be >= 0 and limit from 1 to 500", code="invalid_page",
                             params={"field": "limit" if 0 <= offset <= INT64_MAX else "offset"})
        rows = await self.store.read(db.list_studies, status, offset, limit)
        return {"studies": [summary(r) for r in rows], "offset": offset, "limit": limit}

    async def events(self, study_id: str, cursor: int = 0, wait: float = 0.0) -> dict[str, Any]:
        if not 0 <= cursor <= INT64_MAX:
            raise BadRequest("cursor must be from 0 to 2^63-1", code="invalid_cursor", params={"field": "cursor"})
        check_wait(wait)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        lingered = False
        while True:
            changed = self.changed(study_id)  # before the read: a change committed after it sets this
            study, page = await self.store.read(db.study_events_page, study_id, cursor, EVENTS_PAGE)
            if study is None:
                self._changed.pop(study_id, None)
                raise NotFound(f"no study {study_id}", code="study_not_found", params={"study_id": study_id})
            left = deadline - loop.time()
            if page and not lingered and left > 0 and study["status"] in st.ACTIVE and len(page) < EVENTS_PAGE:
                # A running study appends events every few ms: a follower answered at once would
                # come back for each one or two, and those requests (~2 ms of the server each)
                # slowed the study itself. Wait a moment for the ones that follow, once.
                lingered = True
                await asyncio.sleep(min(EVENTS_BATCH_S, left))
                continue
            if page or left <= 0 or study["status"] not in st.ACTIVE:
                return {"study_id": study_id, "status": study["status"], "revision": study["revision"],
                        "events": page, "cursor": page[-1]["cursor"] if page else cursor,
                        "more": len(page) == EVENTS_PAGE}
            try:
                await asyncio.wait_for(changed.wait(), left)
            except asyncio.TimeoutError:
                pass

    # -- commands -----------------------------------------------------------------------------------
    async def _owned(self, study_id: str, user: str | None, admin: bool, action: str,
                     expected_revision: Any) -> dict[str, Any]:
        study = await self.store.read(db.get_study, study_id)
        if study is None:
            raise NotFound(f"no study {study_id}", code="study_not_found", params={"study_id": study_id})
        if not admin and study["owner"] not in (None, user):
            raise Forbidden(f"study {study_id} belongs to {study['owner']}; only they or an admin may {action} it",
                            params={"owner": study["owner"]})
        if expected_revision is not None and study["revision"] != expected_revision:
            raise Conflict(f"study {study_id} is at revision {study['revision']}, not {expected_revision}",
                           code="revision_moved", params={"field": "expected_revision",
                                                          "expected_revision": expected_revision,
                                                          "revision": study["revision"]})
        return study

    async def cancel(self, study_id: str, body: Any = None, *, user: str | None = None,
                     admin: bool = True) -> dict[str, Any]:
        expected = _command_body(body, ())
        async with self.lock(study_id):
            study = await self._owned(study_id, user, admin, "cancel", expected)
            status = study["status"]
            if status == st.SUCCEEDED:
                raise Conflict(f"study {study_id} has already succeeded", code="study_succeeded",
                               params={"status": status})
            in_flight = [a for a in (await self._attempts(study_id)) if a["status"] in st.IN_FLIGHT]
            if status == st.CANCELLED:
                return {**await self.get(study_id), "cancelled_runs": []}
            if status != st.CANCEL_REQUESTED:
                if in_flight:
                    change = db.Change(study={"status": st.next_status(status, "cancel")},
                                       events=[("study_cancel_requested", {"runs": [a["run_id"] for a in in_flight]})])
                else:
                    change = db.Change(study={"status": st.next_status(status, "cancel_now")},
                                       events=[("study_cancel_requested", {"runs": []}), ("study_cancelled", {})])
                if await self._change(study_id, change, expected) is None:
                    raise Conflict(f"study {study_id} moved", code="revision_moved",
                                   params={"field": "expected_revision"})
            reached = []
            for a in in_flight:
                try:
                    await self.runs.cancel(a["run_id"])
                    reached.append(a["run_id"])
                except ServiceError:
                    pass  # it ended meanwhile, or this process does not hold it
        return {**await self.get(study_id), "cancelled_runs": reached}

    async def resume(self, study_id: str, body: Any = None, *, user: str | None = None,
                     admin: bool = True) -> dict[str, Any]:
        expected = _command_body(body, ("budget",))
        async with self.lock(study_id):
            study = await self._owned(study_id, user, admin, "resume", expected)
            if study["status"] not in st.RESUMABLE:
                raise Conflict(f"a {study['status']} study cannot be resumed (only interrupted, cancelled, failed "
                               "or halted ones)", code="study_not_resumable", params={"status": study["status"]})
            budget = None
            if isinstance(body, dict) and body.get("budget") is not None:
                budget = parse_budget(body["budget"])
                variants = await self.store.read(db.get_variants, study_id)
                check_budget_covers(budget, len(variants) * study["repetitions"])
            if await self.resume_locked(study_id, budget, expected_revision=expected) is None:
                raise Conflict(f"study {study_id} moved", code="revision_moved", params={"field": "expected_revision"})
        return await self.get(study_id)


def check_read(view: str, wait: float, revision: int | None) -> None:
    """GET studies/{id}'s arguments, either format: 400 naming the one that is out of range."""
    if view not in VIEWS:
        raise BadRequest(f"view must be one of {', '.join(VIEWS)}", code="invalid_view",
                         params={"field": "view", "allowed": list(VIEWS)})
    check_wait(wait)
    if revision is not None and not 0 <= revision <= INT64_MAX:
        raise BadRequest("revision must be from 0 to 2^63-1", code="invalid_revision", params={"field": "revision"})


def check_wait(wait: float) -> None:
    if not 0 <= wait <= WAIT_MAX_S:  # NaN too
        raise BadRequest(f"wait must be from 0 to {WAIT_MAX_S:g} seconds", code="invalid_wait",
                         params={"field": "wait"})


def _command_body(body: Any, extra: tuple[str, ...]) -> int | None:
    """The expected_revision of a cancel or resume body (both optional)."""
    if body is None or body == {}:
        return None
    if not isinstance(body, dict):
        raise SchemaError("", "expected a JSON object")
    for key in body:
        if key not in ("expected_revision", *extra):
            raise SchemaError(key, f"unknown key (allowed: {', '.join(sorted(('expected_revision', *extra)))})")
    expected = body.get("expected_revision")
    if expected is None:
        return None
    if isinstance(expected, float) and expected.is_integer():
        expected = int(expected)
    if isinstance(expected, bool) or not isinstance(expected, int) or expected < 0:
        raise SchemaError("expected_revision", "expected a non-negative integer")
    return expected
