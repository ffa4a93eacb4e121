"""Executors: where a placed run executes. `InProcessExecutor` runs the engine in a thread of the
control plane; `WorkerExecutor` (core/workers/worker_executor.py) hands the run to a worker agent. The
placement decides which: a run with no target, or worker `local`, only ever meets this one.

An in-process run reports raw engine events through `on_event` (called on the caller's loop, hopped
over from the run's threads in batches) and finishes with the engine's RunResult. A worker run
writes its events into the run's log itself (through the same sink) and finishes with an
`ExecutionOutcome`.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from functools import partial
from typing import Any, Callable

from ...engine import CancelToken, EngineCallbacks, RunResult, execute_graph
from ..contract.execution import ExecutionOutcome, Executor, RunHandle, RunSpec  # noqa: F401 (re-exported)


class _EngineThread:
    """A thread with an event loop of its own that runs graphs one at a time.

    Reused across runs: creating a thread and an event loop (a selector and a socket pair) for
    every run was a measurable share of the queue's per-run cost.
    """

    def __init__(self, pool: _EngineThreads, number: int) -> None:
        self._pool = pool
        self._jobs: queue.SimpleQueue[Callable[[asyncio.Runner], None] | None] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._serve, name=f"codefy-engine-{number}", daemon=True)
        self.thread.start()

    def give(self, job: Callable[[asyncio.Runner], None] | None) -> None:
        self._jobs.put(job)

    def _serve(self) -> None:
        with asyncio.Runner() as runner:
            while True:
                job = self._jobs.get()
                if job is None:
                    return
                job(runner)
                if not self._pool.idle(self):
                    return


class _EngineThreads:
    """Idle engine threads waiting for the next run; at most `keep_idle` of them wait."""

    def __init__(self, keep_idle: int = 8) -> None:
        self._keep_idle = keep_idle
        self._idle: list[_EngineThread] = []
        self._lock = threading.Lock()
        self._made = 0

    def run(self, job: Callable[[asyncio.Runner], None]) -> None:
        with self._lock:
            worker = self._idle.pop() if self._idle else None
            if worker is None:
                self._made += 1
                number = self._made
        (worker or _EngineThread(self, number)).give(job)

    def idle(self, worker: _EngineThread) -> bool:
        """A worker is done with its run: keep it for the next one, or let it end."""
        with self._lock:
            if len(self._idle) >= self._keep_idle:
                return False
            self._idle.append(worker)
            return True


class _LoopInbox:
    """Calls from engine threads, made on one event loop in the order they were put, in batches.

    One `call_soon_threadsafe` per call (a wake-up of the loop through its self-pipe, and a
    callback of its own) was a measurable share of a short run's cost on the server's loop; here
    a burst of events from any number of runs costs one. A run's result goes through the same
    inbox as its events, so it is never seen before them.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._lock = threading.Lock()
        self._calls: list[tuple[Callable[..., None], tuple[Any, ...]]] = []

    def put(self, fn: Callable[..., None], *args: Any) -> None:
        with self._lock:
            self._calls.append((fn, args))
            if len(self._calls) > 1:
                return  # the drain scheduled for the first of these takes this one too
        self.loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        with self._lock:
            calls, self._calls = self._calls, []
        for fn, args in calls:
            try:
                fn(*args)
            except Exception as err:  # one bad callback must not drop the others
                self.loop.call_exception_handler({"message": "codefy: an engine callback failed",
                                                  "exception": err})


class InProcessExecutor:
    """Runs the engine on an engine thread of its own (one per running run), with its own event loop.

    A run's CPU thread budget is applied per thread (engine/torch_threads.py): torch's intra-op
    count is an OpenMP setting of the thread that sets it, so runs executing here at once each keep
    their own on their node threads. MKL's count and torch's inter-op pool are process-wide: the
    last budget set, and the first one, respectively; with the automatic budget every run here has
    the same one, so only runs given different `options.cpu_threads` at once can differ there.

    A thread per running run rather than one shared loop: a sync node that computes for minutes
    would otherwise hold up every other run, and a run's event loop never shares a thread with the
    server's. Threads and their loops are reused from run to run.
    """

    name = "in_process"

    def __init__(self) -> None:
        self._threads = _EngineThreads()
        self._inbox: _LoopInbox | None = None

    def start(self, spec: RunSpec, on_event: Callable[[dict[str, Any]], None]) -> RunHandle:
        """Start the run; `on_event` is called on the caller's loop for each engine event, in
        order, and all of them before the handle's `done` settles."""
        loop = asyncio.get_running_loop()
        if self._inbox is None or self._inbox.loop is not loop:
            self._inbox = _LoopInbox(loop)
        inbox = self._inbox
        done: asyncio.Future[RunResult] = loop.create_future()
        token = CancelToken()

        def settle(result: RunResult | None, error: BaseException | None) -> None:
            if done.done():
                return
            if error is not None:
                done.set_exception(error)
            else:
                done.set_result(result)

        def job(runner: asyncio.Runner) -> None:
            try:
                opts = spec.options
                result = runner.run(execute_graph(
                    spec.graph, seed=opts.seed, device=spec.device, deterministic=opts.deterministic,
                    max_parallel_nodes=opts.max_parallel_nodes, cache=spec.cache, cancel=token,
                    callbacks=EngineCallbacks.all_to(partial(inbox.put, on_event)), data_dir=spec.data_dir,
                    run_id=spec.run_id, inline=True, cpu_threads=spec.cpu.threads if spec.cpu else None,
                    keep_outputs="all" if opts.record_outputs else "outputs", provenance=opts.provenance))
            except BaseException as err:  # a graph error or an engine bug: the run fails, the server lives
                inbox.put(settle, None, err)
            else:
                inbox.put(settle, result, None)

        self._threads.run(job)
        return RunHandle(spec.run_id, token, done)
