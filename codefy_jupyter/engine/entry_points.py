"""Finding the node packs of an entry-point group without importlib.metadata's full pass.

`importlib.metadata.entry_points(group=...)` imports 10-18 ms of modules (email, zipfile, csv) and
parses the entry points of every installed distribution (4-9 ms for ~100 of them) to keep a
handful, and the first run of a process paid both. A pack's distribution names the group in a
`[group]` header of its `entry_points.txt`, so this scan reads each distribution's file as text and
parses only those that name the group: about 1 ms, and nothing to import.

It reads what the standard path finder reads: `*.dist-info` / `*.egg-info` folders in the folders
on `sys.path`, the first distribution of a name winning, as importlib.metadata does. Anything else
(a zip or egg on `sys.path`, an egg-info file, a meta-path finder that lists distributions of its
own) makes `scan` answer None, and the caller asks importlib.metadata instead.
"""

from __future__ import annotations

import functools
import importlib
import os
import re
import sys
from typing import Any, NamedTuple

# name = module[:attr.path] [extras]
_VALUE = re.compile(r"^(?P<module>[\w.]+)\s*(?::\s*(?P<attr>[\w.]+)\s*)?(?:\[.*\])?\s*$")
_METADATA_SUFFIXES = (".dist-info", ".egg-info")


class Found(NamedTuple):
    name: str
    value: str  # "module" or "module:attr"

    def load(self) -> Any:
        match = _VALUE.match(self.value)
        if match is None:
            raise ValueError(f"entry point {self.name!r}: cannot read {self.value!r} as module[:attr]")
        module = importlib.import_module(match.group("module"))
        return functools.reduce(getattr, filter(None, (match.group("attr") or "").split(".")), module)


def _normalized(stem: str) -> str:
    """A distribution's name from its metadata folder, normalised as importlib.metadata does."""
    name = os.path.splitext(stem)[0].partition("-")[0]
    return re.sub(r"[-_.]+", "-", name).lower().replace("-", "_")


def _section(text: str, header: str) -> list[Found]:
    out: list[Found] = []
    inside = False
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            inside = line == header
            continue
        if inside and "=" in line:
            name, _, value = line.partition("=")
            out.append(Found(name.strip(), value.strip()))
    return out


def _only_standard_finders(meta_path: list[Any]) -> bool:
    from importlib.machinery import PathFinder

    return all(finder is PathFinder or not hasattr(finder, "find_distributions") for finder in meta_path)


def scan(group: str, path: list[str] | None = None, meta_path: list[Any] | None = None) -> list[Found] | None:
    """Every entry point of `group` in the distributions on `path` (default sys.path), or None
    when something there is not a plain folder of metadata folders."""
    if not _only_standard_finders(sys.meta_path if meta_path is None else meta_path):
        return None
    header = f"[{group}]"
    seen: set[str] = set()
    found: list[Found] = []
    for entry in sys.path if path is None else path:
        folder = entry or "."
        try:
            listing = os.scandir(folder)
        except (FileNotFoundError, NotADirectoryError, PermissionError):
            if os.path.isfile(folder):  # a zip on sys.path: importlib.metadata reads those
                return None
            continue
        with listing:  # in directory order, as importlib.metadata reads it (it decides who wins a name)
            names = [(e.name, e.path, e.is_dir()) for e in listing]
        for name, full, is_dir in names:
            if name.endswith(".egg"):
                return None
            if not name.endswith(_METADATA_SUFFIXES):
                continue
            if not is_dir:  # an egg-info file
                return None
            dist = _normalized(name)
            if dist in seen:
                continue
            seen.add(dist)
            try:
                with open(os.path.join(full, "entry_points.txt"), encoding="utf-8") as f:
                    text = f.read()
            except OSError:
                continue
            if header in text:
                found.extend(_section(text, header))
    return found


def entry_points(group: str) -> list[Found] | list[Any]:
    """The group's entry points, each with `.name` and `.load()`: from `scan`, or from
    importlib.metadata where `scan` cannot answer."""
    found = scan(group)
    if found is not None:
        return found
    from importlib.metadata import entry_points as from_metadata

    return list(from_metadata(group=group))
