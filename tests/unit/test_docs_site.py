"""The documentation site (docs/, Sphinx + MyST) builds with no warnings, offline, and its generated
references list everything the code has: every CLI command and flag, every REST route, every
setting, every node type, every run status."""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
sys.path.insert(0, str(DOCS / "_ext"))

import codefy_reference  # noqa: E402  (docs/_ext is no package)

@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # -W --keep-going: every warning fails the build, and all of them are listed at once.
    done = subprocess.run([sys.executable, "-m", "sphinx", "-b", "html", "-W", "--keep-going", "-q", "-E",
                           "-d", str(out / ".doctrees"), str(DOCS), str(out / "html")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=110)
    assert done.returncode == 0 and not done.stderr.strip(), f"sphinx-build failed:\n{done.stderr}{done.stdout}"
    return out / "html"


def page_text(site: Path, name: str) -> str:
    raw = (site / name).read_text()
    return html.unescape(re.sub(r"<[^>]+>", "", raw))


def test_the_site_builds_without_warnings_and_fetches_nothing(site: Path):
    assert (site / "index.html").exists()
    for page in site.rglob("*.html"):
        raw = page.read_text()
        # Offline: no stylesheet, script or image from the network.
        remote = re.findall(r"<(?:script|link|img)\b[^>]*(?:src|href)=\"(https?:)?//[^\"]+\"", raw)
        assert not remote, f"{page.relative_to(site)} loads from the network: {remote[:3]}"


def test_every_cli_command_and_flag_is_in_the_reference(site: Path):
    from codefy_jupyter.cli import build_parser

    text = page_text(site, "reference/cli.html")

    def walk(parser, path):
        for action in parser._actions:
            for flag in action.option_strings:
                if flag not in ("-h", "--help"):
                    assert flag in text, f"{path} {flag} is not in the CLI reference"
        for name, sub in codefy_reference._subcommands(parser).items():
            assert f"{path} {name}" in text, f"{path} {name} is not in the CLI reference"
            walk(sub, f"{path} {name}")

    walk(build_parser(), "codefy")


def test_every_rest_route_is_in_the_reference(site: Path):
    text = page_text(site, "reference/rest.html")
    routes = codefy_reference.routes()
    assert len(routes) > 20
    for method, path in routes:
        assert f"{method} {path}" in text, f"{method} {path} is not in the REST reference"
    assert "owner_queue_full" in text and "memory_unavailable" in text  # error codes from the descriptions


def test_every_setting_is_in_the_reference(site: Path):
    from codefy_jupyter.core.config import SETTINGS

    text = page_text(site, "reference/settings.html")
    for s in SETTINGS:
        assert s.name in text and s.env in text, f"{s.name} ({s.env}) is not in the settings reference"
        assert " ".join(s.help.replace("`", "").split())[:60] in " ".join(text.split()), f"{s.name}'s help is missing"


def test_every_node_type_is_in_the_catalog(site: Path):
    from codefy_jupyter.engine import default_registry

    text = page_text(site, "reference/nodes.html")
    for d in default_registry().definitions():
        assert d["type"] in text
        for port in [*d["inputs"], *d["outputs"], *d["params"]]:
            assert port in text, f"{d['type']}.{port} is not in the node catalog"


def test_every_run_status_change_is_on_the_runs_page(site: Path):
    from codefy_jupyter.core.runs.state import TRANSITIONS

    text = page_text(site, "concepts/runs.html")
    for (before, event), after in TRANSITIONS.items():
        assert re.search(rf"{before}\s+{event}\s+{after}", text), f"{before} --{event}--> {after} is missing"


def test_an_unknown_generated_section_is_an_error():
    with pytest.raises(ValueError, match="no generated section named 'clii'"):
        codefy_reference.expand("intro\n<!-- codefy-reference: clii -->\n")


def test_generated_text_keeps_markdown_out_of_prose():
    # `<data dir>` in a help text is prose, not an HTML tag; code spans stay code.
    assert codefy_reference.text("in <data dir>/token, `a|b`") == "in \\<data dir\\>/token, `a|b`"
    assert codefy_reference.cell("a | b\nc") == "a \\| b c"
    assert codefy_reference.error_codes("code owner_queue_full, params {setting: x}") == ["owner_queue_full"]
    assert codefy_reference.error_codes("codes `not_worker_owner` or `enrollment_needs_user`") == [
        "not_worker_owner", "enrollment_needs_user"]
