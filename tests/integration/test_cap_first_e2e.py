"""Issue 16 through the whole stack: a real control plane and a real `codefy agent start
--share-memory cuda:0 --no-warm` with a declared card. A budgeted run's log starts only after its
process has capped its allocator: run_started (execution_start) carries the cap facts, and a
process that dies while capping fails the run (`memory_cap_failed`) without it ever starting.

This machine has no CUDA: the cap reports `no_cuda`. A stand-in `torch` on the agent's PYTHONPATH
(the edge: what `import torch` does in the run process, which only the cap imports here) holds the
cap at a gate the test opens. And a DDP run with record_outputs is refused at submit."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from test_cap_before_started import fake_torch
from test_ddp_e2e import GRAPH as DDP_GRAPH
from test_server_runs import SMALL, all_events, call, wait_status
from test_workers_e2e import (  # noqa: F401  (fixtures)
    agents, control, jp_server_config, pack_env, server_token, until_connected,
)

pytestmark = pytest.mark.slow

CARDS = [{"key": "cuda:0", "name": "Shared", "uuid": "GPU-cap-0", "memory_total_mib": 8192, "memory_free_mib": 8192},
         {"key": "cuda:1", "name": "Other", "uuid": "GPU-cap-1", "memory_total_mib": 8192}]
TARGET = {"worker": "box", "memory_gib": 1}


async def held_pid(gate: Path, seen: set[str], timeout: float = 120.0) -> int:
    """The pid of the next run process waiting at the cap."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        for found in gate.glob("waiting-*"):
            if found.name not in seen:
                seen.add(found.name)
                return int(found.name.split("-", 1)[1])
        assert asyncio.get_running_loop().time() < deadline, "no run process reached its cap"
        await asyncio.sleep(0.05)


async def post(jp_fetch, graph: dict[str, Any], **options: Any) -> tuple[int, dict[str, Any]]:
    return await call(jp_fetch, "api", "runs", method="POST", body={"graph": graph, "options": options})


@pytest.mark.timeout(360)
async def test_a_budgeted_run_starts_in_the_log_only_after_its_cap(jp_fetch, agents, pack_env, tmp_path):
    torch_dir, gate = fake_torch(tmp_path)
    inventory = tmp_path / "cards.json"
    inventory.write_text(json.dumps({"devices": CARDS}))
    env = {**pack_env, "PYTHONPATH": os.pathsep.join([str(torch_dir), pack_env["PYTHONPATH"]]),
           "FAKE_TORCH_GATE": str(gate), "CODEFY_DEVICE_INVENTORY": str(inventory)}
    box = agents("--share-memory", "cuda:0", "--no-warm", name="box", env=env)
    await until_connected(jp_fetch, box)
    seen: set[str] = set()

    # A process that dies while capping: the run fails with the code and never started.
    code, dies = await post(jp_fetch, SMALL, device="cuda:0", target=TARGET)
    assert code == 201, dies
    os.kill(await held_pid(gate, seen), signal.SIGKILL)
    done = await wait_status(jp_fetch, dies["id"], {"succeeded", "failed"}, timeout=120)
    assert done["status"] == "failed" and done["error"]["code"] == "memory_cap_failed", done
    assert done["error"]["params"]["reason"] == "ended_before_cap"
    facts = done["execution_facts"]
    assert "worker_pid" not in facts and "memory_cap" not in facts  # no run_started came
    events = await all_events(jp_fetch, dies["id"])
    assert not [e for e in events if e["type"] == "node_status"], events  # no node ran

    # Held at the cap: the run is placed, but its log has not started.
    code, run = await post(jp_fetch, SMALL, device="cuda:0", target=TARGET)
    assert code == 201, run
    await held_pid(gate, seen)
    await asyncio.sleep(1.0)  # time enough for a run_started, were one sent before the cap
    assert await all_events(jp_fetch, run["id"]) == []
    _, row = await call(jp_fetch, "api", "runs", run["id"])
    assert "worker_pid" not in (row.get("execution_facts") or {}), row
    (gate / "open").write_text("")
    done = await wait_status(jp_fetch, run["id"], {"succeeded", "failed"}, timeout=120)
    assert done["status"] == "succeeded", done
    facts = done["execution_facts"]
    assert facts["memory_cap"] == "no_cuda" and facts["worker_pid"] > 0
    events = await all_events(jp_fetch, run["id"])
    assert events[0]["type"] == "execution_start"
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert {e["payload"]["node_id"] for e in events if e["type"] == "node_status"} == {"k", "s"}


@pytest.mark.timeout(360)
async def test_a_ddp_run_that_records_outputs_is_refused_at_submit(jp_fetch, agents):
    box = agents()
    await until_connected(jp_fetch, box)
    _, before = await call(jp_fetch, "api", "runs")
    target = {"worker": "box", "devices": ["cuda:0", "cuda:1"]}
    code, body = await post(jp_fetch, DDP_GRAPH, record_outputs=True, target=target)
    assert code == 400 and body["error"]["code"] == "record_outputs_ddp", body
    assert body["error"]["params"] == {"field": "options.record_outputs", "node_id": "train", "ranks": 2}
    assert "options.record_outputs" in body["error"]["message"]
    _, after = await call(jp_fetch, "api", "runs")
    assert after == before  # nothing written
    # One card (no ranks) or no recording: accepted as before.
    code, one = await post(jp_fetch, DDP_GRAPH, record_outputs=True, target={"worker": "box", "devices": ["cuda:0"]})
    assert code == 201, one
    code, plain = await post(jp_fetch, DDP_GRAPH, target=target)
    assert code == 201, plain
    for run in (one, plain):  # their training is not what this test is about
        await call(jp_fetch, "api", "runs", run["id"], "cancel", method="POST", body={})
        await wait_status(jp_fetch, run["id"], {"succeeded", "failed", "cancelled"}, timeout=120)
