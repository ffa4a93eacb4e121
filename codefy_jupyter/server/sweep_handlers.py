"""REST handlers for sweeps under `{base_url}codefy/api/sweeps` (filled in by the sweeps work)."""

from __future__ import annotations

from typing import Any


def sweep_routes(base: str) -> list[tuple[str, type, dict[str, Any]]]:
    return []
