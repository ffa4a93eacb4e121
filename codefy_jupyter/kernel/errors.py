"""The one error clients raise."""

from __future__ import annotations

from typing import Any


class CodefyError(Exception):
    """A refusal from the server (`status`, `code`, `params` as it sent them), or a client-side
    problem with a code of its own: "unreachable" (no answer), "no_server" (none found),
    "file_not_found" / "invalid_json" (a graph file)."""

    def __init__(self, message: str, *, status: int | None = None, code: str = "error",
                 params: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.params = status, code, params or {}

    @property
    def field(self) -> str | None:
        return self.params.get("field")
