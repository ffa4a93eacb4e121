"""A sweep's pure parts without a server: the request schema (422 paths), expansion (ranges, grid
order, seeded draws, the caps, seeds) and the results table (harvest, status, ranks, warnings)."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from codefy_jupyter.core.errors import BadRequest, SchemaError
from codefy_jupyter.core.experiments.sweeps import results
from codefy_jupyter.core.experiments.sweeps.expand import (
    OUTPUT_STORE_RUNS, Caps, combination, draw, plan_sweep, range_points,
)
from codefy_jupyter.core.experiments.sweeps.spec import Range, parse_sweep
from codefy_jupyter.engine import NodeRegistry, param


@pytest.fixture(scope="module")
def registry():
    reg = NodeRegistry()

    @reg.node("P", outputs={"y": "float"},
              params={"x": param.float(1.0, min=-10, max=1e6), "k": param.int(1, min=0, max=100),
                      "m": param.select("a", options=["a", "b", "c"]), "f": param.bool(False), "s": param.string("")})
    def p(ctx, x, k, m, f, s):
        return {"y": x}

    return reg


GRAPH = {"nodes": [{"id": "n", "type": "P", "params": {}}], "edges": []}


def body(params, **spec):
    return {"base_graph": GRAPH, "sweep_spec": {"params": params, **spec},
            "objective": {"metric": "loss", "direction": "minimize"}}


def plan(registry, params, caps=Caps(), options=None, **spec):
    seed_variants = spec.pop("seed_variants", False)
    req = parse_sweep({**body(params, **spec), "seed_variants": seed_variants})
    return plan_sweep(req, registry, caps, options or {})


# -- ranges -----------------------------------------------------------------------------------------

def test_linear_and_log_ranges_hit_both_ends():
    assert range_points(Range(0, 1, 5), "float", "r", 32) == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert range_points(Range(1e-4, 1e-1, 4, "log"), "float", "r", 32) == pytest.approx([1e-4, 1e-3, 1e-2, 1e-1])
    assert range_points(Range(3, 3, 1), "float", "r", 32) == [3.0]
    assert range_points(Range(2, 9, 1), "float", "r", 32) == [2.0]


def test_int_rounding_collapses_to_fewer_distinct_values_in_order():
    assert range_points(Range(1, 3, 7), "int", "r", 32) == [1, 2, 3]
    assert range_points(Range(1, 1000, 4, "log"), "int", "r", 32) == [1, 10, 100, 1000]
    assert range_points(Range(0, 2, 1000), "int", "r", 3) == [0, 1, 2]  # 1000 points, 3 values: under the cap


@pytest.mark.parametrize("seed", range(30))
def test_ranges_are_sorted_distinct_and_inside_their_bounds(seed):
    rng = random.Random(seed)
    lo = rng.uniform(0.001, 50)
    hi = lo + rng.uniform(0, 500)
    for scale in ("linear", "log"):
        for kind in ("int", "float"):
            points = range_points(Range(lo, hi, rng.randint(1, 40), scale), kind, "r", 10_000)
            assert points == sorted(set(points))
            assert all(round(lo) - 1 <= p <= round(hi) + 1 if kind == "int" else lo <= p <= hi for p in points)


def test_range_refusals_name_the_field():
    with pytest.raises(BadRequest) as err:
        range_points(Range(0, 1, 3, "log"), "float", "sweep_spec.params[0].range", 32)
    assert err.value.code == "range_log_min" and err.value.params["field"] == "sweep_spec.params[0].range.min"
    with pytest.raises(BadRequest) as err:
        range_points(Range(2, 1, 3), "float", "r", 32)
    assert err.value.code == "range_invalid"
    with pytest.raises(BadRequest) as err:
        range_points(Range(0, 1, 1_000_000), "float", "r", 32)  # refused at the 33rd point, not after a million
    assert err.value.params["setting"] == "max_sweep_domain"


def test_extreme_ranges_do_not_overflow():
    assert range_points(Range(-1.7e308, 1.7e308, 3), "float", "r", 32) == [-1.7e308, 0.0, 1.7e308]
    assert range_points(Range(1, 1.7e308, 3, "log"), "float", "r", 32)[-1] == 1.7e308


# -- grid and random --------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(20))
def test_combination_numbering_is_the_grid_with_the_last_param_fastest(seed):
    rng = random.Random(seed)
    domains = [list(range(rng.randint(1, 4))) for _ in range(rng.randint(1, 4))]
    grid = list(itertools.product(*domains))
    assert [combination(domains, n) for n in range(len(grid))] == grid


@pytest.mark.parametrize("space,samples", [(1, 1), (12, 5), (12, 12), (10**6, 32), (2**70, 8)])
def test_draws_are_distinct_sized_and_repeatable(space, samples):
    first = draw(space, samples, 7)
    assert len(first) == samples == len(set(first)) and all(0 <= n < space for n in first)
    assert draw(space, samples, 7) == first
    if space > samples:
        assert any(draw(space, samples, s) != first for s in range(8, 12))


def test_a_plan_validates_every_value_and_grids_in_order(registry):
    out = plan(registry, [{"node_id": "n", "param": "k", "values": [1, 2.0]},
                          {"node_id": "n", "param": "m", "values": ["a", "c"]}])
    assert out.combinations == ((1, "a"), (1, "c"), (2, "a"), (2, "c")) and out.total_combinations == 4
    assert out.seeds == (None,) * 4 and isinstance(out.combinations[2][0], int)


def test_true_and_one_are_different_values_of_a_string_but_one_and_one_point_oh_repeat(registry):
    with pytest.raises(BadRequest) as err:
        plan(registry, [{"node_id": "n", "param": "x", "values": [1, 1.0]}])
    assert err.value.code == "values_repeated"
    out = plan(registry, [{"node_id": "n", "param": "f", "values": [True, False]}])
    assert out.combinations == ((True,), (False,))


@pytest.mark.parametrize("field,setting,params,caps", [
    ("sweep_spec", "max_sweep_runs", [{"node_id": "n", "param": "k", "values": [1, 2, 3]},
                                      {"node_id": "n", "param": "m", "values": ["a", "b"]}], Caps(runs=5)),
    ("sweep_spec.params", "max_sweep_params", [{"node_id": "n", "param": p, "values": [v]}
                                               for p, v in (("k", 1), ("m", "a"))], Caps(params=1)),
    ("sweep_spec.params[0].values", "max_sweep_domain", [{"node_id": "n", "param": "k", "values": [1, 2, 3]}],
     Caps(domain=2)),
])
def test_each_cap_refuses_naming_its_setting_and_never_truncates(registry, field, setting, params, caps):
    with pytest.raises(BadRequest) as err:
        plan(registry, params, caps)
    assert err.value.params["field"] == field and err.value.params["setting"] == setting
    assert setting in str(err.value)
    bigger = Caps(**{**caps.__dict__, setting.removeprefix("max_sweep_"): 100})
    assert plan(registry, params, bigger).combinations


def test_random_refusals_and_draws(registry):
    params = [{"node_id": "n", "param": "k", "values": [1, 2, 3, 4]}]
    for spec, code in (({"method": "random", "seed": 1}, "samples_required"),
                       ({"method": "random", "samples": 2}, "seed_required"),
                       ({"method": "random", "samples": 5, "seed": 1}, "samples_exceed_space"),
                       ({"samples": 2}, "samples_not_allowed")):
        with pytest.raises(BadRequest) as err:
            plan(registry, params, **spec)
        assert err.value.code == code
    with pytest.raises(BadRequest) as err:
        plan(registry, params, Caps(runs=2), method="random", samples=3, seed=1)
    assert err.value.params["setting"] == "max_sweep_runs"
    a = plan(registry, params, method="random", samples=3, seed=9)
    assert a.combinations == plan(registry, params, method="random", samples=3, seed=9).combinations
    assert len(set(a.combinations)) == 3 and a.total_combinations == 4


def test_seed_variants_wrap_and_need_a_seed(registry):
    params = [{"node_id": "n", "param": "k", "values": [1, 2, 3]}]
    assert plan(registry, params, seed=2**32 - 1, seed_variants=True).seeds == (2**32 - 1, 0, 1)
    with pytest.raises(BadRequest) as err:
        plan(registry, params, seed_variants=True)
    assert err.value.params["field"] == "sweep_spec.seed"


def test_record_outputs_is_refused_past_the_output_store(registry):
    many = [{"node_id": "n", "param": "k", "values": list(range(OUTPUT_STORE_RUNS + 1))}]
    with pytest.raises(BadRequest) as err:
        plan(registry, many, options={"record_outputs": True})
    assert err.value.code == "record_outputs_too_many"
    assert plan(registry, many[:1], options={"record_outputs": False}).combinations
    fits = [{"node_id": "n", "param": "k", "values": list(range(OUTPUT_STORE_RUNS))}]
    assert len(plan(registry, fits, options={"record_outputs": True}).combinations) == OUTPUT_STORE_RUNS


def test_a_float_value_past_a_float_is_a_400_not_a_crash(registry):
    with pytest.raises(BadRequest) as err:
        plan(registry, [{"node_id": "n", "param": "x", "values": [10**400]}])
    assert err.value.params["field"] == "sweep_spec.params[0].values[0]"


# -- schema -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("change,field", [
    (lambda b: b.pop("objective"), "objective"),
    (lambda b: b["sweep_spec"].update(params=[]), "sweep_spec.params"),
    (lambda b: b["sweep_spec"]["params"][0].update(range={"min": 1, "max": 2, "count": 0}),
     "sweep_spec.params[0]"),
    (lambda b: b["sweep_spec"]["params"].append({"node_id": "n", "param": "k",
                                                  "range": {"min": 1, "max": 2, "count": 10**7}}),
     "sweep_spec.params[1].range.count"),
    (lambda b: b["sweep_spec"]["params"].append({"node_id": "n", "param": "k",
                                                  "range": {"min": 10**400, "max": 2, "count": 2}}),
     "sweep_spec.params[1].range.min"),
    (lambda b: b["sweep_spec"].update(seed=2**32), "sweep_spec.seed"),
    (lambda b: b["sweep_spec"].update(samples=0), "sweep_spec.samples"),
    (lambda b: b["objective"].update(metric="\u3000"), "objective.metric"),
    (lambda b: b["objective"].update(node_id=""), "objective.node_id"),
    (lambda b: b.update(seed_variants=None), "seed_variants"),
    (lambda b: b["sweep_spec"]["params"][0].update(values=[]), "sweep_spec.params[0].values"),
    (lambda b: b["sweep_spec"]["params"][0].update(values=[math.inf]), "sweep_spec.params[0].values[0]"),
])
def test_schema_refusals_name_the_field(change, field):
    b = body([{"node_id": "n", "param": "k", "values": [1]}])
    change(b)
    with pytest.raises(SchemaError) as err:
        parse_sweep(b)
    assert err.value.field == field and err.value.status == 422


def test_a_control_character_is_not_blank_as_json_schema_sees_it():
    b = body([{"node_id": "\x1c", "param": "k", "values": [1]}])
    assert parse_sweep(b).params[0].node_id == "\x1c"


# -- results --------------------------------------------------------------------------------------------

SWEEP = {"objective": {"metric": "loss", "direction": "minimize", "node_id": None},
         "params": [{"node_id": "n", "param": "k", "domain": [1, 2, 3, 4]}]}


def point(value, node="n", name="loss", step=0):
    return {"node_id": node, "name": name, "step": step, "value": value}


def view(index, status, points, *, harvested=None):
    variant = {"index": index, "run_id": f"r{index}", "params": [index], "seed": None, "harvested": False}
    run = {"status": status, "worker_id": None, "devices": ["cpu"], "queue_key": "cpu"}
    if harvested is not None:
        variant.update(harvested, harvested=True)
        run = None if harvested.get("gone") else run
    return results.variant_view(SWEEP, variant, run, points)


def test_ranking_is_competition_order_best_first_with_unranked_in_index_order():
    views = [view(0, "succeeded", [point(3.0)]), view(1, "running", [point(0.5)]), view(2, "failed", [point(1.0)]),
             view(3, "succeeded", [point(1.0)]), view(4, "succeeded", [point(9.0, name="other")])]
    table = results.table(SWEEP, views)
    assert [(v["index"], v["rank"]) for v in table["variants"]] == [(2, 1), (3, 1), (0, 3), (1, None), (4, None)]
    assert table["best"]["index"] == 2 and table["variants"][0]["tied_with"] == [3]
    assert table["counts"] == {"succeeded": 3, "failed": 1, "running": 1}
    assert table["objective_warning"] is None
    assert table["variants"][3]["objective"] == 0.5  # a running variant shows its value, unranked


def test_a_harvested_child_whose_run_is_gone_keeps_its_result():
    harvested = results.harvest_fields(SWEEP["objective"], "succeeded", [point(2.0), point(1.0, step=5)])
    v = view(0, "succeeded", None, harvested={**harvested, "gone": True})
    assert (v["status"], v["objective"], v["objective_node_id"], v["run_exists"]) == ("succeeded", 1.0, "n", False)
    assert "final_metrics" not in v


def test_status_rules_and_settling():
    assert results.variant_status({"run_id": None}, None) == "not_submitted"
    assert results.variant_status({"run_id": "r", "harvested": False}, None) == "missing"
    assert results.variant_status({"run_id": "r", "harvested": True, "status": "failed"}, None) == "failed"
    assert results.variant_status({"run_id": "r"}, {"status": "queued"}) == "queued"
    assert results.settled_state("cancelling", ["cancelled", "missing", "succeeded"]) == "finished"
    assert results.settled_state("running", ["succeeded", "running"]) == "running"
    assert results.settled_state("failed", ["succeeded"]) == "failed"
    assert results.settled_state("finished", []) == "finished"


def test_warnings_for_an_unrecorded_and_an_ambiguous_objective():
    table = results.table(SWEEP, [view(0, "succeeded", [point(1.0, name="acc")])])
    assert "'loss'" in table["objective_warning"] and "acc" in table["objective_warning"]
    table = results.table(SWEEP, [view(0, "succeeded", [point(1.0), point(2.0, node=None)])])
    assert table["variants"][0]["ambiguous_producers"] == ["(run)", "n"] and table["variants"][0]["rank"] is None
    assert "objective.node_id" in table["objective_warning"]
    assert results.table(SWEEP, [view(0, "queued", [])])["objective_warning"] is None


def test_the_example_spec_plans_eight_variants_on_the_example_graph():
    from pathlib import Path

    from codefy_jupyter.engine import default_registry
    from codefy_jupyter.client.client import load_sweep_spec

    body = load_sweep_spec(Path(__file__).parents[2] / "examples" / "sweep_lr.json")
    out = plan_sweep(parse_sweep(body), default_registry(), Caps(), body.get("options") or {})
    assert len(out.combinations) == 8 and out.params[0].domain == pytest.approx((1e-4, 1e-3, 1e-2, 1e-1))
    assert out.combinations[:2] == ((1e-4, 32), (1e-4, 128))
