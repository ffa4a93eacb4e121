"""The pure parts of the metrics: core/telemetry.py's counters and histograms, the bounded labels,
the reason a run ended, the frame tally, and server/metrics.py's families as Prometheus text
(parsed back with prometheus_client's own parser)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from codefy_jupyter.core.runs.tally import COMPLETED, RunTally, reason
from codefy_jupyter.core.telemetry import OTHER, Counter, Histogram, code_label, queue_label
from codefy_jupyter.core.workers.frame_tally import FrameTally
from codefy_jupyter.server import metrics
from codefy_jupyter.server.metrics import CodefyCollector, Families
from codefy_jupyter.wire import run_events as ev
from codefy_jupyter.wire.frames import Event, RunFinished


def test_a_histogram_counts_each_value_in_the_first_bucket_it_fits_cumulatively():
    h = Histogram((1.0, 5.0, 0.5), ("queue",))
    assert h.bounds == (0.5, 1.0, 5.0)
    for v in (0.1, 0.5, 0.7, 1.0, 3.0, 99.0):
        h.observe(v, ("cpu",))
    h.observe(2.0, ("cuda:0",))
    cpu = h.samples()[("cpu",)]
    assert cpu.buckets == (2, 4, 5)  # <= 0.5: 0.1 and 0.5 (a bound is inclusive), <= 1: and 0.7, 1.0...
    assert cpu.count == 6 and cpu.sum == pytest.approx(104.3)
    assert h.samples()[("cuda:0",)].buckets == (0, 0, 1)


def test_labels_must_match_the_declared_names_and_counters_only_go_up():
    with pytest.raises(ValueError, match="expected labels"):
        Histogram((1.0,), ("queue",)).observe(1.0)
    with pytest.raises(ValueError, match="at least one bucket"):
        Histogram(())
    c = Counter(("status", "reason"))
    c.inc(("failed", "node_failed"))
    c.inc(("failed", "node_failed"), 2)
    assert c.value(("failed", "node_failed")) == 3 and c.value(("failed", "x")) == 0
    with pytest.raises(ValueError, match="only goes up"):
        c.inc(("failed", "node_failed"), -1)
    with pytest.raises(ValueError, match="expected labels"):
        c.inc(("failed",))


@pytest.mark.parametrize("key, label", [
    ("cpu", "cpu"), ("cuda:1", "cuda:1"), ("any/cuda", "any/cuda"), ("pool:one-shot/cuda:0", "pool:one-shot/cuda:0"),
    ("box/cuda:1", "box/cuda:1"), ("gpu-box.job123/cuda:0", "gpu-box/cuda:0"), ("box.job9/cpu", "box/cpu")])
def test_a_one_shot_instance_is_folded_out_of_the_queue_label(key, label):
    assert queue_label(key) == label


@pytest.mark.parametrize("code, label", [("node_failed", "node_failed"), ("worker_gone", "worker_gone"),
                                         (None, OTHER), ("", OTHER), ("Not A Code", OTHER), ("x" * 60, OTHER),
                                         (42, OTHER), ("run 3f2a/../", OTHER)])
def test_reason_codes_outside_our_vocabulary_become_other(code, label):
    assert code_label(code) == label


def test_the_reason_a_run_ended():
    done = ev.execution_complete("r", duration_s=1.0, metrics={}, executed=1, cached=0)
    assert reason("succeeded", done, None) == COMPLETED
    failure = {"code": "node_failed", "node_id": "d", "message": "division by zero"}
    assert reason("failed", ev.execution_error("r", failure), failure) == "node_failed"
    stopped = ev.execution_stopped("r", status="cancelled", code="cancelled", message="cancel requested")
    assert reason("cancelled", stopped, None) == "cancelled"
    gone = ev.execution_stopped("r", status="interrupted", code="worker gone!", message="?")
    assert reason("interrupted", gone, None) == OTHER
    assert reason("failed", ev.execution_error("r", {"message": "failed"}), {"message": "failed"}) == OTHER


def test_the_run_tally_counts_starts_waits_ends_and_durations():
    tally = RunTally()
    tally.started("box.job1/cuda:0", 112.0, 100.0)
    tally.started("cpu", 99.5, 100.0)  # a clock step back counts as no wait
    tally.started("cpu", 100.0, None)  # its submit time unknown: started, no wait observed
    closing = ev.execution_stopped("r", status="cancelled", code="cancelled", message="before it started")
    tally.finished("cancelled", closing, None, None)  # never started: no duration
    tally.finished("succeeded", ev.execution_complete("r", duration_s=3, metrics={}, executed=1, cached=0), None, 3.0)
    assert tally.started_total.samples() == {("box/cuda:0",): 1, ("cpu",): 2}
    waits = tally.wait_seconds.samples()
    assert (waits[("cpu",)].count, waits[("cpu",)].sum) == (1, 0)
    assert (waits[("box/cuda:0",)].count, waits[("box/cuda:0",)].sum) == (1, 12.0)
    assert tally.finished_total.samples() == {("cancelled", "cancelled"): 1, ("succeeded", COMPLETED): 1}
    assert list(tally.duration_seconds.samples()) == [("succeeded",)]


def test_the_frame_tally_counts_types_replays_and_duplicates():
    tally = FrameTally()
    run = SimpleNamespace(replay_until=3)  # the agent had sent up to seq 3 when it reconnected
    for seq, new in ((2, False), (3, True), (4, True)):
        frame = Event(run_id="r", seq=seq, event={"type": "node_status", "payload": {}})
        tally.received(frame)
        tally.accepted(run, frame, new)  # type: ignore[arg-type]
    tally.received(RunFinished(run_id="r", seq=5, status="succeeded"))
    assert tally.received_total.samples() == {("event",): 3, ("run_finished",): 1}
    assert tally.replayed_total.value() == 2 and tally.duplicate_total.value() == 1


class _Source:
    def __init__(self, families: Families) -> None:
        self.families = families

    def collect(self):
        return list(self.families.metrics())


def _exposed(families: Families) -> dict[tuple[str, frozenset], float]:
    registry = CollectorRegistry()
    registry.register(_Source(families))  # type: ignore[arg-type]
    text = generate_latest(registry).decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}


def test_families_sum_two_run_queues_and_write_valid_prometheus_text():
    families = Families()
    for waits in ((0.2, 2.0), (30.0,)):
        h = Histogram((1.0, 10.0), ("queue",))
        for w in waits:
            h.observe(w, ("cpu",))
        families.histogram("codefy_run_queue_wait_seconds", "waits", h)
        c = Counter(("queue",))
        c.inc(("cpu",), len(waits))
        families.counter("codefy_runs_started", "started", c)
        families.gauge("codefy_queue_depth", "depth", ("queue",), {("cpu",): 1.0})
    got = _exposed(families)
    assert got[("codefy_runs_started_total", frozenset({("queue", "cpu")}))] == 3
    assert got[("codefy_queue_depth", frozenset({("queue", "cpu")}))] == 2
    bucket = {le: got[("codefy_run_queue_wait_seconds_bucket", frozenset({("queue", "cpu"), ("le", le)}))]
              for le in ("1.0", "10.0", "+Inf")}
    assert bucket == {"1.0": 1, "10.0": 2, "+Inf": 3}
    assert got[("codefy_run_queue_wait_seconds_count", frozenset({("queue", "cpu")}))] == 3
    assert got[("codefy_run_queue_wait_seconds_sum", frozenset({("queue", "cpu")}))] == pytest.approx(32.2)


def test_one_collector_per_registry_however_many_servers_are_watched():
    registry = CollectorRegistry()
    before = metrics.COLLECTOR.watched
    first, second = object(), object()
    metrics.watch(first, SimpleNamespace(), registry)  # type: ignore[arg-type]
    metrics.watch(second, SimpleNamespace(), registry)  # type: ignore[arg-type]  (no DuplicateTimeseries)
    assert metrics.COLLECTOR.watched == before + 2
    metrics.unwatch(first)
    metrics.unwatch(second)
    metrics.unwatch(second)  # twice: nothing
    assert metrics.COLLECTOR.watched == before
    assert CodefyCollector().collect() == []
