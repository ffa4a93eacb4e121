"""What people use to reach workers, against a real control plane with a real `codefy agent start` on
loopback (declared cards): `codefy run --target`, the Python client's `worker=`, the Queue on…
dialog's target, and the Workers table over the real `GET …/codefy/api/workers`.

The Client and the widgets are synchronous (their own thread and loop, as in a notebook kernel); here
they run in a worker thread so that the server, on this test's loop, can answer them."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

import pytest

from codefy_jupyter.client import Client, CodefyError
from codefy_jupyter.kernel.widgets import QueueDialog, WorkersTable

from test_server_runs import SMALL, call, wait_status
from test_workers_e2e import (  # noqa: F401  (fixtures)
    agents, control, jp_server_config, naps, server_token, until_connected, until_event,
)

pytestmark = pytest.mark.slow


async def codefy(control: str, token: str, *args: str) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CODEFY_", "JUPYTER_TOKEN"))}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "codefy_jupyter.cli", *args, "--url", control, "--token", token, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, stdin=asyncio.subprocess.DEVNULL)
    out, err = await asyncio.wait_for(proc.communicate(), 90)
    assert "Traceback" not in err.decode(), err.decode()
    return proc.returncode or 0, out.decode(), err.decode()


async def test_codefy_run_targets_a_worker_by_name_or_any(jp_fetch, agents, control, server_token, tmp_path):
    agent = agents()
    await until_connected(jp_fetch, agent)
    graph = tmp_path / "small.json"
    graph.write_text(json.dumps(SMALL))

    code, out, err = await codefy(control, server_token, "run", str(graph), "--target", "box",
                                  "--devices", "cuda:1,cuda:0", "--json")
    assert code == 0, err
    run = json.loads(out)
    assert run["status"] == "succeeded" and run["worker_id"] == "box" and run["devices"] == ["cuda:1", "cuda:0"]
    assert run["options"]["target"] == {"worker": "box", "devices": ["cuda:1", "cuda:0"]}

    code, out, err = await codefy(control, server_token, "run", str(graph), "--target", "any", "--json")
    assert code == 0, err
    run = json.loads(out)
    assert run["status"] == "succeeded" and run["worker_id"] == "box"  # a connected worker before this server
    assert run["options"]["target"]["worker"] == "any"

    # The live view names where the run went.
    code, out, err = await codefy(control, server_token, "run", str(graph), "--target", "box")
    assert code == 0, err
    assert "▸ started on cpu (worker box)" in out

    code, out, err = await codefy(control, server_token, "runs", "ls", "--limit", "1")
    assert code == 0, err
    header, row = out.splitlines()[:2]
    assert row.split()[header.split().index("WHERE")] == "box"

    code, out, err = await codefy(control, server_token, "run", str(graph), "--target", "nobody")
    assert code == 1
    assert "worker nobody is not enrolled" in err + out


async def test_the_client_and_the_queue_dialog_send_the_target(jp_fetch, agents, control, server_token):
    agent = agents()
    await until_connected(jp_fetch, agent)
    client = Client(url=control, token=server_token)
    try:
        row = await asyncio.to_thread(client.submit, SMALL, worker="box", devices=["cuda:1"])
        assert row["queue_key"] == "box/cuda:1" and row["options"]["target"] == {"worker": "box", "devices": ["cuda:1"]}
        assert (await wait_status(jp_fetch, row["id"], {"succeeded", "failed"}, timeout=120))["worker_id"] == "box"
        with pytest.raises(CodefyError) as refused:
            await asyncio.to_thread(client.submit, SMALL, worker="box", device="cuda:5")
        assert refused.value.status == 400 and refused.value.code == "device_not_offered"
        assert refused.value.params["field"] == "options.device"

        dialog = await asyncio.to_thread(QueueDialog, SMALL, client)
        try:
            assert dialog.targets == [["local", "This server"], ["box", "Worker box"], ["any", "Any available"]]
            assert {"cuda:0", "cuda:1"} <= set(dialog.device_choices)
            await asyncio.to_thread(dialog._handle_custom_msg,
                                    {"action": "submit", "form": {"target": "box", "devices": "cuda:0"}}, [])
            assert dialog.error is None and dialog.run["queue_key"] == "box/cuda:0"
            done = await wait_status(jp_fetch, dialog.run["id"], {"succeeded", "failed"}, timeout=120)
            assert done["worker_id"] == "box" and done["devices"] == ["cuda:0"]
            await asyncio.to_thread(dialog._handle_custom_msg,
                                    {"action": "submit", "form": {"target": "any", "devices": ""}}, [])
            assert dialog.error is None and dialog.run["queue_key"] == "any/cpu"
            await asyncio.to_thread(dialog._handle_custom_msg,
                                    {"action": "submit", "form": {"target": "box", "device": "cuda:9"}}, [])
            assert dialog.error["code"] == "device_not_offered" and dialog.error["field"] == "options.device"
        finally:
            await asyncio.to_thread(dialog.close)
    finally:
        await asyncio.to_thread(client.close)


async def test_the_workers_table_shows_a_connected_agent(jp_fetch, agents, control, server_token):
    agent = agents()
    await until_connected(jp_fetch, agent)
    code, run = await call(jp_fetch, "api", "runs", method="POST",
                           body={"graph": naps(1, 60), "options": {"target": {"worker": "box", "devices": ["cuda:1"]}}})
    assert code == 201
    await until_event(jp_fetch, run["id"], lambda e: e["type"] == "node_status" and e["payload"]["status"] == "running")
    client = Client(url=control, token=server_token)
    table: Any = None
    try:
        table = await asyncio.to_thread(WorkersTable, client, refresh_s=0)
        assert table.error is None and table.message == ""
        (row,) = table.rows
        # Same machine: its CPU is this server's (marked); one run on cuda:1 of the cpu+2 cards' 4 slots.
        assert row == {"name": "box", "state": "connected",
                       "devices": "cpu (shared with this server), cuda:0, cuda:1", "slots": "1/4",
                       "running": 1, "running_ids": [run["id"]], "same_host": True, "tone": "ok",
                       "degraded": False, "missing_types": []}
        assert table.local == {"devices": "cpu", "slots": "0/2"}

        await call(jp_fetch, "api", "workers", "box", "drain", method="POST")
        await asyncio.to_thread(table._handle_custom_msg, {"action": "refresh"}, [])
        assert table.rows[0]["state"] == "draining"
    finally:
        if table is not None:
            await asyncio.to_thread(table.close)
        await asyncio.to_thread(client.close)
        await call(jp_fetch, "api", "runs", run["id"], "cancel", method="POST")
