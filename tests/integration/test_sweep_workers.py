"""Sweeps whose variants run on real `codefy agent start` subprocesses (declared cuda inventories) on
loopback against a real control plane: `any` spreads the variants over two workers, a worker killed
under a sweep, the `any/<device>` line a waiting variant shows; and a KFold cross-validation sweep."""

from __future__ import annotations

import asyncio
import json
import math
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from test_server_runs import all_events, call, wait_status
from test_worker_placement_e2e import start_agent
from test_workers_e2e import (  # noqa: F401  (fixtures)
    agents, control, edge, jp_server_config, server_token, settings, until_connected, until_event,
)

pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


# Node types every agent has (the catalog a worker must match for `any`): a list held for
# `nap.seconds`, then its mean logged as `mean`, so each variant has an objective to rank.
NAPPING_MEAN = {"nodes": [{"id": "l", "type": "List", "params": {"values": [1, 2, 3]}},
                          {"id": "nap", "type": "Sleep", "params": {"seconds": 0.1}},
                          {"id": "m", "type": "Mean", "params": {}}],
                "edges": [edge("l", "values", "nap", "value"), edge("nap", "value", "m", "values")]}


def one_card(name: str) -> list[dict[str, Any]]:
    # A UUID of its own: two workers offering one physical card would share its single slot.
    return [{"key": "cuda:0", "name": f"{name} card", "uuid": f"GPU-sweep-{name}", "memory_total_mib": 8192}]


def sweep_body(naps: list[float], **options: Any) -> dict[str, Any]:
    return {"base_graph": NAPPING_MEAN, "name": "naps",
            "sweep_spec": {"params": [{"node_id": "nap", "param": "seconds", "values": naps}]},
            "objective": {"metric": "mean", "direction": "minimize"}, "options": options}


async def post_sweep(jp_fetch, body: dict[str, Any]) -> dict[str, Any]:
    code, doc = await call(jp_fetch, "api", "sweeps", method="POST", body=body)
    assert code == 201, doc
    return doc


async def read_sweep(jp_fetch, sweep_id: str) -> dict[str, Any]:
    code, doc = await call(jp_fetch, "api", "sweeps", sweep_id)
    assert code == 200, doc
    return doc


async def until(read, test, describe, timeout: float = 120.0) -> dict[str, Any]:
    """`await read()` every 0.1 s until `test` holds of it; past `timeout`, fails with `describe(doc)`."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        doc = await read()
        if test(doc):
            return doc
        assert asyncio.get_running_loop().time() < deadline, describe(doc)
        await asyncio.sleep(0.1)


async def until_sweep(jp_fetch, sweep_id: str, test, timeout: float = 120.0) -> dict[str, Any]:
    return await until(lambda: read_sweep(jp_fetch, sweep_id), test, lambda doc: (doc["counts"], [
        (v["index"], v["status"], v["worker_id"], v["queue_key"]) for v in doc["variants"]]), timeout)


def settled(doc: dict[str, Any]) -> bool:
    return doc["state"] == "finished" and not doc["counts"].get("queued") and not doc["counts"].get("running")


def by_index(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return sorted(doc["variants"], key=lambda v: v["index"])


async def test_an_any_sweep_spreads_over_two_workers_and_a_waiting_variant_shows_any(jp_fetch, agents, tmp_path):
    alpha = start_agent(agents, tmp_path, "alpha", one_card("alpha"))
    beta = start_agent(agents, tmp_path, "beta", one_card("beta"))
    await until_connected(jp_fetch, alpha)
    await until_connected(jp_fetch, beta)
    # Four variants, two cards: two run at once and the other two wait in the `any` line. This
    # server has no cuda card, so none of them can run here.
    doc = await post_sweep(jp_fetch, sweep_body([3.0, 3.1, 3.2, 3.3], device="cuda",
                                                target={"worker": "any"}))
    assert doc["total_combinations"] == 4

    first = await read_sweep(jp_fetch, doc["sweep_id"])
    waiting = [v for v in first["variants"] if v["status"] == "queued"]
    assert len(waiting) >= 2, first["variants"]
    for v in waiting:
        assert v["worker_id"] == "any" and v["queue_key"] == "any/cuda", v
    # The runs API leaves an unplaced run's worker empty; its queue is the `any` line.
    for v in waiting:
        code, run = await call(jp_fetch, "api", "runs", v["run_id"])
        assert code == 200
        if run["status"] == "queued":
            assert run["worker_id"] is None and run["queue_key"] == "any/cuda", run

    # Both cards busy at once at some point: each worker holds one variant.
    both = await until_sweep(jp_fetch, doc["sweep_id"],
                             lambda d: {v["worker_id"] for v in d["variants"] if v["status"] == "running"}
                             == {"alpha", "beta"})
    assert both["state"] == "running"

    done = await until_sweep(jp_fetch, doc["sweep_id"], settled, timeout=90)
    assert done["counts"] == {"succeeded": 4}
    variants = by_index(done)
    assert {v["worker_id"] for v in variants} == {"alpha", "beta"}
    for v in variants:
        assert v["devices"] == ["cuda:0"] and v["queue_key"] == f"{v['worker_id']}/cuda:0", v
        assert v["objective"] == 2.0 and v["rank"] is not None
    code, page = await call(jp_fetch, "api", "runs", limit=50)
    assert code == 200
    rows = {r["id"]: r for r in page["runs"]}
    for v in variants:
        row = rows[v["run_id"]]
        assert row["sweep_id"] == doc["sweep_id"] and row["sweep_variant"] == v["index"]
        assert row["worker_id"] == v["worker_id"] and row["status"] == "succeeded"


@settings(worker_resume_grace_s=2)
async def test_a_killed_worker_interrupts_its_running_variant_and_the_rest_wait_for_it(jp_fetch, agents, tmp_path):
    alpha = start_agent(agents, tmp_path, "alpha", one_card("alpha"))
    await until_connected(jp_fetch, alpha)
    doc = await post_sweep(jp_fetch, sweep_body([30.0, 0.2, 0.3], device="cuda:0",
                                                target={"worker": "alpha"}))
    variants = by_index(doc)
    running = variants[0]["run_id"]
    await until_event(jp_fetch, running, lambda e: e["type"] == "node_status"
                      and e["payload"]["node_id"] == "nap" and e["payload"]["status"] == "running")
    os.kill(alpha.proc.pid, signal.SIGKILL)

    # The running child ends interrupted once the grace is over; the queued ones wait for the worker.
    gone = await wait_status(jp_fetch, running, {"interrupted", "failed", "succeeded"}, timeout=120)
    assert gone["status"] == "interrupted", gone
    codes = [e["payload"].get("code") for e in await all_events(jp_fetch, running) if e["type"] == "run_warning"]
    assert "worker_disconnected" in codes
    reasons = []
    for v in variants[1:]:
        code, row = await call(jp_fetch, "api", "runs", v["run_id"])
        assert code == 200 and row["status"] == "queued" and row["worker_id"] == "alpha", row
        reasons.append(row["queue_reason"]["code"])
    # The first in line waits for the worker; the one after it, behind that one.
    assert reasons == ["worker_disconnected", "behind_waiting_run"]
    doc = await read_sweep(jp_fetch, doc["sweep_id"])
    assert doc["state"] == "running" and doc["counts"] == {"interrupted": 1, "queued": 2}, doc

    # A sweep submitted while the worker is away is accepted, not failed: its variants wait too.
    later = await post_sweep(jp_fetch, sweep_body([0.1], device="cuda:0", target={"worker": "alpha"}))
    assert later["variants"][0]["status"] == "queued"
    assert (await read_sweep(jp_fetch, later["sweep_id"]))["state"] == "running"

    again = start_agent(agents, tmp_path, "alpha", one_card("alpha"))
    await until_connected(jp_fetch, again)
    done = await until_sweep(jp_fetch, doc["sweep_id"], settled)
    assert done["counts"] == {"interrupted": 1, "succeeded": 2}
    rows = by_index(done)
    assert rows[0]["status"] == "interrupted" and rows[0]["rank"] is None and rows[0]["objective"] is None
    assert [v["worker_id"] for v in rows[1:]] == ["alpha", "alpha"]
    assert all(v["rank"] is not None for v in rows[1:])
    assert (await until_sweep(jp_fetch, later["sweep_id"], settled))["counts"] == {"succeeded": 1}


def small_kfold() -> dict[str, Any]:
    """examples/kfold_regression.json cut down to seconds: 3 folds of 120 rows, two epochs."""
    graph = json.loads((EXAMPLES / "kfold_regression.json").read_text())
    params = {"data": {"n_samples": 120}, "kfold": {"n_folds": 3}, "train": {"epochs": 2}}
    for node in graph["nodes"]:
        node["params"].update(params.get(node["id"], {}))
    graph.pop("settings", None)
    return graph


async def test_a_kfold_sweep_runs_each_fold_once_and_ranks_the_folds(jp_fetch):
    body = {"base_graph": small_kfold(), "name": "cv",
            "sweep_spec": {"params": [{"node_id": "kfold", "param": "fold", "values": [0, 1, 2]}],
                           "seed": 11}, "seed_variants": True,
            "objective": {"metric": "r2", "node_id": "eval", "direction": "maximize"}}
    doc = await post_sweep(jp_fetch, body)
    assert [v["params"][0]["value"] for v in by_index(doc)] == [0, 1, 2]
    assert [v["seed"] for v in by_index(doc)] == [11, 12, 13]
    done = await until_sweep(jp_fetch, doc["sweep_id"], settled, timeout=100)
    assert done["counts"] == {"succeeded": 3}, done
    variants = done["variants"]
    # Each fold records its own r2 from RegressionMetrics; the sweep ranks them but does not average.
    assert [v["rank"] for v in variants] == [1, 2, 3]
    values = [v["objective"] for v in variants]
    assert all(math.isfinite(x) for x in values) and values == sorted(values, reverse=True)
    assert all(v["objective_node_id"] == "eval" and v["final_metrics"]["r2"] == v["objective"] for v in variants)
    assert done["best"]["index"] == variants[0]["index"]
