"""The local agent folder's files that `codefy agent start`, `codefy agent ssh` and `codefy agent
stop` share: where the folder is, the pid file of each running agent (or SSH supervisor) and the
token file; and the `codefy start` server this machine runs, the default control plane."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Iterator

from ..agent import private
from ..wire.local_server import pid_alive


def default_agent_dir() -> Path:
    if os.environ.get("CODEFY_AGENT_DIR"):
        return Path(os.environ["CODEFY_AGENT_DIR"]).expanduser()
    try:
        from jupyter_core.paths import jupyter_data_dir
    except ImportError:
        return Path.home() / ".local" / "share" / "jupyter" / "codefy-agent"
    return Path(jupyter_data_dir()) / "codefy-agent"


def read_token_file(path: str) -> str | None:
    """The first line of `path` ('-': standard input), None when it is empty."""
    if path == "-":
        line = sys.stdin.readline()
    else:
        with open(Path(path).expanduser(), encoding="utf-8") as f:
            line = f.readline()
    return line.strip() or None


def local_control() -> tuple[str | None, Path]:
    """The URL of the `codefy start` server on this machine if its process lives, and the file it is
    recorded in (the data dir's server.json, as `codefy start` and the agent's token lookup read it)."""
    from ..wire import local_server

    path = local_server.state_path()
    state = read_state(path)
    pid, url = state.get("pid"), state.get("url")
    if not isinstance(pid, int) or pid <= 0 or not isinstance(url, str) or not url or not pid_alive(pid):
        return None, path
    return url, path


class AlreadyRunning(Exception):
    pass


@contextlib.contextmanager
def pid_file(agent_dir: Path, registered: str, control: str) -> Iterator[Path]:
    """`agents/<name>.json` with this process's pid, locked while the agent runs (a second agent of
    the same name on the same folder is refused: it would share the spools)."""
    private.restrict_umask()
    private.make_dir(agent_dir)
    folder = agent_dir / "agents"
    private.make_dir(folder)
    path = folder / f"{registered}.json"
    fd = private.os_open(path, os.O_RDWR | os.O_CREAT)
    try:
        try:
            import fcntl

            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except ImportError:  # Windows: no lock, the pid file alone
            pass
        except OSError:
            other = read_state(path)
            raise AlreadyRunning(f"agent {registered} is already running from {agent_dir} "
                                 f"(pid {other.get('pid', '?')})") from None
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid(), "name": registered, "control": control,
                                 "started_at": time.time()}).encode())
        yield path
    finally:
        os.close(fd)


def read_state(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}
