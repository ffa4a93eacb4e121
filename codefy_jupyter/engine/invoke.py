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


@dataclass
class Outcome:
    kind: str  # "ok" | "error" | "cancelled"
    value: Any = None
    error: BaseException | None = None
    traceback: str = ""
    ctx: ExecutionContext | None = None
    elapsed_s: float = 0.0


def _running(run: RunState, spec: NodeSpec) -> None:
    if run.reports_status:
        run.emit_status({"event": "node_status", "node_id": spec.id, "node_type": spec.type, "status": "running"})


def call_sync(run: RunState, spec: NodeSpec, kwargs: dict[str, Any]) -> Outcome:
    ctx = ExecutionContext(run, spec.id, spec.type)
    _running(run, spec)
    if run.seed is not None:
        seed_everything(ctx.seed)
    started = run.clock()
    try:
        value = spec.definition.fn(ctx, **kwargs)
    except RunCancelled as err:
        return Outcome("cancelled", error=err, ctx=ctx, elapsed_s=run.clock() - started)
    except Exception as err:  # a node's bug must not take the process down
        return Outcome("error", error=err, traceback=traceback.format_exc(), ctx=ctx,
                       elapsed_s=run.clock() - started)
    return Outcome("ok", value=value, ctx=ctx, elapsed_s=run.clock() - started)


async def call_async(run: RunState, spec: NodeSpec, kwargs: dict[str, Any]) -> Outcome:
    ctx = ExecutionContext(run, spec.id, spec.type)
    _running(run, spec)
    if run.seed is not None:
        seed_everything(ctx.seed)
    started = run.clock()
    try:
        value = await spec.definition.fn(ctx, **kwargs)
    except RunCancelled as err:
        return Outcome("cancelled", error=err, ctx=ctx, elapsed_s=run.clock() - started)
    except Exception as err:
        return Outcome("error", error=err, traceback=traceback.format_exc(), ctx=ctx,
                       elapsed_s=run.clock() - started)
    return Outcome("ok", value=value, ctx=ctx, elapsed_s=run.clock() - started)


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
