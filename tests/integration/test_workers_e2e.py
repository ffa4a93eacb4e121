"""Real `codefy agent start` subprocesses against a real control plane (jupyter-server with the
extension, real SQLite) on loopback, with a declared device inventory: a run on a worker end to end,
the socket dropped mid-run, the agent killed with SIGKILL, a one-shot agent, enrollment, agent stop."""

from __future__ import annotations

import asyncio
import json
import os
import time
import signal
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest

from agent_helpers import install_pack, pythonpath
from test_server_runs import all_events, call, wait_status

pytestmark = pytest.mark.slow

INVENTORY = {"devices": [{"key": "cuda:0", "name": "Declared A", "uuid": "GPU-e2e-aaaa", "memory_total_mib": 8192},
                         {"key": "cuda:1", "name": "Declared B", "uuid": "GPU-e2e-bbbb", "memory_total_mib": 8192}]}


def edge(s: str, sp: str, t: str, tp: str) -> dict[str, str]:
    return {"source": s, "source_port": sp, "target": t, "target_port": tp}


def naps(n: int, seconds: float) -> dict[str, Any]:
    """A chain of `n` Sleep nodes: events keep coming while the run executes."""
    nodes = [{"id": "k", "type": "Float", "params": {"value": 1}}]
    nodes += [{"id": f"nap{i}", "type": "Sleep", "params": {"seconds": seconds}} for i in range(n)]
    edges = [edge("k" if i == 0 else f"nap{i - 1}", "value", f"nap{i}", "value") for i in range(n)]
    return {"nodes": nodes, "edges": edges}


SMALL = {"nodes": [{"id": "k", "type": "Float", "params": {"value": 2}},
                   {"id": "s", "type": "Scale", "params": {"factor": 3}}],
         "edges": [edge("k", "value", "s", "x")]}


@pytest.fixture
def jp_server_config(tmp_path, request):
    codefy = {"data_dir": str(tmp_path / "codefy")}
    codefy.update(getattr(request, "param", {}))
    return {"ServerApp": {"jpserver_extensions": {"codefy_jupyter": True}}, "CodefyApp": codefy}


def settings(**values: Any):
    return pytest.mark.parametrize("jp_server_config", [values], indirect=True,
                                   ids=[",".join(f"{k}={v}" for k, v in values.items())])


class AgentProcess:
    """`codefy agent start` in a subprocess, its output in a log file."""

    def __init__(self, tmp_path: Path, control: str, *args: str, name: str = "box", token: str | None = None,
                 env: dict[str, str] | None = None) -> None:
        self.dir = tmp_path / "agent"
        self.log_path = tmp_path / f"agent-{name}.log"
        inventory = tmp_path / "inventory.json"
        inventory.write_text(json.dumps(INVENTORY))
        base = {k: v for k, v in os.environ.items() if not k.startswith(("CODEFY_", "JUPYTER_TOKEN"))}
        base.update(CODEFY_DEVICE_INVENTORY=str(inventory), JUPYTER_PLATFORM_DIRS="0",
                   JUPYTER_DATA_DIR=str(tmp_path / "agent-jupyter"))
        base.update(env or {})  # a test's own inventory, node packs...
        cmd = [sys.executable, "-m", "codefy_jupyter.cli", "agent", "start", "--control", control, "--name", name,
               "--data-dir", str(self.dir), *args]
        if token is not None:
            cmd += ["--token", token]
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(cmd, env=base, stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        self.name = name
        self.seen: set[int] = set()

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def processes(self) -> list[psutil.Process]:
        """The agent and everything under it (the warm process, run processes)."""
        try:
            me = psutil.Process(self.proc.pid)
            found = [me] + me.children(recursive=True)
        except psutil.NoSuchProcess:
            return []
        self.seen.update(p.pid for p in found)
        return found

    async def exited(self, timeout: float = 120.0) -> int:
        deadline = asyncio.get_running_loop().time() + timeout
        while self.proc.poll() is None:
            assert asyncio.get_running_loop().time() < deadline, f"agent still running:\n{self.output()}"
            await asyncio.sleep(0.05)
        return self.proc.returncode

    def cleanup(self) -> None:
        self.processes()
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)
        for pid in self.seen:
            try:
                psutil.Process(pid).kill()
            except psutil.NoSuchProcess:
                pass
        self.log.close()


@pytest.fixture
def server_token(jp_serverapp, http_server_client):
    return jp_serverapp.identity_provider.token


@pytest.fixture
def control(jp_http_port, jp_base_url, server_token):
    return f"http://127.0.0.1:{jp_http_port}{jp_base_url}"


@pytest.fixture
def agents(tmp_path, control, server_token):
    made: list[AgentProcess] = []

    def start(*args: str, name: str = "box", token: str | None = "server",
              env: dict[str, str] | None = None) -> AgentProcess:
        agent = AgentProcess(tmp_path, control, *args, name=name, token=server_token if token == "server" else token,
                             env=env)
        made.append(agent)
        return agent

    yield start
    for agent in made:
        agent.cleanup()


async def worker_state(jp_fetch, name: str) -> dict[str, Any] | None:
    code, body = await call(jp_fetch, "api", "workers")
    assert code == 200
    return next((w for w in body["workers"] if w["name"] == name), None)


async def until_connected(jp_fetch, agent: AgentProcess, timeout: float = 120.0) -> dict[str, Any]:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        worker = await worker_state(jp_fetch, agent.name)
        if worker is not None and worker["state"] == "connected":
            return worker
        assert agent.proc.poll() is None, f"the agent exited:\n{agent.output()}"
        assert asyncio.get_running_loop().time() < deadline, f"agent never connected:\n{agent.output()}"
        await asyncio.sleep(0.1)


async def until_event(jp_fetch, run_id: str, test, timeout: float = 120.0) -> dict[str, Any]:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        for event in await all_events(jp_fetch, run_id):
            if test(event):
                return event
        assert asyncio.get_running_loop().time() < deadline, "the event never came"
        await asyncio.sleep(0.05)


def assert_gapless_without_duplicates(events: list[dict[str, Any]]) -> None:
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    statuses = [(e["payload"]["node_id"], e["payload"]["status"]) for e in events if e["type"] == "node_status"]
    assert len(statuses) == len(set(statuses)), "a node status was recorded twice"
    assert events[0]["type"] == "execution_start"
    closing = [e for e in events if e["type"] in ("execution_complete", "execution_error", "execution_stopped")]
    assert closing == [events[-1]]


async def submit(jp_fetch, graph: dict[str, Any], target: dict[str, Any]) -> dict[str, Any]:
    code, run = await call(jp_fetch, "api", "runs", method="POST", body={"graph": graph, "options": {"target": target}})
    assert code == 201, run
    return run


async def test_a_run_on_the_worker_completes_with_a_gapless_log(jp_fetch, agents):
    agent = agents()
    worker = await until_connected(jp_fetch, agent)
    assert {d["device"] for d in worker["devices"]} == {"cpu", "cuda:0", "cuda:1"}
    assert worker["same_host"] is True
    run = await submit(jp_fetch, SMALL, {"worker": "box", "devices": ["cuda:1"]})
    done = await wait_status(jp_fetch, run["id"], {"succeeded", "failed"}, timeout=120)
    assert done["status"] == "succeeded", done
    assert done["worker_id"] == "box" and done["devices"] == ["cuda:1"]
    events = await all_events(jp_fetch, run["id"])
    assert_gapless_without_duplicates(events)
    assert [(e["payload"]["node_id"], e["payload"]["status"]) for e in events if e["type"] == "node_status"] == [
        ("k", "running"), ("k", "done"), ("s", "running"), ("s", "done")]
    assert events[-1]["type"] == "execution_complete" and events[-1]["payload"]["executed"] == 2
    # A worker's run is read by the 12 characters Lab shows, like any other (issue 28).
    assert (await all_events(jp_fetch, run["id"][:12])) == events
    assert (await wait_status(jp_fetch, run["id"][:12], {"succeeded"}))["worker_id"] == "box"
    # The run's files live in the agent's folder; its spool is gone once everything was acknowledged.
    run_dir = agent.dir / "agent-runs" / run["id"]
    assert (run_dir / "output.log").exists()
    deadline = asyncio.get_running_loop().time() + 90
    while (run_dir / "spool.jsonl").exists():
        assert asyncio.get_running_loop().time() < deadline, "the spool was never acknowledged"
        await asyncio.sleep(0.05)


def open_to_others(root: Path) -> tuple[list[tuple[str, str]], set[str]]:
    """(every folder and file under `root`, itself included, with a group or other permission bit,
    as (path, mode)); and the paths seen, relative to `root`. Links are skipped, and what goes away
    during the walk (a spool compacted, a folder pruned) too."""
    loose, seen = [], set()
    for folder, dirs, files in os.walk(root):
        for path in [folder, *(os.path.join(folder, n) for n in dirs + files)]:
            try:
                mode = os.lstat(path).st_mode
            except FileNotFoundError:
                continue
            if stat.S_ISLNK(mode):
                continue
            seen.add(os.path.relpath(path, root))
            if stat.S_IMODE(mode) & 0o077:
                loose.append((path, oct(stat.S_IMODE(mode))))
    return sorted(set(loose)), seen


async def test_every_file_and_folder_the_agent_creates_is_its_users_alone(jp_fetch, agents):
    # Started with the usual umask (022): without the agent's own, its folders would be 0755 and its
    # files 0644, readable by every local user of the GPU node.
    before = os.umask(0o022)
    try:
        agent = agents()
    finally:
        os.umask(before)
    await until_connected(jp_fetch, agent)
    graph = naps(20, 0.1)
    graph["nodes"].append({"id": "out", "type": "Scale", "params": {"factor": 2}})
    graph["edges"].append(edge("nap19", "value", "out", "x"))
    code, run = await call(jp_fetch, "api", "runs", method="POST",  # outputs/: written by the run process
                           body={"graph": graph, "options": {"target": {"worker": "box"}, "record_outputs": True}})
    assert code == 201, run
    run_dir = agent.dir / "agent-runs" / run["id"]
    await until_event(jp_fetch, run["id"], lambda e: e["type"] == "node_status" and e["payload"]["node_id"] == "nap1")
    walks = 0
    seen: set[str] = set()
    while True:  # while it executes: the run folder, its owner file, spool and output log
        code, now = await call(jp_fetch, "api", "runs", run["id"])
        loose, found = open_to_others(agent.dir)
        assert loose == [], loose
        seen |= found
        walks += 1
        if now["status"] != "running":
            break
        await asyncio.sleep(0.05)
    assert walks >= 2 and now["status"] == "succeeded", now
    rel = os.path.relpath(run_dir, agent.dir)
    assert {rel, f"{rel}/owner", f"{rel}/output.log", f"{rel}/spool.jsonl"} <= seen, sorted(seen)
    # After it: what the run process wrote once it ended (its recorded outputs), and the agent's
    # state and credential files.
    deadline = asyncio.get_running_loop().time() + 30
    while not (run_dir / "outputs").exists():
        assert asyncio.get_running_loop().time() < deadline, sorted(open_to_others(agent.dir)[1])
        await asyncio.sleep(0.05)
    loose, found = open_to_others(agent.dir)
    assert loose == [], loose
    assert any(p.startswith(f"{rel}/outputs/") for p in found), sorted(found)
    assert "agents" in found, sorted(found)


async def test_the_agent_keeps_only_the_newest_finished_run_folders(jp_fetch, agents, tmp_path):
    # Folders of runs finished one, two and three hours ago, their frames all acknowledged (no
    # spool), and one whose frames never were: the agent (--keep-runs 2) removes the oldest done
    # folder when it starts, and the next oldest once its own run is done (the new folder counts).
    runs_dir = tmp_path / "agent" / "agent-runs"
    now = time.time()
    for name, hours in (("old-1h", 1), ("old-2h", 2), ("old-3h", 3), ("unacked", 9)):
        (runs_dir / name / "data").mkdir(parents=True)
        (runs_dir / name / "output.log").write_text("earlier run\n")
        os.utime(runs_dir / name, (now - hours * 3600, now - hours * 3600))
    (runs_dir / "unacked" / "spool.jsonl").write_text("")
    agent = agents("--keep-runs", "2")
    await until_connected(jp_fetch, agent)
    assert not (runs_dir / "old-3h").exists() and (runs_dir / "old-2h").exists()
    run = await submit(jp_fetch, SMALL, {"worker": "box"})
    assert (await wait_status(jp_fetch, run["id"], {"succeeded", "failed"}, timeout=120))["status"] == "succeeded"
    deadline = asyncio.get_running_loop().time() + 90
    while (runs_dir / "old-2h").exists():
        assert asyncio.get_running_loop().time() < deadline, f"old-2h was never removed:\n{agent.output()}"
        await asyncio.sleep(0.05)
    assert sorted(p.name for p in runs_dir.iterdir()) == sorted(["old-1h", "unacked", run["id"]])
    assert "removed the folders of 1 finished runs (keeping the newest 2)" in agent.output()


async def test_a_dropped_socket_loses_and_duplicates_nothing(jp_fetch, agents):
    agent = agents()
    await until_connected(jp_fetch, agent)
    run = await submit(jp_fetch, naps(12, 0.5), {"worker": "box"})  # 6 s: the drop lands mid-run
    await until_event(jp_fetch, run["id"], lambda e: e["type"] == "node_status" and e["payload"]["node_id"] == "nap1")
    os.kill(agent.proc.pid, signal.SIGUSR1)  # the agent drops its socket as a network failure would
    done = await wait_status(jp_fetch, run["id"], {"succeeded", "failed", "interrupted"}, timeout=120)
    assert done["status"] == "succeeded", done
    events = await all_events(jp_fetch, run["id"])
    assert_gapless_without_duplicates(events)
    warnings = [e["payload"]["code"] for e in events if e["type"] == "run_warning"]
    assert "worker_disconnected" in warnings and "worker_reconnected" in warnings
    assert "worker_frames_lost" not in warnings
    for i in range(12):
        mine = [e["payload"]["status"] for e in events if e["type"] == "node_status"
                and e["payload"]["node_id"] == f"nap{i}"]
        assert mine == ["running", "done"], (i, mine)
    assert "dialling again" in agent.output()


@settings(worker_resume_grace_s=2)
async def test_a_killed_agent_leaves_its_run_interrupted_after_the_grace(jp_fetch, agents):
    agent = agents()
    await until_connected(jp_fetch, agent)
    run = await submit(jp_fetch, naps(1, 60), {"worker": "box"})
    await until_event(jp_fetch, run["id"], lambda e: e["type"] == "node_status" and e["payload"]["node_id"] == "nap0")
    family = agent.processes()
    assert len(family) >= 2  # the agent and at least the run's process
    os.kill(agent.proc.pid, signal.SIGKILL)
    done = await wait_status(jp_fetch, run["id"], {"interrupted", "failed", "succeeded"}, timeout=120)
    assert done["status"] == "interrupted"
    events = await all_events(jp_fetch, run["id"])
    assert_gapless_without_duplicates(events)
    codes = [e["payload"].get("code") for e in events if e["type"] == "run_warning"]
    assert "worker_disconnected" in codes
    assert events[-1]["type"] == "execution_stopped" and events[-1]["payload"]["reason"]["code"] == "worker_gone"
    # Its run process and the warm process notice the agent is gone and end on their own.
    deadline = asyncio.get_running_loop().time() + 90
    while any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in family[1:]):
        assert asyncio.get_running_loop().time() < deadline, "processes of the killed agent are still running"
        await asyncio.sleep(0.1)


async def test_a_one_shot_agent_takes_exactly_one_run_and_exits(jp_fetch, agents):
    agent = agents("--one-shot", name="once")
    worker = await until_connected(jp_fetch, agent)
    assert worker["one_shot"] is True
    first = await submit(jp_fetch, naps(1, 0.5), {"pool": "one-shot"})
    second = await submit(jp_fetch, SMALL, {"pool": "one-shot"})
    done = await wait_status(jp_fetch, first["id"], {"succeeded", "failed"}, timeout=120)
    assert done["status"] == "succeeded" and done["worker_id"] == "once"
    assert await agent.exited() == 0
    assert "one-shot: the run is done" in agent.output()
    code, waiting = await call(jp_fetch, "api", "runs", second["id"])
    assert code == 200 and waiting["status"] == "queued"
    code, _ = await call(jp_fetch, "api", "runs", second["id"], "cancel", method="POST")
    assert code == 200


async def test_a_one_shot_agent_started_for_a_run_takes_that_run_out_of_turn(jp_fetch, agents):
    ahead = await submit(jp_fetch, SMALL, {"pool": "one-shot"})
    mine = await submit(jp_fetch, naps(1, 0.2), {"pool": "one-shot"})
    agent = agents("--one-shot", "--run-id", mine["id"], name="job", token="server")
    done = await wait_status(jp_fetch, mine["id"], {"succeeded", "failed"}, timeout=120)
    assert done["status"] == "succeeded" and done["worker_id"] == "job"
    assert await agent.exited() == 0
    code, waiting = await call(jp_fetch, "api", "runs", ahead["id"])
    assert code == 200 and waiting["status"] == "queued"
    await call(jp_fetch, "api", "runs", ahead["id"], "cancel", method="POST")


async def test_enrolling_stores_the_worker_token_and_reuses_it(jp_fetch, agents, tmp_path):
    code, issued = await call(jp_fetch, "api", "workers", "enrollments", method="POST", body={})
    assert code == 201, issued
    agent = agents(name="enrolled", token=issued["token"])
    worker = await until_connected(jp_fetch, agent)
    assert worker["enrolled"] is True
    stored = tmp_path / "agent" / "credentials" / "enrolled.json"
    assert stat.S_IMODE(stored.stat().st_mode) == 0o600
    assert json.loads(stored.read_text())["worker_token"].startswith("cfw_")
    assert issued["token"] not in stored.read_text()
    agent.proc.send_signal(signal.SIGTERM)
    assert await agent.exited() == 0
    # The same command line again: the one-time token is spent, the stored worker token is used.
    again = agents(name="enrolled", token=issued["token"])
    await until_connected(jp_fetch, again)
    assert "token from stored in" in again.output()


async def test_agent_stop_stops_the_runs_and_exits(jp_fetch, agents, tmp_path):
    agent = agents()
    await until_connected(jp_fetch, agent)
    run = await submit(jp_fetch, naps(1, 60), {"worker": "box"})
    await until_event(jp_fetch, run["id"], lambda e: e["type"] == "node_status" and e["payload"]["node_id"] == "nap0")
    stopped = subprocess.run([sys.executable, "-m", "codefy_jupyter.cli", "agent", "stop", "--data-dir",
                              str(agent.dir)], capture_output=True, text=True, timeout=120)
    assert stopped.returncode == 0, stopped.stderr
    assert await agent.exited() == 0
    done = await wait_status(jp_fetch, run["id"], {"cancelled", "failed", "interrupted"}, timeout=90)
    assert done["status"] == "interrupted", done  # nobody cancelled it: its agent was stopped
    closing = (await all_events(jp_fetch, run["id"]))[-1]
    assert closing["type"] == "execution_stopped" and closing["payload"]["status"] == "interrupted"
    assert closing["payload"]["reason"]["code"] == "agent_stopped"
    assert "the worker agent box was stopped" in closing["payload"]["reason"]["message"]
    assert not (agent.dir / "agents" / "box.json").exists()


async def test_a_second_agent_with_the_same_name_and_folder_is_refused(jp_fetch, agents):
    first = agents()
    await until_connected(jp_fetch, first)
    second = agents()
    assert await second.exited() == 1
    assert "already running" in second.output()


# -- with the test node pack (tests/unit/agent_nodes.py) in the agent's run processes and the server --

@pytest.fixture
def pack_env(tmp_path):
    """The agent's environment with the test node pack installed; the same nodes registered in this
    process's registry (the control plane checks graphs against it), removed again afterwards."""
    import importlib

    from codefy_jupyter.engine import default_registry

    registry = default_registry()
    before = dict(registry._defs)
    import agent_nodes

    importlib.reload(agent_nodes)
    site = install_pack(tmp_path / "site")
    yield {"PYTHONPATH": pythonpath(site), "CODEFY_TOKEN": "agent-secret-token", "JUPYTER_TOKEN": "jt",
           "CODEFY_DB_PATH": "/srv/db.sqlite"}
    registry._defs.clear()
    registry._defs.update(before)


@settings(worker_cancel_grace_s=1)
async def test_stop_reaches_the_worker_and_a_run_that_ignores_it_is_terminated(jp_fetch, agents, pack_env):
    agent = agents(env=pack_env)
    await until_connected(jp_fetch, agent)
    run = await submit(jp_fetch, {"nodes": [{"id": "s", "type": "Stubborn", "params": {"seconds": 60}}], "edges": []},
                       {"worker": "box"})
    await until_event(jp_fetch, run["id"], lambda e: e["type"] == "node_status" and e["payload"]["status"] == "running")
    code, _ = await call(jp_fetch, "api", "runs", run["id"], "cancel", method="POST")
    assert code == 200
    done = await wait_status(jp_fetch, run["id"], {"cancelled", "failed", "succeeded"}, timeout=120)
    assert done["status"] == "cancelled"
    events = await all_events(jp_fetch, run["id"])
    assert_gapless_without_duplicates(events)
    assert events[-1]["type"] == "execution_stopped" and events[-1]["payload"]["status"] == "cancelled"
    assert "sending SIGTERM" in agent.output()


async def test_a_segfault_fails_only_its_run_with_the_output_tail(jp_fetch, agents, pack_env):
    agent = agents(env=pack_env)
    await until_connected(jp_fetch, agent)
    crash = await submit(jp_fetch, {"nodes": [{"id": "boom", "type": "Segfault"}], "edges": []}, {"worker": "box"})
    other = await submit(jp_fetch, naps(3, 0.3), {"worker": "box"})
    crashed = await wait_status(jp_fetch, crash["id"], {"failed", "succeeded"}, timeout=120)
    fine = await wait_status(jp_fetch, other["id"], {"failed", "succeeded"}, timeout=120)
    assert crashed["status"] == "failed" and fine["status"] == "succeeded"
    error = crashed["error"]
    assert error["code"] == "run_process_died" and error["signal"] == signal.SIGSEGV
    assert "about to crash" in error["output_tail"]
    assert agent.proc.poll() is None  # the agent lives on


async def test_the_run_sees_its_cards_renumbered_and_no_secrets(jp_fetch, agents, pack_env):
    agent = agents(env=pack_env)
    await until_connected(jp_fetch, agent)
    run = await submit(jp_fetch, {"nodes": [{"id": "e", "type": "Environ"}], "edges": []},
                       {"worker": "box", "devices": ["cuda:1", "cuda:0"]})
    done = await wait_status(jp_fetch, run["id"], {"failed", "succeeded"}, timeout=120)
    assert done["status"] == "succeeded", done
    events = await all_events(jp_fetch, run["id"])
    seen = next(e["payload"]["params"] for e in events if e["type"] == "run_warning"
                and e["payload"]["code"] == "environ")
    assert seen["CUDA_VISIBLE_DEVICES"] == "1,0" and seen["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert seen["CODEFY_TOKEN"] is None and seen["JUPYTER_TOKEN"] is None and seen["CODEFY_DB_PATH"] is None
    assert seen["raw_has_token"] is False
    # run_started's view of the cards lands in the run's facts (seed: device visibility).
    facts = done["execution_facts"]
    assert facts["visible_devices"] == ["cuda:1", "cuda:0"], facts
    assert facts["device_aliases"] == {"cuda:0": "cuda:1", "cuda:1": "cuda:0"}, facts



# -- a hard stop of the control plane ---------------------------------------------------------------

async def test_a_hard_stopped_control_plane_adopts_the_run_and_it_finishes_in_the_same_log(tmp_path, request):
    import test_headless as headless

    servers = headless.Servers(tmp_path)
    request.addfinalizer(servers.kill_leftovers)
    port = headless.free_port()
    state = servers.start(port)
    code, issued = headless.api(state, "POST", "workers/enrollments", {})
    assert code == 201, issued
    # An enrolled worker token outlives the restart (as the server's own token now does too).
    agent = AgentProcess(tmp_path, state["url"], name="box", token=issued["token"])
    request.addfinalizer(agent.cleanup)

    def worker() -> dict[str, Any] | None:
        code, listing = headless.api(state, "GET", "workers")
        return next((w for w in listing["workers"] if w["name"] == "box" and w["state"] == "connected"), None)

    deadline = asyncio.get_running_loop().time() + 120
    while worker() is None:
        assert agent.proc.poll() is None and asyncio.get_running_loop().time() < deadline, agent.output()
        await asyncio.sleep(0.1)
    # 10 s of naps: the hard stop below lands mid-run, however late a busy machine shows nap1.
    run = headless.submit(state, naps(10, 1.0), options={"target": {"worker": "box"}})
    while not any(e["type"] == "node_status" and e["payload"]["node_id"] == "nap1"
                  for e in headless.all_events(state, run["id"])):
        assert asyncio.get_running_loop().time() < deadline, agent.output()
        await asyncio.sleep(0.05)
    os.kill(state["pid"], signal.SIGKILL)
    headless.wait_gone(state["pid"])

    state = servers.start(port)  # same data dir and port: the agent dials it again by itself
    done = headless.wait_status(state, run["id"], {"succeeded", "failed", "interrupted"}, timeout=90)
    assert done["status"] == "succeeded", (done, agent.output())
    events = headless.all_events(state, run["id"])
    assert_gapless_without_duplicates(events)
    assert [e["type"] for e in events].count("execution_start") == 1
    codes = [e["payload"].get("code") for e in events if e["type"] == "run_warning"]
    assert "worker_adopted" in codes and "worker_reconnected" in codes
    for i in range(10):
        mine = [e["payload"]["status"] for e in events if e["type"] == "node_status"
                and e["payload"]["node_id"] == f"nap{i}"]
        assert mine == ["running", "done"], (i, mine)
    assert agent.proc.poll() is None
    assert servers.stop().returncode == 0
