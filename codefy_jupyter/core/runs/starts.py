"""What a placed run starts with: its `RunSpec` for this process's executor or for the worker it
was placed on, its CPU thread budget on that machine, its memory budget on each of its cards the
worker shares by memory. Decides only; the run service (core/runs/run_service.py) starts the run."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...engine import LRUCache, RAMPressureCache, SessionCache
from ...wire import cpu_threads
from ...wire.run_options import ExecutionOptions, RunOptions
from ..config import Settings
from ..contract.execution import RunSpec
from ..scheduling.limits import Limits
from ..scheduling.queue import RunQueue
from ..scheduling.scheduler_values import Placement
from .recorded import RecordedOutputs

if TYPE_CHECKING:  # a type only (the server hands the class in)
    from ..workers.worker_service import WorkerService


class StartSpecs:
    def __init__(self, settings: Settings, limits: Limits, queue: RunQueue, workers: WorkerService,
                 outputs: RecordedOutputs, data_dir: Path, cpu_cores: int | None) -> None:
        self.settings = settings
        self.limits = limits
        self.queue = queue
        self.workers = workers
        self.outputs = outputs
        self.data_dir = data_dir
        self.cpu_cores = cpu_cores  # this machine's usable cores, for the automatic CPU thread budget

    def session_cache(self) -> SessionCache:
        """The cache a new editor session keeps across its runs: an LRU, or (a threshold set) the
        dynamic scheduling seed's RAM-pressure mode, which keeps everything until memory runs short."""
        floor_mb = self.settings.session_cache_min_available_mb
        if floor_mb > 0:
            return SessionCache(RAMPressureCache(min_available_bytes=floor_mb * 1024 * 1024))
        return SessionCache(LRUCache(512))

    def local(self, placement: Placement, options: RunOptions, graph: dict[str, Any], cache: SessionCache | None,
              budget: cpu_threads.CpuBudget | None) -> RunSpec:
        """A run this process's executor starts (`options`: its row's, RunOptions.from_row)."""
        run_id = placement.run_id
        return RunSpec(run_id=run_id, graph=graph, device=placement.device, options=self._execution(run_id, options),
                       data_dir=self.data_dir / "runs" / run_id, cache=cache, cpu=budget)

    def on_worker(self, placement: Placement, row: dict[str, Any], graph: dict[str, Any], files: Any) -> RunSpec:
        """A run its worker starts (placement.worker)."""
        run_id, name = placement.run_id, placement.worker
        devices = list(placement.devices)
        options = RunOptions.from_row(row)
        return RunSpec(run_id=run_id, graph=graph, device=placement.device, options=self._execution(run_id, options),
                       worker=name, devices=tuple(devices), queue_key=f"{name}/{placement.device}",
                       slots=placement.slots, name=row.get("name"), cpu=self.cpu_budget(options, name), files=files,
                       memory_budgets=self.memory_budgets(options, name, devices))

    def _execution(self, run_id: str, options: RunOptions) -> ExecutionOptions:
        """What the run executes with; a run that records is followed until it ends."""
        self.outputs.follow(run_id, options.record_outputs)
        return options.execution(max_parallel_nodes=self.settings.max_parallel_nodes)

    def cpu_budget(self, options: RunOptions, worker: str | None) -> cpu_threads.CpuBudget | None:
        """The run's CPU thread budget on the machine it was placed on: this server's, or the
        worker's (its cores from its hello, its own cpu queue's slots)."""
        requested = options.cpu_threads
        if worker is None:
            cores, slots = self.cpu_cores, self.limits.limit("cpu")
        else:
            cores, slots = self.workers.cpu_count(worker), self.limits.limit(f"{worker}/cpu")
        return cpu_threads.decide(requested=requested, setting=self.settings.run_cpu_threads, cores=cores,
                                  cpu_slots=slots)

    def memory_budgets(self, options: RunOptions, worker: str, devices: list[str]) -> dict[str, int]:
        """The run's budget in MiB on each of its cards that its worker shares by memory."""
        mib = options.memory_mib
        offer = self.queue.worker(worker)
        if mib is None or offer is None:
            return {}
        return {d: mib for d in devices if d in offer.shared_memory}
