"""A sweep's CSV export names each child's data identity when its children recorded provenance."""

from __future__ import annotations

import csv
import io

from codefy_jupyter.server.sweep_handlers import sweep_csv

DOC = {"params": [{"node_id": "s", "param": "x"}], "objective": {"metric": "loss"},
       "variants": [{"rank": 1, "index": 0, "run_id": "r0", "status": "succeeded", "objective": 0.5,
                     "objective_node_id": "t", "ambiguous_producers": None, "seed": 1,
                     "params": [{"value": 2.0}]},
                    {"rank": 2, "index": 1, "run_id": "r1", "status": "succeeded", "objective": 0.7,
                     "objective_node_id": "t", "ambiguous_producers": None, "seed": 2,
                     "params": [{"value": 3.0}]}]}


def rows(text):
    return list(csv.DictReader(io.StringIO(text)))


def test_without_records_the_table_is_as_before():
    assert "data_identity" not in sweep_csv(DOC, {}).splitlines()[0]
    assert sweep_csv(DOC, {}) == sweep_csv(DOC)


def test_each_child_gets_the_identities_of_what_it_read():
    a = {"kind": "dataset", "path": "/d/a.csv", "sha256": "ab" * 32}
    m = {"kind": "model", "path": "/d/m.pt", "sha256": "cd" * 32}
    got = rows(sweep_csv(DOC, {"r0": [a, m]}))
    assert got[0]["data_identity"] == f"dataset:/d/a.csv@{'ab' * 32};model:/d/m.pt@{'cd' * 32}"
    assert got[1]["data_identity"] == "" and got[1]["s.x"] == "3.0"
