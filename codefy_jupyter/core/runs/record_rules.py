"""Recorded outputs a worker run could never produce (pure).

A DDP run on a worker (a top-level `TrainingLoop` with `strategy: ddp` over two or more CUDA cards,
agent/ddp.py) executes in rank processes, not in its run process, whose captures are what
`record_outputs` keeps: nothing would be recorded. Such a run is refused at submit rather than left
to end with no outputs. On this server the same graph trains in one process and records as usual.
"""

from __future__ import annotations

from typing import Any, Iterable


def ddp_loop(graph: dict[str, Any]) -> str | None:
    """The id of the graph's first top-level TrainingLoop with `strategy: ddp`, or None (the
    agent's rule, agent/ddp.py `plan`)."""
    for node in graph.get("nodes") or ():
        if isinstance(node, dict) and node.get("type") == "TrainingLoop" \
                and (node.get("params") or {}).get("strategy") == "ddp":
            return str(node.get("id"))
    return None


def unrecordable_ddp(graph: dict[str, Any], devices: Iterable[str]) -> tuple[str, int] | None:
    """(the loop's id, its ranks) when a worker would run `graph` on `devices` as DDP ranks."""
    ranks = sum(1 for d in devices if str(d).startswith("cuda:"))
    loop = ddp_loop(graph)
    return (loop, ranks) if loop is not None and ranks >= 2 else None


__all__ = ["ddp_loop", "unrecordable_ddp"]
