"""DDP inside one worker run (agent/ddp.py): the pure plan, then real runs through the agent's runner
(a real run process that starts two gloo ranks on the CPU for a set of two declared cards): the loss
matches one process on the same global batches and seed, cancel mid-epoch stops both ranks, and a
killed rank fails the run cleanly with the other rank stopped."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from codefy_jupyter.agent import ddp
from codefy_jupyter.engine import run_graph
from test_agent_runner import Harness, edge, run_async


def training(epochs: int = 2, n_samples: int = 96, strategy: str = "ddp", batch_size: int = 32) -> dict:
    return {
        "nodes": [
            {"id": "data", "type": "SyntheticClassification",
             "params": {"n_samples": n_samples, "n_features": 4, "n_classes": 2, "seed": 0}},
            {"id": "loader", "type": "DataLoader", "params": {"batch_size": batch_size}},
            {"id": "model", "type": "MLP", "params": {"hidden": 8, "layers": 1}},
            {"id": "opt", "type": "Optimizer", "params": {"kind": "sgd", "lr": 0.1}},
            {"id": "loss", "type": "Loss", "params": {"kind": "auto"}},
            {"id": "train", "type": "TrainingLoop", "params": {"epochs": epochs, "strategy": strategy}},
            {"id": "after", "type": "Float", "params": {"value": 1}},
        ],
        "edges": [edge("data", "dataset", "loader", "dataset"), edge("data", "dataset", "model", "dataset"),
                  edge("model", "model", "opt", "model"), edge("model", "model", "train", "model"),
                  edge("opt", "optimizer", "train", "optimizer"), edge("loss", "loss", "train", "loss"),
                  edge("loader", "dataloader", "train", "train")],
    }


# -- pure -------------------------------------------------------------------------------------------


def test_plan_finds_the_top_level_ddp_loop():
    assert ddp.plan(training()) == "train"
    assert ddp.plan(training(strategy="single")) is None
    assert ddp.world_size(["cuda:0", "cuda:1"]) == 2 and ddp.world_size(["cpu"]) == 0


def test_other_ranks_run_the_loop_and_its_upstream_only():
    sub = ddp.rank_graph(training(), "train")
    assert {n["id"] for n in sub["nodes"]} == {"data", "loader", "model", "opt", "loss", "train"}
    assert all(e["target"] != "after" for e in sub["edges"])


def test_peaks_merge_per_device_and_a_lost_rank_is_the_reported_failure():
    merged = ddp.merge_peaks([{"cpu": {"bytes": 5, "exact": True}}, {"cpu": {"bytes": 9, "exact": True}}, None])
    assert merged == {"cpu": {"bytes": 9, "exact": True}}
    assert ddp.pick_failure([(0, False, {"m": "collective"}), (1, True, {"m": "lost"})]) == (1, {"m": "lost"})
    assert ddp.pick_failure([]) is None


def test_a_ddp_loop_outside_a_rank_trains_in_one_process_with_a_warning(tmp_path):
    events = []
    result = run_graph(training(), seed=7, data_dir=tmp_path, on_event=events.append)
    assert result.status == "succeeded", result.error
    assert [e["code"] for e in events if e.get("event") == "warning"] == ["ddp_single_process"]


# -- real ranks -------------------------------------------------------------------------------------


def _final_loss(events) -> float:
    return [e["value"] for e in events if e.get("event") == "metric" and e.get("name") == "train_loss"][-1]


def _pids(tmp_path: Path, run_id: str) -> list[int]:
    folder = tmp_path / "agent-runs" / run_id / "data" / "ddp"
    return [int((folder / f"rank-{r}.pid").read_text()) for r in range(2)]


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.timeout(480)
def test_two_gloo_ranks_match_one_process_on_the_same_global_batches(tmp_path):
    single = []
    # 96 rows in batches of 32: each rank takes 16 of every batch.
    result = run_graph(training(strategy="single"), seed=7, data_dir=tmp_path / "single", on_event=single.append)
    assert result.status == "succeeded"

    async def scenario() -> None:
        h = Harness(tmp_path, "spawn")
        try:
            body = await h.start("ddp", training(), device="cuda:0", devices=["cuda:0", "cuda:1"], seed=7)
        finally:
            await h.close()
        assert body["status"] == "succeeded", body
        events = [b for k, b in h.of("ddp") if k == "event"]
        losses = [e["payload"]["value"] for e in events
                  if e["type"] == "metric" and e["payload"]["name"] == "train_loss"]
        assert len(losses) == 2  # rank 0 only: the other rank's events are not forwarded
        assert losses[-1] == pytest.approx(_final_loss(single), rel=1e-5, abs=1e-6)
        warnings = [e["payload"]["code"] for e in events if e["type"] == "run_warning"]
        assert "ddp_cpu_ranks" in warnings and "ddp_single_process" not in warnings
        # Rank 0 ran the whole graph (the node after the loop too).
        assert any(e["type"] == "node_status" and e["payload"]["node_id"] == "after" for e in events)
        assert all(_gone(pid) for pid in _pids(tmp_path, "ddp"))
        assert body["peak_memory"]["cpu"]["exact"] is True

    run_async(scenario)


@pytest.mark.timeout(480)
def test_cancel_mid_epoch_stops_both_ranks(tmp_path):
    async def scenario() -> None:
        h = Harness(tmp_path, "spawn")
        try:
            done = h.start("c", training(epochs=100_000, n_samples=256, batch_size=8), device="cuda:0",
                           devices=["cuda:0", "cuda:1"], seed=1)
            await asyncio.wait_for(h.wait_for("c", "event", lambda b: b["type"] == "progress"
                                              and b["payload"].get("value", 0) >= 3), 120)
            h.runner.cancel("c", 30.0, "test")
            body = await asyncio.wait_for(done, 60)
        finally:
            await h.close()
        assert body["status"] == "cancelled", body
        assert all(_gone(pid) for pid in _pids(tmp_path, "c"))

    run_async(scenario)


@pytest.mark.timeout(480)
def test_a_killed_rank_fails_the_run_and_stops_the_other(tmp_path):
    async def scenario() -> None:
        h = Harness(tmp_path, "spawn")
        try:
            done = h.start("k", training(epochs=100_000, n_samples=256, batch_size=8), device="cuda:0",
                           devices=["cuda:0", "cuda:1"], seed=1)
            await asyncio.wait_for(h.wait_for("k", "event", lambda b: b["type"] == "progress"
                                              and b["payload"].get("value", 0) >= 3), 120)
            pids = _pids(tmp_path, "k")
            os.kill(pids[1], signal.SIGKILL)
            body = await asyncio.wait_for(done, 60)
        finally:
            await h.close()
        assert body["status"] == "failed", body
        assert body["error"]["code"] == "ddp_rank_lost" and body["error"]["params"]["rank"] == 1
        assert "signal 9" in body["error"]["message"]
        assert _gone(pids[0])

    run_async(scenario)


@pytest.mark.timeout(480)
def test_ranks_exit_within_5_s_of_losing_the_run_process(tmp_path):
    async def scenario() -> None:
        h = Harness(tmp_path, "spawn")
        try:
            done = h.start("o", training(epochs=100_000, n_samples=256, batch_size=8), device="cuda:0",
                           devices=["cuda:0", "cuda:1"], seed=1)
            await asyncio.wait_for(h.wait_for("o", "event", lambda b: b["type"] == "progress"
                                              and b["payload"].get("value", 0) >= 3), 120)
            pids = _pids(tmp_path, "o")
            child = next(body[0] for kind, body in h.of("o") if kind == "started")
            os.kill(child, signal.SIGKILL)
            killed_at = asyncio.get_running_loop().time()
            while not all(_gone(pid) for pid in pids):
                assert asyncio.get_running_loop().time() - killed_at < 5.0, "a rank outlived its run process by 5 s"
                await asyncio.sleep(0.05)
            body = await asyncio.wait_for(done, 60)
        finally:
            await h.close()
        assert body["status"] == "failed"

    run_async(scenario)


def test_cpu_ranks_split_the_thread_budget_and_card_ranks_keep_it():
    assert ddp.rank_threads(8, 2, "gloo", 16) == 4
    assert ddp.rank_threads(None, 2, "gloo", 16) == 8
    assert ddp.rank_threads(1, 2, "gloo", 16) == 1
    assert ddp.rank_threads(8, 2, "nccl", 16) == 8 and ddp.rank_threads(None, 2, "nccl", 16) is None
