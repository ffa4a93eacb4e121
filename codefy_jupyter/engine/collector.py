"""Keeping CPython's cyclic garbage collector off a run's own bookkeeping.

A run builds a few container objects per node that live as long as the run (node specs, input
maps, consumer lists, scheduler state). The collector walks every tracked object on each full
pass, and a full pass comes each time the old generation has grown by a quarter, so while a
100,000-node graph was parsed and admitted the collector walked those structures again and
again: 5-7 full passes, 2.5-4.4 µs per node at 100k nodes and none at 1k, which made the cost
per node grow with the graph. Nothing in those structures is cyclic garbage, so the walks find
nothing.

`CollectorHold` pauses automatic collection while the engine builds a run (engine code only, no
node runs then), then `gc.freeze()`s what exists, which moves it out of the collector's reach in
O(1), and turns collection back on before the first node runs: nodes' own garbage is collected as
usual. At the end of the last run holding it, `gc.unfreeze()` puts everything back in the oldest
generation (O(1)), so nothing is kept longer than the run; objects without cycles are freed by
reference counting the moment they are dropped, frozen or not.

Freezing is process-wide. Only callers that own the process's collector ask for it (`run_graph`,
a run subprocess), and a hold is refused when the collector is off or someone else has frozen
objects (the headless server freezes its startup heap; unfreezing would hand it back).
"""

from __future__ import annotations

import gc as _gc
import threading
from typing import Any


class CollectorHold:
    """Process-wide and shared by concurrent runs: the first `hold` freezes, the last `release`
    unfreezes. `gc_module` is injectable so the policy is testable without touching the real
    collector."""

    def __init__(self, gc_module: Any = _gc) -> None:
        self._gc = gc_module
        self._lock = threading.Lock()
        self._runs = 0  # runs holding the heap frozen
        self._building = 0  # of those, runs still building (collection paused meanwhile)

    @property
    def runs(self) -> int:
        return self._runs

    def hold(self) -> bool:
        """Pause collection and freeze the heap as it is, for a run about to be built. False (and
        nothing changed) when the collector is off or objects are frozen by someone else."""
        gc = self._gc
        with self._lock:
            if self._runs == 0 and (not gc.isenabled() or gc.get_freeze_count()):
                return False
            self._runs += 1
            self._building += 1
            gc.disable()
            gc.freeze()
            return True

    def built(self) -> None:
        """The run's structures exist: freeze them too, and collect again (nodes run next)."""
        gc = self._gc
        with self._lock:
            gc.freeze()
            self._done_building()

    def release(self, *, building: bool = False) -> None:
        """The run ended (`building`: before `built`, e.g. an invalid graph)."""
        gc = self._gc
        with self._lock:
            if building:
                self._done_building()
            self._runs -= 1
            if self._runs == 0:
                gc.unfreeze()

    def _done_building(self) -> None:
        self._building -= 1
        if self._building == 0:
            self._gc.enable()


# The one the engine uses: the collector is one per process, and so is its bookkeeping.
PROCESS_HOLD = CollectorHold()
