"""`run_graph` / `execute_graph`: set a run up (registry, presets, run state, cache, collector
hold), hand it to an `Execution` (execution.py: the scheduler loop, nodes, values, expansions)
and assemble its `RunResult` (run_result.py).
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

from .cache import NoCache, OutputCache
from .collector import PROCESS_HOLD
from .context import CancelToken, EngineCallbacks, EventFn, RunState
from .execution import Execution
from .graph import Graph, parse_graph
from .invoke import enable_deterministic
from .presets import PresetLibrary
from .registry import NodeRegistry, default_registry
from .run_result import RunResult


async def execute_graph(
    graph: dict[str, Any] | Graph,
    *,
    seed: int | None = None,
    device: str = "cpu",
    max_parallel_nodes: int = 4,
    cache: OutputCache | None = None,
    on_event: EventFn | None = None,
    callbacks: EngineCallbacks | None = None,
    cancel: CancelToken | threading.Event | None = None,
    deterministic: bool = False,
    registry: NodeRegistry | None = None,
    presets: PresetLibrary | None = None,
    data_dir: str | Path | None = None,
    run_id: str | None = None,
    keep_outputs: str = "outputs",
    inline: bool = False,
    freeze_gc: bool = False,
    clock: Callable[[], float] = time.monotonic,
    cpu_threads: int | None = None,
    provenance: bool = False,
) -> RunResult:
    """Run a graph on the current event loop. Raises GraphError before running an invalid graph.

    `cpu_threads`: the run's CPU thread budget, applied to torch on every thread that executes one
    of its nodes (see torch_threads.py); None leaves torch's own defaults.

    `inline=True` lets cheap sync nodes run on the loop's thread; only pass it when this loop
    serves nothing else (run_graph's own loop), since a node then blocks the loop while it runs.
    `freeze_gc=True` keeps the garbage collector off the run's own structures (see collector.py);
    it changes process-wide collector state, so only a caller that owns the process passes it.
    `provenance=True` keeps a record (with a sha256) of every file a node declares through
    `ctx.record_input`; they end up in `RunResult.inputs`.
    """
    if keep_outputs not in ("outputs", "all"):
        raise ValueError("keep_outputs must be 'outputs' or 'all'")
    if cpu_threads is not None and (type(cpu_threads) is not int or cpu_threads < 1):
        raise ValueError(f"cpu_threads must be a positive integer or None, got {cpu_threads!r}")
    if on_event is not None and callbacks is not None:
        raise ValueError("pass on_event or callbacks, not both")
    held = freeze_gc and PROCESS_HOLD.hold()
    building = held

    def built() -> None:  # the run's structures exist and no node ran yet
        nonlocal building
        if building:
            building = False
            PROCESS_HOLD.built()

    try:
        registry = registry or default_registry()
        presets = presets or PresetLibrary.default()
        parsed = graph if isinstance(graph, Graph) else parse_graph(graph, registry, presets)
        run_id = run_id or uuid.uuid4().hex[:12]
        metrics: dict[str, float] = {}
        warnings: list[dict[str, Any]] = []
        base = callbacks or EngineCallbacks.all_to(on_event)

        def signal(event: dict[str, Any]) -> None:
            if event["event"] == "metric":
                metrics[event["name"]] = event["value"]
            elif event["event"] == "warning":
                warnings.append(event)
            if base.signal is not None:
                base.signal(event)

        run = RunState(
            run_id=run_id, seed=seed, device=device, deterministic=deterministic,
            data_dir=Path(data_dir) if data_dir else Path.cwd() / ".codefy-data" / "runs" / run_id,
            callbacks=EngineCallbacks(base.status, base.inner_status, signal), cancel=cancel, clock=clock,
            cpu_threads=cpu_threads, provenance=provenance)
        run.presets = presets
        cache = cache if cache is not None else NoCache()
        started = clock()
        execution = Execution(parsed, registry=registry, presets=presets, run=run, cache=cache,
                              max_parallel_nodes=max_parallel_nodes, inline=inline, keep_outputs=keep_outputs)
        restore = enable_deterministic() if deterministic else None
        cache.begin_run(run_id)
        try:
            await execution.execute(built)
        finally:
            cache.end_run(run_id)
            if restore is not None:
                restore()
    finally:
        built()
        if held:
            PROCESS_HOLD.release()
    if execution.failure is not None:
        status = "failed"
    elif execution.cancelled:
        status = "cancelled"
    else:
        status = "succeeded"
    return RunResult(status=status, run_id=run_id, outputs=execution.kept, error=execution.failure,
                     executed=execution.executed, cached=execution.cached, metrics=metrics, warnings=warnings,
                     seed=seed, device=device, duration_s=clock() - started,
                     inputs=run.inputs)


def run_graph(graph: dict[str, Any] | Graph, **kwargs: Any) -> RunResult:
    """Run a graph to the end and return its RunResult. See `execute_graph` for the options.

    Works inside a running event loop too (a notebook): the run then gets a thread of its own.
    """
    kwargs.setdefault("inline", True)
    # run_graph is the whole of what its caller is doing (a script, a notebook cell, `codefy run`),
    # so it may keep the collector off the run's own structures until the run ends.
    kwargs.setdefault("freeze_gc", True)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(execute_graph(graph, **kwargs))
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="codefy-run") as pool:
        return pool.submit(asyncio.run, execute_graph(graph, **kwargs)).result()
