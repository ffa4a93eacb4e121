"""Bounds on what one worker's run frames may leave in the control plane. Pure: no store, no socket.

A frame is already bounded by the socket (wire/codec.py's MAX_FRAME_BYTES), but that bound is about
reading one message, not about what is kept: a run_finished error of 15 MB would be stored in the
run's row and served by every read of it, and `run_facts` frames of a kind this server does not
know accumulate in the run's facts for as long as the run goes on. A worker is trusted to run
graphs, not to size the control plane's memory and database, so what is kept is bounded here,
with a marker saying what was cut, and a run's error always survives the event log's payload cap
(`run_event_payload_cap_bytes`) instead of being elided whole.
"""

from __future__ import annotations

from typing import Any, Mapping

from ...wire.compact_json import dumps

# Characters kept of a run error's texts. The end of a traceback or of a process's output names
# the failure, so those keep their tail; a message keeps its head.
ERROR_MESSAGE_CHARS = 8 * 1024
ERROR_TRACEBACK_CHARS = 48 * 1024
ERROR_OUTPUT_TAIL_CHARS = 4 * 1024
ERROR_OTHER_TEXT_CHARS = 1024
ERROR_OTHER_VALUE_BYTES = 4 * 1024  # a structured value (params, ...) larger than this is dropped
TAIL_FIELDS = frozenset({"traceback", "output_tail"})

# run_facts of a kind this server files nowhere of its own (kept as they came, under "run_facts").
FACTS_KEPT_PER_RUN = 64
FACT_BYTES = 16 * 1024
# A fingerprint document (packages, drivers, numeric settings) is a few tens of kB.
FINGERPRINT_BYTES = 1024 * 1024


def _json_bytes(value: Any) -> int:
    return len(dumps(value).encode("utf-8", "replace"))


def _cut(text: str, limit: int, *, tail: bool) -> str:
    if len(text) <= limit:
        return text
    dropped = len(text) - limit
    if tail:
        return f"[{dropped} characters cut]\n" + text[-limit:]
    return text[:limit] + f" [{dropped} characters cut]"


def bounded_error(error: Mapping[str, Any]) -> dict[str, Any]:
    """A worker's run error with every text cut to its bound and oversized structured values
    dropped; `truncated` lists the fields that were cut (absent when nothing was)."""
    out: dict[str, Any] = {}
    cut: list[str] = []
    for key, value in error.items():
        if not isinstance(key, str):
            continue
        if isinstance(value, str):
            limit = (ERROR_MESSAGE_CHARS if key == "message" else ERROR_TRACEBACK_CHARS if key == "traceback"
                     else ERROR_OUTPUT_TAIL_CHARS if key == "output_tail" else ERROR_OTHER_TEXT_CHARS)
            kept = _cut(value, limit, tail=key in TAIL_FIELDS)
            if kept is not value:
                cut.append(key)
            out[key] = kept
        elif value is None or isinstance(value, (bool, int, float)) or _json_bytes(value) <= ERROR_OTHER_VALUE_BYTES:
            out[key] = value
        else:
            cut.append(key)
    if cut:
        out["truncated"] = sorted(cut)
    return out


def fact_kept(kind: str, facts: Mapping[str, Any], kept_so_far: int) -> str | None:
    """Why a run_facts frame is not kept (`run_facts_dropped` counts them by reason), or None to
    keep it. `kept_so_far`: facts of unknown kinds this run already keeps."""
    limit = FINGERPRINT_BYTES if kind == "fingerprint" else FACT_BYTES
    if _json_bytes(facts) > limit:
        return "too_large"
    if kind not in ("fingerprint", "system_metrics") and kept_so_far >= FACTS_KEPT_PER_RUN:
        return "too_many"
    return None
