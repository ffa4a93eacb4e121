"""The local worker agent of a Binder session, started by binder/start beside the notebook server.

It waits for a Jupyter server on this machine to list itself (the jpserver-*.json files in Jupyter's
runtime dir, as every Jupyter server writes them), asks that server for a one-time enrollment token
over loopback (with the server's own token, or under JupyterHub the user's API token), and then
becomes `codefy agent start --control <loopback URL> --token <one-time> --name binder`. A worker
token already stored for this server (a restarted session) is used instead of enrolling again.

    python binder/local_agent.py [--name binder] [--data-dir ~/.codefy-agent] [--wait 300]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from codefy_jupyter.wire.local_server import pid_alive


def listed_servers(runtime_dir: Path) -> list[dict[str, Any]]:
    """The servers listed in `runtime_dir` whose process lives, newest first."""
    found = []
    for path in sorted(runtime_dir.glob("jpserver-*.json"), key=lambda p: p.stat().st_mtime, reverse=True):
        try:
            info = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # written as we read it; the next look finds it whole
        if isinstance(info, dict) and pid_alive(info.get("pid")) and info.get("url"):
            found.append(info)
    return found


def loopback_control(info: dict[str, Any]) -> str:
    """The server's URL with its host made 127.0.0.1: the agent dials it over loopback (the worker
    socket takes the server's own token only from a loopback peer), whatever --ip it listens on."""
    parts = urlsplit(str(info["url"]))
    port = f":{parts.port}" if parts.port else ""
    path = parts.path if parts.path.endswith("/") else parts.path + "/"
    return urlunsplit(("http", f"127.0.0.1{port}", path, "", ""))


def api_token(info: dict[str, Any], env: dict[str, str]) -> str:
    return str(info.get("token") or env.get("JUPYTERHUB_API_TOKEN") or "")


def enroll(control: str, token: str) -> str:
    """A one-time token for a new worker, from POST codefy/api/workers/enrollments."""
    request = urllib.request.Request(f"{control}codefy/api/workers/enrollments", method="POST", data=b"{}",
                                     headers={"Authorization": f"token {token}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())["token"]


def wait_for_server(runtime_dir: Path, wait_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + wait_s
    while True:
        servers = listed_servers(runtime_dir)
        if servers:
            return servers[0]
        if time.monotonic() > deadline:
            raise SystemExit(f"no Jupyter server listed itself in {runtime_dir} within {wait_s:g} s")
        time.sleep(0.5)


def agent_command(control: str, name: str, data_dir: Path, token: str | None) -> list[str]:
    cmd = [sys.executable, "-m", "codefy_jupyter.cli", "agent", "start", "--control", control, "--name", name,
           "--data-dir", str(data_dir)]
    return cmd + (["--token", token] if token else [])


def main(argv: list[str] | None = None) -> None:
    from jupyter_core.paths import jupyter_runtime_dir

    from codefy_jupyter.agent.credentials import CredentialStore, normalise_control

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", default=os.environ.get("CODEFY_BINDER_AGENT_NAME", "binder"))
    parser.add_argument("--data-dir", type=Path, default=Path.home() / ".codefy-agent")
    parser.add_argument("--wait", type=float, default=300.0, help="seconds to wait for the server to list itself")
    args = parser.parse_args(argv)

    info = wait_for_server(Path(jupyter_runtime_dir()), args.wait)
    control = loopback_control(info)
    stored = CredentialStore(args.data_dir).load(args.name)
    token = None
    if stored is None or normalise_control(stored.control) != normalise_control(control):
        # The server answers its API a moment after it lists itself: try for a while.
        deadline = time.monotonic() + 60
        while True:
            try:
                token = enroll(control, api_token(info, dict(os.environ)))
                break
            except OSError as err:
                if time.monotonic() > deadline:
                    raise SystemExit(f"could not enroll at {control}: {err}") from err
                time.sleep(0.5)
    print(f"local agent {args.name} for {control}", flush=True)
    cmd = agent_command(control, args.name, args.data_dir, token)
    os.execv(cmd[0], cmd)


if __name__ == "__main__":
    main()
