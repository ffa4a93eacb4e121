"""The agent's side of recorded outputs (agent/outputs.py) with real helper processes: at most four
reads at once, `cancel_fetch` ends a read and its helper, a read that outlasts its budget answers
504 itself, `drop_outputs` and the worker's own limits remove files."""

from __future__ import annotations

import asyncio
import json

import psutil
import pytest

from codefy_jupyter.agent.output_reader import DELAY_ENV
from codefy_jupyter.agent.outputs import MAX_READS, WorkerOutputs
from codefy_jupyter.wire.frames import CancelFetch, DropOutputs, FetchOutput, OutputAnswer
from codefy_jupyter.wire.output_reads import joined

torch = pytest.importorskip("torch")


def make_outputs(tmp_path, run_id: str, n: int = 10) -> None:
    from codefy_jupyter.engine.recorded import write_outputs

    write_outputs(tmp_path / run_id / "outputs", {"x": {"v": torch.arange(n, dtype=torch.float32)}})


def agent_side(tmp_path, sent: list, **kw) -> WorkerOutputs:
    return WorkerOutputs(tmp_path, "box", send=sent.append, writing=lambda run_id: None, **kw)


def helpers() -> list[psutil.Process]:
    return [p for p in psutil.Process().children(recursive=True)
            if "codefy_jupyter.agent.output_reader" in " ".join(p.cmdline())]


def answers(sent: list) -> dict[str, tuple[int, dict]]:
    parts: dict[str, list[str]] = {}
    done = {}
    for frame in sent:
        assert isinstance(frame, OutputAnswer)
        parts.setdefault(frame.request_id, []).append(frame.chunk)
        if frame.final:
            done[frame.request_id] = (frame.http_status, joined(parts[frame.request_id]))
    return done


async def until(test, timeout: float = 120.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not test():
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.05)


@pytest.mark.timeout(300)
async def test_four_reads_at_most_run_at_once_and_a_cancelled_one_ends_its_helper(tmp_path, monkeypatch):
    monkeypatch.setenv(DELAY_ENV, "30")
    make_outputs(tmp_path, "r1")
    sent: list = []
    outputs = agent_side(tmp_path, sent)
    for i in range(MAX_READS + 2):
        outputs.fetch(FetchOutput(request_id=f"q{i}", run_id="r1", kind="port",
                                  query={"node_id": "x", "port": "v"}, wait_s=100))
    await until(lambda: len(helpers()) == MAX_READS)
    await asyncio.sleep(0.5)
    assert len(helpers()) == MAX_READS  # the other two wait for a place
    first = helpers()
    for i in range(MAX_READS + 2):
        outputs.cancel(CancelFetch(request_id=f"q{i}"))
    await until(lambda: not helpers() and outputs.reading == 0)
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in first)
    assert sent == []  # a cancelled read answers nothing


@pytest.mark.timeout(300)
async def test_a_read_that_outlasts_its_budget_answers_504_and_a_listing_needs_no_helper(tmp_path, monkeypatch):
    monkeypatch.setenv(DELAY_ENV, "30")
    make_outputs(tmp_path, "r1")
    sent: list = []
    outputs = agent_side(tmp_path, sent)
    outputs.fetch(FetchOutput(request_id="slow", run_id="r1", kind="port", query={"node_id": "x", "port": "v"},
                              wait_s=6.0))  # the agent gives up 5 s earlier
    outputs.fetch(FetchOutput(request_id="list", run_id="r1", kind="list", wait_s=6.0))
    await until(lambda: len(answers(sent)) == 2)
    got = answers(sent)
    assert got["list"][0] == 200 and got["list"][1]["nodes"][0]["node_id"] == "x"
    status, body = got["slow"]
    assert status == 504 and body["error"]["code"] == "worker_output_timeout" and body["error"]["params"]["worker"] == "box"
    await until(lambda: not helpers())


@pytest.mark.timeout(300)
async def test_a_port_read_answers_through_the_helper(tmp_path):
    make_outputs(tmp_path, "r1")
    sent: list = []
    outputs = agent_side(tmp_path, sent)
    outputs.fetch(FetchOutput(request_id="q", run_id="r1", kind="port", query={"node_id": "x", "port": "v"}))
    outputs.fetch(FetchOutput(request_id="gone", run_id="r2", kind="list"))
    await until(lambda: len(answers(sent)) == 2, timeout=90)
    status, body = answers(sent)["q"]
    assert status == 200 and body["stats"]["max"] == 9.0 and body["shape"] == [10]
    assert answers(sent)["gone"][0] == 404


async def test_drops_and_the_workers_own_limits_remove_files(tmp_path):
    for run_id in ("a", "b", "c"):
        make_outputs(tmp_path, run_id, n=1000)  # 4000 bytes each
    outputs = agent_side(tmp_path, [], max_runs=2)
    outputs.drop(DropOutputs(run_id="../escape"))  # never outside agent-runs/
    outputs.drop(DropOutputs(run_id="a"))
    assert not (tmp_path / "a" / "outputs").exists() and (tmp_path / "a").exists()
    make_outputs(tmp_path, "d", n=1000)
    assert outputs.written("b") == ["c"]  # the oldest goes, never the run just written
    sized = agent_side(tmp_path, [], max_bytes=5000)
    evicted = sized.written("d")
    assert "d" not in evicted and (tmp_path / "d" / "outputs" / "index.json").exists()
    assert len([r for r in "abcd" if (tmp_path / r / "outputs").exists()]) == 1
    assert json.loads((tmp_path / "d" / "outputs" / "index.json").read_text())["nodes"]["x"]["v"]["shape"] == [1000]
