"""The rules sweeps and studies share: which parameter an entry may set, how a run's objective and
final metrics are read from its metric points, the options the experiment owns, the children's
names; and the run service's seams they stand on (a chosen run id, links, preflight, observers,
retention's harvest hook)."""

from __future__ import annotations

import asyncio
import math
import sqlite3

import pytest

from codefy_jupyter.core.config import Settings
from codefy_jupyter.core.errors import BadRequest, SchemaError, ServiceError
from codefy_jupyter.core.experiments import children, objective, params
from codefy_jupyter.core.runs.run_service import RunService
from codefy_jupyter.core.workers.worker_service import WorkerService
from codefy_jupyter.core.store.database import Store
from codefy_jupyter.engine import default_registry

REGISTRY = default_registry()


def _graph(*nodes):
    return {"nodes": list(nodes), "edges": []}


# -- params ---------------------------------------------------------------------------------------

def test_a_registered_nodes_param_is_settable_and_values_are_checked_against_its_definition():
    graph = _graph({"id": "k", "type": "Float", "params": {"value": 1.0}})
    spec = params.settable_param(graph, REGISTRY, "k", "value", "sweep_spec.params[0]")
    assert spec.type == "float"
    assert params.checked_value(spec, 3, "sweep_spec.params[0]", node_id="k", param="value") == 3.0
    with pytest.raises(BadRequest) as info:
        params.checked_value(spec, "x", "sweep_spec.params[0]", node_id="k", param="value")
    assert info.value.code == "param_value_invalid" and info.value.params["field"] == "sweep_spec.params[0]"


@pytest.mark.parametrize("graph,node_id,param,code", [
    (_graph({"id": "k", "type": "Float"}), "nope", "value", "param_node_unknown"),
    (_graph({"id": "k", "type": "Float"}, {"id": "k", "type": "Float"}), "k", "value", "param_node_ambiguous"),
    (_graph({"id": "k", "type": "NoSuchNode"}), "k", "value", "param_node_unregistered"),
    (_graph({"id": "s", "type": "Subgraph"}), "s", "graph", "param_node_instance"),
    (_graph({"id": "p", "type": "Preset"}), "p", "preset", "param_node_instance"),
    (_graph({"id": "k", "type": "Float"}), "k", "nope", "param_unknown"),
])
def test_what_cannot_be_set_is_refused_naming_the_entry(graph, node_id, param, code):
    with pytest.raises(BadRequest) as info:
        params.settable_param(graph, REGISTRY, node_id, param, "variants[1].ops[0]")
    assert info.value.code == code and info.value.status == 400
    assert info.value.params["field"] == "variants[1].ops[0]" and "variants[1].ops[0]" in str(info.value)


def test_secret_and_json_params_are_not_settable():
    from codefy_jupyter.engine import NodeRegistry, param as p

    registry = NodeRegistry()

    @registry.node("WithSecret", outputs={"y": "float"}, params={"key": p.secret(), "blob": p.json({})})
    def with_secret(ctx, key, blob):
        return {"y": 1.0}

    graph = _graph({"id": "w", "type": "WithSecret"})
    for name, code in (("key", "param_secret"), ("blob", "param_not_settable")):
        with pytest.raises(BadRequest) as info:
            params.settable_param(graph, registry, "w", name, "e")
        assert info.value.code == code


def test_with_params_copies_only_the_nodes_it_changes():
    a, b = {"id": "a", "type": "Float", "params": {"value": 1}}, {"id": "b", "type": "Float"}
    graph = _graph(a, b)
    out = params.with_params(graph, {("a", "value"): 2})
    assert out["nodes"][0]["params"] == {"value": 2} and out["nodes"][1] is b
    assert a["params"] == {"value": 1}  # the base graph is untouched


# -- objective ------------------------------------------------------------------------------------

def _p(node, name, step, value):
    return {"node_id": node, "name": name, "step": step, "value": value}


def test_with_a_node_the_objective_is_its_highest_step_then_last_write():
    points = [_p("train", "loss", 2, 0.5), _p("train", "loss", 3, 0.4), _p("other", "loss", 9, 0.0),
              _p("train", "loss", 1, 0.1), _p("train", "loss", 3, 0.3)]
    reading = objective.read_objective(points, "loss", "train")
    assert (reading.value, reading.node_id, reading.ambiguous_producers) == (0.3, "train", [])
    assert objective.read_objective(points, "loss", "absent") == objective.ObjectiveReading()


def test_name_only_uses_the_single_producer_and_refuses_to_pick_among_several():
    one = [_p("train", "acc", 1, 0.7), _p("train", "acc", 2, 0.8)]
    assert objective.read_objective(one, "acc").value == 0.8
    several = one + [_p(None, "acc", 5, 0.1)]
    reading = objective.read_objective(several, "acc")
    assert reading.value is None and reading.ambiguous_producers == [objective.RUN_LEVEL, "train"]
    assert reading.logged
    assert not objective.read_objective(one, "val_loss").logged


def test_a_non_finite_objective_counts_as_logged_without_a_value():
    reading = objective.read_objective([_p("t", "loss", 1, math.nan)], "loss", "t")
    assert reading.logged and reading.value is None


def test_final_metrics_take_the_objective_nodes_value_for_its_names():
    points = [_p("a", "loss", 1, 1.0), _p("b", "loss", 1, 2.0), _p("e", "val_acc", 1, 0.9), _p("a", "lr", 1, 0.1)]
    assert objective.final_metrics(points) == {"loss": 2.0, "val_acc": 0.9, "lr": 0.1}
    assert objective.final_metrics(points, "a") == {"loss": 1.0, "val_acc": 0.9, "lr": 0.1}
    assert objective.series_names(points) == ["loss", "lr", "val_acc"]


def test_a_runs_system_metrics_are_no_final_metric_but_may_be_an_objective():
    points = [_p("a", "loss", 1, 1.0), _p(None, "system/rss_bytes", 0, 3e8), _p(None, "system/cpu_percent", 0, 80.0),
              _p(None, "system/rss_bytes", 1, 4e8)]
    assert objective.final_metrics(points) == {"loss": 1.0}
    assert objective.series_names(points) == ["loss"]
    assert objective.read_objective(points, "system/rss_bytes").value == 4e8


# -- children -------------------------------------------------------------------------------------

@pytest.mark.parametrize("options,code,field", [
    ({"seed": 1}, "seed_owned", "options.seed"),
    ({"seed": None}, "seed_owned", "options.seed"),
    ({"lane": "interactive", "session": "s"}, "lane_interactive", "options.lane"),
    ({"colour": "red"}, "invalid_options", "options.colour"),
    ({"device": 3}, "invalid_options", "options.device"),
])
def test_options_the_experiment_owns_or_cannot_read_are_400s_naming_the_field(options, code, field):
    with pytest.raises(BadRequest) as info:
        children.check_child_options(options, "sweep")
    assert not isinstance(info.value, SchemaError)
    assert info.value.status == 400 and info.value.code == code and info.value.params["field"] == field


def test_child_names_fit_the_runs_panel():
    assert children.sweep_child_name("lr x batch", 2) == "lr x batch #3"
    assert children.sweep_child_name(None, 0) is None
    long = children.sweep_child_name("n" * 100, 9)
    assert len(long) == children.NAME_MAX and long.endswith(" #10")
    assert children.study_child_name("lr study", "wide", 1) == "lr study / wide / r1"


# -- the run service's seams ------------------------------------------------------------------------

class _Recorder:
    def __init__(self):
        self.seen: list[tuple] = []

    def run_started(self, run_id):
        self.seen.append(("started", run_id))

    def run_finished(self, run_id, status):
        self.seen.append(("finished", run_id, status))


class _Harvest:
    def __init__(self, fail: bool = False):
        self.fail, self.harvested, self.failed = fail, [], []

    def harvest(self, conn, run_ids):
        # Reads the doomed runs inside retention's transaction, before they go.
        rows = conn.execute(f"SELECT id, sweep_id FROM runs WHERE id IN ({','.join('?' * len(run_ids))})",
                            list(run_ids)).fetchall()
        self.harvested.extend(rows)
        conn.execute("CREATE TABLE IF NOT EXISTS harvested (id TEXT)")
        conn.executemany("INSERT INTO harvested VALUES (?)", [(r[0],) for r in rows])
        if self.fail:
            raise RuntimeError("disk said no")

    def harvest_failed(self, conn, run_ids, error):
        self.failed.append((list(run_ids), str(error)))


def test_submit_with_a_chosen_id_and_links_preflight_observers_and_the_harvest_hook(store_at, tmp_path):
    async def main():
        store = await Store.open(store_at("db.sqlite"))
        settings = Settings.load({"data_dir": str(tmp_path), "run_retention_keep_last": 1}, env={})
        service = RunService(store, settings, data_dir=tmp_path, workers=WorkerService)
        recorder, harvest = _Recorder(), _Harvest()
        service.add_observer(recorder)
        store.add_prune_hook(harvest)
        await service.start()
        graph = _graph({"id": "k", "type": "Float", "params": {"value": 1}})
        with pytest.raises(ServiceError) as info:
            await service.preflight({"graph": graph, "options": {"device": "cuda:7"}})
        assert info.value.status == 400 and info.value.params.get("field") == "options.device"
        with pytest.raises(SchemaError):
            await service.preflight({"graph": graph, "options": {"nope": 1}})
        assert (await service.list())["total"] == 0  # preflight wrote nothing
        await service.preflight({"graph": graph})

        first = await service.submit({"graph": graph}, run_id="chosen-1", links={"sweep_id": "s1", "sweep_variant": 0})
        assert first["id"] == "chosen-1" and first["sweep_id"] == "s1" and first["sweep_variant"] == 0
        with pytest.raises(ValueError, match="unknown run links"):
            await service.submit({"graph": graph}, links={"colour": "red"})
        for _ in range(500):
            if ("finished", "chosen-1", "succeeded") in recorder.seen:
                break
            await asyncio.sleep(0.01)
        assert recorder.seen[:2] == [("started", "chosen-1"), ("finished", "chosen-1", "succeeded")]
        row = await service.get("chosen-1")
        assert row["study_id"] is None and row["sweep_id"] == "s1"

        second = await service.submit({"graph": graph}, links={"study_id": "t", "study_attempt_id": "a1"})
        for _ in range(500):
            if harvest.harvested:
                break
            await asyncio.sleep(0.01)
        # Keeping one run: retention pruned the first, after the hook saw it in the same transaction.
        assert harvest.harvested == [("chosen-1", "s1")] and not harvest.failed
        # The hook runs inside retention's transaction: its write is visible once that commits.
        for _ in range(3000):
            if await _harvested_ids(store) == [("chosen-1",)]:
                break
            await asyncio.sleep(0.01)
        assert await _harvested_ids(store) == [("chosen-1",)]
        assert (await service.get(second["id"]))["study_attempt_id"] == "a1"
        await service.shutdown()
        await store.close()

    asyncio.run(main())


async def _harvested_ids(store):
    """The ids the hook wrote, or None while its table does not exist (on either backend)."""
    def read(c):
        try:
            return [tuple(r) for r in c.execute("SELECT id FROM harvested").fetchall()]
        except sqlite3.DatabaseError as exc:  # no such table (SQLite), undefined table (PostgreSQL)
            assert "harvested" in str(exc)
            return None
    return await store.read(read)


def test_a_failing_harvest_rolls_back_its_writes_and_never_holds_the_delete_back(store_at, tmp_path):
    async def main():
        store = await Store.open(store_at("db.sqlite"))
        settings = Settings.load({"data_dir": str(tmp_path), "run_retention_keep_last": 0}, env={})
        service = RunService(store, settings, data_dir=tmp_path, workers=WorkerService)
        harvest = _Harvest(fail=True)
        store.add_prune_hook(harvest)
        await service.start()
        run = await service.submit({"graph": _graph({"id": "k", "type": "Float", "params": {"value": 1}})})
        for _ in range(500):
            if harvest.failed:
                break
            await asyncio.sleep(0.01)
        assert harvest.failed == [([run["id"]], "disk said no")]
        # The hook's own write was rolled back with it; the run went anyway.
        assert await _harvested_ids(store) is None
        # The hook runs inside retention's transaction, so the delete commits just after it.
        for _ in range(3000):
            if await store.get_run(run["id"]) is None:
                break
            await asyncio.sleep(0.01)
        assert await store.get_run(run["id"]) is None
        await service.shutdown()
        await store.close()

    asyncio.run(main())
