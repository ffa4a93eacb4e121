"""Per-run system metrics on a real control plane (jupyter-server with the extension, real SQLite):
a run executing in the control plane and one on a real `codefy agent start` over loopback record
system/cpu_percent and system/rss_bytes while they execute; this machine has no NVML, so there are no
GPU series and the run's execution_facts.system_metrics says why. Sampling every 0.2 s: each run
waits until the test has seen three samples through the REST metrics read (a file the test then
writes, or a cancel): waited on by condition, never by time."""

from __future__ import annotations

import asyncio
import os
import re
import sys
import time
from typing import Any

import pytest

from test_server_runs import call, wait_status
from test_workers_e2e import (  # noqa: F401 - fixtures
    agents, control, jp_server_config, server_token, settings, until_connected,
)

LONG = {"nodes": [{"id": "k", "type": "Float", "params": {"value": 1}},
                  {"id": "nap", "type": "Sleep", "params": {"seconds": 3600}}],
        "edges": [{"source": "k", "source_port": "value", "target": "nap", "target_port": "value"}]}
SHORT = {"nodes": [{"id": "nap", "type": "Sleep", "params": {"seconds": 0.6}}], "edges": []}
NO_NVML = "unavailable (no NVML)"


async def metrics(jp_fetch, run_id: str) -> list[dict[str, Any]]:
    code, body = await call(jp_fetch, "api", "runs", run_id, "metrics")
    assert code == 200, body
    return body["metrics"]


async def until_sampled(jp_fetch, run_id: str, samples: int, timeout: float = 120.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        points = await metrics(jp_fetch, run_id)
        if sum(p["name"] == "system/cpu_percent" for p in points) >= samples:
            return
        code, now = await call(jp_fetch, "api", "runs", run_id)
        assert now["status"] in ("queued", "running"), now
        assert asyncio.get_running_loop().time() < deadline, f"fewer than {samples} samples: {points}"
        await asyncio.sleep(0.05)


async def sampled_then_cancelled(jp_fetch, options: dict[str, Any], samples: int = 3,
                                 timeout: float = 120.0) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Submit LONG; once `samples` CPU samples are readable, cancel it; the ended run and its metrics."""
    code, run = await call(jp_fetch, "api", "runs", method="POST", body={"graph": LONG, "options": options})
    assert code == 201, run
    await until_sampled(jp_fetch, run["id"], samples, timeout)
    code, body = await call(jp_fetch, "api", "runs", run["id"], "cancel", method="POST")
    assert code in (200, 202), body
    done = await wait_status(jp_fetch, run["id"], {"cancelled"}, timeout=timeout)
    return done, await metrics(jp_fetch, run["id"])


def check_system_series(points: list[dict[str, Any]]) -> None:
    cpu = [p for p in points if p["name"] == "system/cpu_percent"]
    rss = [p for p in points if p["name"] == "system/rss_bytes"]
    assert len(cpu) >= 3 and len(rss) >= 3
    assert [p["step"] for p in cpu] == list(range(len(cpu)))  # a series of its own, counted from 0
    assert all(p["node_id"] is None for p in cpu + rss)
    assert all(0 <= p["value"] < 100 * 1024 for p in cpu)  # percent of one core, any number of cores
    assert all(1 << 20 < p["value"] < 1 << 44 for p in rss)  # more than a MiB, less than 16 TiB
    assert not [p for p in points if p["name"].startswith("system/gpu_")]  # no NVML on this machine


@pytest.fixture
def wait_file_node():
    """`WaitFile` in this process's registry (in-process runs execute here): logs its own metric
    `waited` at steps 0, 1, 2..., until its `path` exists; then the run goes on to Mean."""
    from codefy_jupyter.engine import default_registry, node, optional, param

    registry = default_registry()
    before = dict(registry._defs)

    @node("WaitFile", inputs={"value": optional("any")}, outputs={"value": "any"},
          params={"path": param.string("")}, cacheable=False)
    def wait_file(ctx, path, value=None):
        step = 0
        while not os.path.exists(path):
            ctx.check_cancelled()
            ctx.log_metric("waited", step, step=step)
            step += 1
            time.sleep(0.02)
        return {"value": value}

    yield
    registry._defs.clear()
    registry._defs.update(before)


@settings(system_metrics_interval_s=0.2)
async def test_a_local_run_records_the_processes_cpu_and_memory_and_says_gpus_are_unavailable(
        jp_fetch, control, server_token, wait_file_node, tmp_path):
    release = tmp_path / "release"
    graph = {"nodes": [{"id": "xs", "type": "List", "params": {"values": [1, 2, 3]}},
                       {"id": "w", "type": "WaitFile", "params": {"path": str(release)}},
                       {"id": "m", "type": "Mean"}],
             "edges": [{"source": "xs", "source_port": "values", "target": "w", "target_port": "value"},
                       {"source": "w", "source_port": "value", "target": "m", "target_port": "values"}]}
    code, run = await call(jp_fetch, "api", "runs", method="POST", body={"graph": graph})
    assert code == 201, run
    await until_sampled(jp_fetch, run["id"], 3)
    release.touch()
    done = await wait_status(jp_fetch, run["id"], {"succeeded", "failed"})
    assert done["status"] == "succeeded", done
    points = await metrics(jp_fetch, run["id"])
    check_system_series(points)
    # The run's own metrics: their steps and the closing event's last values, as without sampling.
    waited = [p for p in points if p["name"] == "waited"]
    assert [p["step"] for p in waited] == list(range(len(waited))) and all(p["node_id"] == "w" for p in waited)
    code, page = await call(jp_fetch, "api", "runs", run["id"], "events", cursor=0)
    closing = [e for e in page["events"] if e["type"] == "execution_complete"]
    assert closing and set(closing[0]["payload"]["metrics"]) == {"waited", "mean"}
    note = done["execution_facts"]["system_metrics"]
    assert note["interval_s"] == 0.2 and note["gpu"] == NO_NVML and note["samples"] >= 3
    assert "control plane" in note["process"]
    assert done["execution_facts"]["peak_memory"]["cpu"]["exact"] is False  # its peak memory as before
    # `codefy runs show` prints the peaks and the note.
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "codefy_jupyter.cli", "runs", "show", done["id"], "--url", control,
        "--token", server_token, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    text = out.decode()
    assert proc.returncode == 0, err.decode()
    assert re.search(r"System\s+sampled every 0.2 s", text), text
    assert re.search(r"peak CPU\s+\d+ %", text) and re.search(r"peak RSS\s+[\d.]+ (MiB|GiB)", text), text
    assert re.search(rf"GPU\s+{re.escape(NO_NVML)}", text), text
    assert re.search(r"waited\s+\d+", text) and "system/cpu_percent" not in text, text


@settings(system_metrics_interval_s=0)
async def test_with_the_setting_at_0_nothing_is_sampled(jp_fetch):
    code, run = await call(jp_fetch, "api", "runs", method="POST", body={"graph": SHORT})
    assert code == 201
    done = await wait_status(jp_fetch, run["id"], {"succeeded"})
    assert "system_metrics" not in (done.get("execution_facts") or {})
    assert not [p for p in await metrics(jp_fetch, run["id"]) if p["name"].startswith("system/")]


@pytest.mark.slow
async def test_an_agent_run_records_its_own_processes_cpu_and_memory(jp_fetch, agents):
    agent = agents("--system-metrics-interval", "0.2")
    await until_connected(jp_fetch, agent)
    done, points = await sampled_then_cancelled(jp_fetch, {"target": {"worker": "box"}})
    check_system_series(points)
    note = done["execution_facts"]["system_metrics"]
    assert note["interval_s"] == 0.2 and note["gpu"] == NO_NVML and note["process"] == "the run's own process"
    assert agent.proc.poll() is None
