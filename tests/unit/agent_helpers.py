"""Helpers for the agent's tests: the test node pack as an installed pack, run-process environments."""

from __future__ import annotations

import os
from pathlib import Path


def install_pack(site: Path) -> Path:
    """A dist-info folder in `site` that declares this module as a node pack; put `site` and this
    folder on the run process's PYTHONPATH."""
    info = site / "codefy_agent_test_nodes-0.0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: codefy-agent-test-nodes\nVersion: 0.0\n")
    (info / "entry_points.txt").write_text("[codefy_jupyter.nodes]\nagent_test = agent_nodes\n")
    return site


def pythonpath(site: Path) -> str:
    here = str(Path(__file__).resolve().parent)
    parts = [str(site), here] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return os.pathsep.join(parts)
