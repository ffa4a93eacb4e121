"""The study coordinator over a real run service and a real store (an SQLite file, and a database
on a real PostgreSQL server: `store_at`), without a web server: a
refused child fails its study (and a resume carries on), and start-up reconciliation of the states
a crash can leave (a child submitted but not recorded, a stamp with no child, a cancel in
progress, an auto study whose budget is used up)."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pg_server import connect_raw

from codefy_jupyter.core.config import Settings
from codefy_jupyter.core.errors import BadRequest
from codefy_jupyter.core.experiments.studies.study_service import StudyService
from codefy_jupyter.core.runs.run_service import RunService
from codefy_jupyter.core.workers.worker_service import WorkerService
from codefy_jupyter.core.store.database import Store


def edge(s, sp, t, tp):
    return {"source": s, "source_port": sp, "target": t, "target_port": tp}


def mean_graph(values):
    return {"nodes": [{"id": "vals", "type": "List", "params": {"values": values}}, {"id": "m", "type": "Mean"}],
            "edges": [edge("vals", "values", "m", "values")]}


def spec(**extra):
    return {"name": "unit", "objective": {"node_id": "m", "metric": "mean", "direction": "minimize"},
            "variants": [{"label": "a", "graph": mean_graph([1, 3])}, {"label": "b", "graph": mean_graph([5, 7])}],
            "repetitions": 1, "seed": 3, **extra}


class RefusingRuns(RunService):
    """Refuses the submits numbered in `refuse` (1-based), as the run API would refuse a child."""
    refuse: set[int] = set()

    async def submit(self, body, **kw):
        self.calls = getattr(self, "calls", 0) + 1
        if self.calls in self.refuse:
            raise BadRequest("refused for the test", code="test_refusal", params={"field": "options.target"})
        return await super().submit(body, **kw)


@dataclass(frozen=True)
class Place:
    target: Any     # the store: an SQLite path or a postgresql:// URL
    data_dir: Path  # the run files


@pytest.fixture
def place(store_at, tmp_path):
    return Place(store_at("db.sqlite"), tmp_path)


async def open_services(place, cls=RunService):
    store = await Store.open(place.target)
    runs = cls(store, Settings.load({"data_dir": str(place.data_dir)}, env={}), data_dir=place.data_dir,
               workers=WorkerService)
    studies = StudyService(runs)  # before start: it follows recovery and retention
    await runs.start()
    await studies.start()
    return store, runs, studies


async def close(store, runs):
    await runs.shutdown()
    await store.close()


async def wait_status(studies, study_id, statuses, timeout=60.0):
    deadline = asyncio.get_running_loop().time() + timeout
    while (study := await studies.get(study_id))["status"] not in statuses:
        assert asyncio.get_running_loop().time() < deadline, study
        await asyncio.sleep(0.02)
    return study


async def event_types(studies, study_id):
    return [e["type"] for e in (await studies.events(study_id))["events"]]


def db(place):
    return connect_raw(place.target)


def test_a_refused_child_fails_the_study_and_a_resume_runs_its_repetition_again(place):
    async def main():
        RefusingRuns.refuse = {2}
        store, runs, studies = await open_services(place, RefusingRuns)
        _, study = await studies.create(spec())
        failed = await wait_status(studies, study["id"], {"failed"})
        lost = failed["variants"][1]["repetitions"][0]["current"]
        assert lost["status"] == "lost" and lost["error"]["code"] == "test_refusal"
        assert failed["error"]["code"] == "test_refusal"
        assert (await event_types(studies, study["id"]))[-2:] == ["attempt_lost", "study_failed"]
        resumed = await studies.resume(study["id"], {"expected_revision": failed["revision"]})
        assert resumed["error"] is None
        done = await wait_status(studies, study["id"], {"succeeded"})
        assert [r["label"] for r in done["rankings"]] == ["a", "b"]
        assert [a["status"] for a in done["variants"][1]["attempts"]] == ["lost", "succeeded"]
        await close(store, runs)

    asyncio.run(main())


def finished_study(place, **extra):
    """A study run to the end by a first process; its id and the attempts' ids by label."""
    async def main():
        store, runs, studies = await open_services(place)
        _, study = await studies.create(spec(**extra))
        done = await wait_status(studies, study["id"], {"succeeded"})
        await close(store, runs)
        return done["id"], {v["label"]: v["attempts"][0] for v in done["variants"]}

    return asyncio.run(main())


def test_restart_relinks_a_recorded_child_and_replaces_a_stamp_with_no_child(place):
    study_id, attempts = finished_study(place)
    conn = db(place)
    # As a crash leaves them: a's child ran but its record never came; b's child was never created.
    conn.execute("UPDATE studies SET status = 'running' WHERE id = ?", (study_id,))
    conn.execute("UPDATE study_attempts SET status = 'submitting', objective_value = NULL, evidence_copied = 0,"
                 " final_metrics = NULL WHERE id IN (?, ?)", (attempts["a"]["id"], attempts["b"]["id"]))
    conn.execute("DELETE FROM runs WHERE study_attempt_id = ?", (attempts["b"]["id"],))
    conn.close()

    async def main():
        store, runs, studies = await open_services(place)
        after = await studies.get(study_id)
        assert after["status"] == "interrupted"
        a = after["variants"][0]["repetitions"][0]["current"]
        assert a["id"] == attempts["a"]["id"] and a["status"] == "succeeded" and a["objective_value"] == 2.0
        b = after["variants"][1]["attempts"]
        assert [x["status"] for x in b] == ["lost", "pending"] and b[1]["seed"] == b[0]["seed"] == 3
        types = await event_types(studies, study_id)
        assert types[-5:] == ["attempt_relinked", "attempt_finished", "attempt_lost", "attempt_added",
                              "study_interrupted"]
        await studies.resume(study_id)
        done = await wait_status(studies, study_id, {"succeeded"})
        assert [r["label"] for r in done["rankings"]] == ["a", "b"]
        await close(store, runs)

    asyncio.run(main())
    conn = db(place)
    per_attempt = Counter(r[0] for r in conn.execute("SELECT study_attempt_id FROM runs WHERE study_id = ?",
                                                     (study_id,)))
    assert set(per_attempt.values()) == {1} and len(per_attempt) == 2  # a's one child, b's new attempt's one
    conn.close()


def test_restart_settles_a_cancel_in_progress_as_cancelled(place):
    study_id, attempts = finished_study(place)
    conn = db(place)
    conn.execute("UPDATE studies SET status = 'cancel_requested' WHERE id = ?", (study_id,))
    conn.execute("UPDATE study_attempts SET status = 'running' WHERE id = ?", (attempts["b"]["id"],))
    conn.execute("UPDATE runs SET status = 'cancelled' WHERE study_attempt_id = ?", (attempts["b"]["id"],))
    conn.close()

    async def main():
        store, runs, studies = await open_services(place)
        after = await studies.get(study_id)
        assert after["status"] == "cancelled" and after["counts"]["cancelled"] == 1
        page = await studies.events(study_id)
        assert page["events"][-1]["type"] == "study_cancelled"
        assert page["events"][-1]["payload"] == {"reason": "server_restart", "revision": after["revision"]}
        await close(store, runs)

    asyncio.run(main())


@pytest.mark.parametrize("budget, ending", [({"max_runs": 2}, "halted"), ({}, "succeeded")])
def test_an_auto_study_resumes_itself_after_a_restart_unless_its_budget_is_used_up(place, budget, ending):
    study_id, attempts = finished_study(place, resume_policy="auto", budget=budget)
    conn = db(place)
    conn.execute("UPDATE studies SET status = 'running' WHERE id = ?", (study_id,))
    conn.execute("UPDATE study_attempts SET status = 'running' WHERE id = ?", (attempts["b"]["id"],))
    conn.execute("UPDATE runs SET status = 'interrupted' WHERE study_attempt_id = ?", (attempts["b"]["id"],))
    conn.close()

    async def main():
        store, runs, studies = await open_services(place)
        final = await wait_status(studies, study_id, {ending})
        types = await event_types(studies, study_id)
        assert "study_interrupted" in types
        if ending == "halted":
            assert final["halt"] == {"budget": "max_runs", "limit": 2, "used": 2}
            payload = (await studies.events(study_id))["events"][-1]["payload"]
            assert payload["halt"] == final["halt"] and [r["label"] for r in payload["ranking"]] == ["a"]
        else:
            assert "study_resumed" in types
            assert [a["status"] for a in final["variants"][1]["attempts"]] == ["interrupted", "succeeded"]
        await close(store, runs)

    asyncio.run(main())



def test_restart_puts_right_the_attempts_of_a_study_that_had_stopped_scheduling(place):
    study_id, attempts = finished_study(place)
    conn = db(place)
    conn.execute("UPDATE studies SET status = 'failed' WHERE id = ?", (study_id,))
    conn.execute("UPDATE study_attempts SET status = 'running' WHERE id = ?", (attempts["b"]["id"],))
    conn.execute("UPDATE runs SET status = 'interrupted' WHERE study_attempt_id = ?", (attempts["b"]["id"],))
    conn.close()

    async def main():
        store, runs, studies = await open_services(place)
        after = await studies.get(study_id)
        assert after["status"] == "failed" and after["counts"]["interrupted"] == 1
        await studies.resume(study_id)
        done = await wait_status(studies, study_id, {"succeeded"})
        assert [a["status"] for a in done["variants"][1]["attempts"]] == ["interrupted", "succeeded"]
        await close(store, runs)

    asyncio.run(main())
