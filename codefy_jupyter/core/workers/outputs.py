"""Reads of recorded outputs that live on a worker (seed: recorded outputs on a worker): each read
goes to the worker's agent as a `fetch_output` frame over its own connection and comes back as
`output_answer` frames (the body in chunks). No port is opened on the worker.

503 at once when the worker is not connected (naming it), 503 when its connection closes while a
read waits, 504 after `timeout_s` (the agent gives up 5 s earlier, so its 504 usually comes
first); a read the control plane stops waiting for is cancelled on the worker (`cancel_fetch`).
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from dataclasses import dataclass, field
from typing import Any

from ...wire.frames import CancelFetch, DropOutputs, FetchOutput, OutputAnswer
from ...wire.output_reads import Answer, joined
from ..errors import ServiceError, Unavailable
from .registry import WorkerRegistry

CAPABILITY = "record_outputs"


class OutputTimeout(ServiceError):
    status = 504
    code = "worker_output_timeout"


@dataclass
class _Pending:
    worker: str
    done: asyncio.Future[Answer]
    status: int = 0
    parts: list[str] = field(default_factory=list)


class WorkerOutputReads:
    def __init__(self, registry: WorkerRegistry, *, timeout_s: float) -> None:
        self.registry = registry
        self.timeout_s = timeout_s
        self._pending: dict[str, _Pending] = {}
        self._ids = itertools.count(1)
        self._prefix = uuid.uuid4().hex[:8]

    def can_record(self, name: str) -> bool | None:
        """Whether the worker's agent lists `record_outputs` (None: it never said, not seen yet)."""
        worker = self.registry.get(name)
        if worker is None or (worker.hello is None and not worker.capabilities and not worker.info.get("capabilities")):
            return None
        caps = worker.capabilities or tuple(worker.info.get("capabilities") or ())
        return CAPABILITY in caps

    def send_drop(self, name: str, run_id: str) -> bool:
        """Tell the worker to remove a run's outputs; False when it cannot be told now."""
        worker = self.registry.get(name)
        if worker is None or worker.link is None or not worker.connected or CAPABILITY not in worker.capabilities:
            return False
        worker.link.send(DropOutputs(run_id=run_id))
        return True

    async def read(self, name: str, run_id: str, kind: str, query: dict[str, Any]) -> Answer:
        worker = self.registry.get(name)
        if worker is None or worker.link is None or not worker.connected:
            raise Unavailable(f"the outputs of run {run_id} are on worker {name}, which is not connected",
                              code="worker_not_connected", params={"worker": name, "run_id": run_id})
        request_id = f"{self._prefix}-{next(self._ids)}"
        pending = _Pending(name, asyncio.get_running_loop().create_future())
        self._pending[request_id] = pending
        link = worker.link
        link.send(FetchOutput(request_id=request_id, run_id=run_id, kind=kind, query=query, wait_s=self.timeout_s))
        try:
            return await asyncio.wait_for(asyncio.shield(pending.done), self.timeout_s)
        except asyncio.TimeoutError:
            raise OutputTimeout(f"worker {name} did not answer a read of run {run_id}'s outputs within "
                                f"{self.timeout_s:g} s", params={"worker": name, "run_id": run_id,
                                                                  "seconds": self.timeout_s}) from None
        finally:
            if self._pending.pop(request_id, None) is not None and not pending.done.done():
                # We stopped waiting (timeout, the client went away): free the agent's read.
                current = self.registry.get(name)
                if current is not None and current.link is not None:
                    current.link.send(CancelFetch(request_id=request_id))

    def answer(self, name: str, frame: OutputAnswer) -> None:
        pending = self._pending.get(frame.request_id)
        if pending is None or pending.worker != name or pending.done.done():
            return  # an answer nobody waits for any more
        pending.status = frame.http_status
        pending.parts.append(frame.chunk)
        if not frame.final:
            return
        try:
            pending.done.set_result((frame.http_status, joined(pending.parts)))
        except ValueError as err:
            pending.done.set_exception(Unavailable(f"worker {name} sent an unreadable answer: {err}",
                                                   code="worker_bad_answer", params={"worker": name, "error": str(err)}))

    def closed(self, name: str) -> None:
        """The worker's connection closed: reads waiting for it end with 503."""
        for pending in list(self._pending.values()):
            if pending.worker == name and not pending.done.done():
                pending.done.set_exception(Unavailable(
                    f"the connection to worker {name} closed while reading its outputs",
                    code="worker_connection_closed", params={"worker": name}))
