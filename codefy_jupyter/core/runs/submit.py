"""What a submit decides before it takes a run id: the request's shape (422), the graph (400), the
device or worker target (400), what a recording run may record, the lane's session, a worker run's
files. Writes nothing; RunService (core/runs/run_service.py) queues and records what this prepared."""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...engine import GraphError, NodeRegistry, validate_graph
from ..config import Settings
from ..errors import BadRequest
from ..scheduling.device_sets import resolve_run_device
from ..scheduling.queue import RunQueue
from ..scheduling.scheduler_values import Run
from ..scheduling.slot_groups import LOCAL
from ..storage import run_needs
from . import record_rules
from .estimates import MemoryEstimates
from .requests import SubmitRequest, parse_submit

if TYPE_CHECKING:
    from ..contract.worker_side import WorkerSide

# Graphs with more nodes and edges than this are validated in a thread (a few ms of work inline).
VALIDATE_INLINE_ITEMS = 2000


@dataclass(frozen=True)
class Prepared:
    req: SubmitRequest  # its options resolved: the run's own seed decided (RunOptions.resolved)
    resolved: Any
    worker: str | None
    pool: str | None
    node_types: Any
    device_field: str
    files: Any = None  # a worker run's (RunFiles, Need), or None: it uses no files


class SubmitChecks:
    def __init__(self, settings: Settings, registry: NodeRegistry, estimates: MemoryEstimates, queue: RunQueue,
                 workers: WorkerSide, devices: list[str], data_dir: Path) -> None:
        self.settings = settings
        self.registry = registry
        self.estimates = estimates
        self.queue = queue
        self.workers = workers
        self.devices = devices
        self.data_dir = data_dir

    async def prepare(self, body: Any) -> Prepared:
        req = parse_submit(body)  # SchemaError: 422
        graph = req.graph
        if _size(graph.get("nodes")) + _size(graph.get("edges")) > VALIDATE_INLINE_ITEMS:
            # A big graph is checked in a thread (pure code that yields the GIL): the loop serves on.
            problems = await asyncio.to_thread(validate_graph, graph, self.registry)
        else:
            problems = validate_graph(graph, self.registry)
        if problems:
            err = GraphError(problems)
            raise BadRequest(str(err), code="invalid_graph", params=err.to_dict()["params"])
        settings = graph.get("settings") or {}
        req = self.estimates.check(replace(req, options=req.options.resolved(settings.get("seed"))))
        target = req.options.target
        pool = getattr(target, "pool", None) if target is not None else None
        worker = target.worker if target is not None and target.worker not in (None, LOCAL) else None
        if req.options.record_outputs:
            self._check_recordable(worker, pool)
        if worker is None and pool is None:  # this server: exactly as without workers
            resolved = resolve_run_device(req.options.device, settings.get("device"),
                                          target.devices if target else (), self.devices)
        else:
            resolved = self.queue.resolve_target(worker, req.options.device, settings.get("device"),
                                                 target.devices if target else (), pool=pool)
        if req.options.record_outputs and (worker is not None or pool is not None):
            self._check_recordable_graph(graph, resolved.devices)
        if req.options.lane == "interactive" and not req.options.session:
            raise BadRequest("an interactive run needs options.session", code="session_required",
                             params={"field": "options.session"})
        node_types = None
        if worker not in (None, "any") and self.workers.is_degraded(worker):
            node_types = await asyncio.to_thread(self.workers.node_types, graph)
        device_field = "options.device" if req.options.device is not None else (
            "graph.settings.device" if settings.get("device") is not None else "options.device")
        files = None
        if worker is not None or pool is not None:
            files = await self._files(graph)
        return Prepared(req, resolved, worker, pool, node_types, device_field, files)

    def queue_run(self, prepared: Prepared, run_id: str, order: int, owner: str | None = None) -> Run:
        """The scheduler's record of the prepared run."""
        req, resolved, worker, pool = prepared.req, prepared.resolved, prepared.worker, prepared.pool
        return Run(run_id=run_id, order=order, device=resolved.device, owner=owner, name=req.name,
                   devices=resolved.devices if (worker is None and pool is None) or len(resolved.devices) > 1 else (),
                   seeded=req.options.seed is not None, lane=req.options.lane, session=req.options.session,
                   **({} if worker is None and pool is None else {"worker": worker or "any", "pool": pool}),
                   files=prepared.files[1].level if prepared.files is not None else "none",
                   files_why=_why(prepared.files), **_memory(req.options.target))

    def _check_recordable(self, worker: str | None, pool: str | None) -> None:
        """record_outputs on a target that could never be read back is refused at submit (seed:
        recorded outputs on a worker): a one-shot worker exits with its run, an agent without the
        capability cannot keep them."""
        if pool is not None or self.workers.is_one_shot(worker):
            what = "a one-shot worker pool" if pool is not None else f"one-shot worker {worker}"
            raise BadRequest(f"options.record_outputs: {what} exits when its run ends, so the outputs could "
                             "never be read", code="record_outputs_one_shot",
                             params={"field": "options.record_outputs", "worker": worker, "pool": pool})
        if worker not in (None, "any") and self.workers.output_reads.can_record(worker) is False:
            raise BadRequest(f"options.record_outputs: worker {worker}'s agent cannot keep recorded outputs "
                             "(it does not list the record_outputs capability)", code="record_outputs_unsupported",
                             params={"field": "options.record_outputs", "worker": worker})

    @staticmethod
    def _check_recordable_graph(graph: dict[str, Any], devices: Any) -> None:
        ddp = record_rules.unrecordable_ddp(graph, devices)
        if ddp is not None:
            raise BadRequest(f"options.record_outputs: node {ddp[0]} trains with DDP on {ddp[1]} cards, in rank "
                             "processes whose outputs cannot be recorded; record without strategy ddp, or run it "
                             "without record_outputs", code="record_outputs_ddp",
                             params={"field": "options.record_outputs", "node_id": ddp[0], "ranks": ddp[1]})

    async def _files(self, graph: dict[str, Any]) -> Any:
        """What a worker run needs for its files (core/storage/run_needs.py), or None: it uses none."""
        found = run_needs.run_files(graph, self.registry)
        if not found.uses_files:
            return None
        paths = [item.path for item in found.inputs]
        sizes = await asyncio.to_thread(_sizes, paths) if paths else {}
        data = str(self.data_dir.resolve())
        return found, run_needs.classify(found, data, sizes, self.settings.transfer_max_input_bytes)


def _size(items: Any) -> int:
    return len(items) if isinstance(items, list) else 0


def _why(files: Any) -> tuple[str, str] | None:
    why = files[1].why if files is not None else None
    return (why["code"], why["text"]) if why else None


def _sizes(paths: list[str]) -> dict[str, int | None]:
    out: dict[str, int | None] = {}
    for path in paths:
        try:
            out[path] = os.stat(os.path.expanduser(path)).st_size
        except OSError:
            out[path] = None
    return out


def _memory(target: Any) -> dict[str, Any]:
    """The scheduler's view of a run's memory budget (`Run.memory_mib`, `Run.wait`, `Run.raised_from_gib`)."""
    if target is None or target.memory_gib is None:
        return {}
    return {"memory_mib": target.memory_mib, "wait": target.wait,
            "raised_from_gib": target.raised_from_gib}
