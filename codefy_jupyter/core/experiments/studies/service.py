"""The studies the server owns (filled in by the studies work)."""

from __future__ import annotations

from ...runs.service import RunService


class StudyService:
    def __init__(self, runs: RunService) -> None:
        self.runs = runs

    async def start(self) -> None:
        """Called once the run service has recovered, before anything is served: reconciles the
        studies a previous process left active."""
