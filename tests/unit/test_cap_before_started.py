"""Issue 16: a budgeted run's process caps its allocator before the agent reports it started.

The run process (real `python -m codefy_jupyter.agent.child`, and real runners with cold spawns)
sends `capped` as its first message; the runner holds run_started until then. This machine has no
CUDA, so the cap itself reports `no_cuda`; a stand-in `torch` package on the run's PYTHONPATH (the
edge: what `import torch` does in the run process) holds the cap at a gate the test opens, or dies,
to show the order and the failures."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from agent_helpers import install_pack, pythonpath
from codefy_jupyter.agent import child, memory_cap, pipe
from codefy_jupyter.agent.pipe_frames import started_frame
from codefy_jupyter.agent.isolation import OfferedDevice, Visibility
from codefy_jupyter.agent.launch import SpawnLauncher
from codefy_jupyter.agent.runner import Runner, RunRequest
from codefy_jupyter.wire.run_options import ExecutionOptions
from test_agent_child import SMALL, make_child  # noqa: F401  (fixture)

OFFERED = {"cuda:0": OfferedDevice("cuda:0", "0"), "cuda:1": OfferedDevice("cuda:1", "1")}
BUDGET = {"cuda:0": 1024}

# `import torch` in the run process: announce itself, wait for the gate, then a torch without CUDA.
FAKE_TORCH = '''
import os, pathlib, time
_gate = os.environ.get("FAKE_TORCH_GATE")
if _gate:
    pathlib.Path(_gate, f"waiting-{os.getpid()}").write_text("")
    while not os.path.exists(os.path.join(_gate, "open")):
        time.sleep(0.02)

__version__ = "0.0+stand-in"


class version:
    cuda = None


class cuda:
    @staticmethod
    def is_available():
        return False

    @staticmethod
    def is_initialized():
        return False
'''


def fake_torch(tmp_path: Path) -> tuple[Path, Path]:
    where = tmp_path / "fake-torch"
    (where / "torch").mkdir(parents=True)
    (where / "torch" / "__init__.py").write_text(FAKE_TORCH)
    gate = tmp_path / "gate"
    gate.mkdir()
    return where, gate


# -- the run process ---------------------------------------------------------------------------------

def test_capped_is_the_first_message_and_says_why_nothing_was_capped(make_child):
    c = make_child()
    c.assign(SMALL, memory_budgets=BUDGET, aliases={}, facts=True)
    messages = c.until_finished()
    assert messages[0] == ("capped", {"memory_limit": None, "reason": memory_cap.NO_CUDA})
    kinds = [k for k, _ in messages]
    assert kinds.count("capped") == 1 and kinds[-1] == "finished" and "facts" in kinds
    assert messages[-1][1]["status"] == "succeeded" and messages[-1][1]["memory_limit"] is None


def test_a_run_without_budgets_says_so_first(make_child):
    c = make_child()
    c.assign(SMALL)
    kind, body = c.next()
    assert (kind, body) == ("capped", {"memory_limit": None, "reason": memory_cap.NO_BUDGET})
    assert c.until_finished()[-1][1]["status"] == "succeeded"


def test_a_cap_that_fails_fails_the_run_before_its_graph(make_child):
    c = make_child(env={child.CAP_FAIL_ENV: "1"})
    c.assign(SMALL, memory_budgets=BUDGET, aliases={})
    messages = c.until_finished()
    assert [k for k, _ in messages] == ["finished"]  # no capped, no event: no node ran
    error = messages[0][1]["error"]
    assert messages[0][1]["status"] == "failed" and error["code"] == "memory_cap_failed"
    assert error["params"] == {"reason": "cap_error", "budgets_mib": BUDGET}
    assert c.close() == child.EXIT_OK


def test_the_hook_does_nothing_without_budgets(make_child):
    c = make_child(env={child.CAP_FAIL_ENV: "1"})
    c.assign(SMALL)
    assert c.until_finished()[-1][1]["status"] == "succeeded"


# -- pure parts --------------------------------------------------------------------------------------

def test_pipe_knows_capped_from_the_run_process_only():
    line = pipe.encode("capped", {"memory_limit": None, "reason": "no_cuda"})
    assert pipe.decode(line, kinds=pipe.CHILD_KINDS) == ("capped", {"memory_limit": None, "reason": "no_cuda"})
    with pytest.raises(pipe.PipeError):
        pipe.decode(line, kinds=pipe.AGENT_KINDS)


def test_ranks_reports_merge_into_one():
    a = {"memory_limit": {"cuda:0": {"bytes": 100, "fraction": 0.1}}, "reason": "applied"}
    b = {"memory_limit": {"cuda:0": {"bytes": 0, "fraction": 0.0}, "cuda:1": {"bytes": 50, "fraction": 0.05}},
         "reason": "applied"}
    assert memory_cap.merge_reports([a, b]) == {"memory_limit": {"cuda:0": {"bytes": 100, "fraction": 0.1},
                                                                 "cuda:1": {"bytes": 50, "fraction": 0.05}},
                                                "reason": "applied"}
    cpu = {"memory_limit": None, "reason": memory_cap.CPU_RANKS}
    assert memory_cap.merge_reports([cpu, cpu]) == cpu


def test_run_started_carries_the_cap_facts():
    view = Visibility(engine_device="cuda:0", cuda_visible_devices="1", visible_devices=["cuda:1"],
                      aliases={"cuda:0": "cuda:1"})
    frame = started_frame("r", 7, view, {"memory_limit": {"cuda:1": {"bytes": 1, "fraction": 0.5}},
                                         "reason": "applied"})
    assert frame.memory_limit == {"cuda:1": {"bytes": 1, "fraction": 0.5}} and frame.memory_cap == "applied"
    plain = started_frame("r", 7, view)
    assert plain.memory_limit is None and plain.memory_cap is None


# -- the runner --------------------------------------------------------------------------------------

class Harness:
    def __init__(self, tmp_path: Path, *, real_torch: bool = False, **env: str) -> None:
        site = install_pack(tmp_path / "site")
        torch_dir, self.gate = fake_torch(tmp_path)
        path = [pythonpath(site)] if real_torch else [str(torch_dir), pythonpath(site)]
        self.env = dict(os.environ, PYTHONPATH=os.pathsep.join(path), FAKE_TORCH_GATE=str(self.gate), **env)
        self.log: list[tuple[str, str, Any]] = []
        self.done: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self.runner = Runner(tmp_path / "agent-runs", SpawnLauncher(), OFFERED, self.env,
                             on_started=lambda run, pid, view, capped: self.log.append((run, "started", capped)),
                             on_message=lambda run, kind, body: self.log.append((run, kind, body)),
                             on_finished=self._finished)

    def _finished(self, run_id: str, body: dict[str, Any]) -> None:
        self.log.append((run_id, "finished", body))
        self.done[run_id].set_result(body)

    def start(self, run_id: str, graph: dict[str, Any] = SMALL, devices: tuple[str, ...] = ("cuda:0",),
              **kw: Any) -> asyncio.Future[dict[str, Any]]:
        self.done[run_id] = asyncio.get_running_loop().create_future()
        self.runner.start(RunRequest(run_id=run_id, graph=graph, device=devices[0], devices=list(devices),
                                     facts=True, **kw))
        return self.done[run_id]

    def of(self, run_id: str) -> list[tuple[str, Any]]:
        return [(kind, body) for run, kind, body in self.log if run == run_id]

    async def waiting(self) -> int:
        """The pid of a run process held at the cap."""
        while True:
            found = list(self.gate.glob("waiting-*"))
            if found:
                return int(found[0].name.split("-", 1)[1])
            await asyncio.sleep(0.02)


def run_async(coro_fn, *args: Any) -> Any:
    async def main() -> Any:
        return await asyncio.wait_for(coro_fn(*args), 100)

    return asyncio.run(main())


def test_a_budgeted_run_is_reported_started_only_once_capped(tmp_path):
    async def scenario() -> None:
        h = Harness(tmp_path)
        done = h.start("r1", memory_budgets=BUDGET)
        await h.waiting()
        await asyncio.sleep(0.3)  # the process is up and capping: nothing reported yet
        assert h.of("r1") == []
        (h.gate / "open").write_text("")
        body = await done
        assert body["status"] == "succeeded", body
        kinds = [k for k, _ in h.of("r1")]
        assert kinds[0] == "started" and kinds[-1] == "finished" and "capped" not in kinds
        assert h.of("r1")[0][1] == {"memory_limit": None, "reason": memory_cap.NO_CUDA}
        assert "facts" in kinds and "event" in kinds

    run_async(scenario)


def test_a_run_without_budgets_is_reported_started_at_once(tmp_path):
    async def scenario() -> None:
        h = Harness(tmp_path)
        done = h.start("plain")
        while not h.of("plain"):
            await asyncio.sleep(0.01)
        assert h.of("plain")[0] == ("started", None)
        assert (await done)["status"] == "succeeded"
        assert not list(h.gate.glob("waiting-*"))  # it never imported torch to cap anything

    run_async(scenario)


def test_a_process_that_dies_before_its_cap_fails_and_is_never_started(tmp_path):
    async def scenario() -> None:
        h = Harness(tmp_path)
        done = h.start("dies", memory_budgets=BUDGET)
        pid = await h.waiting()
        os.kill(pid, signal.SIGKILL)
        body = await done
        assert [k for k, _ in h.of("dies")] == ["finished"]  # no run_started, nothing it sent
        assert body["status"] == "failed" and body["error"]["code"] == "memory_cap_failed"
        assert body["error"]["params"]["reason"] == "ended_before_cap" and body["signal"] == signal.SIGKILL

    run_async(scenario)


def test_a_cap_that_fails_is_reported_with_its_code_and_never_started(tmp_path):
    async def scenario() -> None:
        h = Harness(tmp_path, **{child.CAP_FAIL_ENV: "1"})
        body = await h.start("fails", memory_budgets=BUDGET)
        assert [k for k, _ in h.of("fails")] == ["finished"]
        assert body["status"] == "failed" and body["error"]["code"] == "memory_cap_failed"
        assert body["error"]["params"]["reason"] == "cap_error"

    run_async(scenario)


def test_a_budgeted_run_cancelled_while_capping_ends_cancelled_without_starting(tmp_path):
    async def scenario() -> None:
        h = Harness(tmp_path)
        done = h.start("stop", memory_budgets=BUDGET)
        await h.waiting()
        h.runner.cancel("stop", 0.0, "stop")
        body = await done
        assert [k for k, _ in h.of("stop")] == ["finished"] and body["status"] == "cancelled"

    run_async(scenario)


@pytest.mark.timeout(480)
def test_a_budgeted_ddp_run_is_started_once_every_rank_has_capped(tmp_path):
    from test_ddp import training

    async def scenario() -> None:
        h = Harness(tmp_path, real_torch=True)
        body = await h.start("ddp", training(epochs=1, n_samples=32, batch_size=16), devices=("cuda:0", "cuda:1"),
                             memory_budgets={"cuda:0": 1024, "cuda:1": 1024}, options=ExecutionOptions(seed=3))
        assert body["status"] == "succeeded", body
        log = h.of("ddp")
        # Both ranks train on gloo here (no CUDA): nothing capped, said once, before anything else.
        assert log[0] == ("started", {"memory_limit": None, "reason": memory_cap.CPU_RANKS})
        kinds = [k for k, _ in log]
        assert kinds.count("started") == 1 and "facts" in kinds and "event" in kinds

    run_async(scenario)
