"""agent/private.py: the agent's folders are 0700 and its files 0600, whatever the umask, and an
older agent's wider folder or file is narrowed when it is opened again. (The real agent and its run
processes: tests/integration/test_workers_e2e.py.)"""

from __future__ import annotations

import os
import stat

import pytest

from codefy_jupyter.agent import private
from codefy_jupyter.agent.delivery import Deliveries


@pytest.fixture
def open_umask():
    """A umask that lets everyone read what is created, as a login shell's 022 does and wider."""
    before = os.umask(0o000)
    yield
    os.umask(before)


def mode(path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_folders_and_their_new_parents_are_0700_and_files_0600(tmp_path, open_umask):
    made = private.make_dir(tmp_path / "a" / "b" / "c")
    assert [mode(p) for p in (tmp_path / "a", tmp_path / "a" / "b", made)] == [0o700] * 3
    for how in ("w", "a", "wb", "x"):
        path = made / f"f-{how}"
        with private.open_file(path, how) as f:
            f.write(b"x" if "b" in how else "x")
        assert mode(path) == 0o600, how
    private.write_text(made / "owner", "box")
    assert (made / "owner").read_text() == "box" and mode(made / "owner") == 0o600
    fd = private.os_open(made / "log", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.close(fd)
    assert mode(made / "log") == 0o600


def test_what_an_older_agent_left_wider_is_narrowed(tmp_path, open_umask):
    folder = tmp_path / "run"
    folder.mkdir(mode=0o755)
    (folder / "owner").write_text("box")
    os.chmod(folder / "owner", 0o644)
    private.make_dir(folder)
    private.write_text(folder / "owner", "box")
    assert (mode(folder), mode(folder / "owner")) == (0o700, 0o600)


def test_the_run_folder_owner_file_and_spool_are_private(tmp_path, open_umask):
    runs = Deliveries(tmp_path / "agent-runs", "box")
    delivery = runs.open("r1")
    run_dir = tmp_path / "agent-runs" / "r1"
    assert (mode(tmp_path / "agent-runs"), mode(run_dir), mode(run_dir / "owner")) == (0o700, 0o700, 0o600)
    spool = delivery.spool
    assert mode(spool.path) == 0o600
    spool.compact()  # rewritten through a temporary file: private as well
    spool.close()
    assert mode(spool.path) == 0o600


def test_restrict_umask_makes_what_is_created_afterwards_private(tmp_path, open_umask):
    assert private.restrict_umask() == 0o000
    (tmp_path / "plain").write_text("x")
    (tmp_path / "dir").mkdir()
    assert (mode(tmp_path / "plain"), mode(tmp_path / "dir")) == (0o600, 0o700)
