"""Which finished runs' folders an agent keeps: `agent-runs/<run>/` (output.log, data/) of the
newest `keep` runs that are done. Older ones are removed, so that a GPU box's disk does not fill
up with the folders of runs finished long ago.

A run is done here once its spool file is gone, i.e. the control plane acknowledged its last
frame (`delivery.py`). Folders that still hold a spool are never touched, whoever owns them:
their frames are not delivered yet (another instance's runs share the folder). Folders younger
than `MIN_AGE_S` are kept as well, which covers a run whose folder was just made and whose spool
is not there yet.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from pathlib import Path
from typing import Collection, Iterable

from .spool import SPOOL_FILE

log = logging.getLogger("codefy.agent")

DEFAULT_KEEP_RUNS = 200
MIN_AGE_S = 60.0


def folders_to_remove(done: Iterable[tuple[str, float]], keep: int) -> list[str]:
    """Of the done runs' folders `(run id, last change)`, those beyond the newest `keep` (a
    negative `keep` keeps all). Ties go by run id, so the choice does not depend on listing order."""
    if keep < 0:
        return []
    newest_first = sorted(done, key=lambda folder: (folder[1], folder[0]), reverse=True)
    return [run_id for run_id, _ in newest_first[keep:]]


def prune_run_folders(runs_dir: Path, keep: int, live: Collection[str] = (), *,
                      now: float | None = None) -> list[str]:
    """Remove the folders of done runs beyond the newest `keep`; returns the run ids removed.
    `live` names runs this agent is still running or delivering (kept, spool or not)."""
    if keep < 0:
        return []
    now = time.time() if now is None else now
    asked = keep
    done: list[tuple[str, float]] = []
    try:
        entries = list(os.scandir(runs_dir))
    except FileNotFoundError:
        return []
    for entry in entries:
        try:
            if not entry.is_dir(follow_symlinks=False) or entry.name in live:
                continue
            if os.path.exists(os.path.join(entry.path, SPOOL_FILE)):
                continue
            changed = entry.stat(follow_symlinks=False).st_mtime
        except OSError:
            continue
        if now - changed >= MIN_AGE_S:
            done.append((entry.name, changed))
        else:
            keep -= 1  # a young done folder counts among the newest kept
    removed = []
    for run_id in folders_to_remove(done, max(keep, 0)):
        shutil.rmtree(Path(runs_dir) / run_id, ignore_errors=True)
        removed.append(run_id)
    if removed:
        log.info("removed the folders of %d finished runs (keeping the newest %d)", len(removed), asked)
    return removed
