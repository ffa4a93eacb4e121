"""Which runs' recorded outputs (`options.record_outputs`) the control plane keeps, and reads of
them (`/codefy/api/execution/outputs/*`).

One retention order of `max_runs` run ids, whether the captures are in this process's
RunOutputStore or on a worker (seed: recorded outputs on a worker, capacity and retention). A
worker run takes its place once it has started on the worker and ended; evicting it, or deleting
it, sends `drop_outputs` to its worker, or records the drop for the worker's next connection. A
finished worker run this process does not know (it restarted) is found again from its row, unless
its outputs were dropped. Statistics of a finished worker run's ports are cached here with it.
"""

from __future__ import annotations

import functools
import logging
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Callable

from ...engine import RunResult
from ...engine.recorded import OUTPUT_STORE_RUNS, Captures, RunOutputStore, index_of, summarize
from ...wire.output_reads import LIST, PORT, Answer, answer, not_recorded
from ...wire.run_options import RunOptions
from ..store import output_drops
from ..contract import lifecycle as rs
from ..contract.execution import ExecutionOutcome

if TYPE_CHECKING:  # a type only: tests/unit/route_codes.py follows it to the codes a read answers
    from ..workers.outputs import WorkerOutputReads

log = logging.getLogger("codefy.runs")

LOCAL = None  # the holder of captures kept in this process


class RecordedOutputs:
    def __init__(self, store: Any, reads: WorkerOutputReads, *, max_runs: int = OUTPUT_STORE_RUNS, max_bytes: int | None = None,
                 clock: Callable[[], float]) -> None:
        self.store = store
        self.reads = reads
        self.max_runs = max_runs
        self.local = RunOutputStore(max_runs=max_runs, max_bytes=max_bytes)
        self.clock = clock
        self._order: OrderedDict[str, str | None] = OrderedDict()  # run id -> worker name, or LOCAL
        self._cache: dict[tuple[str, str, str], Answer] = {}
        self.recording: set[str] = set()  # the runs executing now that record their outputs


    def holder(self, run_id: str) -> tuple[bool, str | None]:
        return run_id in self._order, self._order.get(run_id)

    # -- keeping --------------------------------------------------------------------------------------
    def options(self, run_id: str, row: dict[str, Any]) -> None:
        """An adopted run that records (its row's options) records until it ends."""
        self.follow(run_id, RunOptions.from_row(row).record_outputs)

    def follow(self, run_id: str, recording: bool) -> None:
        """A run that starts with record_outputs records until it ends."""
        if recording:
            self.recording.add(run_id)

    async def keep_ending(self, run_id: str, result: Any, worker: str | None) -> None:
        """A recording run ended: its captures here, or its place for the worker's."""
        self.recording.discard(run_id)
        try:
            if isinstance(result, RunResult):
                await self.keep_local(run_id, result.outputs)
            elif isinstance(result, ExecutionOutcome) and "worker_pid" in (result.facts or {}):
                # Only a run that started on its worker holds a place (one that failed before
                # cannot push another run's outputs out).
                await self.keep_worker(run_id, str(worker))
        except Exception:
            log.exception("codefy: keeping the recorded outputs of run %s failed", run_id)

    async def keep_local(self, run_id: str, captures: Captures) -> None:
        for evicted in self.local.put(run_id, captures):
            self._order.pop(evicted, None)
        await self._place(run_id, LOCAL)

    async def keep_worker(self, run_id: str, worker: str) -> None:
        await self._place(run_id, worker)

    async def _place(self, run_id: str, holder: str | None) -> None:
        self._order.pop(run_id, None)
        self._order[run_id] = holder
        while len(self._order) > self.max_runs:
            await self._give_up(next(iter(self._order)))

    async def _give_up(self, run_id: str) -> bool:
        if run_id not in self._order:
            return False
        holder = self._order.pop(run_id)
        self._forget_cache(run_id)
        if holder is LOCAL:
            self.local.drop(run_id)
        else:
            await self._drop_on_worker(run_id, holder)
        return True

    async def _drop_on_worker(self, run_id: str, worker: str) -> None:
        sent = self.reads.send_drop(worker, run_id)
        await self.store.write(functools.partial(output_drops.add, run_id=run_id, worker=worker, sent=sent,
                                                 now=self.clock()))

    def _forget_cache(self, run_id: str) -> None:
        for key in [k for k in self._cache if k[0] == run_id]:
            del self._cache[key]

    async def connected(self, worker: str) -> None:
        """A worker (re)connected: the drops it missed while away."""
        missed = await self.store.read(output_drops.unsent, worker)
        sent = [r for r in missed if self.reads.send_drop(worker, r)]
        if sent:
            await self.store.write(functools.partial(output_drops.mark_sent, run_ids=sent))
            log.info("codefy: sent %d missed drop_outputs to worker %s", len(sent), worker)

    # -- reads ----------------------------------------------------------------------------------------
    async def _find(self, run_id: str) -> tuple[bool, str | None]:
        known, holder = self.holder(run_id)
        if known:
            return known, holder
        row = await self.store.get_run(run_id)
        if row is None or not row.get("worker_id") or not RunOptions.from_row(row).record_outputs:
            return False, None
        if row["status"] not in rs.FINISHED or "worker_pid" not in (row.get("execution_facts") or {}):
            return False, None
        if await self.store.read(output_drops.is_dropped, run_id):
            return False, None
        await self.keep_worker(run_id, row["worker_id"])  # found again after a restart
        return True, row["worker_id"]

    async def read(self, run_id: str, kind: str, query: dict[str, Any]) -> Answer:
        known, holder = await self._find(run_id)
        if not known:
            return not_recorded(run_id)
        if holder is LOCAL:
            return local_answer(self.local, run_id, kind, query)
        key = (run_id, kind, f"{query.get('node_id')}.{query.get('port')}") if kind == PORT else None
        if key is not None and key in self._cache:
            return self._cache[key]
        status, body = await self.reads.read(holder, run_id, kind, query)
        if status == 404 and (body.get("error") or {}).get("code") == "outputs_not_recorded":
            self._order.pop(run_id, None)  # the worker no longer has it: its place goes
            self._forget_cache(run_id)
        elif key is not None and status == 200 and run_id in self._order:
            self._cache[key] = (status, body)
        return status, body

    async def delete(self, run_id: str) -> bool:
        """Give up a run's outputs (DELETE of them, or of the run); False when none were kept."""
        known, _ = await self._find(run_id)
        if not known:
            return False
        return await self._give_up(run_id)


def local_answer(store: RunOutputStore, run_id: str, kind: str, query: dict[str, Any]) -> Answer:
    """A read of captures kept in this process (a worker's helper answers the same over files)."""
    captures = store.get(run_id)
    if captures is None:
        return not_recorded(run_id)
    return answer(run_id, kind, query, index_of(captures), lambda n, p: summarize(captures[n][p]))


__all__ = ["LIST", "PORT", "RecordedOutputs"]
