"""The loss-checker's verdicts (benchmarks/chaos_audit.py) on logs built by hand: each kind of loss
and duplication it exists to find is found, and a whole log is clean."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import chaos_audit as audit  # noqa: E402

CHAIN = [("vals", "List"), ("nap0", "Sleep"), ("m", "Mean")]
EXPECTED = audit.expected_keys(CHAIN, ("m", "mean"))


def whole_log() -> list[dict]:
    payloads = [("execution_start", {})]
    for node, _ in CHAIN:
        payloads.append(("node_status", {"node_id": node, "status": "running"}))
        if node == "m":
            payloads.append(("metric", {"node_id": "m", "name": "mean", "value": 1.5, "step": None}))
        payloads.append(("node_status", {"node_id": node, "status": "done"}))
    payloads.append(("execution_complete", {"status": "succeeded"}))
    return [{"seq": i + 1, "type": t, "payload": p} for i, (t, p) in enumerate(payloads)]


def renumber(events: list[dict]) -> list[dict]:
    return [{**e, "seq": i + 1} for i, e in enumerate(events)]


def run(status: str = "succeeded", last_seq: int | None = None) -> dict:
    return {"id": "r1", "status": status, "worker_id": "box", "last_seq": last_seq}


def test_a_whole_log_is_clean():
    events = whole_log()
    a = audit.audit_run(run(last_seq=len(events)), events, EXPECTED)
    assert (a["lost"], a["duplicated"], a["gaps"]) == (0, 0, 0) and audit.run_ok(a)


def test_system_metrics_sampled_in_between_are_neither_unexpected_nor_lost():
    events = whole_log()
    sampled = [{"seq": 0, "type": "metric", "payload": {"node_id": None, "name": name, "value": 1.0, "step": step}}
               for step in range(3) for name in ("system/cpu_percent", "system/rss_bytes")]
    events = renumber(events[:3] + sampled + events[3:])
    a = audit.audit_run(run(last_seq=len(events)), events, EXPECTED)
    assert a["unexpected_events"] == [] and (a["lost"], a["duplicated"], a["gaps"]) == (0, 0, 0) and audit.run_ok(a)
    # Their seqs are checked as every event's are: one missing is a gap.
    del events[4]
    a = audit.audit_run(run(last_seq=len(events) + 1), events, EXPECTED)
    assert a["gaps"] == 1 and not audit.run_ok(a)


def test_a_missing_seq_is_a_gap_and_a_loss():
    events = whole_log()
    del events[3]
    a = audit.audit_run(run(), events, EXPECTED)
    assert a["gaps"] == 1 and a["missing_seqs"] == [4] and a["lost"] == 2 and not audit.run_ok(a)
    assert a["lost_events"] == ["node_status/nap0/running"]


def test_a_tail_the_run_row_counts_but_the_log_lacks_is_lost():
    events = whole_log()
    a = audit.audit_run(run(last_seq=len(events) + 2), events, EXPECTED)
    assert a["missing_seqs"] == [len(events) + 1, len(events) + 2] and not audit.run_ok(a)


def test_an_event_acknowledged_then_dropped_is_lost_though_the_seqs_are_gapless():
    events = whole_log()
    del events[4]  # nap0 done never written, the rest numbered on
    a = audit.audit_run(run(), renumber(events), EXPECTED)
    assert a["gaps"] == 0 and a["lost"] == 1 and a["lost_events"] == ["node_status/nap0/done"]


def test_a_seq_twice_and_a_frame_replayed_under_a_new_seq_are_duplicates():
    events = whole_log()
    twice = audit.audit_run(run(), events[:3] + [events[2]] + events[3:], EXPECTED)
    assert twice["duplicate_seqs"] == [3] and twice["duplicated"] >= 1
    replayed = renumber(events[:4] + [events[2], events[3]] + events[4:])
    a = audit.audit_run(run(), replayed, EXPECTED)
    assert a["gaps"] == 0 and a["duplicated"] == 2 and a["out_of_order"] == 1 and not audit.run_ok(a)


def test_an_interrupted_run_may_stop_part_way_but_has_one_closing_event_last():
    events = whole_log()[:4] + [{"seq": 5, "type": "execution_stopped", "payload": {"status": "interrupted"}}]
    assert audit.run_ok(audit.audit_run(run("interrupted"), events, EXPECTED))
    reopened = events + [{"seq": 6, "type": "node_status", "payload": {"node_id": "nap0", "status": "done"}}]
    assert audit.audit_run(run("interrupted"), reopened, EXPECTED)["closing_problem"] is not None
    assert not audit.run_ok(audit.audit_run(run("running"), whole_log()[:4], EXPECTED))  # not ended


def test_a_succeeded_run_without_its_last_events_lost_them():
    events = whole_log()
    a = audit.audit_run(run(), renumber(events[:3] + events[-1:]), EXPECTED)
    assert a["lost"] == len(EXPECTED) - 3


def study_doc(attempts: list[dict]) -> dict:
    return {"id": "s1", "status": "succeeded",
            "variants": [{"label": "v0", "attempts": attempts,
                          "repetitions": [{"repetition": 0, "current": attempts[-1]}]}]}


def test_a_repetition_retried_after_an_interruption_has_exactly_one_run_that_counts():
    attempts = [{"id": "a1", "repetition": 0, "attempt": 1, "status": "interrupted"},
                {"id": "a2", "repetition": 0, "attempt": 2, "status": "succeeded"}]
    runs = [{"id": "r1", "status": "interrupted", "study_attempt_id": "a1"},
            {"id": "r2", "status": "succeeded", "study_attempt_id": "a2"}]
    s = audit.audit_study(study_doc(attempts), runs)
    assert s["problems"] == [] and s["exactly_one_per_repetition"] == 1 and s["retried_attempts"] == 1


def test_two_succeeded_runs_or_two_runs_of_one_attempt_break_the_rule():
    attempts = [{"id": "a1", "repetition": 0, "attempt": 1, "status": "succeeded"}]
    runs = [{"id": "r1", "status": "succeeded", "study_attempt_id": "a1"},
            {"id": "r2", "status": "succeeded", "study_attempt_id": "a1"},
            {"id": "r3", "status": "succeeded", "study_attempt_id": "nobody"}]
    s = audit.audit_study(study_doc(attempts), runs)
    assert s["exactly_one_per_repetition"] == 0 and s["stray_runs"] == ["r3"]
    assert any("2 succeeded runs" in p for p in s["problems"]) and any("more than one run" in p for p in s["problems"])
