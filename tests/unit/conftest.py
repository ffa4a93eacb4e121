"""Fixtures the engine test files share (a file that defines its own `probe` or `reg` keeps its own)."""

from __future__ import annotations

import pytest
from engine_nodes import Probe, make_registry

from codefy_jupyter.engine import NodeRegistry


@pytest.fixture
def probe() -> Probe:
    return Probe()


@pytest.fixture
def reg(probe: Probe) -> NodeRegistry:
    return make_registry(probe)
