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
