"""The lab extension's TypeScript unit tests (labextension/test, vitest) inside the Python suite,
so `make test` runs them: the pure model and formatting code of the Runs and Workers panels."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

LAB = Path(__file__).resolve().parents[2] / "labextension"
VITEST = LAB / "node_modules" / ".bin" / "vitest"


def test_labextension_unit_tests_pass():
    if shutil.which("node") is None:
        pytest.skip("node is not installed: the lab extension's TypeScript tests need it")
    if not VITEST.exists():
        pytest.skip("labextension/node_modules is missing: `make venv` installs it with the extension's build")
    done = subprocess.run([str(VITEST), "run", "--reporter=dot"], cwd=LAB, capture_output=True, text=True,
                          timeout=100)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
