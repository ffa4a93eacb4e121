"""Recorded outputs kept on this worker (seed: recorded outputs on a worker): answers to the control
plane's `fetch_output` frames, `cancel_fetch`, `drop_outputs`, and the worker's own limits.

A run's outputs are in `agent-runs/<run>/outputs/` (written by its process after it reported its
end; until it has exited, that process answers reads from its copy in memory). A listing is
answered here from `index.json`; a port's value is read by a helper process
(output_reader.py), because this process never imports torch. Both compute the answer with
wire/output_reads.py, the control plane's own functions. At most `MAX_READS` reads run at once;
each gives up `GIVE_UP_EARLY_S` before the control plane would, so its 504 is the one the client
sees. The worker keeps the outputs of at most `max_runs` runs and `max_bytes` in all, oldest first,
never the run just written.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import sys
from pathlib import Path
from typing import Any, Callable

from ..wire.frames import CancelFetch, DropOutputs, FetchOutput, Frame, OutputAnswer
from ..wire.output_reads import LIST, Answer, answer, chunks, error, index_bytes, read_index

log = logging.getLogger("codefy.agent")

MAX_READS = 4
GIVE_UP_EARLY_S = 5.0
MIN_READ_S = 0.5
OUTPUTS = "outputs"
DEFAULT_MAX_RUNS = 20


def outputs_settings(env: dict[str, str] | os._Environ[str] = os.environ) -> tuple[float, int | None]:
    """(write timeout in seconds, store limit in bytes or None) from the worker's own settings."""
    timeout = float(env.get("CODEFY_WORKER_OUTPUTS_WRITE_TIMEOUT_S") or 300)
    mb = float(env.get("CODEFY_RUN_OUTPUT_STORE_MAX_MB") or 2048)
    return timeout, (int(mb * 1024 * 1024) if mb > 0 else None)


def runs_to_evict(held: list[tuple[str, int]], max_runs: int, max_bytes: int | None) -> list[str]:
    """Of the runs held (oldest first, with their sizes), those to remove; never the newest."""
    held = list(held)
    evict: list[str] = []
    while len(held) > 1 and (len(held) > max_runs or (max_bytes is not None and sum(s for _, s in held) > max_bytes)):
        evict.append(held.pop(0)[0])
    return evict


class WorkerOutputs:
    def __init__(self, runs_dir: Path, name: str, *, send: Callable[[Frame], None],
                 writing: Callable[[str], Any], max_runs: int = DEFAULT_MAX_RUNS,
                 max_bytes: int | None = None, python: str = sys.executable) -> None:
        self.runs_dir = Path(runs_dir)
        self.name = name
        self.send = send
        self.writing = writing
        self.max_runs = max_runs
        self.max_bytes = max_bytes
        self.python = python
        self._slots = asyncio.Semaphore(MAX_READS)
        self._reads: dict[str, asyncio.Task[None]] = {}

    def folder(self, run_id: str) -> Path:
        return self.runs_dir / run_id / OUTPUTS

    # -- frames ---------------------------------------------------------------------------------------
    def fetch(self, frame: FetchOutput) -> None:
        task = asyncio.ensure_future(self._fetch(frame))
        self._reads[frame.request_id] = task
        task.add_done_callback(lambda _t: self._reads.pop(frame.request_id, None))

    def cancel(self, frame: CancelFetch) -> None:
        task = self._reads.pop(frame.request_id, None)
        if task is not None:
            task.cancel()

    def drop(self, frame: DropOutputs) -> None:
        if "/" in frame.run_id or frame.run_id in ("", ".", ".."):
            return
        shutil.rmtree(self.folder(frame.run_id), ignore_errors=True)
        log.info("run %s: recorded outputs dropped at the control plane's request", frame.run_id)

    @property
    def reading(self) -> int:
        return len(self._reads)

    # -- one read -------------------------------------------------------------------------------------
    async def _fetch(self, frame: FetchOutput) -> None:
        budget = max(MIN_READ_S, frame.wait_s - GIVE_UP_EARLY_S)
        try:
            status, body = await asyncio.wait_for(self._answer(frame), budget)
        except asyncio.TimeoutError:
            status, body = error(504, "worker_output_timeout",
                                 f"worker {self.name} did not read the outputs of run {frame.run_id} within {budget:g} s",
                                 {"worker": self.name, "run_id": frame.run_id, "seconds": budget})
        except Exception as err:  # a bug of ours: this read fails, the agent lives
            log.exception("a read of run %s's outputs failed", frame.run_id)
            status, body = error(500, "worker_output_failed", f"worker {self.name} failed to read the outputs: {err}",
                                 {"worker": self.name, "run_id": frame.run_id, "error": str(err)})
        parts = chunks(body)
        for i, part in enumerate(parts):
            self.send(OutputAnswer(request_id=frame.request_id, http_status=status, chunk=part, final=i == len(parts) - 1))

    async def _answer(self, frame: FetchOutput) -> Answer:
        async with self._slots:
            process = self.writing(frame.run_id)
            if process is not None:  # reported, still writing: it answers from its copy in memory
                answered = await process.read(frame.kind, frame.query)
                if answered is not None:
                    return answered
                if process.task is not None:  # it went while asked: its files are complete (or absent)
                    await asyncio.shield(process.task)
            folder = self.folder(frame.run_id)
            if frame.kind == LIST:
                return answer(frame.run_id, frame.kind, frame.query, read_index(folder), None)
            if read_index(folder) is None:
                return answer(frame.run_id, frame.kind, frame.query, None, None)
            return await self._helper(folder, frame)

    async def _helper(self, folder: Path, frame: FetchOutput) -> Answer:
        proc = await asyncio.create_subprocess_exec(
            self.python, "-m", "codefy_jupyter.agent.output_reader", str(folder), frame.run_id, frame.kind,
            json.dumps(frame.query), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            start_new_session=True)
        try:
            out, err = await proc.communicate()
        except asyncio.CancelledError:  # cancel_fetch or our own time limit: the helper goes too
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            with contextlib.suppress(Exception):
                await asyncio.shield(proc.wait())
            raise
        if proc.returncode != 0:
            tail = err.decode("utf-8", "replace")[-500:]
            return error(500, "output_unreadable", f"the outputs of run {frame.run_id} cannot be read: {tail}",
                         {"run_id": frame.run_id, **frame.query})
        status, body = json.loads(out)
        return int(status), body

    # -- the worker's own limit ----------------------------------------------------------------------
    def written(self, run_id: str) -> list[str]:
        """A run's outputs are on disk: remove the oldest runs' beyond the limits."""
        held: list[tuple[float, str, int]] = []
        try:
            entries = list(os.scandir(self.runs_dir))
        except FileNotFoundError:
            return []
        for entry in entries:
            index = Path(entry.path) / OUTPUTS / "index.json"
            try:
                changed = index.stat().st_mtime
            except OSError:
                continue
            held.append((changed if entry.name != run_id else float("inf"), entry.name,
                         index_bytes(index.parent)))
        held.sort()
        evict = runs_to_evict([(r, s) for _, r, s in held], self.max_runs, self.max_bytes)
        for old in evict:
            shutil.rmtree(self.folder(old), ignore_errors=True)
        if evict:
            log.info("removed the recorded outputs of %d older run(s): %s", len(evict), ", ".join(evict))
        return evict
