"""Every setting and every CLI flag is documented in the documentation pages (docs/), and the README
is the front page: short, its links relative and inside the repository."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from codefy_jupyter.core.config import SETTINGS

ROOT = Path(__file__).resolve().parents[2]
DOCS_DIR = ROOT / "docs"
README = (ROOT / "README.md").read_text()
# The hand-written pages (the generated references are checked by test_docs_site.py).
PAGES = {p: p.read_text() for p in sorted(DOCS_DIR.rglob("*.md")) if "_build" not in p.parts}
DOCS = "\n".join(PAGES.values())

sys.path.insert(0, str(DOCS_DIR / "_ext"))
import codefy_reference  # noqa: E402  (docs/_ext is no package)


def test_every_setting_is_in_the_settings_reference():
    page = (DOCS_DIR / "reference" / "settings.md").read_text()
    assert "<!-- codefy-reference: settings -->" in page
    rendered = codefy_reference.expand(page)
    for s in SETTINGS:
        row = next((line for line in rendered.splitlines() if line.startswith(f"| `{s.name}` |")), None)
        assert row is not None, f"{s.name} is not documented"
        assert f"`{s.env}`" in row


def test_every_cli_flag_is_in_the_docs():
    from codefy_jupyter.cli import build_parser

    parser = build_parser()
    for name, sub in parser._subparsers._group_actions[0].choices.items():
        assert f"codefy {name}" in DOCS, f"codefy {name} is not documented"
        for action in sub._actions:
            for flag in action.option_strings:
                if flag.startswith("--") and flag != "--help":
                    assert f"`{flag}" in DOCS or f" {flag} " in DOCS, f"codefy {name} {flag} is not documented"


def test_the_readme_is_a_front_page():
    lines = README.splitlines()
    assert len(lines) <= 250, f"the README has {len(lines)} lines"
    assert "make demo" in README and "make test" in README
    links = re.findall(r"\]\(([^)]+)\)", README)
    assert any(link.startswith("docs/") for link in links), "the README links into the docs"
    for link in links:
        assert not re.match(r"[a-z]+:", link), f"the README links outside the repository: {link}"
        target = (ROOT / link.split("#", 1)[0]).resolve()
        assert target.is_relative_to(ROOT) and target.exists(), f"the README links to a missing file: {link}"


def test_every_page_is_in_the_site():
    listed = {"index"}
    for path, text in PAGES.items():
        for block in re.findall(r"^```\{toctree\}\n(.*?)^```", text, re.MULTILINE | re.DOTALL):
            for entry in block.splitlines():
                if entry.strip() and not entry.startswith(":"):
                    listed.add((path.parent / entry.strip()).relative_to(DOCS_DIR).as_posix())
    for path in PAGES:
        name = path.relative_to(DOCS_DIR).with_suffix("").as_posix()
        assert name in listed, f"{name} is in no toctree"
