"""The one error clients raise, and how a person reads it."""

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

    @property
    def suggestions(self) -> dict[str, list[str]]:
        """An invalid graph's unknown node types' close matches, by node id (`{"s": ["Scale"]}`
        for a node of type 'Scael'); the message already asks "did you mean 'Scale'?"."""
        out: dict[str, list[str]] = {}
        for problem in self.params.get("problems") or ():
            close = (problem.get("params") or {}).get("suggestions") if isinstance(problem, dict) else None
            if close:
                out[str(problem.get("node_id"))] = list(close)
        return out

    @property
    def candidates(self) -> list[str]:
        """The ids an ambiguous id prefix starts (409 ambiguous_id: the first 10), else []."""
        return list(self.params.get("candidates") or ()) if self.code == "ambiguous_id" else []


def describe(err: CodefyError, url: str | None = None) -> str:
    """A CodefyError as the message a person reads: the server's message, its field, its status
    (`url`: the server's address, named when it refused the token)."""
    if err.status == 403 and err.code in ("http_error", "unauthenticated"):
        return (f"the codefy server at {url or 'its address'} refused the request (403 Forbidden): wrong or "
                "missing token; pass --token or set CODEFY_TOKEN")
    text = str(err)
    if err.status is not None:
        if err.field:
            text += f"\n  field: {err.field}"
        text += f"\n  (HTTP {err.status}, {err.code})"
    return text
