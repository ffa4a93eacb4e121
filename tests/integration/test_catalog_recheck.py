"""The server's own node catalog changing while it runs (seed: node catalog and fingerprint): a node
pack installed or removed on the server's side, and a real agent that has the pack all along, is
compared again each time: degraded while the server lacks the pack, healthy once it has it, degraded
again when it is removed. A real `codefy agent start` subprocess over loopback."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import pytest

from test_server_runs import call
from test_workers_e2e import agents, control, server_token, until_connected, worker_state  # noqa: F401

pytestmark = pytest.mark.slow

PACK = """
def register(registry):
    @registry.node("Rechecked", outputs={"y": "float"})
    def rechecked(ctx):
        return {"y": 1.0}
"""


@pytest.fixture
def jp_server_config(tmp_path):
    return {"ServerApp": {"jpserver_extensions": {"codefy_jupyter": True}},
            "CodefyApp": {"data_dir": str(tmp_path / "codefy"), "node_catalog_check_s": 0.2}}


def install(site: Path) -> Path:
    """The pack as pip would leave it: a module and a dist-info folder naming its entry point."""
    site.mkdir(exist_ok=True)
    (site / "codefy_rechecked_pack.py").write_text(PACK)
    info = site / "codefy_rechecked_pack-0.0.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: codefy-rechecked-pack\nVersion: 0.0\n")
    (info / "entry_points.txt").write_text("[codefy_jupyter.nodes]\nrechecked = codefy_rechecked_pack:register\n")
    return info


async def until_status(jp_fetch, name: str, status: str, timeout: float = 90.0) -> dict:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        worker = await worker_state(jp_fetch, name)
        if worker is not None and worker["status"] == status:
            return worker
        assert asyncio.get_running_loop().time() < deadline, f"worker {name} stayed {worker and worker['status']}"
        await asyncio.sleep(0.05)


async def test_a_pack_installed_and_removed_on_the_server_marks_a_connected_worker_again(
        jp_fetch, agents, tmp_path, monkeypatch):
    agent_site = tmp_path / "agent-site"
    install(agent_site)
    paths = [str(agent_site), *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]]
    agent = agents(env={"PYTHONPATH": os.pathsep.join(paths)})
    worker = await until_connected(jp_fetch, agent)
    assert worker["status"] == "degraded" and worker["extra_types"] == ["Rechecked"]

    server_site = tmp_path / "server-site"
    info = install(server_site)
    monkeypatch.syspath_prepend(str(server_site))  # installed where the server finds its packs
    healthy = await until_status(jp_fetch, "box", "online")
    assert healthy["extra_types"] == [] and healthy["missing_types"] == []
    code, nodes = await call(jp_fetch, "api", "nodes")
    assert code == 200 and "Rechecked" in [n["type"] for n in nodes["nodes"]]
    # `any` takes the worker again now that its catalog is complete.
    code, run = await call(jp_fetch, "api", "runs", method="POST", body={
        "graph": {"nodes": [{"id": "r", "type": "Rechecked"}], "edges": []},
        "options": {"target": {"worker": "any"}}})
    assert code == 201, run
    deadline = asyncio.get_running_loop().time() + 120
    while True:
        code, row = await call(jp_fetch, "api", "runs", run["id"])
        if row["status"] in ("succeeded", "failed", "cancelled", "interrupted"):
            break
        assert asyncio.get_running_loop().time() < deadline, row
        await asyncio.sleep(0.1)
    assert row["status"] == "succeeded" and row["worker_id"] == "box", row

    shutil.rmtree(info)  # uninstalled while the server runs
    again = await until_status(jp_fetch, "box", "degraded")
    assert again["extra_types"] == ["Rechecked"]
    code, nodes = await call(jp_fetch, "api", "nodes")
    assert "Rechecked" not in [n["type"] for n in nodes["nodes"]]
