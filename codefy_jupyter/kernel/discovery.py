"""Finding the control plane without being told where it is.

In order: a URL given (argument, or `CODEFY_URL` with `CODEFY_TOKEN`); inside a notebook kernel,
the Jupyter server that runs this kernel; the last `codefy start` (its `server.json` in the data
dir); any running Jupyter server of this user that serves the extension. Otherwise a clear error
that says what to do.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from ..wire import local_server
from .errors import CodefyError

PROBE_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class ServerInfo:
    url: str  # ends with "/": the server's base URL
    token: str
    source: str  # "arguments", "environment", "kernel", "codefy start", "jupyter server"


def _base(url: str) -> str:
    return url if url.endswith("/") else url + "/"


def discover(url: str | None = None, token: str | None = None, data_dir: str | None = None) -> ServerInfo:
    if url:
        return ServerInfo(_base(url), token if token is not None else os.environ.get("CODEFY_TOKEN", ""), "arguments")
    if os.environ.get("CODEFY_URL"):
        return ServerInfo(_base(os.environ["CODEFY_URL"]), token or os.environ.get("CODEFY_TOKEN", ""), "environment")
    kernel_id = _kernel_id()
    if kernel_id:
        for server in _jupyter_servers():
            if _serves_kernel(server, kernel_id) and _has_extension(server):
                return server
    state = _codefy_start_state(data_dir)
    if state is not None:
        return state
    # Listing Jupyter servers imports jupyter_server (about 2 s), so it comes last.
    for server in _jupyter_servers():
        if _has_extension(server):
            return server
    where = _state_file(data_dir)
    raise CodefyError(
        "no codefy server found: start one with `codefy start` (none recorded in "
        f"{where}), run JupyterLab with codefy-jupyter installed, or pass --url and --token",
        code="no_server")


def _state_file(data_dir: str | None) -> Path:
    return local_server.state_path(data_dir)


def _pid_alive(pid: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, someone else's
        return True
    return True


def _codefy_start_state(data_dir: str | None) -> ServerInfo | None:
    try:
        state = json.loads(_state_file(data_dir).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(state, dict) or not _pid_alive(state.get("pid")) or not state.get("url"):
        return None
    return ServerInfo(_base(state["url"]), state.get("token", ""), "codefy start")


def _jupyter_servers() -> list[ServerInfo]:
    try:
        from jupyter_server.serverapp import list_running_servers
    except ImportError:
        return []
    found = []
    for info in list_running_servers():
        if _pid_alive(info.get("pid")) and info.get("url"):
            found.append(ServerInfo(_base(info["url"]), info.get("token", ""), "jupyter server"))
    return found


def _kernel_id() -> str | None:
    """The id of the kernel we run in, from its connection file (None outside a kernel)."""
    if "ipykernel" not in sys.modules:
        return None
    try:
        from ipykernel import get_connection_file

        name = Path(get_connection_file()).name
    except Exception:  # not in a kernel after all
        return None
    if name.startswith("kernel-") and name.endswith(".json"):
        return name[len("kernel-"):-len(".json")]
    return None


def _get(server: ServerInfo, path: str) -> Any:
    request = urllib.request.Request(server.url + path,
                                     headers={"Authorization": f"token {server.token}"} if server.token else {})
    with urllib.request.urlopen(request, timeout=PROBE_TIMEOUT_S) as response:  # noqa: S310 - loopback servers
        return json.loads(response.read() or b"null")


def _serves_kernel(server: ServerInfo, kernel_id: str) -> bool:
    try:
        kernels: Iterable[dict[str, Any]] = _get(server, "api/kernels") or []
    except (OSError, ValueError, urllib.error.URLError):
        return False
    return any(k.get("id") == kernel_id for k in kernels)


def _has_extension(server: ServerInfo) -> bool:
    try:
        _get(server, "codefy/api/runs?limit=1")
    except (OSError, ValueError, urllib.error.URLError):
        return False
    return True
