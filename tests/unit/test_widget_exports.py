"""The widgets package's public surface: the six classes, their constructor signatures (the
%codefy magics rely on them) and one plain ES module each, shipped in the package."""

from __future__ import annotations

import inspect
import re

import codefy_jupyter.kernel.widgets as widgets
from codefy_jupyter.kernel.widgets._base import ASSETS, SHARED_JS


def test_exports_and_signatures():
    assert sorted(widgets.__all__) == ["QueueDialog", "RunView", "RunsTable", "StudyView", "SweepView", "WorkersTable"]
    params = {name: list(inspect.signature(getattr(widgets, name).__init__).parameters)[1:3]
              for name in widgets.__all__}
    assert params == {"RunView": ["run_id", "client"], "RunsTable": ["client", "refresh_s"],
                      "WorkersTable": ["client", "refresh_s"], "QueueDialog": ["graph", "client"],
                      "SweepView": ["sweep_id", "client"], "StudyView": ["study_id", "client"]}
    for name in ("RunsTable", "WorkersTable"):
        refresh = inspect.signature(getattr(widgets, name).__init__).parameters["refresh_s"]
        assert refresh.kind is inspect.Parameter.KEYWORD_ONLY


DRAW = "run_view_draw.js"  # the run view's drawing, shipped in front of the RunView and the dialog's module
EXPERIMENT = "experiment_draw.js"  # the sweep and study views' shared drawing


def test_each_widget_ships_the_shared_helpers_then_its_own_es_module_with_a_default_render():
    files = {"RunView": "run_view.js", "RunsTable": "runs_table.js", "WorkersTable": "workers_table.js",
             "QueueDialog": "queue_dialog.js", "SweepView": "sweep_view.js", "StudyView": "study_view.js"}
    parts = {"RunView": (DRAW,), "QueueDialog": (DRAW,), "SweepView": (DRAW, EXPERIMENT),
             "StudyView": (DRAW, EXPERIMENT)}
    assert sorted(p.name for p in ASSETS.glob("*.js")) == sorted([*files.values(), SHARED_JS.name, DRAW, EXPERIMENT])
    dom = SHARED_JS.read_text()
    assert "h" in set(re.findall(r"^(?:function|const|let|class) (\w+)", dom, re.M))
    for cls, name in files.items():
        texts = [dom, *((ASSETS / p).read_text() for p in parts.get(cls, ())), (ASSETS / name).read_text()]
        assert getattr(widgets, cls)._esm == "\n".join(texts), f"{cls} does not ship dom.js, {parts.get(cls)}, {name}"
        *front, source = texts
        shared = "\n".join(front)
        declared = set()
        for text in front:  # each text in front declares its own names, none twice
            names = set(re.findall(r"^(?:function|const|let|class) (\w+)", text, re.M))
            assert not declared & names, f"{cls}: {declared & names} declared twice"
            declared |= names
        assert re.search(r"^export default \{ render \};$", source, re.M), name
        # One module text: an import would not resolve, and a name dom.js declares again is a SyntaxError.
        assert not re.search(r"^import ", shared + source, re.M), f"{name} must load on its own (no build step, no imports)"
        again = declared & set(re.findall(r"^(?:function|const|let|class) (\w+)", source, re.M))
        assert not again, f"{name} declares {again} again, which the text in front of it already declares"
        assert not re.search(r"^export ", shared, re.M), "what is put in front of a module exports nothing"


def test_the_browsers_finished_statuses_are_the_kernels():
    """A view of a finished run never shows itself disconnected: the ES module's list of finished
    statuses must be run_state_view.FINISHED."""
    from codefy_jupyter.kernel.widgets.run_state_view import FINISHED

    match = re.search(r"^const RUN_FINISHED = \[([^\]]*)\];$", (ASSETS / DRAW).read_text(), re.M)
    assert match, "run_view_draw.js declares RUN_FINISHED"
    assert set(re.findall(r'"(\w+)"', match.group(1))) == set(FINISHED)
