"""The view rules Python and Lab both write (a run's row, a study's cells, how a number reads),
held to the shared vectors in tests/shared/ that labextension/test/viewVectors.test.ts reads too:
a change on one side only fails here or there."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from codefy_jupyter.client.numbers import format_loss, format_p
from codefy_jupyter.kernel.widgets import experiment_rows as er
from codefy_jupyter.kernel.widgets import runs_rows as rr

SHARED = Path(__file__).resolve().parents[1] / "shared"
RUNS = json.loads((SHARED / "run_row_vectors.json").read_text())
STUDIES = json.loads((SHARED / "study_row_vectors.json").read_text())


@pytest.mark.parametrize("case", RUNS["rows"], ids=lambda c: c["run"]["id"])
def test_a_run_row_reads_as_the_vector_says(case):
    row = rr.table_row(case["run"], now=RUNS["now"])
    assert {key: row[key] for key in case["row"]} == case["row"]


@pytest.mark.parametrize(("value", "text"), RUNS["numbers"], ids=lambda v: repr(v))
def test_a_number_reads_as_the_vector_says(value, text):
    assert format_loss(value) == text


@pytest.mark.parametrize("case", STUDIES["variants"], ids=lambda c: c["variant"]["label"])
def test_a_study_row_reads_as_the_vector_says(case):
    (row,) = er.study_rows({"variants": [case["variant"]]})
    cells = {"rank": row["rank_text"], "mean": row["mean_text"], "p": row["p_text"],
             "average_rank": row["average_rank_text"], "values": row["values_text"]}
    assert cells == case["cells"]


def test_the_p_value_rule():
    assert [format_p(p) for p in (None, 0.0004, 0.001, 0.25, 1)] == ["-", "<0.001", "0.001", "0.250", "1.000"]


def test_the_vectors_cover_every_run_status_and_both_number_forms():
    statuses = {c["run"]["status"] for c in RUNS["rows"]}
    assert rr.ACTIVE | rr.FINISHED <= statuses
    texts = [text for _value, text in RUNS["numbers"]]
    assert any("e-" in t for t in texts) and any("e+" in t for t in texts) and "-" in texts
