"""Which server the CLI and the agent use when several run, as real `codefy start` subprocesses sharing one
Jupyter runtime dir (each also lists itself there, as any Jupyter server does): the pick, why, the
others named, what changes after `codefy stop`, and `codefy agent start` with no --control."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_headless import Servers, api

pytestmark = pytest.mark.slow


@pytest.fixture
def two(tmp_path, request):
    """Two `codefy start` servers, A and B, listed in the same runtime dir."""
    a, b = Servers(tmp_path / "a"), Servers(tmp_path / "b")
    for s in (a, b):
        request.addfinalizer(s.kill_leftovers)
        s.cwd.mkdir(parents=True, exist_ok=True)
    b.env.update({k: a.env[k] for k in ("JUPYTER_RUNTIME_DIR", "JUPYTER_DATA_DIR", "JUPYTER_CONFIG_DIR")})
    return a, b


def codefy(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "codefy_jupyter.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def test_several_servers_are_named_and_a_stopped_one_is_not_silently_replaced(two):
    a, b = two
    sa, sb = a.start(), b.start()
    env = {**a.env, "CODEFY_DATA_DIR": str(a.data_dir)}
    proc = codefy(env, a.cwd, "runs", "ls")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines()[:3] == [
        f"server {sa['url']} — the `codefy start` server recorded in {a.state_file}",
        f"  also running: {sb['url']} (Jupyter server pid {sb['pid']}, root {b.data_dir})",
        "  (pass --url to use another)"]

    assert a.stop().returncode == 0
    after = codefy(env, a.cwd, "runs", "ls")
    assert after.returncode == 0, after.stderr
    assert after.stderr.splitlines()[0] == (
        f"server {sb['url']} — the only running Jupyter server with codefy-jupyter (pid {sb['pid']}, root "
        f"{b.data_dir}); no `codefy start` server is running (none in {a.state_file})")

    # Found through the runtime dir's files, without importing jupyter-server (seconds) to list them.
    check = ("import sys, json; from codefy_jupyter.client.discovery import discover; s = discover(); "
             "print(json.dumps([s.url, s.source, 'jupyter_server' in sys.modules]))")
    found = subprocess.run([sys.executable, "-c", check], env=env, capture_output=True, text=True, timeout=120)
    assert json.loads(found.stdout) == [sb["url"], "jupyter server", False], found.stderr
    assert b.stop().returncode == 0


def test_agent_start_without_control_uses_the_local_codefy_start_server(tmp_path, request):
    servers = Servers(tmp_path)
    request.addfinalizer(servers.kill_leftovers)
    env = {**servers.env, "CODEFY_DATA_DIR": str(servers.data_dir)}
    agent_dir = tmp_path / "agent"

    nothing = codefy(env, tmp_path, "agent", "start", "--name", "box", "--data-dir", str(agent_dir))
    assert nothing.returncode == 2
    assert (f"error: no --control given and no `codefy start` server is running on this machine (none recorded "
            f"in {servers.state_file}): start one, or pass --control URL") in nothing.stderr

    state = servers.start()
    log = open(tmp_path / "agent.log", "wb")
    agent = subprocess.Popen([sys.executable, "-m", "codefy_jupyter.cli", "agent", "start", "--name", "box",
                              "--data-dir", str(agent_dir)], env=env, stdout=log, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while True:
            code, page = api(state, "GET", "workers")
            assert code == 200, page
            workers = page["workers"] if isinstance(page, dict) else page
            if any(w.get("name") == "box" and w.get("state") == "connected" for w in workers):
                break
            assert agent.poll() is None, (tmp_path / "agent.log").read_text()
            assert time.monotonic() < deadline, (workers, (tmp_path / "agent.log").read_text())
            time.sleep(0.2)
        said = (tmp_path / "agent.log").read_text()
        assert (f"control plane {state['url']}: the `codefy start` server on this machine ({servers.state_file}), "
                "as no --control was given") in said
        stopped = codefy(env, tmp_path, "agent", "stop", "--data-dir", str(agent_dir))
        assert stopped.returncode == 0, stopped.stderr
        assert agent.wait(timeout=120) == 0
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait(timeout=30)
        log.close()
    assert servers.stop().returncode == 0


KERNEL_LOOKUP = ("import json, sys; from codefy_jupyter.client.discovery import discover; s = discover(); "
                 "print(json.dumps([s.url, s.source, s.why, 'jupyter_server' in sys.modules]))")


def run_in_a_kernel(state: dict, runtime_dir: Path, code: str) -> str:
    """`code` run in a real ipykernel the server started (POST api/kernels); what it printed."""
    from jupyter_client import BlockingKernelClient

    status, kernel = api_root(state, "POST", "api/kernels", {"name": "python3"})
    assert status == 201, kernel
    client = BlockingKernelClient(connection_file=str(runtime_dir / f"kernel-{kernel['id']}.json"))
    client.load_connection_file()
    client.start_channels()
    printed: list[str] = []
    try:
        client.wait_for_ready(timeout=120)
        reply = client.execute_interactive(code, timeout=60, output_hook=lambda msg: printed.append(
            msg["content"].get("text", "")) if msg["msg_type"] == "stream" else None)
        assert reply["content"]["status"] == "ok", reply["content"]
    finally:
        client.stop_channels()
        api_root(state, "DELETE", f"api/kernels/{kernel['id']}")
    return "".join(printed)


def api_root(state: dict, method: str, path: str, body: dict | None = None):
    import urllib.request

    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(state["url"] + path, data=data, method=method,
                                     headers={"Authorization": f"token {state['token']}"})
    with urllib.request.urlopen(request, timeout=30) as response:
        raw = response.read()
        return response.status, json.loads(raw) if raw else None


def test_in_a_kernel_the_server_running_it_is_found_without_jupyter_server(two):
    a, b = two
    sa, sb = a.start(), b.start()
    # A kernel of B finds B, with A listed in the same runtime dir.
    printed = run_in_a_kernel(sb, Path(b.env["JUPYTER_RUNTIME_DIR"]), KERNEL_LOOKUP)
    assert json.loads(printed) == [sb["url"], "kernel", "the Jupyter server running this kernel", False], printed
    assert a.stop().returncode == 0 and b.stop().returncode == 0
