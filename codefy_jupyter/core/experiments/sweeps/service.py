"""The sweeps the server owns (filled in by the sweeps work)."""

from __future__ import annotations

from ...runs.service import RunService


class SweepService:
    def __init__(self, runs: RunService) -> None:
        self.runs = runs

    async def start(self) -> None:
        """Called once the run service has recovered, before anything is served."""
