"""Sphinx configuration: Markdown pages (MyST) in the PyData theme, the references generated from
the code by `_ext/codefy_reference.py`. Everything builds offline: no intersphinx, no remote
images, no theme assets fetched at build time."""

from __future__ import annotations

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS / "_ext"))
sys.path.insert(0, str(DOCS.parent))  # the generators import this checkout's codefy_jupyter

project = "codefy-jupyter"
author = "the codefy-jupyter authors"
copyright = "the codefy-jupyter authors"

extensions = ["myst_parser", "codefy_reference"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]
templates_path: list[str] = []

myst_enable_extensions = ["colon_fence", "deflist"]
# Headings become anchors, so that pages (and the README) link to sections by name.
myst_heading_anchors = 4
suppress_warnings: list[str] = []
# Quotes stay as typed: settings, flags and JSON are shown exactly as the code has them.
smartquotes = False

html_theme = "pydata_sphinx_theme"
html_title = "codefy-jupyter"
html_static_path = ["_static"]
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "navbar_align": "left",
    "footer_start": ["copyright"],
    "footer_end": [],
    # Nothing from the network: no version switcher, no icon links, no analytics.
    "icon_links": [],
}
html_show_sourcelink = False
