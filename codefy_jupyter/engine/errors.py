"""The engine's errors: one shape for every problem a graph or a node can have.

A `Problem` names where something is wrong (node id and field) and what; a `GraphError` carries
every problem found, not just the first, so a user fixes a graph in one pass. `NodeFailure` is the
structured record of a run that stopped on a node; it is data, not an exception, because a failed
run is a normal outcome of `run_graph`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from dataclasses import field as _field
from typing import Any


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a graph. `node_id` is None for graph-level problems."""

    code: str
    message: str
    node_id: str | None = None
    field: str | None = None
    params: dict[str, Any] = _field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        where = []
        if self.node_id is not None:
            where.append(f"node {self.node_id!r}")
        if self.field:
            where.append(self.field)
        prefix = ", ".join(where)
        return f"{prefix}: {self.message}" if prefix else self.message


def unknown_type(type_: Any, node_id: str, suggestions: list[str]) -> Problem:
    """A node of a type the registry does not hold, with the registered types close to it (the
    message asks "did you mean 'Scale'?"; `params.suggestions` lists them for a client to show)."""
    hint = f"; did you mean {' or '.join(repr(s) for s in suggestions)}?" if suggestions else ""
    return Problem("unknown_type", f"unknown node type {type_!r}{hint}", node_id, "type",
                   {"type": type_, "suggestions": list(suggestions)})


class EngineError(Exception):
    """Base of every error the engine raises on purpose."""

    code = "engine_error"


# A graph can have millions of problems (a body of `"nodes": [1, 1, ...]`); listing them all cost
# minutes and gigabytes. The first ones are listed, the rest counted.
MAX_PROBLEMS_LISTED = 100


class Problems(list):
    """A list of problems that keeps the first `limit` and counts the rest in `more`."""

    def __init__(self, limit: int = MAX_PROBLEMS_LISTED) -> None:
        super().__init__()
        self.limit = limit
        self.more = 0

    def append(self, problem: Problem) -> None:  # type: ignore[override]
        if len(self) < self.limit:
            super().append(problem)
        else:
            self.more += 1

    def extend(self, problems: Any) -> None:  # type: ignore[override]
        for problem in problems:
            self.append(problem)
        self.more += getattr(problems, "more", 0)


class GraphError(EngineError):
    """A graph that cannot run. Lists its problems (the first MAX_PROBLEMS_LISTED; `more` counts
    the others)."""

    code = "invalid_graph"

    def __init__(self, problems: list[Problem]):
        if not problems:
            raise ValueError("GraphError needs at least one problem")
        listed = Problems()
        listed.extend(problems)
        self.problems = listed
        self.more = listed.more
        lines = "\n".join(f"  - {p}" for p in self.problems)
        if self.more:
            lines += f"\n  - and {self.more} more"
        total = len(self.problems) + self.more
        noun = "problem" if total == 1 else "problems"
        super().__init__(f"graph has {total} {noun}:\n{lines}")

    def to_dict(self) -> dict[str, Any]:
        params: dict[str, Any] = {"problems": [p.to_dict() for p in self.problems]}
        if self.more:
            params["more"] = self.more
        return {"code": self.code, "message": str(self), "params": params}


class RegistryError(EngineError):
    """A node definition that cannot be registered (programming error in a node pack)."""

    code = "invalid_node_definition"


class RunCancelled(EngineError):
    """Raised by `ctx.check_cancelled()` once a cancel was requested."""

    code = "cancelled"


class NodeOutputError(EngineError):
    """A node returned something that does not match its declared outputs."""

    code = "bad_node_output"

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.field = field


@dataclass
class NodeFailure:
    """Why a run stopped: the failing node and how far the run got."""

    node_id: str
    node_type: str
    exception_type: str
    message: str
    traceback: str = ""
    code: str = "node_failed"
    field: str | None = None
    hint: str | None = None
    executed: list[str] = _field(default_factory=list)
    outputs_present: list[str] = _field(default_factory=list)
    params: dict[str, Any] = _field(default_factory=dict)

    # `.error.type` in the DESIGN contract.
    @property
    def type(self) -> str:
        return self.node_type

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        where = f"node {self.node_id!r} ({self.node_type})"
        if self.field:
            where += f", {self.field}"
        text = f"{where}: {self.exception_type}: {self.message}"
        if self.hint:
            text += f"\nhint: {self.hint}"
        return text
