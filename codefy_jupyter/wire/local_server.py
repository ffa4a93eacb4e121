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
