"""What a real worker agent and its run process do and do not do (seed: execution architecture,
direction rule and run_facts): they dial out and listen on no port, open no database, and a worker
run points at the fingerprint its own process sent. A real control plane and `codefy agent start`
subprocesses over loopback."""

from __future__ import annotations

from typing import Any

import psutil
import pytest

from test_server_runs import all_events, call, wait_status
from test_workers_e2e import (  # noqa: F401  (fixtures)
    SMALL, agents, control, naps, server_token, submit, until_connected, until_event,
)

from codefy_jupyter.wire.fingerprint import digest

pytestmark = pytest.mark.slow


@pytest.fixture
def jp_server_config(tmp_path):
    return {"ServerApp": {"jpserver_extensions": {"codefy_jupyter": True}},
            "CodefyApp": {"data_dir": str(tmp_path / "codefy")}}


def sockets_and_files(processes: list[psutil.Process]) -> tuple[list[Any], list[str]]:
    listening, files = [], []
    for proc in processes:
        try:
            listening += [c for c in proc.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN]
            files += [f.path for f in proc.open_files()]
        except psutil.NoSuchProcess:  # a helper that ended meanwhile
            continue
    return listening, files


async def test_the_agent_and_its_run_listen_on_no_port_and_open_no_database(jp_fetch, agents):
    agent = agents()
    await until_connected(jp_fetch, agent)
    run = await submit(jp_fetch, naps(1, 60), {"worker": "box"})
    await until_event(jp_fetch, run["id"], lambda e: e["type"] == "node_status" and e["payload"]["node_id"] == "nap0")
    processes = agent.processes()
    cmdlines = [" ".join(p.cmdline()) for p in processes]
    assert len(processes) >= 2, cmdlines  # the agent and at least the run's own process
    listening, files = sockets_and_files(processes)
    assert listening == [], (listening, cmdlines)
    assert not [f for f in files if f.endswith((".sqlite", ".db", "-wal", "-journal"))], files
    # The agent's one connection is the one it dialled, to this control plane.
    outbound = [c for c in psutil.Process(agent.proc.pid).net_connections(kind="inet")
                if c.status == psutil.CONN_ESTABLISHED]
    assert outbound and all(c.raddr and c.raddr.ip == "127.0.0.1" for c in outbound), outbound
    code, _ = await call(jp_fetch, "api", "runs", run["id"], "cancel", method="POST")
    assert code == 200
    await wait_status(jp_fetch, run["id"], {"cancelled"}, timeout=120)


async def test_a_worker_run_points_at_the_fingerprint_its_own_process_sent(jp_fetch, jp_serverapp, agents):
    agent = agents()
    await until_connected(jp_fetch, agent)
    run = await submit(jp_fetch, SMALL, {"worker": "box"})
    done = await wait_status(jp_fetch, run["id"], {"succeeded", "failed"}, timeout=120)
    assert done["status"] == "succeeded", done
    facts = done["execution_facts"]
    assert facts["fingerprint_source"] == "worker-run" and "numerics" in facts, facts
    app = jp_serverapp.extension_manager.extension_points["codefy"].app
    document = await app.store.get_fingerprint(done["fingerprint_digest"])
    assert document is not None and digest(document) == done["fingerprint_digest"]
    assert document["python"] and document["node_catalog"] and document["packages"]
    assert [e["type"] for e in await all_events(jp_fetch, run["id"])][-1] == "execution_complete"
