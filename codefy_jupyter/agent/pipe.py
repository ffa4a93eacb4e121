"""The messages between the agent and one run's process, over a socket pair: one JSON array
`[kind, body]` per line.

agent -> run process   ["assign", {run_id, graph, device, data_dir, env, facts, cpu_threads, ..., and the
                                    assign's options beside them: seed, deterministic, max_parallel_nodes,
                                    ... (wire/run_options.py ExecutionOptions to_json/from_json)}]   (first, once)
                       ["cancel", {"reason"}]
                       ["read", {"id", "kind", "query"}]   a read of a record_outputs run's captures
                                                           while it writes them, after its report
run process -> agent   ["capped", {memory_limit, reason}]   first: its allocator caps (memory_cap.report);
                                                         a budgeted run is reported started only then
                       ["event", {"type", "payload"}]   a log event as wire/run_events builds it (node
                                                         status, progress, metric, artifact, run_warning...)
                       ["facts", {kind, facts}]
                       ["finished", {status, error, executed, cached, metrics, duration_s, peak_memory}]
                       ["answer", {"id", "status", "body"}]   to a `read`, from the copy in memory

JSON rather than pickle: the agent holds the worker token, and a run executes arbitrary node code, so
nothing the run process sends may execute in the agent when read.
"""

from __future__ import annotations

import json
from typing import Any

# A line longer than this is a broken run process (payloads are capped far below it).
MAX_LINE_BYTES = 32 * 1024 * 1024

CHILD_KINDS = frozenset({"capped", "event", "facts", "finished", "answer"})
AGENT_KINDS = frozenset({"assign", "cancel", "read"})


class PipeError(ValueError):
    """A line that is not a message."""


def encode(kind: str, body: dict[str, Any]) -> bytes:
    return (json.dumps([kind, body], separators=(",", ":"), ensure_ascii=False, default=str) + "\n").encode()


def decode(line: bytes | str, *, kinds: frozenset[str]) -> tuple[str, dict[str, Any]]:
    try:
        value = json.loads(line)
    except ValueError as err:
        raise PipeError(f"not JSON: {err}") from None
    if (not isinstance(value, list) or len(value) != 2 or not isinstance(value[0], str)
            or not isinstance(value[1], dict)):
        raise PipeError("expected [kind, {body}]")
    if value[0] not in kinds:
        raise PipeError(f"unknown message kind {value[0]!r}")
    return value[0], value[1]
