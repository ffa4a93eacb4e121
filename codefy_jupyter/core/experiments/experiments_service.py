"""The experiments room's front: sweeps and studies over one run service.

Built before the run service starts, so that each can register what it needs on it (a run
observer, a retention hook on the store) before recovery and retention first run; started after
it, so that a study's reconciliation sees every child already retired or adopted.
"""

from __future__ import annotations

from ..runs.run_service import RunService
from .studies.study_service import StudyService
from .sweeps.sweep_service import SweepService


class Experiments:
    def __init__(self, runs: RunService) -> None:
        self.runs = runs
        self.sweeps = SweepService(runs)
        self.studies = StudyService(runs)

    async def start(self) -> None:
        await self.sweeps.start()
        await self.studies.start()
