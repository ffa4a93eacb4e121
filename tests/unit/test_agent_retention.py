"""Which finished runs' folders an agent removes: the pure choice and the pass over a real folder."""

from __future__ import annotations

import os
from pathlib import Path

from codefy_jupyter.agent.retention import MIN_AGE_S, folders_to_remove, prune_run_folders
from codefy_jupyter.agent.spool import SPOOL_FILE

NOW = 1_000_000.0


def test_the_newest_are_kept_and_ties_go_by_run_id():
    done = [("a", 10.0), ("b", 30.0), ("c", 20.0), ("d", 20.0)]
    assert folders_to_remove(done, 2) == ["c", "a"]  # kept: b (30), d (20, after c by id)
    assert folders_to_remove(done, 0) == ["b", "d", "c", "a"]
    assert folders_to_remove(done, 10) == []
    assert folders_to_remove(done, -1) == []  # keep all
    assert sorted(folders_to_remove(list(reversed(done)), 2)) == ["a", "c"]  # listing order does not matter


def folder(root: Path, run_id: str, age_s: float, *, spool: bool = False) -> Path:
    path = root / run_id
    (path / "data").mkdir(parents=True)
    (path / "output.log").write_text("log\n")
    (path / "data" / "weights.pt").write_bytes(b"\0" * 64)
    if spool:
        (path / SPOOL_FILE).write_text("{}\n")
    os.utime(path, (NOW - age_s, NOW - age_s))
    return path


def test_a_pass_removes_only_old_done_folders_beyond_the_newest(tmp_path):
    root = tmp_path / "agent-runs"
    old = MIN_AGE_S + 100
    for i in range(5):  # done, old: r0 is the oldest
        folder(root, f"r{i}", old + (5 - i) * 10)
    folder(root, "undelivered", old * 10, spool=True)  # its frames are not acknowledged yet
    folder(root, "running", old * 10)  # this agent's own live run (no spool yet)
    folder(root, "young", 1.0)  # done a second ago: counts among the newest kept
    (root / "stray-file").write_text("not a run")

    removed = prune_run_folders(root, keep=3, live={"running"}, now=NOW)

    assert sorted(removed) == ["r0", "r1", "r2"]  # kept: young, r4, r3
    assert sorted(p.name for p in root.iterdir()) == ["r3", "r4", "running", "stray-file", "undelivered", "young"]
    assert (root / "undelivered" / "data" / "weights.pt").exists()


def test_keep_all_and_a_missing_folder_remove_nothing(tmp_path):
    root = tmp_path / "agent-runs"
    assert prune_run_folders(root, keep=0, now=NOW) == []  # no agent-runs/ yet
    folder(root, "r0", MIN_AGE_S + 1)
    assert prune_run_folders(root, keep=-1, now=NOW) == []
    assert prune_run_folders(root, keep=0, now=NOW) == ["r0"] and not (root / "r0").exists()
