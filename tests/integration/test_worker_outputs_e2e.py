"""Recorded outputs of worker runs, end to end: a real control plane (jupyter-server with the
extension, real SQLite) and real `codefy agent start` subprocesses on loopback. A worker run's
captures stay on the worker and read the same as a local run's; 503 when its agent is away, 504
when it is too slow; eviction and DELETE send `drop_outputs` (a missed one on the next connection);
the refusals at submit leave nothing behind."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import psutil
import pytest

from test_server_runs import call, wait_status
from test_workers_e2e import (  # noqa: F401  (fixtures)
    AgentProcess, agents, control, server_token, until_connected, worker_state,
)

pytestmark = pytest.mark.slow


@pytest.fixture
def jp_server_config(tmp_path, request):
    codefy = {"data_dir": str(tmp_path / "codefy")}
    codefy.update(getattr(request, "param", {}))
    return {"ServerApp": {"jpserver_extensions": {"codefy_jupyter": True}}, "CodefyApp": codefy}


def settings(**values: Any):
    return pytest.mark.parametrize("jp_server_config", [values], indirect=True,
                                   ids=[",".join(f"{k}={v}" for k, v in values.items())])


def edge(s: str, sp: str, t: str, tp: str) -> dict[str, str]:
    return {"source": s, "source_port": sp, "target": t, "target_port": tp}


RECORDED = {"nodes": [{"id": "data", "type": "SyntheticRegression", "params": {"n_samples": 32, "n_features": 3, "seed": 7}},
                      {"id": "k", "type": "Float", "params": {"value": 2}},
                      {"id": "s", "type": "Scale", "params": {"factor": 3}}],
            "edges": [edge("k", "value", "s", "x")]}
SMALL = {"nodes": [{"id": "k", "type": "Float", "params": {"value": 1}}], "edges": []}
PORTS = [("data", "dataset"), ("k", "value"), ("s", "y")]


async def run_recorded(jp_fetch, target: dict[str, Any] | None, graph: dict[str, Any] = RECORDED) -> str:
    options: dict[str, Any] = {"record_outputs": True, **({"target": target} if target else {})}
    code, run = await call(jp_fetch, "api", "runs", method="POST", body={"graph": graph, "options": options})
    assert code == 201, run
    done = await wait_status(jp_fetch, run["id"], {"succeeded", "failed", "cancelled", "interrupted"}, timeout=90)
    assert done["status"] == "succeeded", done
    return run["id"]


async def outputs(jp_fetch, run_id: str, *port: str) -> tuple[int, Any]:
    return await call(jp_fetch, "api", "execution", "outputs", run_id, *port)


def without_run_id(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k != "run_id"}


async def until(test, what: str, timeout: float = 90.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not test():
        assert asyncio.get_running_loop().time() < deadline, what
        await asyncio.sleep(0.1)


def run_processes(agent: AgentProcess) -> list[psutil.Process]:
    """The agent's live run processes: forked from its warm process, or spawned as agent.child."""
    found = []
    procs = agent.processes()
    try:
        warm = {p.pid for p in procs if p.ppid() == agent.proc.pid and "codefy_jupyter.agent.warm" in p.cmdline()}
    except psutil.NoSuchProcess:
        return procs  # one went while looking: look again
    for p in procs:
        try:
            if p.status() == psutil.STATUS_ZOMBIE:
                continue
            if p.ppid() in warm or "codefy_jupyter.agent.child" in p.cmdline():
                found.append(p)
        except psutil.NoSuchProcess:
            continue
    return found


def outputs_dir(agent: AgentProcess, run_id: str) -> Path:
    return agent.dir / "agent-runs" / run_id / "outputs"


async def test_a_worker_runs_outputs_read_exactly_as_a_local_runs(jp_fetch, agents):
    agent = agents(name="rec")
    worker = await until_connected(jp_fetch, agent)
    assert "record_outputs" in worker["capabilities"]
    local = await run_recorded(jp_fetch, None)
    remote = await run_recorded(jp_fetch, {"worker": "rec", "devices": ["cpu"]})
    code, listing = await outputs(jp_fetch, remote)
    assert code == 200, listing
    assert listing["run_id"] == remote
    code, local_listing = await outputs(jp_fetch, local)
    assert without_run_id(listing) == without_run_id(local_listing)
    assert {n["node_id"] for n in listing["nodes"]} == {"data", "k", "s"}
    for port in PORTS:
        code, body = await outputs(jp_fetch, remote, *port)
        assert code == 200, body
        assert without_run_id(body) == without_run_id((await outputs(jp_fetch, local, *port))[1])
    code, body = await outputs(jp_fetch, remote, "s", "y")
    assert body["value"] == 6.0
    code, body = await outputs(jp_fetch, remote, "data", "dataset")
    assert body["fields"]["features"]["shape"] == [32, 3] and body["fields"]["features"]["stats"]["min"] is not None
    # The captures are on the worker: one file per port and the index.
    folder = outputs_dir(agent, remote)
    await until(lambda: (folder / "index.json").is_file(), "the worker never wrote the recorded outputs")
    assert len(list(folder.glob("*.pt"))) == 3  # index.json is written last
    # An unknown port answers as for a local run.
    code, body = await outputs(jp_fetch, remote, "s", "nope")
    local_code, local_body = await outputs(jp_fetch, local, "s", "nope")
    assert code == local_code == 404 and body["error"]["code"] == local_body["error"]["code"] == "output_not_found"


async def test_reads_answer_503_naming_the_worker_once_its_agent_stopped(jp_fetch, agents):
    agent = agents(name="gone")
    await until_connected(jp_fetch, agent)
    run_id = await run_recorded(jp_fetch, {"worker": "gone", "devices": ["cpu"]})
    assert (await outputs(jp_fetch, run_id))[0] == 200
    agent.proc.terminate()
    assert await agent.exited() == 0
    deadline = asyncio.get_running_loop().time() + 90
    while (await worker_state(jp_fetch, "gone"))["state"] == "connected":
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.1)
    for port in ((), ("s", "y")):
        code, body = await outputs(jp_fetch, run_id, *port)
        assert code == 503, body
        assert body["error"]["code"] == "worker_not_connected" and body["error"]["params"]["worker"] == "gone"
        assert "gone" in body["error"]["message"]
    # The files stay on the worker: a later connection reads them again.
    assert (outputs_dir(agent, run_id) / "index.json").is_file()


@settings(worker_output_fetch_timeout_s=6)
async def test_a_read_the_worker_is_too_slow_for_answers_504_and_the_listing_still_answers(jp_fetch, agents):
    agent = agents(name="slow", env={"CODEFY_TEST_OUTPUT_READ_DELAY_S": "30"})
    await until_connected(jp_fetch, agent)
    run_id = await run_recorded(jp_fetch, {"worker": "slow", "devices": ["cpu"]})
    # Until the run's process has written its files and exited, it answers reads from its copy in
    # memory (without the slow helper), and the control plane keeps that answer; under load it
    # outlives its run's end by seconds. The read under test is the first after it has gone.
    await until(lambda: not run_processes(agent), "the run's process never exited")
    started = asyncio.get_running_loop().time()
    code, body = await outputs(jp_fetch, run_id, "s", "y")
    waited = asyncio.get_running_loop().time() - started
    assert code == 504, body
    assert body["error"]["code"] == "worker_output_timeout" and body["error"]["params"]["worker"] == "slow"
    # The agent gives up after 1 s (its budget is 5 s under the server's), the server after 6 s at the
    # latest: either way long before the agent's 30 s read.
    assert waited < 25, waited
    # A listing needs no value: the agent answers it itself, at once.
    assert (await outputs(jp_fetch, run_id))[0] == 200


async def test_eviction_and_delete_drop_the_workers_files_a_missed_drop_goes_on_reconnect(jp_fetch, agents):
    agent = agents(name="keep")
    await until_connected(jp_fetch, agent)
    evicted = await run_recorded(jp_fetch, {"worker": "keep", "devices": ["cpu"]})
    deleted = await run_recorded(jp_fetch, {"worker": "keep", "devices": ["cpu"]})
    missed = await run_recorded(jp_fetch, {"worker": "keep", "devices": ["cpu"]})
    # A run's end is reported before the worker has written its files (child.py): wait for them.
    await until(lambda: all((outputs_dir(agent, r) / "index.json").is_file() for r in (evicted, deleted, missed)),
                "the worker never wrote the recorded outputs")
    # DELETE of the outputs: the worker removes them at once.
    code, _ = await call(jp_fetch, "api", "execution", "outputs", deleted, method="DELETE")
    assert code == 204
    await until(lambda: not outputs_dir(agent, deleted).exists(), "drop_outputs never reached the worker")
    assert (await outputs(jp_fetch, deleted))[0] == 404
    # 20 local recording runs push the oldest worker run out of the newest 20 (they count together).
    for _ in range(18):
        await run_recorded(jp_fetch, None, SMALL)
    assert (await outputs(jp_fetch, evicted))[0] == 200
    await run_recorded(jp_fetch, None, SMALL)
    await until(lambda: not outputs_dir(agent, evicted).exists(), "the evicted run's files stayed on the worker")
    code, body = await outputs(jp_fetch, evicted)
    assert code == 404 and body["error"]["code"] == "outputs_not_recorded"
    # A drop while the worker is away is sent when it connects again.
    agent.proc.terminate()
    assert await agent.exited() == 0
    code, _ = await call(jp_fetch, "api", "execution", "outputs", missed, method="DELETE")
    assert code == 204
    assert (outputs_dir(agent, missed) / "index.json").is_file()
    again = agents(name="keep")
    await until_connected(jp_fetch, again)
    await until(lambda: not outputs_dir(again, missed).exists(), "the missed drop_outputs was never sent")
    assert (await outputs(jp_fetch, missed))[0] == 404


async def test_record_outputs_is_refused_for_one_shot_targets_and_nothing_is_written(jp_fetch, agents):
    before = (await call(jp_fetch, "api", "runs"))[1]
    code, body = await call(jp_fetch, "api", "runs", method="POST", body={
        "graph": SMALL, "options": {"record_outputs": True, "target": {"worker": "any", "pool": "one-shot"}}})
    assert code == 400 and body["error"]["code"] == "record_outputs_one_shot", body
    assert body["error"]["params"]["field"] == "options.record_outputs"
    # A one-shot agent named by the run: it exits with its run, so nothing could ever be read.
    solo = agents("--one-shot", name="solo")
    await until_connected(jp_fetch, solo)
    code, body = await call(jp_fetch, "api", "runs", method="POST", body={
        "graph": SMALL, "options": {"record_outputs": True, "target": {"worker": "solo"}}})
    assert code == 400 and body["error"]["code"] == "record_outputs_one_shot", body
    assert body["error"]["params"]["worker"] == "solo" and "solo" in body["error"]["message"]
    assert (await call(jp_fetch, "api", "runs"))[1] == before
    assert solo.proc.poll() is None  # it took nothing


async def test_agent_stop_waits_for_a_finished_run_to_write_its_outputs(jp_fetch, agents):
    agent = agents(name="slowdisk", env={"CODEFY_TEST_OUTPUTS_WRITE_DELAY_S": "4"})
    await until_connected(jp_fetch, agent)
    run_id = await run_recorded(jp_fetch, {"worker": "slowdisk", "devices": ["cpu"]})
    folder = outputs_dir(agent, run_id)
    # Reported before the files exist; a read meanwhile is answered from the run's memory.
    assert not (folder / "index.json").exists()
    code, body = await outputs(jp_fetch, run_id, "s", "y")
    assert code == 200 and body["value"] == 6.0
    agent.proc.terminate()
    assert await agent.exited() == 0
    assert (folder / "index.json").is_file() and len(list(folder.glob("*.pt"))) == 3
