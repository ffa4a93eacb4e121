"""Counters and histograms the control plane keeps about itself, in memory: pure, no I/O, no
exporter. Each room keeps the ones it feeds (the run service its runs', the event log its lag, the
store's writer its commits, the worker executor its frames); `server/metrics.py` reads them at
scrape time and writes them out in Prometheus's format. Nothing here imports prometheus_client, so
core stays testable without it and two servers in one process never share a series.

Label values must come from bounded sets (statuses, reason codes of our own vocabulary, queue
keys with a worker's instance folded away by `queue_label`): never run ids or user names.
Increments happen on the event loop, except the store writer's, which happen on its thread; a
scrape may then see a histogram's count one observation ahead of its sum, never a lost one.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from dataclasses import dataclass
from typing import Iterable

Labels = tuple[str, ...]

# Seconds, for things a person waits for (a run in a queue, a run executing): 1 s to a day.
LONG_S = (1.0, 5.0, 15.0, 30.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 3 * 3600.0, 6 * 3600.0, 86400.0)
# Seconds, for the control plane's own writes: 1 ms to 10 s.
SHORT_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)

_CODE = re.compile(r"^[a-z][a-z0-9_]{0,47}$")
OTHER = "other"


@dataclass(frozen=True)
class HistogramSample:
    """One label set of a histogram: `buckets[i]` observations were <= `bounds[i]` (cumulative),
    `count` in all (the +Inf bucket), summing to `sum`."""

    bounds: tuple[float, ...]
    buckets: tuple[int, ...]
    count: int
    sum: float


class Histogram:
    """Observations by label set into fixed upper bounds (Prometheus's `le`)."""

    def __init__(self, bounds: Iterable[float], label_names: Labels = ()) -> None:
        self.bounds = tuple(sorted(float(b) for b in bounds))
        if not self.bounds:
            raise ValueError("a histogram needs at least one bucket bound")
        self.label_names = label_names
        self._counts: dict[Labels, list[int]] = {}  # per bucket (not cumulative), the last one +Inf
        self._sums: dict[Labels, float] = {}

    def observe(self, value: float, labels: Labels = ()) -> None:
        if len(labels) != len(self.label_names):
            raise ValueError(f"expected labels {self.label_names}, got {labels!r}")
        counts = self._counts.get(labels)
        if counts is None:
            counts = self._counts[labels] = [0] * (len(self.bounds) + 1)
            self._sums[labels] = 0.0
        counts[bisect_left(self.bounds, value)] += 1
        self._sums[labels] += value

    def samples(self) -> dict[Labels, HistogramSample]:
        out = {}
        for labels, counts in list(self._counts.items()):
            cumulative, running = [], 0
            for n in counts:
                running += n
                cumulative.append(running)
            out[labels] = HistogramSample(self.bounds, tuple(cumulative[:-1]), cumulative[-1],
                                          self._sums.get(labels, 0.0))
        return out


class Counter:
    """A monotonic count by label set."""

    def __init__(self, label_names: Labels = ()) -> None:
        self.label_names = label_names
        self._values: dict[Labels, float] = {}

    def inc(self, labels: Labels = (), amount: float = 1.0) -> None:
        if len(labels) != len(self.label_names):
            raise ValueError(f"expected labels {self.label_names}, got {labels!r}")
        if amount < 0:
            raise ValueError("a counter only goes up")
        self._values[labels] = self._values.get(labels, 0.0) + amount

    def samples(self) -> dict[Labels, float]:
        return dict(self._values)

    def value(self, labels: Labels = ()) -> float:
        return self._values.get(labels, 0.0)


def queue_label(key: str) -> str:
    """A queue key as a label: `gpu-box.job123/cuda:0` -> `gpu-box/cuda:0`. One-shot agents register
    as `<name>.<instance>` (one instance per batch job), so the instance is folded away; local
    devices, `any/…` and `pool:…/…` keys are kept as they are."""
    worker, sep, device = key.partition("/")
    if not sep or worker == "any" or worker.startswith("pool:"):
        return key
    return f"{worker.split('.', 1)[0]}/{device}"


def code_label(code: object) -> str:
    """A reason code as a label: our codes are short snake_case words; anything else (a code an
    agent made up, a missing one) is `other`."""
    return code if isinstance(code, str) and _CODE.match(code) else OTHER


__all__ = ["Counter", "Histogram", "HistogramSample", "LONG_S", "OTHER", "SHORT_S", "code_label", "queue_label"]
