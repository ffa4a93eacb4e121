"""Every notebook widget's ES module parses (`node --check`), as its class ships it.

The browser page test (tests/e2e/test_widget_esm.py) only says "the page wrote no report" when a
module fails to parse; this names the module and the line, and runs in the unit suite."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from codefy_jupyter.kernel.widgets import QueueDialog, RunsTable, RunView, WorkersTable
from codefy_jupyter.kernel.widgets.study_view import StudyView
from codefy_jupyter.kernel.widgets.sweep_view import SweepView

WIDGETS = [RunsTable, RunView, WorkersTable, QueueDialog, StudyView, SweepView]
NODE = shutil.which("node")


@pytest.mark.parametrize("widget", WIDGETS, ids=lambda w: w.__name__)
def test_the_module_a_widget_ships_parses(widget, tmp_path):
    assert NODE is not None, "node is needed: the lab extension's build (make venv) uses it too"
    module = tmp_path / f"{widget.__name__}.mjs"
    module.write_text(str(widget._esm), encoding="utf-8")
    checked = subprocess.run([NODE, "--check", str(module)], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stderr
