"""REST handlers for studies under `{base_url}codefy/api/studies` (filled in by the studies work)."""

from __future__ import annotations

from typing import Any


def study_routes(base: str) -> list[tuple[str, type, dict[str, Any]]]:
    return []
