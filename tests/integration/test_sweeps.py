"""Sweeps on a real jupyter-server with a real store (an SQLite file, and a database on a real
PostgreSQL server through store_url: `store_at`): every refusal, ranking, harvest across
retention and delete, cancel and owners (the restart and the CLI: test_sweeps_headless.py)."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import re

import pytest

from test_server_runs import call, wait_status


@pytest.fixture
def jp_server_config(tmp_path, store_at):
    target = store_at("codefy.db")
    store_url = {"store_url": target, "run_files_shared": 1} if isinstance(target, str) else {}
    return {"ServerApp": {"jpserver_extensions": {"codefy_jupyter": True}},
            "CodefyApp": {"data_dir": str(tmp_path / "codefy"), **store_url}}


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


async def wait_sweep(jp_fetch, sweep_id, timeout=120.0, **params):
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


async def nothing_written(jp_fetch):
    code, page = await call(jp_fetch, "api", "sweeps")
    assert code == 200 and page["total"] == 0
    code, runs = await call(jp_fetch, "api", "runs")
    assert runs["total"] == 0


def _without(body, *path):
    *parents, last = path
    target = body
    for key in parents:
        target = target[key]
    del target[last]
    return body


def _with(body, value, *path):
    *parents, last = path
    target = body
    for key in parents:
        target = target[key]
    target[last] = value
    return body


RANGE = {"min": 1, "max": 3, "count": 3}
SCHEMA_CASES = [
    ("missing objective", lambda b: _without(b, "objective"), "objective"),
    ("missing base_graph", lambda b: _without(b, "base_graph"), "base_graph"),
    ("unknown top-level key", lambda b: _with(b, 1, "extra"), "extra"),
    ("unknown sweep_spec key", lambda b: _with(b, 1, "sweep_spec", "extra"), "sweep_spec.extra"),
    ("unknown objective key", lambda b: _with(b, 1, "objective", "extra"), "objective.extra"),
    ("unknown params entry key", lambda b: _with(b, 1, "sweep_spec", "params", 0, "extra"),
     "sweep_spec.params[0].extra"),
    ("unknown range key", lambda b: _with(b, {**RANGE, "step": 1}, "sweep_spec", "params", 0, "range")
     if _without(b, "sweep_spec", "params", 0, "values") else b, "sweep_spec.params[0].range.step"),
    ("method", lambda b: _with(b, "bayes", "sweep_spec", "method"), "sweep_spec.method"),
    ("scale", lambda b: _with(_without(b, "sweep_spec", "params", 0, "values"), {**RANGE, "scale": "ln"},
                              "sweep_spec", "params", 0, "range"), "sweep_spec.params[0].range.scale"),
    ("type", lambda b: _with(_without(b, "sweep_spec", "params", 0, "values"), {**RANGE, "type": "str"},
                             "sweep_spec", "params", 0, "range"), "sweep_spec.params[0].range.type"),
    ("direction", lambda b: _with(b, "up", "objective", "direction"), "objective.direction"),
    ("non-integer count", lambda b: _with(_without(b, "sweep_spec", "params", 0, "values"), {**RANGE, "count": 2.5},
                                          "sweep_spec", "params", 0, "range"), "sweep_spec.params[0].range.count"),
    ("string count", lambda b: _with(_without(b, "sweep_spec", "params", 0, "values"), {**RANGE, "count": "3"},
                                     "sweep_spec", "params", 0, "range"), "sweep_spec.params[0].range.count"),
    ("non-integer seed", lambda b: _with(b, 1.5, "sweep_spec", "seed"), "sweep_spec.seed"),
    ("boolean seed", lambda b: _with(b, True, "sweep_spec", "seed"), "sweep_spec.seed"),
    ("non-integer samples", lambda b: _with(b, "2", "sweep_spec", "samples"), "sweep_spec.samples"),
    ("null inside values", lambda b: _with(b, [1.0, None], "sweep_spec", "params", 0, "values"),
     "sweep_spec.params[0].values[1]"),
    ("list inside values", lambda b: _with(b, [[1.0]], "sweep_spec", "params", 0, "values"),
     "sweep_spec.params[0].values[0]"),
    ("object inside values", lambda b: _with(b, [{"v": 1}], "sweep_spec", "params", 0, "values"),
     "sweep_spec.params[0].values[0]"),
    ("blank metric", lambda b: _with(b, "  ", "objective", "metric"), "objective.metric"),
    ("both values and range", lambda b: _with(b, RANGE, "sweep_spec", "params", 0, "range"), "sweep_spec.params[0]"),
]


@pytest.mark.parametrize("case,change,field", SCHEMA_CASES, ids=[c[0] for c in SCHEMA_CASES])
async def test_a_body_outside_the_schema_is_a_422_naming_the_field(jp_fetch, case, change, field):
    body = change(sweep_body())
    refusal = await post_sweep(jp_fetch, body, expect=422)
    assert refusal["error"]["code"] == "invalid_request" and refusal["error"]["params"]["field"] == field, refusal
    await nothing_written(jp_fetch)


def x_values(values):
    return [{"node_id": "s", "param": "x", "values": values}]


REFUSALS = [
    ("repeated values", sweep_body(x_values([1.0, 2.0, 1.0])), "values_repeated", "sweep_spec.params[0].values"),
    ("unknown node", sweep_body([{"node_id": "nope", "param": "x", "values": [1]}]), "param_node_unknown",
     "sweep_spec.params[0]"),
    ("unknown param", sweep_body([{"node_id": "s", "param": "nope", "values": [1]}]), "param_unknown",
     "sweep_spec.params[0]"),
    ("secret param", sweep_body([{"node_id": "s", "param": "key", "values": ["a"]}]), "param_secret",
     "sweep_spec.params[0]"),
    ("json param", sweep_body([{"node_id": "s", "param": "data", "values": [1]}]), "param_not_settable",
     "sweep_spec.params[0]"),
    ("value above max", sweep_body(x_values([1.0, 500.0])), "param_value_invalid", "sweep_spec.params[0].values[1]"),
    ("select value", sweep_body([{"node_id": "s", "param": "mode", "values": ["a", "c"]}]), "param_value_invalid",
     "sweep_spec.params[0].values[1]"),
    ("range over a select", sweep_body([{"node_id": "s", "param": "mode", "range": RANGE}]), "range_not_numeric",
     "sweep_spec.params[0].range"),
    ("range past max", sweep_body([{"node_id": "s", "param": "x", "range": {"min": 1, "max": 200, "count": 2}}]),
     "param_value_invalid", "sweep_spec.params[0].range"),
    ("log range from zero", sweep_body([{"node_id": "s", "param": "x",
                                         "range": {"min": 0, "max": 1, "count": 3, "scale": "log"}}]),
     "range_log_min", "sweep_spec.params[0].range.min"),
    ("param twice", sweep_body(x_values([1.0]) + x_values([2.0])), "param_repeated", "sweep_spec.params[1]"),
    ("grid with samples", sweep_body(spec={"samples": 2}), "samples_not_allowed", "sweep_spec.samples"),
    ("random without seed", sweep_body(spec={"method": "random", "samples": 2}), "seed_required", "sweep_spec.seed"),
    ("random without samples", sweep_body(spec={"method": "random", "seed": 1}), "samples_required",
     "sweep_spec.samples"),
    ("more samples than the space", sweep_body(spec={"method": "random", "seed": 1, "samples": 4}),
     "samples_exceed_space", "sweep_spec.samples"),
    ("seed_variants without a seed", sweep_body(seed_variants=True), "seed_required", "sweep_spec.seed"),
    ("options.seed", sweep_body(options={"seed": 3}), "seed_owned", "options.seed"),
    ("interactive lane", sweep_body(options={"lane": "interactive", "session": "s1"}), "lane_interactive",
     "options.lane"),
    ("unknown option", sweep_body(options={"colour": "red"}), "invalid_options", "options.colour"),
    ("record_outputs past the output store", sweep_body(x_values([float(i) for i in range(21)]),
                                                        options={"record_outputs": True}),
     "record_outputs_too_many", "options.record_outputs"),
    ("a worker nobody has seen", sweep_body(options={"target": {"worker": "ghost"}}), None, None),
    ("a graph that does not validate", sweep_body(graph={"nodes": [{"id": "s", "type": "Score"},
                                                                   {"id": "z", "type": "NoSuchNode"}]}),
     "invalid_graph", None),
    ("runs cap", sweep_body(x_values([float(i) for i in range(6)]) +
                            [{"node_id": "s", "param": "k", "values": list(range(6))}]),
     "sweep_too_large", "sweep_spec"),
    ("params cap", sweep_body(x_values([1.0]) + [{"node_id": "s", "param": p, "values": [v]} for p, v in
                                                 (("k", 1), ("mode", "a"), ("flag", True), ("label", "l"))]),
     "sweep_too_large", "sweep_spec.params"),
    ("domain cap", sweep_body(x_values([float(i) for i in range(33)])), "sweep_too_large",
     "sweep_spec.params[0].values"),
    ("a subgraph instance's param", sweep_body([{"node_id": "g", "param": "graph", "values": ["x"]}],
                                               graph={"nodes": GRAPH["nodes"] + [{"id": "g", "type": "Subgraph"}],
                                                      "edges": []}),
     "param_node_instance", "sweep_spec.params[0]"),
    ("a preset instance's param", sweep_body([{"node_id": "q", "param": "preset", "values": ["x"]}],
                                             graph={"nodes": GRAPH["nodes"] + [{"id": "q", "type": "Preset"}],
                                                    "edges": []}),
     "param_node_instance", "sweep_spec.params[0]"),
    ("a node id twice in the graph", sweep_body(graph={"nodes": GRAPH["nodes"] * 2, "edges": []}),
     "param_node_ambiguous", "sweep_spec.params[0]"),
    ("domain cap of a range", sweep_body([{"node_id": "s", "param": "x", "range": {"min": 0, "max": 1, "count": 40}}]),
     "sweep_too_large", "sweep_spec.params[0].range"),
]


@pytest.mark.parametrize("case,body,code,field", REFUSALS, ids=[c[0] for c in REFUSALS])
async def test_a_sweep_that_cannot_be_honoured_is_a_400_and_writes_nothing(jp_fetch, case, body, code, field):
    refusal = await post_sweep(jp_fetch, json.loads(json.dumps(body)), expect=400)
    if code is not None:
        assert refusal["error"]["code"] == code, refusal
    if field is not None:
        assert refusal["error"]["params"]["field"] == field, refusal
    if code == "sweep_too_large":
        setting = refusal["error"]["params"]["setting"]
        assert setting in refusal["error"]["message"] and f"CODEFY_{setting.upper()}" in refusal["error"]["message"]
    await nothing_written(jp_fetch)


async def test_children_are_named_after_the_sweep_cut_to_fit_and_an_unnamed_sweeps_are_unnamed(jp_fetch):
    long = "n" * 70
    doc = await post_sweep(jp_fetch, sweep_body(name=long))
    unnamed = await post_sweep(jp_fetch, {k: v for k, v in sweep_body().items() if k != "name"})
    await wait_sweep(jp_fetch, doc["sweep_id"])
    await wait_sweep(jp_fetch, unnamed["sweep_id"])
    runs = await sweep_runs(jp_fetch)
    named = sorted((r["sweep_variant"], r["name"]) for r in runs if r["sweep_id"] == doc["sweep_id"])
    assert named == [(i, "n" * (64 - len(f" #{i + 1}")) + f" #{i + 1}") for i in range(3)]
    assert all(len(name) == 64 for _, name in named)
    assert [r["name"] for r in runs if r["sweep_id"] == unnamed["sweep_id"]] == [None] * 3


async def test_grid_order_is_last_param_fastest_and_ranges_expand(jp_fetch):
    params = [{"node_id": "s", "param": "x", "range": {"min": 0.01, "max": 1, "count": 3, "scale": "log"}},
              {"node_id": "s", "param": "k", "range": {"min": 1, "max": 3, "count": 7}},
              {"node_id": "s", "param": "mode", "values": ["a", "b"]}]
    doc = await post_sweep(jp_fetch, sweep_body(params))
    domains = [p["domain"] for p in doc["params"]]
    assert domains[1] == [1, 2, 3] and domains[2] == ["a", "b"]  # int rounding collapsed 7 points onto 3
    assert domains[0] == pytest.approx([0.01, 0.1, 1.0])
    assert doc["total_combinations"] == 18 and len(doc["variants"]) == 18
    combos = [tuple(p["value"] for p in v["params"]) for v in doc["variants"]]
    assert combos[:3] == [(0.01, 1, "a"), (0.01, 1, "b"), (0.01, 2, "a")]
    assert combos[-1] == (1.0, 3, "b") and len(set(combos)) == 18
    await wait_sweep(jp_fetch, doc["sweep_id"], timeout=120)


async def test_random_draws_distinct_combinations_and_the_same_seed_draws_the_same(jp_fetch):
    params = x_values([1.0, 2.0, 3.0, 4.0]) + [{"node_id": "s", "param": "k", "values": [1, 2, 3]}]
    spec = {"method": "random", "samples": 5, "seed": 42}
    first = await post_sweep(jp_fetch, sweep_body(params, spec=spec))
    second = await post_sweep(jp_fetch, sweep_body(params, spec=spec))
    other = await post_sweep(jp_fetch, sweep_body(params, spec={**spec, "seed": 43}))

    def combos(doc):
        return [tuple(p["value"] for p in v["params"]) for v in doc["variants"]]

    assert first["total_combinations"] == 12 and len(combos(first)) == 5 and len(set(combos(first))) == 5
    assert combos(first) == combos(second) and combos(first) != combos(other)
    every = await post_sweep(jp_fetch, sweep_body(params, spec={**spec, "samples": 12}))
    assert len(set(combos(every))) == 12
    for doc in (first, second, other, every):
        await wait_sweep(jp_fetch, doc["sweep_id"], timeout=120)


async def test_seed_variants_seeds_variant_i_with_seed_plus_i_wrapped(jp_fetch):
    doc = await post_sweep(jp_fetch, sweep_body(spec={"seed": 2**32 - 2}, seed_variants=True))
    assert [v["seed"] for v in doc["variants"]] == [2**32 - 2, 2**32 - 1, 0]
    for v in doc["variants"]:
        code, run = await call(jp_fetch, "api", "runs", v["run_id"])
        assert run["seed"] == v["seed"]
    await wait_sweep(jp_fetch, doc["sweep_id"])


async def test_an_objective_several_nodes_log_ranks_nothing_until_a_node_is_chosen(jp_fetch):
    params = [{"node_id": "s", "param": "x", "values": [5.0, -5.0]}]
    doc = await post_sweep(jp_fetch, sweep_body(params, graph=TWO))
    done = await wait_sweep(jp_fetch, doc["sweep_id"])
    assert all(v["rank"] is None and v["objective"] is None and v["ambiguous_producers"] == ["s", "t"]
               for v in done["variants"])
    assert [v["index"] for v in done["variants"]] == [0, 1] and done["best"] is None
    assert "objective.node_id" in done["objective_warning"] and "s, t" in done["objective_warning"]
    assert done["variants"][0]["final_metrics_node_id"] is None
    chosen = await post_sweep(jp_fetch, {**sweep_body(params, graph=TWO),
                                         "objective": {"metric": "score", "direction": "minimize", "node_id": "s"}})
    done = await wait_sweep(jp_fetch, chosen["sweep_id"])
    assert [(v["index"], v["rank"], v["objective"], v["objective_node_id"]) for v in done["variants"]] == [
        (1, 1, -5.0, "s"), (0, 2, 5.0, "s")]
    assert done["variants"][0]["final_metrics"]["score"] == -5.0 and done["objective_warning"] is None


async def test_an_objective_node_inside_a_block_is_named_by_its_flattened_id(jp_fetch):
    from codefy_jupyter.engine import Expand, default_registry, param

    reg = default_registry()
    if reg.get("ScoreBlock") is None:
        @reg.node("ScoreBlock", outputs={"y": "float"}, params={"x": param.float(1.0, min=-100, max=100)})
        def score_block(ctx, x):
            return Expand({"nodes": [{"id": "inner", "type": "Score", "params": {"x": x, "k": 1}}], "edges": []},
                          outputs={"y": ("inner", "y")})
    # A top-level Score logs `score` too: by name alone the sweep could not rank.
    graph = {"nodes": [{"id": "blk", "type": "ScoreBlock", "params": {"x": 1.0}},
                       {"id": "s", "type": "Score", "params": {"x": 50.0, "k": 1}}], "edges": []}
    body = sweep_body([{"node_id": "blk", "param": "x", "values": [3.0, 1.0, 2.0]}], graph=graph,
                      objective={"metric": "score", "direction": "minimize", "node_id": "blk/inner"})
    done = await wait_sweep(jp_fetch, (await post_sweep(jp_fetch, body))["sweep_id"])
    assert [(v["index"], v["rank"], v["objective"]) for v in done["variants"]] == [(1, 1, 1.0), (2, 2, 2.0),
                                                                                    (0, 3, 3.0)]
    assert all(v["objective_node_id"] == "blk/inner" and v["ambiguous_producers"] is None for v in done["variants"])
    assert all(v["final_metrics_node_id"] == "blk/inner" and v["final_metrics"]["score"] == v["objective"]
               for v in done["variants"])


async def test_no_variant_recording_the_metric_warns_with_the_series_recorded(jp_fetch):
    body = sweep_body()
    body["objective"] = {"metric": "val_loss", "direction": "maximize"}
    done = await wait_sweep(jp_fetch, (await post_sweep(jp_fetch, body))["sweep_id"])
    assert all(v["rank"] is None for v in done["variants"]) and done["best"] is None
    assert "val_loss" in done["objective_warning"] and "aux, score" in done["objective_warning"]


async def test_a_failed_run_that_logged_the_objective_is_still_ranked_and_csv_lists_the_table(jp_fetch):
    params = [{"node_id": "s", "param": "fail", "values": [False, True]},
              {"node_id": "s", "param": "x", "values": [2.0]}]
    body = sweep_body(params)
    body["objective"]["direction"] = "maximize"
    done = await wait_sweep(jp_fetch, (await post_sweep(jp_fetch, body))["sweep_id"])
    assert done["counts"] == {"succeeded": 1, "failed": 1}
    assert [(v["status"], v["rank"]) for v in done["variants"]] == [("succeeded", 1), ("failed", 1)]
    assert done["variants"][0]["tied_with"] == [1]
    code, text = await call(jp_fetch, "api", "sweeps", done["sweep_id"], format="csv")
    assert code == 200
    rows = list(csv.DictReader(io.StringIO(text.decode())))
    assert [r["index"] for r in rows] == ["0", "1"] and rows[0]["objective_metric"] == "score"
    assert rows[0]["s.fail"] == "false" and rows[1]["s.fail"] == "true" and rows[0]["s.x"] == "2.0"
    assert rows[0]["objective_node_id"] == "s" and rows[0]["ambiguous_producers"] == ""
    code, body = await call(jp_fetch, "api", "sweeps", done["sweep_id"], format="xml")
    assert code == 400 and body["error"]["params"]["field"] == "format"


async def test_unknown_sweeps_and_bad_reads_are_refused(jp_fetch):
    code, body = await call(jp_fetch, "api", "sweeps", "nope")
    assert code == 404 and body["error"]["code"] == "sweep_not_found"
    code, body = await call(jp_fetch, "api", "sweeps", "nope", "cancel", method="POST")
    assert code == 404
    code, body = await call(jp_fetch, "api", "sweeps", limit=0)
    assert code == 400 and body["error"]["params"]["field"] == "limit"
    doc = await post_sweep(jp_fetch, sweep_body())
    code, body = await call(jp_fetch, "api", "sweeps", doc["sweep_id"], wait=61)
    assert code == 400 and body["error"]["params"]["field"] == "wait"
    await wait_sweep(jp_fetch, doc["sweep_id"])


async def test_a_child_deleted_before_any_read_shows_missing_and_keeps_its_row(jp_fetch):
    doc = await post_sweep(jp_fetch, sweep_body())
    for v in doc["variants"]:
        await wait_status(jp_fetch, v["run_id"], {"succeeded"})
    gone = doc["variants"][1]["run_id"]
    code, _ = await call(jp_fetch, "api", "runs", gone, method="DELETE")
    assert code == 204
    done = await wait_sweep(jp_fetch, doc["sweep_id"])
    row = next(v for v in done["variants"] if v["index"] == 1)
    assert row["status"] == "missing" and row["objective"] is None and row["rank"] is None
    assert row["run_exists"] is False and "final_metrics" not in row
    assert done["counts"] == {"succeeded": 2, "missing": 1} and done["state"] == "finished"
    # Harvested on that read: deleting another child now keeps its result.
    kept = doc["variants"][0]["run_id"]
    assert (await call(jp_fetch, "api", "runs", kept, method="DELETE"))[0] == 204
    code, again = await call(jp_fetch, "api", "sweeps", doc["sweep_id"])
    row = next(v for v in again["variants"] if v["index"] == 0)
    assert row["status"] == "succeeded" and row["objective"] == 3.0 and row["run_exists"] is False
    assert row["rank"] == 2


async def test_cancel_stops_every_active_child_and_the_sweep_settles_finished(jp_fetch):
    params = [{"node_id": "s", "param": "x", "values": [1.0, 2.0, 3.0]},
              {"node_id": "s", "param": "nap", "values": [30.0]}]
    doc = await post_sweep(jp_fetch, sweep_body(params))
    code, reply = await call(jp_fetch, "api", "sweeps", doc["sweep_id"], "cancel", method="POST")
    assert code == 200 and reply["cancelled"] == 3 and reply["already_finished"] == 0
    assert reply["state"] in ("cancelling", "finished")
    assert [v["index"] for v in reply["variants"]] == [0, 1, 2]
    done = await wait_sweep(jp_fetch, doc["sweep_id"])
    assert done["state"] == "finished" and done["counts"] == {"cancelled": 3}
    code, again = await call(jp_fetch, "api", "sweeps", doc["sweep_id"], "cancel", method="POST")
    assert code == 200 and again["cancelled"] == 0 and again["already_finished"] == 3
    assert again["state"] == "finished"


async def test_cancel_of_a_finished_sweep_counts_already_finished(jp_fetch):
    doc = await post_sweep(jp_fetch, sweep_body())
    for v in doc["variants"]:
        await wait_status(jp_fetch, v["run_id"], {"succeeded"})
    code, reply = await call(jp_fetch, "api", "sweeps", doc["sweep_id"], "cancel", method="POST")
    assert code == 200 and (reply["cancelled"], reply["already_finished"]) == (0, 3)
    assert reply["state"] == "finished" and all(v["objective"] is not None for v in reply["variants"])


async def test_a_follower_long_polls_until_a_child_changes(jp_fetch):
    params = [{"node_id": "s", "param": "nap", "values": [0.5]}]
    doc = await post_sweep(jp_fetch, sweep_body(params))
    code, first = await call(jp_fetch, "api", "sweeps", doc["sweep_id"])
    loop = asyncio.get_running_loop()
    started = loop.time()
    seen = first
    while seen["state"] != "finished":
        code, seen = await call(jp_fetch, "api", "sweeps", doc["sweep_id"], wait=60, changes=seen["changes"])
        assert code == 200
    # Woken by the child's changes: a poll that waited out its 60 s would pass this.
    assert loop.time() - started < 45 and seen["changes"] >= 1


class TestRetention:
    @pytest.fixture
    def jp_server_config(self, tmp_path):
        return {"ServerApp": {"jpserver_extensions": {"codefy_jupyter": True}},
                "CodefyApp": {"data_dir": str(tmp_path / "codefy"), "run_retention_keep_last": 1}}

    async def _pruned(self, jp_fetch, doc, kept=1):
        deadline = asyncio.get_running_loop().time() + 90
        while True:
            runs = await sweep_runs(jp_fetch)
            if len(runs) == kept and all(r["status"] == "succeeded" for r in runs):
                return
            assert asyncio.get_running_loop().time() < deadline, runs
            await asyncio.sleep(0.05)

    async def test_retention_harvests_before_it_prunes(self, jp_fetch):
        doc = await post_sweep(jp_fetch, sweep_body())
        await self._pruned(jp_fetch, doc)
        done = await wait_sweep(jp_fetch, doc["sweep_id"])
        assert done["error"] is None and done["counts"] == {"succeeded": 3}
        assert [(v["index"], v["rank"], v["objective"]) for v in done["variants"]] == [(1, 1, 1.0), (2, 2, 2.0),
                                                                                        (0, 3, 3.0)]
        gone = [v for v in done["variants"] if not v["run_exists"]]
        assert len(gone) == 2 and all("final_metrics" not in v and v["objective_node_id"] == "s" for v in gone)

    async def test_a_harvest_retention_could_not_finish_is_reported_on_the_sweep(self, jp_fetch, monkeypatch):
        from codefy_jupyter.core.experiments.sweeps import sweep_service

        def broken(objective, status, points):
            raise RuntimeError("disk on fire")

        monkeypatch.setattr(sweep_service, "decide_harvest", broken)
        doc = await post_sweep(jp_fetch, sweep_body())
        await self._pruned(jp_fetch, doc)
        monkeypatch.undo()
        done = await wait_sweep(jp_fetch, doc["sweep_id"])
        # One note per retention pass: the two runs went in one pass or in two (the first child
        # starts, and ends, before its siblings are queued).
        deleted = [int(n) for n in re.findall(r"retention deleted (\d+) runs?", done["error"])]
        assert sum(deleted) == 2 and "disk on fire" in done["error"], done["error"]
        assert done["state"] == "finished"
        assert sorted(v["status"] for v in done["variants"]) == ["missing", "missing", "succeeded"]


class TestSharedServer:
    @pytest.fixture
    def jp_server_config(self, tmp_path):
        return {"ServerApp": {"jpserver_extensions": {"codefy_jupyter": True},
                              "identity_provider_class": "fake_identity.HeaderIdentityProvider",
                              "disable_check_xsrf": True},
                "CodefyApp": {"data_dir": str(tmp_path / "codefy"), "shared_server": True, "admin_users": ["boss"]}}

    async def test_only_the_owner_or_an_admin_may_cancel_a_sweep(self, jp_fetch):
        async def as_user(user, *path, **kw):
            return await call(jp_fetch, *path, headers={"X-Test-User": user}, **kw)

        params = [{"node_id": "s", "param": "nap", "values": [30.0]}]
        code, doc = await as_user("alice", "api", "sweeps", method="POST", body=sweep_body(params))
        assert code == 201
        code, body = await as_user("bob", "api", "sweeps", doc["sweep_id"], "cancel", method="POST")
        assert code == 403 and body["error"]["params"]["owner"] == "alice"
        code, seen = await as_user("bob", "api", "sweeps", doc["sweep_id"])
        assert code == 200 and seen["owner"] == "alice"
        code, reply = await as_user("boss", "api", "sweeps", doc["sweep_id"], "cancel", method="POST")
        assert code == 200 and reply["cancelled"] == 1
        await wait_status(jp_fetch, doc["variants"][0]["run_id"], {"cancelled"}, headers={"X-Test-User": "alice"})


@pytest.fixture
def aclient(jp_serverapp, jp_base_url, http_server_port, http_server):
    from codefy_jupyter.client import AsyncClient, ServerInfo

    info = ServerInfo(f"http://localhost:{http_server_port[-1]}{jp_base_url}", jp_serverapp.identity_provider.token,
                      "arguments")
    return AsyncClient(server=info)


async def test_graph_sweep_builds_a_checked_body_the_client_follows_to_the_end(aclient):
    from codefy_jupyter.client import CodefyError, Graph

    g = Graph()
    s = g.add("Score", id="s", k=2)
    catalog = await aclient.nodes()
    body = g.sweep({(s, "x"): [3.0, -1.0], "s.mode": ["a", "b"]}, metric="score", node=s, name="built",
                   catalog=catalog)
    assert body["sweep_spec"]["params"] == [{"node_id": "s", "param": "x", "values": [3.0, -1.0]},
                                            {"node_id": "s", "param": "mode", "values": ["a", "b"]}]
    assert body["objective"] == {"metric": "score", "direction": "minimize", "node_id": "s"}
    for params, field in (({"s.nope": [1]}, "sweep_spec.params[0]"),
                          ({"s.mode": ["z"]}, "sweep_spec.params[0].values[0]"),
                          ({"s.key": ["k"]}, "sweep_spec.params[0]"), ({"t.x": [1]}, "sweep_spec.params[0]"),
                          ({"s.x": [500]}, "sweep_spec.params[0].values[0]")):
        with pytest.raises(CodefyError) as info:
            g.sweep(params, metric="score", catalog=catalog)
        assert info.value.field == field
    created = await aclient.sweep(body)
    docs = [d async for d in aclient.follow_sweep(created["sweep_id"], wait=5)]
    final = docs[-1]
    assert final["state"] == "finished" and final["name"] == "built"
    assert [(v["index"], v["objective"]) for v in final["variants"]] == [(2, -2.0), (0, 6.0), (3, 98.0), (1, 106.0)]
    assert len(docs) <= 12  # woken by the children's changes, not polled
    listed = await aclient.list_sweeps()
    assert listed["sweeps"][0]["sweep_id"] == created["sweep_id"]
    assert "objective_metric" in await aclient.sweep_csv(created["sweep_id"])
    again = await aclient.cancel_sweep(created["sweep_id"])
    assert again["cancelled"] == 0 and again["already_finished"] == 4
    with pytest.raises(CodefyError) as info:
        await aclient.get_sweep("nope")
    assert info.value.status == 404
    await aclient.close()


async def test_a_submit_loop_that_breaks_part_way_fails_the_sweep_and_the_queued_children_run_on(
        jp_fetch, jp_serverapp, monkeypatch):
    from codefy_jupyter.core.errors import Unavailable

    await call(jp_fetch, "api", "sweeps")  # the run queue is up once it has answered
    runs = jp_serverapp.extension_manager.extension_points["codefy"].app.experiments.runs
    real = runs.submit
    calls = []

    async def breaks_on_the_third(body, **kwargs):
        calls.append(kwargs["links"]["sweep_variant"])
        if len(calls) == 3:
            raise Unavailable("the server is shutting down", code="shutting_down")
        return await real(body, **kwargs)

    monkeypatch.setattr(runs, "submit", breaks_on_the_third)
    params = [{"node_id": "s", "param": "x", "values": [1.0, 2.0, 3.0, 4.0]}]
    doc = await post_sweep(jp_fetch, sweep_body(params))
    monkeypatch.undo()
    assert doc["state"] == "failed" and "shutting down" in doc["failure"]
    assert [(v["index"], v["run_id"] is None, v["status"]) for v in doc["variants"]][2] == (2, True, "not_submitted")
    done = await wait_sweep(jp_fetch, doc["sweep_id"])
    assert done["state"] == "failed" and done["counts"] == {"succeeded": 3, "not_submitted": 1}
    assert [v["index"] for v in done["variants"] if v["rank"] is not None] == [0, 1, 3]


async def test_a_sweep_for_any_worker_runs_here_when_no_worker_is_connected(jp_fetch):
    doc = await post_sweep(jp_fetch, sweep_body(options={"target": {"worker": "any"}}))
    done = await wait_sweep(jp_fetch, doc["sweep_id"])
    assert done["counts"] == {"succeeded": 3} and done["options"]["target"] == {"worker": "any"}


async def test_a_child_another_process_runs_is_in_neither_count(jp_fetch, jp_serverapp):
    doc = await post_sweep(jp_fetch, sweep_body())
    for v in doc["variants"]:
        await wait_status(jp_fetch, v["run_id"], {"succeeded"})
    store = jp_serverapp.extension_manager.extension_points["codefy"].app.store
    elsewhere = doc["variants"][0]["run_id"]
    # As a second server process on the same database would leave it: running, but not ours.
    await store.write(lambda conn: conn.execute("UPDATE runs SET status = 'running' WHERE id = ?", (elsewhere,)))
    code, reply = await call(jp_fetch, "api", "sweeps", doc["sweep_id"], "cancel", method="POST")
    assert code == 200 and (reply["cancelled"], reply["already_finished"]) == (0, 2)
    assert reply["state"] == "running" and reply["counts"] == {"running": 1, "succeeded": 2}
