"""A run's "Data and models" outside Lab: the notebook RunView's rows (run_state_view.input_rows,
synced as the `inputs` trait), the words `codefy runs show` prints, and the data_identity column
a sweep's and a study's CSV export share (wire/provenance.py). The records come from a real engine
run with provenance on."""

from __future__ import annotations

import csv
import hashlib
import io

import pytest

from codefy_jupyter.cli.runs import _input_text
from codefy_jupyter.core.experiments.studies.views import study_csv
from codefy_jupyter.engine import provenance as engine_provenance
from codefy_jupyter.engine import run_graph
from codefy_jupyter.kernel.widgets import RunView
from codefy_jupyter.kernel.widgets.run_state_view import RunViewState, apply_row, input_rows, to_traits
from codefy_jupyter.server.sweep_handlers import sweep_csv
from codefy_jupyter.wire.provenance import data_identity, describe, identity_column

SHA = "ab" * 32


@pytest.fixture(autouse=True)
def fresh_cache():
    engine_provenance.clear_cache()
    yield
    engine_provenance.clear_cache()


def recorded(tmp_path):
    """The records of a real run that read a 7-row CSV."""
    data = tmp_path / "iris.csv"
    data.write_text("a,b,y\n" + "".join(f"{i},{i * 2},{i % 2}\n" for i in range(7)))
    graph = {"nodes": [{"id": "csv", "type": "CSVDataset",
                        "params": {"path": str(data), "target_column": "y", "task": "classification"}}],
             "edges": []}
    result = run_graph(graph, data_dir=tmp_path / "run", provenance=True)
    assert result.ok, result.error
    return data, result.inputs


def test_the_run_view_shows_what_a_provenance_run_read(tmp_path):
    data, inputs = recorded(tmp_path)
    digest = hashlib.sha256(data.read_bytes()).hexdigest()
    running = apply_row(RunViewState("r"), {"status": "running"})
    assert to_traits(running)["inputs"] == []  # nothing until the run's row carries them
    done = apply_row(running, {"status": "succeeded", "inputs": inputs})
    assert to_traits(done)["inputs"] == [{"kind": "dataset", "path": str(data.resolve()), "sha256": digest,
                                          "digest": digest[:12], "detail": f"{data.stat().st_size} bytes, 7 rows"}]
    # A later row without the key (a row of a list) keeps them; the trait is one the widget syncs.
    assert apply_row(done, {"status": "succeeded"}).inputs == done.inputs
    assert "inputs" in RunView.class_trait_names(sync=True)


def test_rows_say_size_rows_and_revision_when_known_and_skip_what_they_cannot_read():
    rows = input_rows([
        {"node_id": "csv", "kind": "dataset", "path": "/d/a.csv", "sha256": SHA, "size": 120, "revision": "v3",
         "rows": 10},
        {"node_id": "load", "kind": "model", "path": "/d/m.pt", "sha256": SHA, "size": 5, "revision": None,
         "rows": None},
        {"kind": "model", "path": "/d/broken.pt"},  # no digest, no size: a newer server's shape
        {"kind": "model", "path": "/d/odd.pt", "sha256": 7, "size": 1},
    ])
    assert [dict(r) for r in rows] == [
        {"kind": "dataset", "path": "/d/a.csv", "sha256": SHA, "digest": "abababababab",
         "detail": "120 bytes, 10 rows, revision v3"},
        {"kind": "model", "path": "/d/m.pt", "sha256": SHA, "digest": "abababababab", "detail": "5 bytes"}]


def test_codefy_runs_show_and_the_view_use_the_same_words(tmp_path):
    _, inputs = recorded(tmp_path)
    shown = describe(inputs[0])
    assert _input_text(inputs[0]) == f"{shown['path']} sha256:{shown['digest']} ({shown['detail']})"
    assert shown["detail"].endswith(", 7 rows")


def test_the_identity_column_is_absent_without_records_and_empty_for_a_run_without_any():
    assert identity_column({})[0] == [] and identity_column({})[1]("r0") == []
    a = {"kind": "dataset", "path": "/d/a.csv", "sha256": "ab" * 32}
    m = {"kind": "model", "path": "/d/m.pt", "sha256": "cd" * 32}
    header, cells = identity_column({"r0": [a, m]})
    assert header == ["data_identity"]
    assert cells("r0") == [f"dataset:/d/a.csv@{'ab' * 32};model:/d/m.pt@{'cd' * 32}"]
    assert cells("r1") == [""] and cells(None) == [""]  # a repetition not submitted yet has no run
    assert data_identity([a]) == f"dataset:/d/a.csv@{'ab' * 32}"


def study_view():
    def rep(n, run_id):
        return {"repetition": n, "seed": 7 + n,
                "current": {"attempt": 1, "status": "succeeded", "objective_value": 1.0, "run_id": run_id,
                            "stop_reason": None} if run_id else None}
    variant = {"rank": 1, "tie": False, "eligible": True, "aggregate": {"mean": 1.0, "std": None},
               "average_rank": 1.0}
    return {"id": "s1", "objective": {"node_id": "m", "metric": "mean", "direction": "minimize"},
            "variants": [{**variant, "index": 0, "label": "a", "repetitions": [rep(0, "r0"), rep(1, "r1")]},
                         {**variant, "index": 1, "label": "b", "repetitions": [rep(0, "r2"), rep(1, None)]}]}


def test_a_study_export_gets_each_childs_identity_as_a_sweep_export_does(tmp_path):
    _, inputs = recorded(tmp_path)
    plain = study_csv(study_view())
    assert "data_identity" not in plain.splitlines()[0] and study_csv(study_view(), {}) == plain
    rows = list(csv.DictReader(io.StringIO(study_csv(study_view(), {"r0": inputs, "r2": inputs}))))
    assert [(r["label"], r["run_id"], r["data_identity"]) for r in rows] == [
        ("a", "r0", data_identity(inputs)), ("a", "r1", ""), ("b", "r2", data_identity(inputs)), ("b", "", "")]
    # The sweep's export writes the same cell for the same records.
    doc = {"params": [], "objective": {"metric": "mean"},
           "variants": [{"rank": 1, "index": 0, "run_id": "r0", "status": "succeeded", "objective": 1.0,
                         "objective_node_id": "m", "ambiguous_producers": None, "seed": 1, "params": []}]}
    sweep = list(csv.DictReader(io.StringIO(sweep_csv(doc, {"r0": inputs}))))
    assert sweep[0]["data_identity"] == rows[0]["data_identity"]
