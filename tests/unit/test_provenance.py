"""Input provenance: content identities of the files a run read, hashed once per file version."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
import torch

from codefy_jupyter.engine import provenance, registry, run_graph
from codefy_jupyter.engine.context import CancelToken, EngineCallbacks, ExecutionContext, RunState
from codefy_jupyter.engine.nodes import data, models  # noqa: F401 - registers the nodes


@pytest.fixture(autouse=True)
def fresh_cache():
    provenance.clear_cache()
    yield
    provenance.clear_cache()


@pytest.fixture
def hash_calls(monkeypatch):
    calls = []
    real = provenance._sha256_file

    def counting(path):
        calls.append(str(path))
        return real(path)

    monkeypatch.setattr(provenance, "_sha256_file", counting)
    return calls


def make_run(tmp_path, on):
    return RunState(run_id="t", seed=None, device="cpu", deterministic=False, data_dir=tmp_path,
                    callbacks=EngineCallbacks(), cancel=CancelToken(), provenance=on)


def call(run, node_type, **kwargs):
    nd = registry.REGISTRY.get(node_type)
    values = {name: spec.default for name, spec in nd.params.items()}
    values.update(kwargs)
    return nd.fn(ExecutionContext(run, node_type.lower(), node_type), **values)


def write_csv(path, rows):
    path.write_text("a,b,y\n" + "".join(f"{i},{i * 2},{i % 2}\n" for i in range(rows)))
    return path


def csv_graph(path):
    return {"nodes": [{"id": "csv", "type": "CSVDataset",
                       "params": {"path": str(path), "target_column": "y", "task": "classification"}}],
            "edges": []}


def test_csv_dataset_record_in_a_run(tmp_path):
    file = write_csv(tmp_path / "d.csv", 5)
    result = run_graph(csv_graph(file), provenance=True)
    assert result.ok
    assert result.inputs == [{"node_id": "csv", "kind": "dataset", "path": str(file.resolve()),
                              "sha256": hashlib.sha256(file.read_bytes()).hexdigest(),
                              "size": file.stat().st_size, "revision": None, "rows": 5}]
    assert result.summary()["inputs"] == result.inputs


def test_off_by_default_and_nothing_hashed(tmp_path, hash_calls):
    file = write_csv(tmp_path / "d.csv", 3)
    result = run_graph(csv_graph(file))
    assert result.ok and result.inputs == [] and hash_calls == []


def test_changed_file_gets_a_new_identity(tmp_path):
    file = write_csv(tmp_path / "d.csv", 3)
    first = run_graph(csv_graph(file), provenance=True).inputs[0]
    write_csv(file, 4)
    second = run_graph(csv_graph(file), provenance=True).inputs[0]
    assert first["sha256"] != second["sha256"] and second["rows"] == 4


def test_same_content_rewritten_same_identity_but_rehashed(tmp_path, hash_calls):
    file = write_csv(tmp_path / "d.csv", 3)
    first = provenance.file_identity(file)
    stat = file.stat()
    write_csv(file, 3)
    os.utime(file, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    second = provenance.file_identity(file)
    assert first == second and len(hash_calls) == 2


def test_large_file_hashed_once_per_version(tmp_path, hash_calls):
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(3 * (1 << 20) + 17))
    identities = [provenance.file_identity(big) for _ in range(5)]
    assert len(hash_calls) == 1 and len({i["sha256"] for i in identities}) == 1
    assert identities[0]["sha256"] == hashlib.sha256(big.read_bytes()).hexdigest()
    with big.open("ab") as handle:
        handle.write(b"x")
    provenance.file_identity(big)
    assert len(hash_calls) == 2


def test_checkpoint_load_recorded(tmp_path):
    run = make_run(tmp_path, on=True)
    model = call(run, "MLP", in_features=3, out_features=2, hidden=4)["model"]
    path = call(run, "SaveModel", model=model, filename="m.pt")["path"]
    call(run, "LoadModel", model=model, path=path)
    [record] = run.inputs
    assert record["kind"] == "model" and record["node_id"] == "loadmodel" and record["rows"] is None
    assert record["sha256"] == hashlib.sha256(Path(path).read_bytes()).hexdigest()
    torch.save({"w": torch.ones(1)}, tmp_path / "other.pt")
    assert provenance.file_identity(tmp_path / "other.pt")["sha256"] != record["sha256"]


@pytest.mark.parametrize(("kwargs", "field"), [({"kind": "table"}, "'kind'"), ({"kind": "model", "rows": -1}, "'rows'"),
                                               ({"kind": "model", "revision": 3}, "'revision'")])
def test_bad_record_arguments_name_the_field(tmp_path, kwargs, field):
    file = write_csv(tmp_path / "d.csv", 1)
    ctx = ExecutionContext(make_run(tmp_path, on=True), "n", "T")
    with pytest.raises(ValueError, match=field):
        ctx.record_input(file, **kwargs)


def test_record_input_without_provenance_is_a_no_op(tmp_path, hash_calls):
    ctx = ExecutionContext(make_run(tmp_path, on=False), "n", "T")
    assert ctx.record_input(tmp_path / "missing.csv", kind="dataset") is None and hash_calls == []
