"""An upload of a worker run's files never holds its card (capability `run_released`), end to end:
a real control plane (jupyter-server, real SQLite) and real `codefy agent start` subprocesses on
loopback, with the transfer backend. The first run writes a large file; the agent holds each
upload for a few seconds (CODEFY_AGENT_TEST_UPLOAD_DELAY_S) so the test reliably sees it
mid-upload. The cpu queue admits one run at a time, so the second run queued behind the first
can only start once the first has released its slot.

The agents run on this machine, so each declares a machine id of its own: otherwise they would be
same-machine workers, which borrow this server's folder and upload nothing."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from test_server_runs import all_events, call, wait_status
from test_workers_e2e import (  # noqa: F401  (fixtures)
    AgentProcess, agents, control, server_token, until_connected,
)

pytestmark = pytest.mark.slow

UPLOAD_DELAY_S = 4.0


@pytest.fixture
def jp_server_config(tmp_path):
    codefy = {"data_dir": str(tmp_path / "codefy"), "run_queue_max_concurrent_cpu": 1}
    return {"ServerApp": {"jpserver_extensions": {"codefy_jupyter": True}}, "CodefyApp": codefy}


def edge(s: str, sp: str, t: str, tp: str) -> dict[str, str]:
    return {"source": s, "source_port": sp, "target": t, "target_port": tp}


# An MLP of about 5.2 M parameters saved as a state_dict: a file of about 21 MB in the run's folder.
BIG = {"nodes": [{"id": "model", "type": "MLP", "params": {"in_features": 512, "out_features": 2, "hidden": 2048,
                                                           "layers": 2}},
                 {"id": "save", "type": "SaveModel", "params": {"filename": "big.pt"}}],
       "edges": [edge("model", "model", "save", "model")]}
SMALL = {"nodes": [{"id": "k", "type": "Float", "params": {"value": 2}},
                   {"id": "s", "type": "Scale", "params": {"factor": 3}}],
         "edges": [edge("k", "value", "s", "x")]}
ON_CPU = {"worker": "remote", "devices": ["cpu"]}


def remote_agent(agents, **env: str) -> AgentProcess:
    return agents(name="remote", env={"CODEFY_AGENT_MACHINE_ID": "test-machine-remote",
                                      "CODEFY_AGENT_TEST_UPLOAD_DELAY_S": str(UPLOAD_DELAY_S), **env})


async def submit(jp_fetch, graph: dict[str, Any]) -> dict[str, Any]:
    code, run = await call(jp_fetch, "api", "runs", method="POST", body={"graph": graph, "options": {"target": ON_CPU}})
    assert code == 201, run
    return run


async def get(jp_fetch, run_id: str) -> dict[str, Any]:
    code, run = await call(jp_fetch, "api", "runs", run_id)
    assert code == 200
    return run


async def started_while_first_runs(jp_fetch, first: str, second: str, timeout: float = 90.0) -> None:
    """Poll until `second` has started; `first` must still be running then (it is uploading)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        b = await get(jp_fetch, second)
        if b["status"] not in ("queued",):
            a = await get(jp_fetch, first)
            assert a["status"] == "running", (a["status"], b["status"])
            return
        a = await get(jp_fetch, first)
        assert a["status"] in ("queued", "running"), a
        assert asyncio.get_running_loop().time() < deadline, "the second run never started"
        await asyncio.sleep(0.05)


def saved(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if r["kind"] == "model"]


async def artifacts(jp_fetch, run_id: str) -> list[dict[str, Any]]:
    code, body = await call(jp_fetch, "api", "runs", run_id, "artifacts")
    assert code == 200, body
    return body["artifacts"]


async def test_the_next_run_starts_while_the_first_uploads_and_the_first_ends_with_its_file(jp_fetch, agents,
                                                                                         tmp_path):
    agent = remote_agent(agents)
    worker = await until_connected(jp_fetch, agent)
    assert "run_released" in worker["capabilities"]
    first = await submit(jp_fetch, BIG)
    second = await submit(jp_fetch, SMALL)
    await started_while_first_runs(jp_fetch, first["id"], second["id"])
    done_b = await wait_status(jp_fetch, second["id"], {"succeeded", "failed"}, timeout=120)
    assert done_b["status"] == "succeeded", done_b
    done_a = await wait_status(jp_fetch, first["id"], {"succeeded", "failed", "cancelled"}, timeout=90)
    assert done_a["status"] == "succeeded", (done_a, agent.output()[-3000:])
    # The second ran entirely inside the first's upload: the first's row stayed running meanwhile.
    assert done_a["started_at"] < done_b["started_at"] < done_b["finished_at"] < done_a["finished_at"]
    facts = done_a["execution_facts"]
    assert facts["released_at"] <= done_b["started_at"]
    assert facts["released_upload_bytes"] > 10_000_000
    # The file is home, byte for byte, and recorded as the run's artifact.
    rows = saved(await artifacts(jp_fetch, first["id"]))
    assert len(rows) == 1 and rows[0]["backend"] == "transfer" and rows[0]["relative_path"] == "big.pt"
    local = Path(rows[0]["path"])
    assert local == tmp_path / "codefy" / "runs" / first["id"] / "big.pt"
    remote = agent.dir / "agent-runs" / first["id"] / "data" / "big.pt"
    assert local.stat().st_size == remote.stat().st_size > 10_000_000
    assert local.read_bytes() == remote.read_bytes()
    events = await all_events(jp_fetch, first["id"])
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert events[-1]["type"] == "execution_complete"
    # Both slots are free again: a third run starts at once.
    third = await submit(jp_fetch, SMALL)
    assert (await wait_status(jp_fetch, third["id"], {"succeeded", "failed"}, timeout=120))["status"] == "succeeded"


async def test_a_cancel_during_the_upload_ends_the_run_cancelled_and_stops_the_upload(jp_fetch, agents, tmp_path):
    agent = remote_agent(agents)
    await until_connected(jp_fetch, agent)
    first = await submit(jp_fetch, BIG)
    second = await submit(jp_fetch, SMALL)
    await started_while_first_runs(jp_fetch, first["id"], second["id"])  # the first is uploading now
    code, body = await call(jp_fetch, "api", "runs", first["id"], "cancel", method="POST")
    assert code == 200, body
    done = await wait_status(jp_fetch, first["id"], {"succeeded", "failed", "cancelled"}, timeout=120)
    assert done["status"] == "cancelled", (done, agent.output()[-3000:])
    events = await all_events(jp_fetch, first["id"])
    warnings = [e["payload"]["code"] for e in events if e["type"] == "run_warning"]
    assert "worker_upload_stopped" in warnings
    assert events[-1]["type"] == "execution_stopped"
    # Nothing reached the control plane; the file stays on the worker.
    assert not (tmp_path / "codefy" / "runs" / first["id"] / "big.pt").exists()
    assert (agent.dir / "agent-runs" / first["id"] / "data" / "big.pt").stat().st_size > 10_000_000
    done_b = await wait_status(jp_fetch, second["id"], {"succeeded", "failed"}, timeout=120)
    assert done_b["status"] == "succeeded"


async def test_a_dropped_connection_during_the_upload_loses_nothing(jp_fetch, agents, tmp_path):
    agent = remote_agent(agents)
    await until_connected(jp_fetch, agent)
    first = await submit(jp_fetch, BIG)
    second = await submit(jp_fetch, SMALL)
    await started_while_first_runs(jp_fetch, first["id"], second["id"])
    os.kill(agent.proc.pid, signal.SIGUSR1)  # the agent drops its socket as a network failure would
    done = await wait_status(jp_fetch, first["id"], {"succeeded", "failed", "cancelled", "interrupted"}, timeout=90)
    assert done["status"] == "succeeded", (done, agent.output()[-3000:])
    assert "dialling again" in agent.output()
    events = await all_events(jp_fetch, first["id"])
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    warnings = [e["payload"]["code"] for e in events if e["type"] == "run_warning"]
    assert "worker_disconnected" in warnings and "worker_reconnected" in warnings
    assert "worker_frames_lost" not in warnings
    rows = saved(await artifacts(jp_fetch, first["id"]))
    assert len(rows) == 1 and Path(rows[0]["path"]).stat().st_size > 10_000_000
    assert (await wait_status(jp_fetch, second["id"], {"succeeded", "failed"}, timeout=120))["status"] == "succeeded"
    # The slot was given back once, not twice: with one slot, two new runs still go one at a time.
    third, fourth = await submit(jp_fetch, BIG), await submit(jp_fetch, SMALL)
    await started_while_first_runs(jp_fetch, third["id"], fourth["id"])
    for run in (third, fourth):
        assert (await wait_status(jp_fetch, run["id"], {"succeeded", "failed"}, timeout=90))["status"] == "succeeded"


async def test_an_older_agent_without_the_capability_holds_the_slot_through_the_upload(jp_fetch, agents):
    agent = remote_agent(agents, CODEFY_AGENT_TEST_WITHOUT_CAPABILITIES="run_released")
    worker = await until_connected(jp_fetch, agent)
    assert "run_released" not in worker["capabilities"] and "transfer" in worker["capabilities"]
    first = await submit(jp_fetch, BIG)
    second = await submit(jp_fetch, SMALL)
    done_a = await wait_status(jp_fetch, first["id"], {"succeeded", "failed"}, timeout=90)
    assert done_a["status"] == "succeeded", (done_a, agent.output()[-3000:])
    assert "released_at" not in done_a["execution_facts"]
    done_b = await wait_status(jp_fetch, second["id"], {"succeeded", "failed"}, timeout=120)
    assert done_b["status"] == "succeeded"
    # It waited through the whole upload: the slot is given back as the first run's end is filed
    # (slot first, then the final status), so its start and that end are a moment apart.
    assert done_b["started_at"] - done_a["started_at"] > UPLOAD_DELAY_S
    assert abs(done_b["started_at"] - done_a["finished_at"]) < 0.5
