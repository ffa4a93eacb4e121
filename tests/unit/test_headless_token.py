"""The headless server's own token: generated once per data dir, kept 0600, reused by every start."""

from __future__ import annotations

import os
import stat

from codefy_jupyter.server.headless import stored_token


def test_generated_once_then_reused_and_private(tmp_path):
    old = os.umask(0o022)
    try:
        first = stored_token(tmp_path)
    finally:
        os.umask(old)
    path = tmp_path / "token"
    assert len(first) == 48 and path.read_text() == first + "\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stored_token(tmp_path) == first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["token"]  # no temporary file left


def test_a_wider_file_is_narrowed_and_an_empty_one_replaced(tmp_path):
    path = tmp_path / "token"
    path.write_text("kept-token\n")
    os.chmod(path, 0o644)
    assert stored_token(tmp_path) == "kept-token"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    path.write_text("")
    fresh = stored_token(tmp_path)
    assert fresh and path.read_text().strip() == fresh and stored_token(tmp_path) == fresh
    assert sorted(p.name for p in tmp_path.iterdir()) == ["token"]
