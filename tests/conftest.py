import sys
from pathlib import Path

import pytest

# A real jupyter-server for integration tests (jp_fetch, jp_ws_fetch, jp_serverapp).
pytest_plugins = ["pytest_jupyter.jupyter_server"]

# Test helper modules (tests/unit/engine_nodes.py) import as plain modules.
sys.path.insert(0, str(Path(__file__).parent / "unit"))
sys.path.insert(0, str(Path(__file__).parent / "integration"))


@pytest.fixture(autouse=True)
def _default_node_registry_restored():
    """A test that registers a node type in the process-wide registry (the one the control plane
    checks graphs and worker catalogs against) takes it away again, so a later test's agent is not
    listed degraded for lacking it."""
    from codefy_jupyter.engine import default_registry

    registry = default_registry()
    before = dict(registry._defs)
    yield
    if registry._defs != before:
        registry._defs.clear()
        registry._defs.update(before)
