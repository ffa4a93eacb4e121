"""DDP through the whole stack: a real control plane, a real agent whose two CUDA cards are declared
(this machine has none, so the ranks fall back to gloo on the CPU with a warning), a TrainingLoop
with strategy ddp on the device set [cuda:0, cuda:1]. The run is one run to the control plane: one
gapless log, rank 0's metrics only, the node after the loop run by rank 0."""

from __future__ import annotations

import pytest

from test_server_runs import all_events, wait_status
from test_workers_e2e import (  # noqa: F401  (fixtures)
    agents, control, jp_server_config, server_token, submit, until_connected,
)

pytestmark = pytest.mark.slow


def edge(s, sp, t, tp):
    return {"source": s, "source_port": sp, "target": t, "target_port": tp}


GRAPH = {
    "nodes": [
        {"id": "data", "type": "SyntheticClassification",
         "params": {"n_samples": 96, "n_features": 4, "n_classes": 2, "seed": 0}},
        {"id": "loader", "type": "DataLoader", "params": {"batch_size": 32}},
        {"id": "model", "type": "MLP", "params": {"hidden": 8, "layers": 1}},
        {"id": "opt", "type": "Optimizer", "params": {"kind": "sgd", "lr": 0.1}},
        {"id": "loss", "type": "Loss", "params": {"kind": "auto"}},
        {"id": "train", "type": "TrainingLoop", "params": {"epochs": 2, "strategy": "ddp"}},
        {"id": "after", "type": "Float", "params": {"value": 1}},
    ],
    "edges": [edge("data", "dataset", "loader", "dataset"), edge("data", "dataset", "model", "dataset"),
              edge("model", "model", "opt", "model"), edge("model", "model", "train", "model"),
              edge("opt", "optimizer", "train", "optimizer"), edge("loss", "loss", "train", "loss"),
              edge("loader", "dataloader", "train", "train")],
    "settings": {"seed": 7},
}


@pytest.mark.timeout(480)
async def test_a_ddp_run_on_two_declared_cards_trains_on_gloo_ranks(jp_fetch, agents):
    agent = agents()
    await until_connected(jp_fetch, agent)
    run = await submit(jp_fetch, GRAPH, {"worker": "box", "devices": ["cuda:0", "cuda:1"]})
    done = await wait_status(jp_fetch, run["id"], {"succeeded", "failed"}, timeout=180)
    assert done["status"] == "succeeded", done
    events = await all_events(jp_fetch, run["id"])
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    warnings = [e["payload"]["code"] for e in events if e["type"] == "run_warning"]
    assert warnings.count("ddp_cpu_ranks") == 1 and "ddp_single_process" not in warnings
    losses = [e for e in events if e["type"] == "metric" and e["payload"]["name"] == "train_loss"]
    assert [e["payload"]["step"] for e in losses] == [1, 2]
    assert any(e["type"] == "node_status" and e["payload"]["node_id"] == "after" for e in events)
    assert done["execution_facts"]["peak_memory"]["cpu"]["exact"] is True


async def test_a_ddp_loop_run_here_trains_in_one_process_with_a_warning(jp_fetch):
    from test_server_runs import call

    code, run = await call(jp_fetch, "api", "runs", method="POST", body={"graph": GRAPH})
    assert code == 201, run
    done = await wait_status(jp_fetch, run["id"], {"succeeded", "failed"}, timeout=120)
    assert done["status"] == "succeeded", done
    events = await all_events(jp_fetch, run["id"])
    assert [e["payload"]["code"] for e in events if e["type"] == "run_warning"] == ["ddp_single_process"]


def ddp_inputs_graph(tmp_path):
    """The provenance test's CSV dataset and saved checkpoint, feeding a ddp TrainingLoop: rank 0
    and rank 1 both read both files; the run must record each once."""
    from test_provenance_e2e import inputs_graph

    graph = inputs_graph(tmp_path)
    graph["nodes"] += [{"id": "loader", "type": "DataLoader", "params": {"batch_size": 4}},
                       {"id": "opt", "type": "Optimizer", "params": {"kind": "sgd", "lr": 0.1}},
                       {"id": "loss", "type": "Loss", "params": {"kind": "auto"}},
                       {"id": "train", "type": "TrainingLoop", "params": {"epochs": 1, "strategy": "ddp"}}]
    graph["edges"] += [edge("csv", "dataset", "loader", "dataset"), edge("load", "model", "opt", "model"),
                       edge("load", "model", "train", "model"), edge("opt", "optimizer", "train", "optimizer"),
                       edge("loss", "loss", "train", "loss"), edge("loader", "dataloader", "train", "train")]
    return graph


@pytest.mark.timeout(480)
async def test_a_ddp_run_with_provenance_records_its_inputs_once_as_a_local_run_does(jp_fetch, agents, tmp_path):
    from test_provenance_e2e import expected, finished

    graph = ddp_inputs_graph(tmp_path)
    local = await finished(jp_fetch, graph, {"provenance": True})
    assert local["inputs"] == expected(tmp_path)
    agent = agents()
    await until_connected(jp_fetch, agent)
    remote = await finished(jp_fetch, graph, {"provenance": True,
                                              "target": {"worker": "box", "devices": ["cuda:0", "cuda:1"]}})
    events = await all_events(jp_fetch, remote["id"])
    assert [e["payload"]["code"] for e in events if e["type"] == "run_warning"].count("ddp_cpu_ranks") == 1
    assert remote["inputs"] == local["inputs"]
