"""Fresh S3 credentials for worker runs on the S3 backend (seed: storage, S3): a run's STS
credentials expire, so while it runs it gets new ones in a `credentials` frame when a third of
their lifetime remains (core/storage/s3.py `refresh_delay`). Only agents listing `s3` have such
runs. A worker that is away at that moment gets the next ones (issued again a period later), or
fresh ones with its run's resume, when the run comes back."""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable, Mapping, Sequence

from ...wire.frames import Credentials
from ..storage.s3 import S3Error, S3Storage, refresh_delay
from .worker_run_record import WorkerRun
from .registry import WorkerRegistry

log = logging.getLogger("codefy.workers")

RETRY_S = 5.0


class CredentialRefresh:
    def __init__(self, s3: S3Storage, registry: WorkerRegistry, runs: Mapping[str, WorkerRun],
                 spawn: Callable[[Any], None]) -> None:
        self.s3 = s3
        self.registry = registry
        self.runs = runs
        self.spawn = spawn
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._keys: dict[str, list[str]] = {}

    def arm(self, run_id: str, input_keys: Sequence[str]) -> None:
        """The run got credentials now (its assign): schedule the next ones."""
        if not self.s3.expiring:
            return
        self._keys[run_id] = list(input_keys)
        self._schedule(run_id, refresh_delay(self.s3.config.credentials_seconds))

    def _schedule(self, run_id: str, delay: float) -> None:
        old = self._timers.pop(run_id, None)
        if old is not None:
            old.cancel()
        self._timers[run_id] = asyncio.get_running_loop().call_later(
            delay, lambda: self.spawn(self._refresh(run_id)))

    async def _refresh(self, run_id: str) -> None:
        run = self.runs.get(run_id)
        if run is None or run.finished or run_id not in self._keys:
            self.forget(run_id)
            return
        try:
            credentials = await self.s3.credentials(run_id, self._keys[run_id])
        except S3Error as err:
            log.warning("codefy: run %s: fresh S3 credentials could not be issued: %s", run_id, err)
            self._schedule(run_id, RETRY_S)
            return
        worker = self.registry.get(run.worker)
        if worker is not None and worker.link is not None and "s3" in worker.capabilities:
            worker.link.send(Credentials(run_id=run_id, credentials=credentials))
            run.facts["s3_credentials_sent"] = int(run.facts.get("s3_credentials_sent", 0)) + 1
        if run_id in self._keys:
            self._schedule(run_id, refresh_delay(self.s3.config.credentials_seconds))

    def forget(self, run_id: str) -> None:
        timer = self._timers.pop(run_id, None)
        if timer is not None:
            timer.cancel()
        self._keys.pop(run_id, None)

    def close(self) -> None:
        for run_id in list(self._timers):
            self.forget(run_id)
