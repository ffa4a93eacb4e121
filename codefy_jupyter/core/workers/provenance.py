"""Input provenance records a worker run sends (`run_facts` of kind `provenance`, one per record),
checked against wire/provenance.py's caps before the store keeps them."""

from __future__ import annotations

from typing import Any, Awaitable, Mapping

from ...wire.provenance import RECORDS_PER_RUN, check_record
from .worker_run_record import WorkerRun


def kept_input(run: WorkerRun, store: Any, facts: Mapping[str, Any]) -> Awaitable[int] | None:
    """The store write for one record, or None when it is refused (counted in the run's facts
    under run_facts_dropped, by reason, as other refused facts are)."""
    record, wrong = check_record(facts)
    kept = run.facts.get("inputs_recorded", 0)
    reason = f"provenance_{wrong}" if wrong else "provenance_too_many" if kept >= RECORDS_PER_RUN else None
    if reason is not None:
        dropped = run.facts.setdefault("run_facts_dropped", {})
        dropped[reason] = dropped.get(reason, 0) + 1
        return None
    run.facts["inputs_recorded"] = kept + 1
    return store.record_inputs(run.run_id, [record])
