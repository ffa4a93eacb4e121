"""A placed run's `assign`: what is checked before it goes (the worker knows the graph's node types
and can keep recorded outputs), how the run's files reach the worker (the transfer's listing of its
inputs, or its inputs put in the S3 bucket), then the frame itself; from then on an S3 run's
credentials are refreshed (core/workers/s3_credentials.py). A check or a file that fails ends the
run failed, before anything reached the worker."""

from __future__ import annotations

import asyncio
from typing import Any, Callable

from ...wire.protocol import Assign
from ..contract import lifecycle as rs
from ..contract.execution import ExecutionOutcome
from ..storage.plan import S3, TRANSFER, StoragePlan
from ..storage.s3 import S3Error, S3Storage
from ..storage.transfer import InputHashes
from .handshake import check_graph_types, graph_node_types
from .worker_run_record import WorkerRun
from .registry import Worker
from .s3_credentials import CredentialRefresh


class Assigner:
    def __init__(self, hashes: InputHashes, s3: S3Storage | None, credentials: CredentialRefresh | None,
                 cancel_grace_s: float, finish: Callable[[WorkerRun, ExecutionOutcome], None]) -> None:
        self.hashes = hashes
        self.s3 = s3
        self.credentials = credentials
        self.cancel_grace_s = cancel_grace_s
        self.finish = finish  # ends a run the assign refused

    async def assign(self, run: WorkerRun, worker: Worker) -> None:
        spec = run.spec
        assert spec is not None
        if run.assigned or run.finished:
            return
        run.assigned = True
        if worker.catalog is not None and not worker.catalog.matches:
            needed = await asyncio.to_thread(graph_node_types, spec.graph)
            refused = check_graph_types(worker.name, needed, worker.node_types)
            if refused is not None:
                self.finish(run, ExecutionOutcome(rs.FAILED, error={"code": refused.code, "message": refused.message,
                                                                    "params": refused.params},
                                                  code=refused.code, message=refused.message))
                return
        if spec.options.record_outputs and "record_outputs" not in worker.capabilities:
            # Placed through `any` on an agent that cannot keep outputs (a named one is refused at submit).
            message = (f"worker {worker.name} cannot keep recorded outputs (its agent does not list the "
                       "record_outputs capability); run it without record_outputs or on another worker")
            params = {"worker": worker.name}
            self.finish(run, ExecutionOutcome(rs.FAILED, error={"code": "record_outputs_unsupported", "message": message,
                                                                "params": params},
                                              code="record_outputs_unsupported", message=message, params=params))
            return
        graph, storage = spec.graph, None
        plan: StoragePlan | None = run.storage
        if plan is not None:
            graph = plan.graph_for_worker(graph)
            hashed: list[dict[str, Any]] = []
            if plan.backend in (TRANSFER, S3) and plan.inputs:
                try:
                    hashed = await self.hashes.listing(plan.inputs)
                except OSError as err:
                    message = f"an input of this run cannot be read for the transfer to worker {worker.name}: {err}"
                    self._fail_storage(run, "worker_transfer_failed", message, worker.name, err)
                    return
            storage = plan.assign_doc(hashed)
            if plan.backend == S3:
                try:
                    storage, uploaded = await self.s3.assign_doc(run.run_id, hashed, [i.path for i in plan.inputs])
                    run.facts["s3_inputs_uploaded"] = uploaded
                except (S3Error, OSError) as err:
                    message = f"the run's inputs could not be put in the S3 bucket for worker {worker.name}: {err}"
                    self._fail_storage(run, "worker_s3_transfer_failed", message, worker.name, err)
                    return
        if worker.link is None:  # it went away while we looked at the graph: assign when it is back
            run.assigned = False
            return
        worker.link.send(Assign(
            run_id=run.run_id, graph=graph, device=spec.device, devices=list(spec.devices or (spec.device,)),
            grace_s=float(self.cancel_grace_s), cpu_threads=spec.cpu.threads if spec.cpu else None, storage=storage,
            memory_budgets=(dict(spec.memory_budgets) if spec.memory_budgets and "memory_budget" in worker.capabilities
                            else None),
            options=spec.options))
        if plan is not None and plan.backend == S3 and self.credentials is not None and storage is not None:
            keys = [i["key"] for i in storage["inputs"]]
            run.facts.setdefault("storage", {})["input_keys"] = keys  # an adopted run refreshes with them
            self.credentials.arm(run.run_id, keys)

    def _fail_storage(self, run: WorkerRun, code: str, message: str, worker: str, err: BaseException) -> None:
        params = {"worker": worker, "reason": str(err)}
        self.finish(run, ExecutionOutcome(rs.FAILED, error={"code": code, "message": message, "params": params},
                                          code=code, message=message, params=params))
