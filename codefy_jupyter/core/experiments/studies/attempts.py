"""A study's attempt record as it is created (its child's run id chosen at once: the stamp) and
how events name it."""

from __future__ import annotations

import uuid
from typing import Any, Mapping

from ...store import studies as db
from . import state as st


def new_id() -> str:
    return uuid.uuid4().hex[:16]


def new_attempt(study_id: str, variant: int, repetition: int, number: int, seed: int, now: float) -> dict[str, Any]:
    # Every column, as the store reads it back: a tally held across a resume takes this dict as is.
    return {**dict.fromkeys(db.ATTEMPT_COLUMNS), "evidence_copied": False, "id": new_id(), "study_id": study_id,
            "variant": variant, "repetition": repetition, "attempt": number, "seed": seed, "run_id": new_id(),
            "status": st.PENDING, "created_at": now}


def where(a: Mapping[str, Any]) -> dict[str, Any]:
    """What an attempt's events say of it."""
    return {"attempt_id": a["id"], "run_id": a["run_id"], "variant": a["variant"], "repetition": a["repetition"],
            "attempt": a["attempt"]}
