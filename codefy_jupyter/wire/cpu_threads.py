"""A run's CPU thread budget: how many threads its torch/OpenMP/BLAS work may use.

As a cluster scheduler gives a job its cores: without a budget every concurrent run (and torch in
each) sizes its pools to the whole machine, and two runs plus any other load oversubscribe the
cores (the 120-epoch example took 66-151 s under load against 9-11 s alone, issue 11).

The decision is pure (`decide`); `available_cores` is the one look at the machine. Stdlib only:
the agent imports this module too.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

# A run asking for more than this is a typo, not a machine (options.cpu_threads is refused with 422).
MAX_CPU_THREADS = 1024

OPTION = "option"  # options.cpu_threads of the run
SETTING = "setting"  # run_cpu_threads of the server
AUTO = "auto"  # the machine's cores divided among its cpu queue's slots


@dataclass(frozen=True)
class CpuBudget:
    threads: int
    source: str  # OPTION, SETTING or AUTO
    cores: int | None  # the machine's usable cores, when known
    slots: int  # the cpu queue's concurrent runs on that machine

    def to_dict(self) -> dict[str, Any]:
        return {"threads": self.threads, "source": self.source, "cores": self.cores, "slots": self.slots}


def decide(*, requested: int | None, setting: int, cores: int | None, cpu_slots: int) -> CpuBudget | None:
    """The run's budget: its own `options.cpu_threads`, else the server's `run_cpu_threads` (0 or
    less: automatic), else `cores // cpu_slots` (at least 1). None when it is automatic and the
    machine's cores are unknown (a worker agent too old to say): the run then gets no budget, as
    before budgets existed, rather than one sized for another machine."""
    slots = max(1, cpu_slots)
    if requested is not None:
        return CpuBudget(requested, OPTION, cores, slots)
    if setting > 0:
        return CpuBudget(setting, SETTING, cores, slots)
    if cores is None or cores < 1:
        return None
    return CpuBudget(max(1, cores // slots), AUTO, cores, slots)


def available_cores() -> int:
    """Cores this process may run on: its CPU affinity (a container's or taskset's cpuset), not the
    machine's total, which overcounts under both."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


def thread_environment(threads: int) -> dict[str, str]:
    """The variables that size OpenMP, MKL and OpenBLAS pools, read when those libraries load, so
    a run's process must have them before it imports torch."""
    value = str(threads)
    return {"OMP_NUM_THREADS": value, "MKL_NUM_THREADS": value, "OPENBLAS_NUM_THREADS": value}
