"""Presets: named subgraphs loaded from presets folders.

A preset file `<name>.json` is a graph with an interface:
`{"description"?, "nodes", "edges", "inputs": {name: {"node", "port"}}, "outputs": {...}}`.
Folders are searched in order: those given, then `CODEFY_PRESETS_DIR` (path-separated list),
then the presets shipped with the package. The first file of a name wins.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

BUILTIN_DIR = Path(__file__).with_name("presets")
ENV_VAR = "CODEFY_PRESETS_DIR"


_DEFAULTS: dict[str, "PresetLibrary"] = {}


class PresetError(Exception):
    pass


class PresetLibrary:
    def __init__(self, dirs: list[str | os.PathLike[str]] | None = None, *, include_env: bool = True,
                 include_builtin: bool = True) -> None:
        folders = [Path(d) for d in (dirs or [])]
        if include_env and os.environ.get(ENV_VAR):
            folders += [Path(p) for p in os.environ[ENV_VAR].split(os.pathsep) if p]
        if include_builtin:
            folders.append(BUILTIN_DIR)
        self.dirs = folders
        self._cache: dict[str, tuple[float, dict[str, Any]]] = {}

    @classmethod
    def default(cls) -> PresetLibrary:
        """The library for the current `CODEFY_PRESETS_DIR`, built once per value (every graph
        validation asks for it)."""
        key = os.environ.get(ENV_VAR, "")
        library = _DEFAULTS.get(key)
        if library is None:
            library = _DEFAULTS[key] = cls()
        return library

    def path_of(self, name: str) -> Path | None:
        if not name or "/" in name or "\\" in name or name.startswith("."):
            return None
        for folder in self.dirs:
            path = folder / f"{name}.json"
            if path.is_file():
                return path
        return None

    def names(self) -> list[str]:
        seen: dict[str, None] = {}
        for folder in self.dirs:
            if folder.is_dir():
                for path in sorted(folder.glob("*.json")):
                    seen.setdefault(path.stem, None)
        return sorted(seen)

    def get(self, name: str) -> dict[str, Any]:
        """The preset's graph JSON; PresetError naming the preset when missing or unreadable."""
        path = self.path_of(name)
        if path is None:
            known = ", ".join(self.names()) or "none"
            raise PresetError(f"no preset named {name!r} (known: {known})")
        mtime = path.stat().st_mtime
        hit = self._cache.get(name)
        if hit is not None and hit[0] == mtime:
            return hit[1]
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            raise PresetError(f"preset {name!r} ({path}) is not readable JSON: {err}") from err
        if not isinstance(data, dict):
            raise PresetError(f"preset {name!r} ({path}) must be a JSON object")
        self._cache[name] = (mtime, data)
        return data
