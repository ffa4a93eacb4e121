"""What a worker's run frames may leave in the control plane: bounded errors and run facts."""

from __future__ import annotations

from codefy_jupyter.core.workers import frame_bounds as fb


def test_an_error_within_bounds_is_kept_as_it_came():
    error = {"type": "ValueError", "message": "bad", "traceback": "Traceback...\nValueError: bad",
             "node_id": "n", "exit_code": 1, "signal": None, "params": {"field": "x"}}
    assert fb.bounded_error(error) == error


def test_texts_are_cut_a_message_keeps_its_head_a_traceback_and_output_keep_their_tail():
    error = fb.bounded_error({"message": "A" + "m" * fb.ERROR_MESSAGE_CHARS,
                              "traceback": "t" * fb.ERROR_TRACEBACK_CHARS + "Z",
                              "output_tail": "o" * fb.ERROR_OUTPUT_TAIL_CHARS + "END",
                              "type": "T" * (fb.ERROR_OTHER_TEXT_CHARS + 1)})
    assert error["truncated"] == ["message", "output_tail", "traceback", "type"]
    assert error["message"].startswith("Am") and error["message"].endswith("[1 characters cut]")
    assert error["traceback"].startswith("[1 characters cut]\n") and error["traceback"].endswith("Z")
    assert error["output_tail"].endswith("END") and "[3 characters cut]" in error["output_tail"]
    assert len(error["type"]) < fb.ERROR_OTHER_TEXT_CHARS + 40


def test_oversized_structured_values_and_odd_keys_are_dropped():
    error = fb.bounded_error({"message": "x", "params": {"big": "y" * fb.ERROR_OTHER_VALUE_BYTES},
                              "small": [1, 2], 7: "not a field"})
    assert error == {"message": "x", "small": [1, 2], "truncated": ["params"]}


def test_facts_of_unknown_kinds_are_kept_up_to_the_cap_known_kinds_by_size_only():
    assert fb.fact_kept("custom", {"a": 1}, 0) is None
    assert fb.fact_kept("custom", {"a": 1}, fb.FACTS_KEPT_PER_RUN - 1) is None
    assert fb.fact_kept("custom", {"a": 1}, fb.FACTS_KEPT_PER_RUN) == "too_many"
    assert fb.fact_kept("custom", {"a": "x" * fb.FACT_BYTES}, 0) == "too_large"
    # A fingerprint or the sampled system metrics replace the run's one copy: never "too many".
    assert fb.fact_kept("fingerprint", {"document": {"p": "x" * fb.FACT_BYTES}}, 10_000) is None
    assert fb.fact_kept("fingerprint", {"document": "x" * fb.FINGERPRINT_BYTES}, 0) == "too_large"
    assert fb.fact_kept("system_metrics", {"cpu": 1}, 10_000) is None
