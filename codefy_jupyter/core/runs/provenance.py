"""Input provenance of a run (options.provenance): its records reach the store before the run's
final status is written, so a read that sees the run ended finds them too."""

from __future__ import annotations

from typing import Any

from ...engine import RunResult
from ..store.database import Store


async def keep_inputs(store: Store, run_id: str, result: Any) -> None:
    """Store what an in-process run's nodes recorded (RunResult.inputs)."""
    if isinstance(result, RunResult) and result.inputs:
        await store.record_inputs(run_id, result.inputs)

