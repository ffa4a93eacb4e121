"""The agent's runner with real run processes (cold spawn and warm fork), real engine, real torch on
CPU: events in order then the result, device variables and scrubbed secrets as the run sees them,
cooperative cancel, terminate after the grace and kill after that, a segfault failing only its run."""

from __future__ import annotations

import asyncio
import os
import signal
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from agent_helpers import install_pack, pythonpath
from codefy_jupyter.agent import warm
from codefy_jupyter.agent.isolation import OfferedDevice
from codefy_jupyter.agent.launch import SpawnLauncher, WarmLauncher
from codefy_jupyter.agent.runner import KillPolicy, Runner, RunRequest
from codefy_jupyter.wire.run_options import ExecutionOptions

OFFERED = {"cuda:0": OfferedDevice("cuda:0", "0"), "cuda:1": OfferedDevice("cuda:1", "1"),
           "cuda:2": OfferedDevice("cuda:2", "2")}
SECRETS = {"CODEFY_TOKEN": "agent-secret-token", "CODEFY_DB_PATH": "/srv/codefy.sqlite", "JUPYTER_TOKEN": "jt",
           "CODEFY_AGENT_TOKEN": "agent-secret-token", "CODEFY_SOME_SECRET": "s", "ROCR_VISIBLE_DEVICES": "0"}

LAUNCHERS = ["spawn", pytest.param("warm", marks=pytest.mark.skipif(not warm.supported(), reason="Linux only"))]


def edge(s: str, sp: str, t: str, tp: str) -> dict[str, str]:
    return {"source": s, "source_port": sp, "target": t, "target_port": tp}


SMALL = {"nodes": [{"id": "k", "type": "Float", "params": {"value": 2}},
                   {"id": "s", "type": "Scale", "params": {"factor": 3}},
                   {"id": "m", "type": "List", "params": {"values": [1, 2, 3]}},
                   {"id": "mean", "type": "Mean"}],
         "edges": [edge("k", "value", "s", "x"), edge("m", "values", "mean", "values")]}


def one(node_type: str, **params: Any) -> dict[str, Any]:
    return {"nodes": [{"id": "n", "type": node_type, "params": params}], "edges": []}


class Harness:
    """A Runner whose callbacks record everything, in order."""

    def __init__(self, tmp_path: Path, how: str, kill_after_s: float = 5.0) -> None:
        site = install_pack(tmp_path / "site")
        self.env = dict(os.environ, PYTHONPATH=pythonpath(site), KEEP_ME="yes", **SECRETS)
        self.launcher = SpawnLauncher() if how == "spawn" else WarmLauncher(self.env)
        self.log: list[tuple[str, str, Any]] = []
        self.done: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self.runner = Runner(tmp_path / "agent-runs", self.launcher, OFFERED, self.env,
                             on_started=lambda run, pid, view, capped: self.log.append((run, "started", (pid, view))),
                             on_message=lambda run, kind, body: self.log.append((run, kind, body)),
                             on_finished=self._finished, kill_policy=KillPolicy(kill_after_s=kill_after_s))

    def _finished(self, run_id: str, body: dict[str, Any]) -> None:
        self.log.append((run_id, "finished", body))
        self.done[run_id].set_result(body)

    def start(self, run_id: str, graph: dict[str, Any], device: str = "cpu", devices: list[str] | None = None,
              **kw: Any) -> asyncio.Future[dict[str, Any]]:
        self.done[run_id] = asyncio.get_running_loop().create_future()
        # What an assign's options carry (seed, deterministic, ...) may be given as keywords.
        given = {k: kw.pop(k) for k in [k for k in kw if k in ExecutionOptions.__dataclass_fields__]}
        if given:
            kw["options"] = replace(kw.get("options") or ExecutionOptions(), **given)
        self.runner.start(RunRequest(run_id=run_id, graph=graph, device=device, devices=devices or [], **kw))
        return self.done[run_id]

    def of(self, run_id: str) -> list[tuple[str, Any]]:
        return [(kind, body) for run, kind, body in self.log if run == run_id]

    async def wait_for(self, run_id: str, kind: str, test=lambda body: True) -> Any:
        while True:
            for k, body in self.of(run_id):
                if k == kind and test(body):
                    return body
            await asyncio.sleep(0.02)

    async def close(self) -> None:
        await self.launcher.close()


def run_async(coro_fn, *args: Any) -> Any:
    async def main() -> Any:
        return await asyncio.wait_for(coro_fn(*args), 100)

    return asyncio.run(main())


@pytest.mark.parametrize("how", LAUNCHERS)
def test_a_run_reports_started_then_events_in_order_then_finished(tmp_path, how):
    async def scenario() -> None:
        h = Harness(tmp_path, how)
        try:
            body = await h.start("r1", SMALL)
        finally:
            await h.close()
        kinds = [kind for kind, _ in h.of("r1")]
        assert kinds[0] == "started" and kinds[-1] == "finished"
        assert body["status"] == "succeeded" and body["error"] is None
        assert body["executed"] == 4 and body["metrics"] == {"mean": 2.0}
        events = [b for k, b in h.of("r1") if k == "event"]
        # The same payloads the control plane builds for its own runs (core.run_events.from_engine).
        statuses = [(e["payload"]["node_id"], e["payload"]["status"]) for e in events if e["type"] == "node_status"]
        assert {n for n, _ in statuses} == {"k", "s", "m", "mean"}
        for node in ("k", "s", "m", "mean"):
            mine = [s for n, s in statuses if n == node]
            assert mine[0] == "running" and mine[-1] == "done", mine
        assert all(e["payload"]["run_id"] == "r1" for e in events)
        metrics = [e["payload"] for e in events if e["type"] == "metric"]
        assert metrics == [{"run_id": "r1", "node_id": "mean", "name": "mean", "value": 2.0, "step": None}]
        assert (tmp_path / "agent-runs" / "r1" / "output.log").exists()

    run_async(scenario)


@pytest.mark.parametrize("how", LAUNCHERS)
def test_the_run_sees_its_cards_in_assign_order_and_no_secrets(tmp_path, how):
    async def scenario() -> None:
        h = Harness(tmp_path, how)
        try:
            cuda = await h.start("cuda", one("Environ"), device="cuda:2", devices=["cuda:2", "cuda:0"])
            cpu = await h.start("cpu", one("Environ"), device="cpu")
        finally:
            await h.close()
        assert cuda["status"] == "succeeded" and cpu["status"] == "succeeded"
        _, (pid, view) = h.of("cuda")[0]
        assert view.engine_device == "cuda:0" and view.aliases == {"cuda:0": "cuda:2", "cuda:1": "cuda:0"}
        seen = next(b["payload"] for k, b in h.of("cuda") if k == "event" and b["type"] == "run_warning")["params"]
        assert seen["CUDA_VISIBLE_DEVICES"] == "2,0" and seen["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
        for name in SECRETS:
            assert seen[name] is None, name
        assert seen["KEEP_ME"] == "yes"
        assert seen["raw_has_token"] is False  # not even in the exec-time environment
        seen = next(b["payload"] for k, b in h.of("cpu") if k == "event" and b["type"] == "run_warning")["params"]
        assert seen["CUDA_VISIBLE_DEVICES"] == ""

    run_async(scenario)


@pytest.mark.parametrize("how", LAUNCHERS)
def test_cancel_is_cooperative(tmp_path, how):
    async def scenario() -> None:
        h = Harness(tmp_path, how)
        try:
            done = h.start("nap", {"nodes": [{"id": "k", "type": "Float", "params": {"value": 1}},
                                              {"id": "nap", "type": "Sleep", "params": {"seconds": 60}}],
                                   "edges": [edge("k", "value", "nap", "value")]})
            await h.wait_for("nap", "event", lambda b: b["payload"].get("node_id") == "nap")
            assert h.runner.cancel("nap", grace_s=60, reason="stop please")
            body = await done
        finally:
            await h.close()
        # The run's own report: the engine stopped; nothing was terminated.
        assert body["status"] == "cancelled" and "signal" not in body and "output_tail" not in body

    run_async(scenario)


@pytest.mark.parametrize("how", LAUNCHERS)
def test_a_run_that_ignores_cancel_is_terminated_after_the_grace(tmp_path, how):
    async def scenario() -> None:
        h = Harness(tmp_path, how)
        try:
            done = h.start("stubborn", one("Stubborn", seconds=60))
            await h.wait_for("stubborn", "event", lambda b: b["payload"].get("status") == "running")
            h.runner.cancel("stubborn", grace_s=0.5)
            body = await done
        finally:
            await h.close()
        assert body["status"] == "cancelled"
        assert body["signal"] == signal.SIGTERM
        assert "stubborn: not checking cancel" in body["output_tail"]

    run_async(scenario)


def test_a_run_that_ignores_sigterm_is_killed(tmp_path):
    async def scenario() -> None:
        h = Harness(tmp_path, "spawn", kill_after_s=0.5)
        try:
            done = h.start("deaf", one("IgnoreTerm", seconds=60), options=ExecutionOptions(max_parallel_nodes=1))
            await h.wait_for("deaf", "event", lambda b: b["payload"].get("status") == "running")
            log = tmp_path / "agent-runs" / "deaf" / "output.log"
            while "ignoring SIGTERM" not in log.read_text():
                await asyncio.sleep(0.02)
            h.runner.cancel("deaf", grace_s=0)
            body = await done
        finally:
            await h.close()
        assert body["status"] == "cancelled" and body["signal"] == signal.SIGKILL

    run_async(scenario)


@pytest.mark.parametrize("how", LAUNCHERS)
def test_a_segfault_fails_only_its_own_run(tmp_path, how):
    async def scenario() -> None:
        h = Harness(tmp_path, how)
        try:
            crash = h.start("crash", one("Segfault"))
            other = h.start("other", {"nodes": [{"id": "say", "type": "Say", "params": {"text": "fine"}},
                                                {"id": "nap", "type": "Sleep", "params": {"seconds": 0.5}}],
                                      "edges": [edge("say", "value", "nap", "value")]})
            crashed, survived = await crash, await other
        finally:
            await h.close()
        assert crashed["status"] == "failed" and crashed["signal"] == signal.SIGSEGV
        assert crashed["error"]["code"] == "run_process_died" and "SIGSEGV" in crashed["error"]["message"]
        assert "about to crash" in crashed["output_tail"]
        assert survived["status"] == "succeeded"

    run_async(scenario)


def test_a_run_whose_process_cannot_start_fails_with_the_reason(tmp_path):
    async def scenario() -> None:
        h = Harness(tmp_path, "spawn")
        h.launcher.python = str(tmp_path / "no-such-python")
        body = await h.start("nope", SMALL)
        assert body["status"] == "failed" and body["error"]["code"] == "run_process_start_failed"
        assert "no-such-python" in body["error"]["message"]

    run_async(scenario)


@pytest.mark.skipif(not warm.supported(), reason="Linux only")
def test_a_torch_training_run_forked_from_the_warm_process(tmp_path):
    graph = {
        "nodes": [
            {"id": "data", "type": "SyntheticClassification",
             "params": {"n_samples": 120, "n_features": 4, "n_classes": 2, "seed": 0}},
            {"id": "loader", "type": "DataLoader", "params": {"batch_size": 32}},
            {"id": "model", "type": "MLP", "params": {"hidden": 8, "layers": 1}},
            {"id": "opt", "type": "Optimizer", "params": {"kind": "adam", "lr": 0.01}},
            {"id": "loss", "type": "Loss", "params": {"kind": "auto"}},
            {"id": "train", "type": "TrainingLoop", "params": {"epochs": 2}},
        ],
        "edges": [edge("data", "dataset", "loader", "dataset"), edge("data", "dataset", "model", "dataset"),
                  edge("model", "model", "opt", "model"), edge("model", "model", "train", "model"),
                  edge("opt", "optimizer", "train", "optimizer"), edge("loss", "loss", "train", "loss"),
                  edge("loader", "dataloader", "train", "train")],
    }

    async def scenario() -> None:
        h = Harness(tmp_path, "warm")
        try:
            await h.launcher.start()
            assert h.launcher.pid is not None
            body = await h.start("train", graph, options=ExecutionOptions(seed=7))
            again = await h.start("train2", graph, options=ExecutionOptions(seed=7))
        finally:
            await h.close()
        assert body["status"] == "succeeded", body
        assert again["metrics"] == body["metrics"]  # a fresh process each time, same seed, same numbers
        names = {b["payload"]["name"] for k, b in h.of("train") if k == "event" and b["type"] == "metric"}
        assert "train_loss" in names
        pids = {h.of(run)[0][1][0] for run in ("train", "train2")}
        assert len(pids) == 2 and h.launcher.pid not in pids

    run_async(scenario)


@pytest.mark.parametrize("how", LAUNCHERS)
def test_a_recording_run_reports_its_end_before_it_writes_its_outputs(tmp_path, how, monkeypatch):
    from codefy_jupyter.agent.child import WRITE_DELAY_ENV
    from codefy_jupyter.wire.output_reads import read_index

    monkeypatch.setenv(WRITE_DELAY_ENV, "2")

    async def scenario() -> None:
        h = Harness(tmp_path, how)
        written: list[str] = []
        h.runner.on_outputs = written.append
        folder = tmp_path / "agent-runs" / "r1" / "outputs"
        try:
            body = await h.start("r1", SMALL, options=ExecutionOptions(record_outputs=True))
            # Reported (the slot is free) while its process still writes: nothing on disk yet.
            assert body["status"] == "succeeded"
            assert "r1" in h.runner.writing and "r1" not in h.runner.runs and read_index(folder) is None
            # Meanwhile it answers reads from its copy in memory, as its files will.
            proc = h.runner.writing["r1"]
            early = [await proc.read("list", {}), await proc.read("port", {"node_id": "mean", "port": "mean"})]
            assert read_index(folder) is None and early[0][0] == 200 and early[1] == (
                200, {"run_id": "r1", "node_id": "mean", "port": "mean", "type": "float", "shape": None, "value": 2.0})
            await asyncio.wait_for(proc.task, 60)
            assert await proc.read("list", {}) is None  # gone: the files answer now
            from codefy_jupyter.agent.output_reader import answer_from_folder
            assert [answer_from_folder(folder, "r1", "list", {}),
                    answer_from_folder(folder, "r1", "port", {"node_id": "mean", "port": "mean"})] == early
            assert written == ["r1"] and "r1" not in h.runner.writing
            index = read_index(folder)
            assert set(index["nodes"]) == {"k", "s", "m", "mean"}
            assert index["nodes"]["s"]["y"]["type"] == "float" and (folder / index["nodes"]["s"]["y"]["file"]).is_file()
            # Out of write time: the ports are listed, none kept.
            h.done["r2"] = asyncio.get_running_loop().create_future()
            h.runner.start(RunRequest(run_id="r2", graph=SMALL, device="cpu", options=ExecutionOptions(record_outputs=True),
                                      outputs_write_timeout_s=0.5))
            await h.done["r2"]
            await asyncio.wait_for(h.runner.writing["r2"].task, 60)
            late = read_index(tmp_path / "agent-runs" / "r2" / "outputs")
            assert all("write time ran out" in e["error"] for ports in late["nodes"].values() for e in ports.values())
        finally:
            await h.close()

    run_async(scenario)
