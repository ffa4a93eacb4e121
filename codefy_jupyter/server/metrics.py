"""The control plane's Prometheus metrics, on jupyter-server's own `/metrics` (which serves
prometheus_client's default registry; `ServerApp.authenticate_prometheus`, on by default, asks for
the server's token there). The same in `jupyter lab` and headless under `codefy start`.

One collector per process, registered in the default registry the first time a run queue starts
(`watch`); it reads, at scrape time, every run queue of this process that is up (a test process
starts many servers one after another: each is watched from its start to its stop, and no metric
name is ever registered twice). Nothing is kept here: the counters and histograms are core's
(core/telemetry.py, fed by the rooms as runs change state), the gauges are read from the live
queue, worker registry and run book, which costs O(queues + workers + active runs) per scrape.
Sweep and study counts come from the database, by one grouped count of each table at most every
`EXPERIMENT_COUNTS_S`, in the background; a scrape shows the last one. docs/operators/metrics.md
lists every metric.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
import weakref
from typing import Any, Callable, Iterable, Iterator

from prometheus_client import REGISTRY
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import CollectorRegistry

from ..core.contract import lifecycle as rs
from ..core.runs.run_service import RunService
from ..core.scheduling.device_sets import device_kind
from ..core.scheduling.slot_groups import LOCAL
from ..core.telemetry import Counter, Histogram, queue_label
from ..core.workers.registry import STATES as WORKER_STATES

log = logging.getLogger("codefy.metrics")

EXPERIMENT_COUNTS_S = 5.0


def _experiment_counts(conn: sqlite3.Connection) -> dict[str, dict[str, int]]:
    return {"sweeps": dict(conn.execute("SELECT state, COUNT(*) FROM sweeps GROUP BY state").fetchall()),
            "studies": dict(conn.execute("SELECT status, COUNT(*) FROM studies GROUP BY status").fetchall())}


class ExperimentCounts:
    """Sweeps by state and studies by status, refreshed in the background when a scrape finds the
    last count older than `every_s` (one count at a time)."""

    def __init__(self, service: RunService, every_s: float = EXPERIMENT_COUNTS_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.service = service
        self.every_s = every_s
        self.clock = clock
        self.values: dict[str, dict[str, int]] = {"sweeps": {}, "studies": {}}
        self._at: float | None = None
        self._busy = False

    def refresh_if_due(self) -> None:
        now = self.clock()
        if self._busy or (self._at is not None and now - self._at < self.every_s) or self.service.closing:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # collected off the event loop: keep the last count
            return
        self._busy, self._at = True, now
        task = loop.create_task(self.service.store.read(_experiment_counts))
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task) -> None:
        self._busy = False
        if task.cancelled() or task.exception() is not None:
            log.debug("codefy: counting sweeps and studies failed: %r", None if task.cancelled() else task.exception())
            return
        self.values = task.result()


class Families:
    """The metric families of one scrape, summed over the run queues of this process."""

    def __init__(self) -> None:
        self._gauges: dict[str, tuple[str, tuple[str, ...], dict[tuple[str, ...], float]]] = {}
        self._counters: dict[str, tuple[str, tuple[str, ...], dict[tuple[str, ...], float]]] = {}
        self._histograms: dict[str, tuple[str, Histogram | None, dict[tuple[str, ...], list[Any]]]] = {}

    def gauge(self, name: str, doc: str, labels: tuple[str, ...], values: dict[tuple[str, ...], float]) -> None:
        _, _, into = self._gauges.setdefault(name, (doc, labels, {}))
        for key, value in values.items():
            into[key] = into.get(key, 0.0) + value

    def counter(self, name: str, doc: str, counter: Counter) -> None:
        _, _, into = self._counters.setdefault(name, (doc, counter.label_names, {}))
        for key, value in counter.samples().items():
            into[key] = into.get(key, 0.0) + value

    def histogram(self, name: str, doc: str, histogram: Histogram) -> None:
        _, _, into = self._histograms.setdefault(name, (doc, histogram, {}))
        for key, sample in histogram.samples().items():
            have = into.setdefault(key, [[0] * len(sample.bounds), 0, 0.0])
            have[0] = [a + b for a, b in zip(have[0], sample.buckets)]
            have[1] += sample.count
            have[2] += sample.sum

    def metrics(self) -> Iterator[Metric]:
        for name, (doc, labels, values) in self._gauges.items():
            family = GaugeMetricFamily(name, doc, labels=list(labels))
            for key, value in sorted(values.items()):
                family.add_metric(list(key), value)
            yield family
        for name, (doc, labels, values) in self._counters.items():
            family = CounterMetricFamily(name, doc, labels=list(labels))
            for key, value in sorted(values.items()):
                family.add_metric(list(key), value)
            yield family
        for name, (doc, histogram, values) in self._histograms.items():
            assert histogram is not None
            family = HistogramMetricFamily(name, doc, labels=list(histogram.label_names))
            for key, (buckets, count, total) in sorted(values.items()):
                pairs = [(_le(b), n) for b, n in zip(histogram.bounds, buckets)] + [("+Inf", count)]
                family.add_metric(list(key), pairs, total)
            yield family


def _le(bound: float) -> str:
    return repr(float(bound))


def add_service(families: Families, service: RunService, counts: ExperimentCounts | None) -> None:
    """Everything one run queue says, added to `families` (the names are the operator guide's)."""
    queue = service.queue
    runs: dict[tuple[str, str], float] = {}
    for run in queue.waiting():
        key = (rs.QUEUED, queue_label(run.queue_key))
        runs[key] = runs.get(key, 0) + 1
    for record in service.reads.runs.all_executing():
        placed = queue.get(record.run_id)
        key = (record.status, queue_label(placed.queue_key) if placed is not None else "unknown")
        runs[key] = runs.get(key, 0) + 1
    families.gauge("codefy_runs", "Runs this server holds, by status (queued, running, disconnected) and queue.",
                   ("status", "queue"), runs)
    depth: dict[tuple[str], float] = {}
    slots: dict[tuple[str], float] = {}
    used: dict[tuple[str], float] = {}
    for q in queue.statistics().queues:
        key = (queue_label(q.key),)
        depth[key] = depth.get(key, 0) + q.waiting
        slots[key] = slots.get(key, 0) + q.limit
        used[key] = used.get(key, 0) + q.running
    families.gauge("codefy_queue_depth", "Runs waiting in each queue's FIFO.", ("queue",), depth)
    families.gauge("codefy_queue_slots", "Queued-lane runs each queue's device admits at once.", ("queue",), slots)
    families.gauge("codefy_queue_slots_in_use", "Queued-lane units taken on each queue's device.", ("queue",), used)

    registry = service.workers.registry
    workers = {(state,): 0.0 for state in WORKER_STATES}
    for worker in registry.workers():
        workers[(worker.state,)] = workers.get((worker.state,), 0) + 1
    families.gauge("codefy_workers", "Worker agents by state.", ("state",), workers)
    total: dict[tuple[str, str], float] = {}
    taken: dict[tuple[str, str], float] = {}
    for slot in queue.slot_info():
        if slot.provider == LOCAL:
            continue
        worker = registry.get(slot.provider)
        key = (worker.state if worker is not None else "unknown", device_kind(slot.device))
        total[key] = total.get(key, 0) + slot.limit
        taken[key] = taken.get(key, 0) + slot.taken
    families.gauge("codefy_worker_slots", "Run slots the workers offer, by worker state and device kind.",
                   ("state", "kind"), total)
    families.gauge("codefy_worker_slots_in_use", "Run slots taken on the workers, by worker state and device kind.",
                   ("state", "kind"), taken)

    tally = service.final.tally
    families.counter("codefy_runs_started", "Runs started, by queue.", tally.started_total)
    families.counter("codefy_runs_finished", "Runs that ended, by final status and reason code.",
                     tally.finished_total)
    families.histogram("codefy_run_queue_wait_seconds", "Seconds from a run's submit to its start, by queue.",
                       tally.wait_seconds)
    families.histogram("codefy_run_duration_seconds", "Seconds from a run's start to its end, by final status.",
                       tally.duration_seconds)
    families.histogram("codefy_event_log_lag_seconds", "Seconds from a run event's emit to its commit "
                       "(the oldest event of each batch written).", service.events.lag_seconds)
    families.histogram("codefy_store_commit_seconds", "Seconds the store's writer took to apply and commit "
                       "one batch of writes.", service.store.commit_seconds)
    frames = service.workers.executor.tally
    families.counter("codefy_worker_frames_received", "Per-run frames received from worker agents, by type.",
                     frames.received_total)
    families.counter("codefy_worker_frames_replayed", "Frames an agent sent again from its spool after a "
                     "reconnect.", frames.replayed_total)
    families.counter("codefy_worker_frames_duplicate", "Frames dropped because their seq was already recorded.",
                     frames.duplicate_total)
    if counts is not None:
        counts.refresh_if_due()
        families.gauge("codefy_sweeps", "Sweeps by state (as last counted).", ("state",),
                       {(k,): float(v) for k, v in counts.values["sweeps"].items()})
        families.gauge("codefy_studies", "Studies by status (as last counted).", ("status",),
                       {(k,): float(v) for k, v in counts.values["studies"].items()})


class CodefyCollector:
    """Reads the watched run queues at each scrape (a prometheus_client custom collector)."""

    def __init__(self) -> None:
        self._watched: dict[int, tuple[Any, ExperimentCounts]] = {}

    def watch(self, owner: Any, service: RunService) -> None:
        self._watched[id(owner)] = (service, ExperimentCounts(service))

    def unwatch(self, owner: Any) -> None:
        self._watched.pop(id(owner), None)

    @property
    def watched(self) -> int:
        return len(self._watched)

    def describe(self) -> Iterable[Metric]:
        return []  # names are not claimed: one collector per process, whatever it serves

    def collect(self) -> Iterable[Metric]:
        families = Families()
        for service, counts in list(self._watched.values()):
            try:
                add_service(families, service, counts)
            except Exception:  # a scrape must not fail because one queue is closing
                log.exception("codefy: collecting metrics failed")
        return list(families.metrics())


COLLECTOR = CodefyCollector()
_registered: "weakref.WeakSet[CollectorRegistry]" = weakref.WeakSet()


def watch(owner: Any, service: RunService, registry: CollectorRegistry = REGISTRY) -> None:
    """Export `service`'s metrics from now until `unwatch(owner)`."""
    if registry not in _registered:
        registry.register(COLLECTOR)  # type: ignore[arg-type]
        _registered.add(registry)
    COLLECTOR.watch(owner, service)


def unwatch(owner: Any) -> None:
    COLLECTOR.unwatch(owner)


__all__ = ["COLLECTOR", "CodefyCollector", "EXPERIMENT_COUNTS_S", "ExperimentCounts", "Families", "add_service",
           "unwatch", "watch"]
