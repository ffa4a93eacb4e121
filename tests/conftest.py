import sys
from pathlib import Path

# A real jupyter-server for integration tests (jp_fetch, jp_ws_fetch, jp_serverapp).
pytest_plugins = ["pytest_jupyter.jupyter_server"]

# Test helper modules (tests/unit/engine_nodes.py) import as plain modules.
sys.path.insert(0, str(Path(__file__).parent / "unit"))
sys.path.insert(0, str(Path(__file__).parent / "integration"))
