"""The sweeps the server owns: create (check everything, write the sweep and its variant rows,
then submit every child), read (harvest finished children onto the rows, settle the state, rank),
cancel, and the retention hook that harvests before children are pruned.

The decisions live in spec.py (422), expand.py (400s and the variants) and results.py (the
table); this module only moves rows between the store, the run service and those functions.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import uuid
from functools import partial
from typing import Any, Mapping, Sequence

from ...errors import BadRequest, Conflict, Forbidden, NotFound, ServiceError
from ...contract import lifecycle as rs
from ...runs.run_service import RunService
from ...runs.submit import VALIDATE_INLINE_ITEMS
from ...scheduling.quotas import Reservation
from ...store import sweeps as sweep_store
from ..children import check_child_options, sweep_child_name
from ..params import with_params
from . import results
from .expand import Caps, plan_sweep
from .spec import parse_sweep

log = logging.getLogger(__name__)

LIST_LIMIT = 50
WAIT_MAX_S = 60.0


def decide_harvest(objective: Mapping[str, Any], status: str, points: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The one place a harvest is decided, for reads, cancels and retention alike."""
    return results.harvest_fields(objective, status, points)


def _read_state(conn: sqlite3.Connection, sweep_id: str) -> tuple[dict | None, dict, dict]:
    """The sweep, its existing children and their metric points, in one reader hop."""
    sweep = sweep_store.select_sweep(conn, sweep_id)
    if sweep is None:
        return None, {}, {}
    children = sweep_store.select_child_runs(conn, sweep_id)
    return sweep, children, sweep_store.select_points(conn, list(children))


def _active_children(conn: sqlite3.Connection) -> list[tuple[str, str]]:
    return conn.execute("SELECT id, sweep_id FROM runs WHERE sweep_id IS NOT NULL AND status IN (?, ?, ?)",
                        tuple(sorted(rs.ACTIVE))).fetchall()


class SweepService:
    def __init__(self, runs: RunService) -> None:
        self.runs = runs
        self.store = runs.store
        self._sweep_of: dict[str, str] = {}  # active child run -> its sweep (to wake followers)
        self._changes: dict[str, int] = {}
        self._changed: dict[str, asyncio.Event] = {}
        runs.add_observer(self)
        self.store.add_prune_hook(self)

    async def start(self) -> None:
        """Called once the run service has recovered, before anything is served: follow the
        children still active (recovery retired the ones a dead process left behind)."""
        for run_id, sweep_id in await self.store.read(_active_children):
            self._sweep_of[run_id] = sweep_id

    # -- run observer and retention hook --------------------------------------------------------
    def run_started(self, run_id: str) -> None:
        self._touch(self._sweep_of.get(run_id))

    def run_finished(self, run_id: str, status: str) -> None:
        self._touch(self._sweep_of.pop(run_id, None))

    def _touch(self, sweep_id: str | None) -> None:
        if sweep_id is None:
            return
        self._changes[sweep_id] = self._changes.get(sweep_id, 0) + 1
        event = self._changed.pop(sweep_id, None)
        if event is not None:
            event.set()

    def harvest(self, conn: sqlite3.Connection, run_ids: Sequence[str]) -> None:
        sweep_store.harvest_before_prune(conn, run_ids, decide_harvest)

    def harvest_failed(self, conn: sqlite3.Connection, run_ids: Sequence[str], error: Exception) -> None:
        log.error("codefy: retention could not harvest sweep results before deleting runs: %s", error)
        sweep_store.note_harvest_failed(conn, run_ids, error)

    # -- create -----------------------------------------------------------------------------------
    async def create(self, body: Any, *, owner: str | None = None) -> dict[str, Any]:
        req = parse_sweep(body)  # 422
        options = check_child_options(req.options, "sweep")  # 400
        settings = self.runs.settings
        caps = Caps(settings.max_sweep_runs, settings.max_sweep_params, settings.max_sweep_domain)
        plan = plan_sweep(req, self.runs.registry, caps, options)
        # Every refusal a single child would get (graph, device, target) refuses the sweep now.
        await self.runs.preflight({"graph": req.base_graph, "name": req.name, "options": options})
        # Every child is queued at once: the owner's queued cap refuses the sweep whole (429), never
        # halfway. The room is reserved now, so that submits running meanwhile cannot take it.
        reservation = self.runs.reserve(owner, len(plan.combinations))
        try:
            return await self._create(req, plan, options, owner, reservation)
        finally:
            self.runs.release(reservation)  # what a child that was not queued did not use

    async def _create(self, req: Any, plan: Any, options: dict[str, Any], owner: str | None,
                      reservation: Reservation) -> dict[str, Any]:
        sweep_id = uuid.uuid4().hex[:16]
        ids = os.urandom(8 * len(plan.combinations)).hex()  # one call, not 1,000 uuid4()s
        run_ids = [ids[i:i + 16] for i in range(0, len(ids), 16)]
        swept = [p.to_json() for p in plan.params]
        sweep = {"id": sweep_id, "name": req.name, "owner": owner, "state": results.RUNNING, "method": req.method,
                 "objective": req.objective.to_json(), "params": swept, "spec": req.raw_spec, "options": options,
                 "seed_variants": req.seed_variants, "total_combinations": plan.total_combinations,
                 "error": None, "failure": None, "created_at": self.runs.clock(), "finished_at": None}
        try:
            answers = await self._submit_children(req, plan, options, sweep, run_ids, owner, reservation)
        except BaseException:
            for run_id in run_ids:
                self._sweep_of.pop(run_id, None)
            raise
        failures = [(i, a) for i, a in enumerate(answers) if isinstance(a, BaseException)]
        state, failure = results.RUNNING, None
        if failures:
            first = failures[0][1]
            failure = (f"the submit loop broke at variant {failures[0][0]} ({len(failures)} of {len(answers)} "
                       f"variants not queued): {first}")
            log.error("codefy: sweep %s: %s", sweep_id, failure)
            for i, _ in failures:
                self._sweep_of.pop(run_ids[i], None)
            await self.store.write(partial(sweep_store.mark_failed, sweep_id=sweep_id,
                                           unsubmitted=[i for i, _ in failures], failure=failure))
            state = results.FAILED
        out = []
        for i, answer in enumerate(answers):
            queued = not isinstance(answer, BaseException)
            out.append({"index": i, "run_id": run_ids[i] if queued else None,
                        "status": answer["status"] if queued else results.NOT_SUBMITTED,
                        "seed": answer.get("seed") if queued else plan.seeds[i],
                        "params": results.params_view(swept, plan.combinations[i])})
        return {"sweep_id": sweep_id, "name": req.name, "state": state, "failure": failure,
                "objective": sweep["objective"], "total_combinations": plan.total_combinations,
                "params": swept, "variants": out}

    async def _submit_children(self, req: Any, plan: Any, options: dict[str, Any], sweep: dict[str, Any],
                               run_ids: list[str], owner: str | None, reservation: Reservation) -> list[Any]:
        """Write the sweep and submit every child; an answer per variant (the run's view, or the
        exception that broke it). Raises, with no child left queued, when the sweep cannot be
        written.

        The first child starts as soon as a plain run would: the sweep's row and the first
        variant's are written with it (queued right ahead of its row; the store commits writes in
        call order, so the sweep is durable no later than its child), and the other variants'
        rows only once it is in, so that its commit does not wait on theirs (~10 ms for 1,000); the
        other variants are not even built before it has started (~1 ms for 1,000).
        Then the rest. Submits of small graphs are started together: each takes its place in the
        queue before its first await (in index order), and their row writes share the store's
        group commit. A big graph is validated in a thread, which could reorder them, so those go
        one by one."""
        sweep_id = sweep["id"]
        keys = [(p.node_id, p.param) for p in plan.params]

        def variant(i: int) -> dict[str, Any]:
            return {"index": i, "run_id": run_ids[i], "params": plan.combinations[i], "seed": plan.seeds[i]}

        def child(i: int) -> Any:
            child_options = dict(options)
            if plan.seeds[i] is not None:
                child_options["seed"] = plan.seeds[i]
            body = {"graph": with_params(req.base_graph, dict(zip(keys, plan.combinations[i]))),
                    "name": sweep_child_name(req.name, i), "options": child_options}
            return self.runs.submit(body, owner=owner, run_id=run_ids[i],
                                    links={"sweep_id": sweep_id, "sweep_variant": i}, reservation=reservation)

        self._sweep_of[run_ids[0]] = sweep_id
        written = asyncio.ensure_future(self.store.write(partial(sweep_store.insert_sweep, sweep=sweep,
                                                                 variants=[variant(0)])))
        submitting = asyncio.gather(child(0), return_exceptions=True)  # its row queues behind `written`
        try:
            await written
        except BaseException:
            first = (await submitting)[0]
            if not isinstance(first, BaseException):  # it was queued with no sweep to hold it
                log.error("codefy: sweep %s could not be written; cancelling its first child %s", sweep_id, run_ids[0])
                try:
                    await self.runs.cancel(run_ids[0])
                except ServiceError:
                    pass  # it ended already
            raise
        answers: list[Any] = [(await submitting)[0]]
        if len(run_ids) == 1:
            return answers
        for run_id in run_ids[1:]:
            self._sweep_of[run_id] = sweep_id
        try:
            await self.store.write(partial(sweep_store.insert_variants, sweep_id=sweep_id,
                                           variants=[variant(i) for i in range(1, len(run_ids))]))
        except Exception as err:  # the others cannot be submitted: the sweep fails, as when the loop breaks
            log.error("codefy: sweep %s: writing its variants failed: %s", sweep_id, err)
            return answers + [err] * (len(run_ids) - 1)
        graph = req.base_graph
        size = len(graph.get("nodes") or ()) + len(graph.get("edges") or ())
        if size <= VALIDATE_INLINE_ITEMS:
            return answers + list(await asyncio.gather(*(child(i) for i in range(1, len(run_ids))),
                                                       return_exceptions=True))
        if isinstance(answers[0], BaseException):  # the loop broke at once: no other is submitted
            return answers * len(run_ids)
        for i in range(1, len(run_ids)):
            try:
                answers.append(await child(i))
            except Exception as err:  # the loop broke: the rest are not submitted either
                answers += [err] * (len(run_ids) - i)
                break
        return answers

    # -- reads ----------------------------------------------------------------------------------
    async def _load(self, sweep_id: str) -> tuple[dict, dict, dict]:
        sweep, children, points = await self.store.read(_read_state, sweep_id)
        if sweep is None:
            raise NotFound(f"no sweep {sweep_id}", code="sweep_not_found", params={"sweep_id": sweep_id})
        return sweep, children, points

    async def _refresh(self, sweep: dict, children: dict, points: dict) -> dict[str, Any]:
        """Harvest what finished, settle the state, and build the ranked table."""
        harvests = {}
        for v in sweep["variants"]:
            run = children.get(v["run_id"]) if v["run_id"] else None
            if run is not None and not v["harvested"] and run["status"] in rs.FINISHED:
                harvests[v["index"]] = decide_harvest(sweep["objective"], run["status"], points[v["run_id"]])
        if harvests:
            await self.store.write(partial(sweep_store.write_harvest, sweep_id=sweep["id"], harvests=harvests))
            for v in sweep["variants"]:
                if v["index"] in harvests:
                    v.update(harvests[v["index"]], harvested=True)
        views = [results.variant_view(sweep, v, children.get(v["run_id"]) if v["run_id"] else None,
                                      points.get(v["run_id"]) if v["run_id"] else None) for v in sweep["variants"]]
        state = results.settled_state(sweep["state"], [v["status"] for v in views])
        if state != sweep["state"]:
            finished_at = self.runs.clock()
            await self.store.write(partial(sweep_store.set_state, sweep_id=sweep["id"], state=state,
                                           only_if=(results.RUNNING, results.CANCELLING), finished_at=finished_at))
            sweep["state"], sweep["finished_at"] = state, finished_at
        doc = {"sweep_id": sweep["id"], "name": sweep["name"], "owner": sweep["owner"], "state": sweep["state"],
               "method": sweep["method"], "objective": sweep["objective"], "params": sweep["params"],
               "total_combinations": sweep["total_combinations"], "seed_variants": sweep["seed_variants"],
               "options": sweep["options"], "error": sweep["error"], "failure": sweep["failure"],
               "created_at": sweep["created_at"], "finished_at": sweep["finished_at"],
               "changes": self._changes.get(sweep["id"], 0)}
        doc.update(results.table(sweep, views))
        return doc

    async def get(self, sweep_id: str, *, wait: float = 0.0, changes: int | None = None) -> dict[str, Any]:
        """The sweep's table. With `wait`, a follower that saw `changes` waits (up to `wait` s) for
        one of the children to start or end before the read, unless the sweep has settled."""
        if not 0 <= wait <= WAIT_MAX_S:
            raise BadRequest(f"wait must be from 0 to {WAIT_MAX_S:g} seconds", code="invalid_wait",
                             params={"field": "wait"})
        doc = await self._refresh(*await self._load(sweep_id))
        seen = changes if changes is not None else doc["changes"]
        settled = doc["state"] in (results.FINISHED, results.FAILED) and not any(
            doc["counts"].get(s) for s in rs.ACTIVE)
        if wait <= 0 or doc["changes"] != seen or settled:
            return doc
        event = self._changed.setdefault(sweep_id, asyncio.Event())
        if self._changes.get(sweep_id, 0) == doc["changes"]:  # nothing changed while it read
            try:
                await asyncio.wait_for(event.wait(), wait)
            except asyncio.TimeoutError:
                pass
        return await self._refresh(*await self._load(sweep_id))

    async def list(self, *, offset: int = 0, limit: int = LIST_LIMIT) -> dict[str, Any]:
        if not 1 <= limit <= LIST_LIMIT:
            raise BadRequest(f"limit must be from 1 to {LIST_LIMIT}", code="invalid_limit", params={"field": "limit"})
        if not 0 <= offset <= 2**63 - 1:
            raise BadRequest("offset must not be negative", code="invalid_offset", params={"field": "offset"})
        rows, total = await self.store.read(sweep_store.select_sweeps, offset, limit)
        sweeps = [{"sweep_id": r["id"], "name": r["name"], "owner": r["owner"], "state": r["state"],
                   "method": r["method"], "objective": r["objective"], "total_combinations": r["total_combinations"],
                   "variant_count": r["variant_count"], "error": r["error"], "created_at": r["created_at"],
                   "finished_at": r["finished_at"]} for r in rows]
        return {"sweeps": sweeps, "total": total, "offset": offset, "limit": limit}

    # -- cancel -----------------------------------------------------------------------------------
    async def cancel(self, sweep_id: str, *, user: str | None = None, admin: bool = True) -> dict[str, Any]:
        sweep, children, _ = await self._load(sweep_id)
        if not admin and sweep["owner"] not in (None, user):
            raise Forbidden(f"sweep {sweep_id} belongs to {sweep['owner']}; only they or an admin may stop it",
                            params={"owner": sweep["owner"]})
        cancelled = already_finished = 0
        for v in sweep["variants"]:
            if v["run_id"] is None:
                continue  # never got a run
            run = children.get(v["run_id"])
            if run is None or run["status"] in rs.FINISHED:
                already_finished += 1
                continue
            if not self.runs.reachable(v["run_id"]):
                continue  # shows running, but another process runs it
            try:
                await self.runs.cancel(v["run_id"])
                cancelled += 1
            except (Conflict, NotFound):
                already_finished += 1  # it ended (or went) between the read and the cancel
            except ServiceError as err:
                log.warning("codefy: sweep %s: cancelling run %s failed: %s", sweep_id, v["run_id"], err)
        if cancelled:
            await self.store.write(partial(sweep_store.set_state, sweep_id=sweep_id, state=results.CANCELLING,
                                           only_if=(results.RUNNING,)))
        doc = await self._refresh(*await self._load(sweep_id))
        variants = sorted(doc["variants"], key=lambda v: v["index"])
        return {"sweep_id": sweep_id, "state": doc["state"], "cancelled": cancelled,
                "already_finished": already_finished, "counts": doc["counts"], "variants": variants}
