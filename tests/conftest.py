import sys
from pathlib import Path

# Test helper modules (tests/unit/engine_nodes.py) import as plain modules.
sys.path.insert(0, str(Path(__file__).parent / "unit"))
