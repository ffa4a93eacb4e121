"""Executors: where a placed run executes. Today: `InProcessExecutor`, the engine in a thread of
the control plane. The worker issue adds `WorkerExecutor` behind the same seam.

An executor reports raw engine events through `on_event` (called from the run's threads; the
caller hops them onto its loop) and finishes with the engine's RunResult.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..engine import CancelToken, EngineCallbacks, OutputCache, RunResult, run_graph


@dataclass
class RunSpec:
    """What an executor needs to run one graph."""

    run_id: str
    graph: dict[str, Any]
    device: str
    seed: int | None = None
    deterministic: bool = False
    max_parallel_nodes: int = 4
    data_dir: Path | None = None
    cache: OutputCache | None = None
    options: dict[str, Any] = field(default_factory=dict)


class RunHandle:
    """A run that was started: cancel it, await its result."""

    def __init__(self, run_id: str, token: CancelToken, done: asyncio.Future[RunResult]) -> None:
        self.run_id = run_id
        self._token = token
        self.done = done

    def cancel(self, reason: str = "cancel requested") -> None:
        self._token.cancel(reason)

    @property
    def cancel_requested(self) -> bool:
        return self._token.cancelled


class InProcessExecutor:
    """Runs the engine on a thread of its own (one per run), with its own event loop.

    A thread per run rather than a pool: runs are few and long, and a thread of its own means a
    run's event loop never shares a thread with the server's.
    """

    name = "in_process"

    def start(self, spec: RunSpec, on_event: Callable[[dict[str, Any]], None]) -> RunHandle:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[RunResult] = loop.create_future()
        token = CancelToken()

        def settle(result: RunResult | None, error: BaseException | None) -> None:
            if done.done():
                return
            if error is not None:
                done.set_exception(error)
            else:
                done.set_result(result)

        def target() -> None:
            try:
                result = run_graph(
                    spec.graph, seed=spec.seed, device=spec.device, deterministic=spec.deterministic,
                    max_parallel_nodes=spec.max_parallel_nodes, cache=spec.cache, cancel=token,
                    callbacks=EngineCallbacks.all_to(on_event), data_dir=spec.data_dir, run_id=spec.run_id)
            except BaseException as err:  # a graph error or an engine bug: the run fails, the server lives
                loop.call_soon_threadsafe(settle, None, err)
            else:
                loop.call_soon_threadsafe(settle, result, None)

        thread = threading.Thread(target=target, name=f"codefy-run-{spec.run_id}", daemon=True)
        thread.start()
        return RunHandle(spec.run_id, token, done)
