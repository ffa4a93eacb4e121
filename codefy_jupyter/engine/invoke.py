"""Calling one node: seeding, timing, catching what it raises, checking what it returns.

Runs on whichever thread executes the node (the scheduler's own, or a pool thread); returns an
`Outcome` instead of raising so the scheduler loop decides what a failure means.
"""

from __future__ import annotations

import gc
import os
import sys
import traceback
from dataclasses import dataclass
from typing import Any

from .context import ExecutionContext, RunState, seed_everything
from .errors import NodeOutputError, RunCancelled
from .expansion import Expand
from .graph import NodeSpec
from .torch_threads import use as use_cpu_threads


@dataclass
class Outcome:
    kind: str  # "ok" | "error" | "cancelled"
    value: Any = None
    error: BaseException | None = None
    traceback: str = ""
    ctx: ExecutionContext | None = None
    elapsed_s: float = 0.0


def _start(run: RunState, spec: NodeSpec) -> tuple[ExecutionContext, float]:
    ctx = ExecutionContext(run, spec.id, spec.type)
    if run.cpu_threads is not None:  # the node may run on any of the run's threads
        use_cpu_threads(run.cpu_threads)
    if run.reports_status:
        run.emit_status({"event": "node_status", "node_id": spec.id, "node_type": spec.type, "status": "running"})
    if run.seed is not None:
        seed_everything(ctx.seed)
    return ctx, run.clock()


def _ended(run: RunState, ctx: ExecutionContext, started: float, kind: str, value: Any = None,
           error: BaseException | None = None) -> Outcome:
    # format_exc here: still inside the except block of the caller, where the traceback lives.
    tb = traceback.format_exc() if kind == "error" else ""
    return Outcome(kind, value=value, error=error, traceback=tb, ctx=ctx, elapsed_s=run.clock() - started)


def call_sync(run: RunState, spec: NodeSpec, kwargs: dict[str, Any]) -> Outcome:
    ctx, started = _start(run, spec)
    try:
        value = spec.definition.fn(ctx, **kwargs)
    except RunCancelled as err:
        return _ended(run, ctx, started, "cancelled", error=err)
    except Exception as err:  # a node's bug must not take the process down
        return _ended(run, ctx, started, "error", error=err)
    return _ended(run, ctx, started, "ok", value=value)


async def call_async(run: RunState, spec: NodeSpec, kwargs: dict[str, Any]) -> Outcome:
    ctx, started = _start(run, spec)
    try:
        value = await spec.definition.fn(ctx, **kwargs)
    except RunCancelled as err:
        return _ended(run, ctx, started, "cancelled", error=err)
    except Exception as err:
        return _ended(run, ctx, started, "error", error=err)
    return _ended(run, ctx, started, "ok", value=value)


def check_outputs(spec: NodeSpec, value: Any) -> dict[str, Any] | Expand:
    """The node's outputs as declared, or NodeOutputError naming the offending port."""
    if isinstance(value, Expand):
        return value
    declared = spec.outputs
    if value is None and not declared:
        return {}
    if not isinstance(value, dict):
        raise NodeOutputError(
            f"returned {type(value).__name__}; a node returns a dict of its outputs {sorted(declared)}",
            field="outputs")
    for port in declared:
        if port not in value:
            raise NodeOutputError(f"returned no value for output {port!r}", field=f"outputs.{port}")
    for port in value:
        if port not in declared:
            raise NodeOutputError(f"returned unknown output {port!r} (declared: {sorted(declared)})",
                                  field=f"outputs.{port}")
    return value


def is_out_of_memory(err: BaseException) -> bool:
    if type(err).__name__ == "OutOfMemoryError" or isinstance(err, MemoryError):
        return True
    return isinstance(err, RuntimeError) and "out of memory" in str(err).lower()


def free_memory() -> None:
    """After an out-of-memory error: collect garbage and return cached device memory."""
    gc.collect()
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            if torch.cuda.is_initialized():
                torch.cuda.empty_cache()
        except Exception:  # freeing is best effort; the failure is already being reported
            pass


def enable_deterministic() -> Any:
    """Ask torch for deterministic kernels (warn_only) for this run; returns a restore function."""
    import torch

    before = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
              torch.backends.cudnn.benchmark)
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = False

    def restore() -> None:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])
        torch.backends.cudnn.benchmark = before[2]

    return restore
