"""Where a control plane on this machine keeps its data and records itself: the one place that knows.

The data dir is `--data-dir`, else `CODEFY_DATA_DIR`, else the Jupyter data dir's `codefy/` folder.
A headless server (`codefy start`) writes `<data dir>/server.json` (pid, url, token, ...); the CLI,
the kernel side and a same-machine agent read it to find that server.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

DATA_DIR_ENV = "CODEFY_DATA_DIR"
STATE_FILE = "server.json"


def default_data_dir() -> Path:
    """The Jupyter data dir's `codefy/` folder (jupyter_core knows where that is on each platform;
    it is there whenever a server is, and the fallback is its Linux answer)."""
    try:
        from jupyter_core.paths import jupyter_data_dir
    except ImportError:
        return Path.home() / ".local" / "share" / "jupyter" / "codefy"
    return Path(jupyter_data_dir()) / "codefy"


def data_dir(chosen: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None) -> Path:
    """`chosen`, else `CODEFY_DATA_DIR`, else `default_data_dir()`."""
    env = os.environ if env is None else env
    value = chosen or env.get(DATA_DIR_ENV) or ""
    return Path(value).expanduser() if value else default_data_dir()


def state_path(folder: str | os.PathLike[str] | None = None) -> Path:
    """The `server.json` of the data dir `folder` (as `data_dir` resolves it)."""
    return data_dir(folder) / STATE_FILE


def pid_alive(pid: object) -> bool:
    """Whether the process a state file names still runs. Someone else's process counts (it exists);
    a zombie does not (a server that exited and was not reaped yet is gone for whoever reads its file)."""
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return False
    try:  # Linux: the state letter follows the command name's closing parenthesis
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return True
    return stat[stat.rfind(")") + 1:].split()[:1] != ["Z"]
