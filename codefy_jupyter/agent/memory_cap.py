"""Capping a run's CUDA allocator to its memory budget on cards shared by memory (seed #788).

The control plane admits a run onto a shared card by its budget (core/scheduling/memory_ledger.py);
the run's own process then holds itself to it with `torch.cuda.set_per_process_memory_fraction`, so
an allocation past the budget fails in this run (an out-of-memory error) instead of starving the
other runs on the card. The CUDA context is not governed by the cap (hence
CODEFY_EXECUTION_CUDA_CONTEXT_MIB on the control plane). `fractions` is the pure decision; `apply`
touches torch and runs in the run process before the graph, and before the agent reports
the run started.
"""

from __future__ import annotations

import sys
from typing import Any, Mapping

MIB = 1024 * 1024


def fractions(budgets_mib: Mapping[str, int], aliases: Mapping[str, str],
              totals: Mapping[int, int], own: int | None = None) -> dict[int, float]:
    """{the run's CUDA index: fraction of that card} for each budgeted card the run sees.
    `budgets_mib` are keyed by the agent's card names, `aliases` map the run's names to the agent's,
    `totals` are each visible card's total memory in bytes (by the run's index). `own`: a DDP rank's
    card (its run index); the rank keeps its budget there and gets none on the run's other budgeted
    cards (seed #792), so a stray allocation cannot eat another rank's share."""
    by_agent = {agent: run for run, agent in aliases.items()}
    out: dict[int, float] = {}
    for agent_name, mib in budgets_mib.items():
        run_name = by_agent.get(agent_name, agent_name)
        if not run_name.startswith("cuda:"):
            continue
        index = int(run_name.split(":", 1)[1])
        total = totals.get(index)
        if not total or mib <= 0:
            continue
        out[index] = 0.0 if own is not None and index != own else min(1.0, mib * MIB / total)
    return out


def limits(caps: Mapping[int, float], aliases: Mapping[str, str], totals: Mapping[int, int]) -> dict[str, Any]:
    """The caps as the run reports them (`memory_limit`): {the agent's card name: {bytes, fraction}}."""
    out: dict[str, Any] = {}
    for index, fraction in caps.items():
        name = f"cuda:{index}"
        out[aliases.get(name, name)] = {"bytes": int(fraction * totals.get(index, 0)), "fraction": fraction}
    return out


def merge_limits(parts: list[dict[str, Any] | None]) -> dict[str, Any] | None:
    """One `memory_limit` for a run of several ranks: per card, the largest cap any rank set there
    (its owner's budget; the others set zero)."""
    out: dict[str, Any] = {}
    for part in parts:
        for device, entry in (part or {}).items():
            if device not in out or entry.get("bytes", 0) > out[device].get("bytes", 0):
                out[device] = entry
    return out or None


def apply(budgets_mib: Mapping[str, int], aliases: Mapping[str, str], own: int | None = None) -> dict[str, Any]:
    """Cap this process's allocator on each budgeted card (nothing without CUDA); the run's
    `memory_limit` (see `limits`)."""
    return report(budgets_mib, aliases, own)["memory_limit"] or {}


# Why a run's process set no cap (the `reason` of its `capped` report, and of run_started's `memory_cap`).
APPLIED, NO_BUDGET, NO_CUDA, NO_BUDGETED_CARD, CPU_RANKS = "applied", "no_budget", "no_cuda", "no_budgeted_card", "cpu_ranks"


def report(budgets_mib: Mapping[str, int], aliases: Mapping[str, str], own: int | None = None) -> dict[str, Any]:
    """Cap the allocator as `apply` does and say what was done: `{"memory_limit": {...} | None,
    "reason"}`. The run's process sends this (`capped`) before anything else, and the agent holds
    run_started for a budgeted run until it arrives (seed #788: capped before run_started)."""
    if not budgets_mib:
        return {"memory_limit": None, "reason": NO_BUDGET}
    import torch

    if not torch.cuda.is_available():
        return {"memory_limit": None, "reason": NO_CUDA}
    totals = {i: int(torch.cuda.get_device_properties(i).total_memory) for i in range(torch.cuda.device_count())}
    caps = fractions(budgets_mib, aliases, totals, own)
    for index, fraction in caps.items():
        torch.cuda.set_per_process_memory_fraction(fraction, index)
    limit = limits(caps, aliases, totals)
    return {"memory_limit": limit or None, "reason": APPLIED if limit else NO_BUDGETED_CARD}


def merge_reports(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """One `capped` report for a run of several ranks: their caps merged (`merge_limits`); without
    any, the first rank's reason."""
    limit = merge_limits([p.get("memory_limit") for p in parts])
    if limit:
        return {"memory_limit": limit, "reason": APPLIED}
    return {"memory_limit": None, "reason": next((p.get("reason") for p in parts if p.get("reason")), NO_BUDGET)}


def cpu_peak_bytes() -> int | None:
    """This process's peak resident set in bytes (Linux reports KiB, macOS bytes); None elsewhere."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not POSIX
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def peak_memory(aliases: dict[str, str]) -> dict[str, Any] | None:
    """Peak memory per device this run used, under the agent's card names, and the process's peak
    resident set as `cpu`. Exact: the process holds this one run only."""
    out: dict[str, Any] = {}
    rss = cpu_peak_bytes()
    if rss is not None:
        out["cpu"] = {"bytes": rss, "exact": True}
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return out or None
    for index in range(torch.cuda.device_count()):
        name = f"cuda:{index}"
        out[aliases.get(name, name)] = {"bytes": int(torch.cuda.max_memory_allocated(index)), "exact": True}
    return out


__all__ = ["apply", "cpu_peak_bytes", "fractions", "limits", "merge_limits", "merge_reports", "peak_memory", "report"]
