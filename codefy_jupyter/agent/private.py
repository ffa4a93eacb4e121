"""The agent's files are its user's alone: every folder 0700 and every file 0600 under the agent's
data folder (agent-runs/<run>/ with its owner file, spool, output log, data/ and outputs/, the
input cache, the credentials and state files), whoever else can log in to the GPU node.

Two layers. `restrict_umask()` runs first in the agent process, its warm parent and every run
process (and so in the ranks and helpers they start): whatever a node, torch or a library writes
there is created private too. The helpers below set the mode explicitly as well, so the agent's own
files do not depend on the umask (an embedding process may have another) and a folder or file left
0755/0644 by an older agent is tightened when it is opened again.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO, Any

UMASK = 0o077
DIR_MODE = 0o700
FILE_MODE = 0o600


def restrict_umask() -> int:
    """Make what this process (and its children) create private; the previous umask."""
    return os.umask(UMASK)


def make_dir(path: str | os.PathLike[str]) -> Path:
    """`path` and any missing parents, 0700; an existing `path` is tightened to 0700."""
    path = Path(path)
    missing = []
    for parent in (path, *path.parents):
        if parent.exists():
            break
        missing.append(parent)
    path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    for created in missing[1:]:  # Path.mkdir gives its mode to the last folder only
        _chmod(created, DIR_MODE)
    _chmod(path, DIR_MODE)
    return path


def open_file(path: str | os.PathLike[str], mode: str = "w", **kwargs: Any) -> IO[Any]:
    """`open(path, mode)` for a file created 0600 (an existing one is tightened to 0600)."""
    flags = {"w": os.O_WRONLY | os.O_CREAT | os.O_TRUNC, "a": os.O_WRONLY | os.O_CREAT | os.O_APPEND,
             "x": os.O_WRONLY | os.O_CREAT | os.O_EXCL}[mode.replace("b", "").replace("+", "")]
    if "+" in mode:
        flags = (flags & ~os.O_WRONLY) | os.O_RDWR
    fd = os_open(path, flags)
    try:
        return os.fdopen(fd, mode, **kwargs)
    except BaseException:
        os.close(fd)
        raise


def os_open(path: str | os.PathLike[str], flags: int) -> int:
    """`os.open(path, flags, 0o600)`, tightening a file that existed with a wider mode."""
    fd = os.open(path, flags, FILE_MODE)
    if hasattr(os, "fchmod"):  # not on Windows
        try:
            os.fchmod(fd, FILE_MODE)
        except OSError:  # not ours to change: it keeps its mode
            pass
    return fd


def write_text(path: str | os.PathLike[str], text: str) -> None:
    with open_file(path, "w", encoding="utf-8") as f:
        f.write(text)


def _chmod(path: Path, mode: int) -> None:
    try:
        os.chmod(path, mode)
    except OSError:  # not ours to change (a shared parent): what we create inside is still private
        pass
