from pathlib import Path
from typing import Iterator

import pytest
from lab_server import Lab, running_lab


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Lab]:
    """A real `jupyter lab` with this package's extensions, stopped after the test."""
    with running_lab(tmp_path) as server:
        yield server
