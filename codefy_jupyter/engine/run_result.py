"""`RunResult`: what a run of a graph ends with (execute_graph / run_graph, executor.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .errors import NodeFailure


@dataclass
class RunResult:
    status: str  # "succeeded" | "failed" | "cancelled"
    run_id: str
    outputs: dict[str, dict[str, Any]]
    error: NodeFailure | None = None
    executed: list[str] = field(default_factory=list)
    cached: list[str] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)  # last value of each series
    warnings: list[dict[str, Any]] = field(default_factory=list)
    seed: int | None = None
    device: str = "cpu"
    duration_s: float = 0.0
    inputs: list[dict[str, Any]] = field(default_factory=list)  # provenance records (provenance.py)

    @property
    def ok(self) -> bool:
        return self.status == "succeeded"

    def summary(self) -> dict[str, Any]:
        """JSON-safe description (outputs omitted: they are Python objects)."""
        return {
            "status": self.status, "run_id": self.run_id, "seed": self.seed, "device": self.device,
            "duration_s": round(self.duration_s, 4), "executed": self.executed, "cached": self.cached,
            "metrics": self.metrics, "warnings": self.warnings, "inputs": self.inputs,
            "error": self.error.to_dict() if self.error else None,
        }
