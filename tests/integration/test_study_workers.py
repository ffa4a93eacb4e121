"""A study whose children run on a real `codefy agent start` subprocess (a declared cuda inventory)
on loopback: its attempts say where they run as a sweep's variants do, `any` while they wait in the
`any` line and the worker once placed."""

from __future__ import annotations

from typing import Any

import pytest

from test_server_runs import call
from test_sweep_workers import NAPPING_MEAN, jp_server_config, one_card, until  # noqa: F401  (fixture)
from test_worker_placement_e2e import start_agent
from test_workers_e2e import agents, control, server_token, until_connected  # noqa: F401  (fixtures)

pytestmark = pytest.mark.slow


def nap(seconds: float) -> list[dict[str, Any]]:
    return [{"node_id": "nap", "param": "seconds", "value": seconds}]


async def read_study(jp_fetch, study_id: str) -> dict[str, Any]:
    code, doc = await call(jp_fetch, "api", "studies", study_id)
    assert code == 200, doc
    return doc


def attempts(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [a for v in doc["variants"] for a in v["attempts"]]


async def until_study(jp_fetch, study_id: str, test, timeout: float = 120.0) -> dict[str, Any]:
    return await until(lambda: read_study(jp_fetch, study_id), test, lambda doc: [
        (a["run_id"], a["status"], a.get("worker_id"), a.get("queue_key")) for a in attempts(doc)], timeout)


async def test_a_waiting_any_study_attempt_shows_any_then_its_worker(jp_fetch, agents, tmp_path):
    alpha = start_agent(agents, tmp_path, "alpha", one_card("alpha"))
    await until_connected(jp_fetch, alpha)
    # Four children at once on one card: one runs, three wait in the `any` line (this server has
    # no cuda card, so none can run here).
    body = {"name": "naps", "base_graph": NAPPING_MEAN, "repetitions": 2, "seed": 3,
            "variants": [{"label": "short", "ops": nap(1.5)}, {"label": "long", "ops": nap(1.6)}],
            "objective": {"node_id": "m", "metric": "mean", "direction": "minimize"},
            "budget": {"max_parallel_runs": 4}, "options": {"device": "cuda", "target": {"worker": "any"}}}
    code, study = await call(jp_fetch, "api", "studies", method="POST", body=body)
    assert code == 201, study

    def some_wait(doc: dict[str, Any]) -> bool:
        return sum(a["status"] == "queued" for a in attempts(doc)) >= 2

    first = await until_study(jp_fetch, study["id"], some_wait)
    waiting = [a for a in attempts(first) if a["status"] == "queued"]
    for a in waiting:
        assert a["worker_id"] == "any" and a["queue_key"] == "any/cuda", a
        # The run itself leaves an unplaced worker empty; only the study's view says `any`.
        code, run = await call(jp_fetch, "api", "runs", a["run_id"])
        assert code == 200
        if run["status"] == "queued":
            assert run["worker_id"] is None and run["queue_key"] == "any/cuda", run

    done = await until_study(jp_fetch, study["id"], lambda d: d["status"] == "succeeded", timeout=90)
    final = attempts(done)
    assert len(final) == 4
    for a in final:
        assert a["status"] == "succeeded", a
        assert (a["worker_id"], a["devices"], a["queue_key"]) == ("alpha", ["cuda:0"], "alpha/cuda:0"), a


def spec(variants: list[dict[str, Any]], repetitions: int, budget: dict[str, Any]) -> dict[str, Any]:
    return {"name": "budgets", "base_graph": NAPPING_MEAN, "repetitions": repetitions, "seed": 3,
            "variants": variants, "objective": {"node_id": "m", "metric": "mean", "direction": "minimize"},
            "budget": budget, "options": {"device": "cuda", "target": {"worker": "alpha"}}}


async def stopped_on_the_worker(jp_fetch, attempt: dict[str, Any]) -> dict[str, Any]:
    """The child's own run: placed on the agent, ended by a cancel the agent carried out (its log
    closes with the worker's stop, long before the nap it was given would have ended)."""
    code, run = await call(jp_fetch, "api", "runs", attempt["run_id"])
    assert code == 200 and run["worker_id"] == "alpha" and run["status"] == "cancelled", run
    assert run["finished_at"] - run["started_at"] < 100, run
    return run


async def test_time_budgets_stop_children_running_on_a_worker(jp_fetch, agents, tmp_path):
    alpha = start_agent(agents, tmp_path, "alpha", one_card("alpha"))
    await until_connected(jp_fetch, alpha)

    # max_run_seconds: the slow variant's child on the agent is stopped and ends timed_out; the
    # study goes on and finishes with the fast one.
    body = spec([{"label": "fast", "ops": nap(0.1)}, {"label": "slow", "ops": nap(300)}], 1,
                {"max_run_seconds": 8, "max_parallel_runs": 1})
    code, study = await call(jp_fetch, "api", "studies", method="POST", body=body)
    assert code == 201, study
    done = await until_study(jp_fetch, study["id"], lambda d: d["status"] == "succeeded", timeout=180)
    fast, slow = done["variants"][0]["repetitions"][0]["current"], done["variants"][1]["repetitions"][0]["current"]
    assert fast["status"] == "succeeded" and fast["worker_id"] == "alpha", fast
    assert slow["status"] == "timed_out" and slow["stop_reason"] == "max_run_seconds", slow
    await stopped_on_the_worker(jp_fetch, slow)
    assert [r["label"] for r in done["rankings"]] == ["fast"]

    # max_active_seconds: the running child on the agent is stopped, the study halts with what it
    # used, and the next repetition does not start.
    body = spec([{"label": "only", "ops": nap(300)}], 2, {"max_active_seconds": 4, "max_parallel_runs": 1})
    code, study = await call(jp_fetch, "api", "studies", method="POST", body=body)
    assert code == 201, study
    halted = await until_study(jp_fetch, study["id"], lambda d: d["status"] == "halted", timeout=180)
    current = halted["variants"][0]["repetitions"][0]["current"]
    assert current["status"] == "cancelled" and current["stop_reason"] == "max_active_seconds", current
    assert halted["halt"]["budget"] == "max_active_seconds" and halted["halt"]["used"] >= 4
    # The second repetition never started: its attempt stays pending.
    assert halted["counts"]["pending"] == 1 and [a["status"] for a in attempts(halted)] == ["cancelled", "pending"]
    await stopped_on_the_worker(jp_fetch, current)
    # The agent is free again: nothing of the study still runs there.
    code, listing = await call(jp_fetch, "api", "workers")
    alpha_row = next(w for w in listing["workers"] if w["name"] == "alpha")
    assert all(s["slots"]["taken"] == 0 for s in alpha_row["slots"]), alpha_row["slots"]
