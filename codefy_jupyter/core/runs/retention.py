"""A pruned run's files: what retention removes from its folder, and what it keeps."""

from __future__ import annotations

import shutil
from pathlib import Path


def remove_run_files(folder: Path, keep: set[str]) -> None:
    if not folder.is_dir():
        return
    for entry in folder.iterdir():
        if entry.name in keep:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)
    if not keep:
        try:
            folder.rmdir()
        except OSError:  # something new appeared in it: leave it
            pass
