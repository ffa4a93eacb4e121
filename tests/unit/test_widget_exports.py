"""The widgets package's public surface: the four classes, their constructor signatures (the
%codefy magics rely on them) and one plain ES module each, shipped in the package."""

from __future__ import annotations

import inspect
import re

import codefy_jupyter.kernel.widgets as widgets
from codefy_jupyter.kernel.widgets._base import ASSETS, SHARED_JS


def test_exports_and_signatures():
    assert sorted(widgets.__all__) == ["QueueDialog", "RunView", "RunsTable", "WorkersTable"]
    params = {name: list(inspect.signature(getattr(widgets, name).__init__).parameters)[1:3]
              for name in widgets.__all__}
    assert params == {"RunView": ["run_id", "client"], "RunsTable": ["client", "refresh_s"],
                      "WorkersTable": ["client", "refresh_s"], "QueueDialog": ["graph", "client"]}
    for name in ("RunsTable", "WorkersTable"):
        refresh = inspect.signature(getattr(widgets, name).__init__).parameters["refresh_s"]
        assert refresh.kind is inspect.Parameter.KEYWORD_ONLY


def test_each_widget_ships_the_shared_helpers_then_its_own_es_module_with_a_default_render():
    files = {"RunView": "run_view.js", "RunsTable": "runs_table.js", "WorkersTable": "workers_table.js",
             "QueueDialog": "queue_dialog.js"}
    assert sorted(p.name for p in ASSETS.glob("*.js")) == sorted([*files.values(), SHARED_JS.name])
    shared = SHARED_JS.read_text()
    declared = set(re.findall(r"^(?:function|const|let|class) (\w+)", shared, re.M))
    assert "h" in declared
    for cls, name in files.items():
        source = (ASSETS / name).read_text()
        assert getattr(widgets, cls)._esm == shared + "\n" + source, f"{cls} does not ship dom.js + {name}"
        assert re.search(r"^export default \{ render \};$", source, re.M), name
        # One module text: an import would not resolve, and a name dom.js declares again is a SyntaxError.
        assert not re.search(r"^import ", shared + source, re.M), f"{name} must load on its own (no build step, no imports)"
        again = declared & set(re.findall(r"^(?:function|const|let|class) (\w+)", source, re.M))
        assert not again, f"{name} declares {again} again, which dom.js already declares"
    assert not re.search(r"^export ", shared, re.M), "dom.js is put in front of each module; it exports nothing"
