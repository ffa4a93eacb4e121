"""Sweeps on a real jupyter-server with a real SQLite file: every refusal, ranking, harvest across
retention and delete, cancel and owners (the restart and the CLI: test_sweeps_headless.py)."""

from __future__ import annotations

import asyncio
import csv
import io
import json

import pytest

from test_server_runs import call, wait_status


@pytest.fixture
def jp_server_config(tmp_path):
    return {"ServerApp": {"jpserver_extensions": {"codefy_jupyter": True}},
            "CodefyApp": {"data_dir": str(tmp_path / "codefy")}}


@pytest.fixture(autouse=True)
def score_node():
    """`Score` logs `score` = x * k (+ 0 or 100 for mode b) under its own node id; it can sleep
    (cooperatively) first, fail after logging, and log a second series `aux`."""
    from codefy_jupyter.engine import default_registry, param

    reg = default_registry()
    if reg.get("Score") is None:
        @reg.node("Score", outputs={"y": "float"}, cacheable=False,
                  params={"x": param.float(1.0, min=-100, max=100), "k": param.int(1, min=0, max=1000),
                          "mode": param.select("a", options=["a", "b"]), "flag": param.bool(False),
                          "label": param.string(""), "nap": param.float(0.0, min=0, max=60),
                          "fail": param.bool(False), "key": param.secret(""), "data": param.json([])})
        async def score(ctx, x, k, mode, flag, label, nap, fail, key, data):
            loop = asyncio.get_running_loop()
            deadline = loop.time() + nap
            while loop.time() < deadline:
                ctx.check_cancelled()
                await asyncio.sleep(0.02)
            value = x * k + (100 if mode == "b" else 0)
            ctx.log_metric("aux", 1.0, step=0)
            ctx.log_metric("score", value + 1000, step=0)
            ctx.log_metric("score", value, step=1)
            if fail:
                raise RuntimeError("failed after logging")
            return {"y": value}
    yield


GRAPH = {"nodes": [{"id": "s", "type": "Score", "params": {"x": 1.0, "k": 1}}], "edges": []}
TWO = {"nodes": [{"id": "s", "type": "Score", "params": {}}, {"id": "t", "type": "Score", "params": {}}],
       "edges": []}


def sweep_body(params=None, graph=GRAPH, **extra):
    spec = {"params": params or [{"node_id": "s", "param": "x", "values": [3.0, 1.0, 2.0]}]}
    spec.update(extra.pop("spec", {}))
    body = {"base_graph": graph, "name": "xs", "sweep_spec": spec,
            "objective": {"metric": "score", "direction": "minimize"}}
    body.update(extra)
    return body


async def post_sweep(jp_fetch, body, expect=201):
    code, doc = await call(jp_fetch, "api", "sweeps", method="POST", body=body)
    assert code == expect, doc
    return doc


async def wait_sweep(jp_fetch, sweep_id, timeout=30.0, **params):
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        code, doc = await call(jp_fetch, "api", "sweeps", sweep_id, wait=2, **params)
        assert code == 200, doc
        if doc["state"] in ("finished", "failed") and not doc["counts"].get("queued") \
                and not doc["counts"].get("running"):
            return doc
        assert asyncio.get_running_loop().time() < deadline, doc["counts"]


async def sweep_runs(jp_fetch):
    code, page = await call(jp_fetch, "api", "runs", limit=50)
    return [r for r in page["runs"] if r.get("sweep_id")]


async def test_a_grid_sweep_runs_every_variant_and_ranks_them(jp_fetch):
    doc = await post_sweep(jp_fetch, sweep_body())
    assert doc["total_combinations"] == 3 and doc["state"] == "running"
    assert doc["params"] == [{"node_id": "s", "param": "x", "domain": [3.0, 1.0, 2.0]}]
    assert [v["index"] for v in doc["variants"]] == [0, 1, 2]
    assert [v["params"][0]["value"] for v in doc["variants"]] == [3.0, 1.0, 2.0]
    assert all(v["status"] in ("queued", "running") and v["run_id"] for v in doc["variants"])
    done = await wait_sweep(jp_fetch, doc["sweep_id"])
    assert done["state"] == "finished" and done["counts"] == {"succeeded": 3}
    assert [(v["index"], v["rank"], v["objective"]) for v in done["variants"]] == [(1, 1, 1.0), (2, 2, 2.0),
                                                                                    (0, 3, 3.0)]
    first = done["variants"][0]
    assert first["objective_node_id"] == "s" and first["run_exists"] is True
    assert first["final_metrics"] == {"aux": 1.0, "score": 1.0} and first["final_metrics_node_id"] == "s"
    assert first["queue_key"] and first["devices"] == ["cpu"]
    assert done["best"]["index"] == 1 and done["objective_warning"] is None
    runs = {r["id"]: r for r in await sweep_runs(jp_fetch)}
    for v in done["variants"]:
        run = runs[v["run_id"]]
        assert run["sweep_id"] == doc["sweep_id"] and run["sweep_variant"] == v["index"]
        assert run["name"] == f"xs #{v['index'] + 1}" and run["lane"] == "queued"
    code, page = await call(jp_fetch, "api", "sweeps")
    assert code == 200 and page["sweeps"][0]["sweep_id"] == doc["sweep_id"] and page["total"] == 1
