"""`codefy agent ssh` against a real `sshd` (Debian's openssh-server, started here on a free port
with throwaway keys) and a real control plane: the agent on the "remote" side dials back through the
reverse tunnel, a run goes through it, a killed ssh is reconnected and the same agent comes back,
`codefy agent stop` ends the supervisor and the remote agent, and the tunnelled agent is never taken
for one on the server's machine (its connection comes from loopback, its machine id is its own)."""

from __future__ import annotations

import asyncio
import getpass
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from test_server_runs import call, wait_status
from test_workers_e2e import INVENTORY, SMALL, control, jp_server_config, server_token, submit, worker_state  # noqa: F401

SSHD = Path("/usr/sbin/sshd")
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not SSHD.exists(), reason="no /usr/sbin/sshd: install Debian's openssh-server "
                                 "(.ci/run does) to test SSH workers")]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Sshd:
    def __init__(self, tmp_path: Path) -> None:
        self.dir = tmp_path / "sshd"
        self.dir.mkdir()
        for key in ("host_key", "client_key"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.dir / key)], check=True)
        self.key = self.dir / "client_key"
        (self.dir / "authorized_keys").write_bytes((self.dir / "client_key.pub").read_bytes())
        # The remote side's own settings, as a GPU box would have them: its devices, its folders, and a
        # machine id of its own (the test's "remote" shares /etc/machine-id with the server).
        inventory = tmp_path / "remote-inventory.json"
        inventory.write_text(json.dumps(INVENTORY))
        remote_env = {"CODEFY_AGENT_MACHINE_ID": "ssh-gpu-box", "CODEFY_DEVICE_INVENTORY": str(inventory),
                      "JUPYTER_PLATFORM_DIRS": "0", "JUPYTER_DATA_DIR": str(tmp_path / "remote-jupyter")}
        self.port = free_port()
        config = self.dir / "sshd_config"
        config.write_text("\n".join([
            f"Port {self.port}", "ListenAddress 127.0.0.1", f"HostKey {self.dir / 'host_key'}",
            f"PidFile {self.dir / 'sshd.pid'}", "UsePAM no", "PermitRootLogin prohibit-password",
            f"AuthorizedKeysFile {self.dir / 'authorized_keys'}", "StrictModes no", "PasswordAuthentication no",
            "KbdInteractiveAuthentication no", "AllowTcpForwarding yes",
            "SetEnv " + " ".join(f"{k}={v}" for k, v in remote_env.items()), ""]))
        if os.geteuid() == 0:  # sshd's privilege separation folder, made by the service scripts otherwise
            Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        self.log_path = self.dir / "sshd.log"
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen([str(SSHD), "-f", str(config), "-D", "-e"], stdout=self.log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    async def listening(self, timeout: float = 60.0) -> None:
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            assert self.proc.poll() is None, f"sshd exited:\n{self.log_path.read_text(errors='replace')}"
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", self.port)
                writer.close()
                return
            except OSError:
                assert asyncio.get_running_loop().time() < deadline, "sshd never listened"
                await asyncio.sleep(0.1)

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


@pytest.fixture
def sshd(tmp_path):
    server = Sshd(tmp_path)
    yield server
    server.close()


def remote_agent_pid(tmp_path: Path) -> int | None:
    try:
        pid = json.loads((tmp_path / "remote-agent" / "agents" / "gpu-box.json").read_text())["pid"]
    except (OSError, ValueError, KeyError):
        return None
    return pid if psutil.pid_exists(pid) else None


async def test_an_agent_over_ssh_runs_reconnects_and_stops(jp_fetch, control, tmp_path, sshd):  # noqa: F811
    await sshd.listening()
    code, issued = await call(jp_fetch, "api", "workers", "enrollments", method="POST", body={})
    assert code == 201, issued
    token_file = tmp_path / "token"
    token_file.write_text(issued["token"] + "\n")
    token_file.chmod(0o600)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CODEFY_", "JUPYTER_TOKEN"))}
    env.update(JUPYTER_PLATFORM_DIRS="0", JUPYTER_DATA_DIR=str(tmp_path / "local-jupyter"))
    local_dir = tmp_path / "agent"
    remote_log = tmp_path / "remote-agent.log"
    cmd = [sys.executable, "-m", "codefy_jupyter.cli", "agent", "ssh", f"{getpass.getuser()}@127.0.0.1",
           "--port", str(sshd.port), "--identity", str(sshd.key), "--ssh-option", "StrictHostKeyChecking=no",
           "--ssh-option", "UserKnownHostsFile=/dev/null", "--ssh-option", "LogLevel=ERROR",
           "--remote-python", sys.executable, "--remote-port", str(free_port()),
           "--remote-data-dir", str(tmp_path / "remote-agent"), "--remote-log", str(remote_log),
           "--name", "gpu-box", "--control", control, "--token-file", str(token_file), "--data-dir", str(local_dir),
           "--alive-interval", "5"]
    log_path = tmp_path / "supervisor.log"
    with open(log_path, "wb") as log:
        supervisor = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    seen: set[int] = set()

    def output() -> str:
        text = log_path.read_text(errors="replace")
        remote = remote_log.read_text(errors="replace") if remote_log.exists() else "(none)"
        return f"supervisor:\n{text}\nremote agent:\n{remote}\nsshd:\n{sshd.log_path.read_text(errors='replace')}"

    def ssh_children() -> list[psutil.Process]:
        try:
            found = [p for p in psutil.Process(supervisor.pid).children() if p.name() == "ssh"]
        except psutil.NoSuchProcess:
            return []
        seen.update(p.pid for p in found)
        return found

    async def until(test, what: str, timeout: float = 120.0):
        deadline = asyncio.get_running_loop().time() + timeout
        while not (value := await test()):
            assert asyncio.get_running_loop().time() < deadline, f"{what} never happened:\n{output()}"
            await asyncio.sleep(0.1)
        return value

    async def connected():
        worker = await worker_state(jp_fetch, "gpu-box")
        return worker if worker is not None and worker["state"] == "connected" else None

    try:
        worker = await until(connected, "the agent connecting through the tunnel")
        assert worker["enrolled"] is True
        # Its connection comes from loopback (the tunnel), but it is another machine.
        assert worker["same_host"] is False, worker
        assert not [d for d in worker["devices"] if d.get("shared_with") == "local"], worker["devices"]
        run = await submit(jp_fetch, SMALL, {"worker": "gpu-box", "devices": ["cuda:1"]})
        done = await wait_status(jp_fetch, run["id"], {"succeeded", "failed"}, timeout=120)
        assert done["status"] == "succeeded" and done["worker_id"] == "gpu-box", done
        # The one-time token travelled over ssh's input: no command line on either side holds it.
        for proc in psutil.process_iter(["cmdline"]):
            assert issued["token"] not in " ".join(proc.info["cmdline"] or []), proc.info["cmdline"]
        agent_pid = remote_agent_pid(tmp_path)
        assert agent_pid is not None, output()

        # A dropped tunnel: the supervisor opens a new one and the same agent comes back through it.
        [first] = ssh_children()
        first.kill()
        await until(lambda: _async(not any(p.pid == first.pid for p in ssh_children())), "the ssh exit")

        async def back():
            others = [p for p in ssh_children() if p.pid != first.pid]
            return await connected() if others else None

        async def disconnected():
            w = await worker_state(jp_fetch, "gpu-box")
            return w is not None and (w["state"] != "connected" or w["connected_at"] != worker["connected_at"])

        await until(disconnected, "the control plane seeing the tunnel drop")
        again = await until(back, "the agent reconnecting through a new tunnel")
        assert again["same_host"] is False
        assert remote_agent_pid(tmp_path) == agent_pid, "the remote agent was restarted, not reconnected"
        assert "reconnecting in" in log_path.read_text(errors="replace")
        run = await submit(jp_fetch, SMALL, {"worker": "gpu-box"})
        done = await wait_status(jp_fetch, run["id"], {"succeeded", "failed"}, timeout=120)
        assert done["status"] == "succeeded", done

        # `codefy agent stop` finds the supervisor in the local folder; it stops the remote agent.
        stop = subprocess.run([sys.executable, "-m", "codefy_jupyter.cli", "agent", "stop", "--name", "gpu-box",
                               "--data-dir", str(local_dir)], env=env, capture_output=True, text=True, timeout=120)
        assert stop.returncode == 0, f"{stop.stderr}\n{output()}"
        assert supervisor.wait(timeout=60) == 0, output()
        assert not psutil.pid_exists(agent_pid) or psutil.Process(agent_pid).status() == psutil.STATUS_ZOMBIE
        assert not [pid for pid in seen if psutil.pid_exists(pid)
                    and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE], "an ssh process outlived the stop"
        assert (await worker_state(jp_fetch, "gpu-box"))["state"] != "connected"
    finally:
        ssh_children()
        if supervisor.poll() is None:
            supervisor.kill()
            supervisor.wait(timeout=30)
        for pid in [*seen, remote_agent_pid(tmp_path) or 0]:
            if pid:
                try:
                    for proc in [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]:
                        proc.kill()
                except psutil.NoSuchProcess:
                    pass


async def _async(value):
    return value
