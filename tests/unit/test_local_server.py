"""pid_alive: whether the process a server's or agent's state file names still runs."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from codefy_jupyter.wire.local_server import pid_alive


def test_a_running_process_is_alive_and_nonsense_is_not():
    assert pid_alive(os.getpid())
    for pid in (None, 0, -1, True, "123", 2**22 + 12345):
        assert not pid_alive(pid), pid


def test_an_unreaped_child_counts_as_gone_and_so_does_a_reaped_one():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 90
    while pid_alive(child.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pid_alive(child.pid)  # exited, not yet waited for: a zombie
    child.wait()
    assert not pid_alive(child.pid)


def test_someone_elses_process_exists():
    assert pid_alive(1)  # init: not ours to signal, but it runs
