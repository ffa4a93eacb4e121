"""Data, model, training and evaluation nodes called directly, on real torch (CPU)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from codefy_jupyter.engine import registry
from codefy_jupyter.engine.context import CancelToken, EngineCallbacks, ExecutionContext, RunState
from codefy_jupyter.engine.errors import RunCancelled
from codefy_jupyter.engine.nodes import data, evaluation, models, training  # noqa: F401 - registers the nodes
from codefy_jupyter.engine.nodes.data import Dataset


def make_run(tmp_path, seed=None, events=None, device="cpu"):
    events = [] if events is None else events
    state = RunState(run_id="t", seed=seed, device=device, deterministic=False, data_dir=tmp_path,
                     callbacks=EngineCallbacks.all_to(events.append), cancel=CancelToken())
    state.events = events
    return state


@pytest.fixture
def run(tmp_path):
    return make_run(tmp_path)


def call(run, node_type, node_id=None, **kwargs):
    """Call a node the way the engine does: params defaulted, inputs and params as keywords."""
    nd = registry.REGISTRY.get(node_type)
    values = {name: spec.default for name, spec in nd.params.items()}
    values.update(kwargs)
    return nd.fn(ExecutionContext(run, node_id or node_type.lower(), node_type), **values)


def indexed_dataset(n):
    """Rows whose single feature is their own index, so a split's rows can be identified."""
    return Dataset(torch.arange(n, dtype=torch.float32).unsqueeze(1), torch.zeros(n, 1), "regression", 0)


def row_ids(dataset):
    return dataset.features[:, 0].long().tolist()


def metric_events(run, name):
    return [e for e in run.events if e["event"] == "metric" and e["name"] == name]


def training_setup(run, n_samples=240, batch_size=32, lr=1e-2, seed=0, task="classification"):
    if task == "classification":
        ds = call(run, "SyntheticClassification", n_samples=n_samples, n_features=8, n_classes=3, noise=1.5,
                  seed=seed)["dataset"]
    else:
        ds = call(run, "SyntheticRegression", n_samples=n_samples, n_features=4, seed=seed)["dataset"]
    split = call(run, "TrainTestSplit", dataset=ds, test_fraction=0.25)
    loader = call(run, "DataLoader", dataset=split["train"], batch_size=batch_size)["dataloader"]
    model = call(run, "MLP", dataset=split["train"], hidden=16)["model"]
    opt = call(run, "Optimizer", model=model, kind="adam", lr=lr)["optimizer"]
    return {"model": model, "optimizer": opt, "loss": call(run, "Loss")["loss"], "train": loader,
            "val": split["test"]}


# ---------------------------------------------------------------------------------------------
# Data


def test_synthetic_classification_shapes_and_determinism(run):
    ds = call(run, "SyntheticClassification", n_samples=90, n_features=5, n_classes=3, seed=4)["dataset"]
    assert ds.features.shape == (90, 5) and ds.features.dtype == torch.float32
    assert ds.targets.shape == (90,) and ds.targets.dtype == torch.int64
    assert ds.task == "classification" and ds.n_classes == 3 and ds.out_features == 3
    assert torch.bincount(ds.targets).tolist() == [30, 30, 30]
    again = call(run, "SyntheticClassification", n_samples=90, n_features=5, n_classes=3, seed=4)["dataset"]
    other = call(run, "SyntheticClassification", n_samples=90, n_features=5, n_classes=3, seed=5)["dataset"]
    assert torch.equal(ds.features, again.features) and torch.equal(ds.targets, again.targets)
    assert not torch.equal(ds.features, other.features)


def test_synthetic_regression_shapes_and_determinism(tmp_path):
    # Its own seed decides the data; the run seed does not.
    a = call(make_run(tmp_path, seed=1), "SyntheticRegression", n_samples=50, n_features=3, seed=2)["dataset"]
    b = call(make_run(tmp_path, seed=99), "SyntheticRegression", n_samples=50, n_features=3, seed=2)["dataset"]
    assert a.features.shape == (50, 3) and a.targets.shape == (50, 1) and a.targets.dtype == torch.float32
    assert a.task == "regression" and a.out_features == 1
    assert torch.equal(a.features, b.features) and torch.equal(a.targets, b.targets)


def test_train_test_split_is_disjoint_and_covering(run):
    out = call(run, "TrainTestSplit", dataset=indexed_dataset(50), test_fraction=0.2, seed=3)
    train, test = row_ids(out["train"]), row_ids(out["test"])
    assert len(test) == 10 and len(train) == 40
    assert sorted(train + test) == list(range(50))
    unshuffled = call(run, "TrainTestSplit", dataset=indexed_dataset(50), test_fraction=0.2, shuffle=False)
    assert row_ids(unshuffled["test"]) == list(range(10))


def test_train_test_split_refuses_an_empty_side(run):
    with pytest.raises(ValueError, match="param 'test_fraction'"):
        call(run, "TrainTestSplit", dataset=indexed_dataset(10), test_fraction=0.01)


def test_kfold_folds_are_disjoint_covering_and_ignore_the_run_seed(tmp_path):
    n, k = 23, 5
    tests = []
    for fold in range(k):
        per_seed = [call(make_run(tmp_path, seed=s), "KFoldSplit", dataset=indexed_dataset(n), n_folds=k,
                         fold=fold, seed=7) for s in (None, 1, 12345)]
        ids = [(row_ids(o["train"]), row_ids(o["test"])) for o in per_seed]
        assert ids[0] == ids[1] == ids[2]
        train, test = ids[0]
        assert sorted(train + test) == list(range(n))
        assert len(test) in (4, 5)
        tests.append(set(test))
    assert set().union(*tests) == set(range(n))
    assert sum(len(t) for t in tests) == n  # pairwise disjoint
    other_seed = call(make_run(tmp_path), "KFoldSplit", dataset=indexed_dataset(n), n_folds=k, fold=0, seed=8)
    assert set(row_ids(other_seed["test"])) != tests[0]


def test_kfold_fold_out_of_range_names_fold(run):
    with pytest.raises(ValueError, match=r"param 'fold' \(5\) must be < n_folds \(5\)"):
        call(run, "KFoldSplit", dataset=indexed_dataset(20), n_folds=5, fold=5)
    with pytest.raises(ValueError, match="param 'n_folds'"):
        call(run, "KFoldSplit", dataset=indexed_dataset(3), n_folds=4, fold=0)


def test_dataloader_batches_cover_the_data_and_reshuffle_per_epoch(run):
    loader = call(run, "DataLoader", dataset=indexed_dataset(10), batch_size=4)["dataloader"]
    assert len(loader) == 3
    epoch1 = [row_ids(Dataset(x, y, "regression")) for x, y in loader.batches(1)]
    epoch2 = [row_ids(Dataset(x, y, "regression")) for x, y in loader.batches(2)]
    assert [len(b) for b in epoch1] == [4, 4, 2]
    assert sorted(sum(epoch1, [])) == list(range(10)) == sorted(sum(epoch2, []))
    assert epoch1 != epoch2
    ordered = call(run, "DataLoader", dataset=indexed_dataset(10), batch_size=4, shuffle=False)["dataloader"]
    assert [row_ids(Dataset(x, y, "regression")) for x, y in ordered] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


def test_dataloader_order_follows_the_run_seed(tmp_path):
    def order(seed):
        loader = call(make_run(tmp_path, seed=seed), "DataLoader", dataset=indexed_dataset(64),
                      batch_size=8)["dataloader"]
        return [x[:, 0].tolist() for x, _ in loader.batches(1)]

    assert order(3) == order(3)
    assert order(3) != order(4)


def test_csv_dataset_reads_classification_and_regression(run, tmp_path):
    file = tmp_path / "d.csv"
    file.write_text("a,label,b\n1,cat,2.5\n3,dog,4\n5,cat,6\n")
    ds = call(run, "CSVDataset", path=str(file), target_column="label", task="classification")["dataset"]
    assert ds.features.tolist() == [[1.0, 2.5], [3.0, 4.0], [5.0, 6.0]]
    assert ds.targets.tolist() == [0, 1, 0] and ds.class_names == ("cat", "dog") and ds.n_classes == 2
    numeric = tmp_path / "n.csv"
    numeric.write_text("x1,x2,y\n1,2,0.5\n3,4,1.5\n")
    reg = call(run, "CSVDataset", path=str(numeric), target_column="y", task="regression")["dataset"]
    assert reg.targets.tolist() == [[0.5], [1.5]] and reg.feature_names == ("x1", "x2") and reg.task == "regression"


def test_csv_dataset_errors_name_the_file_and_column(run, tmp_path):
    missing = tmp_path / "nope.csv"
    with pytest.raises(FileNotFoundError, match="param 'path'.*nope.csv"):
        call(run, "CSVDataset", path=str(missing), target_column="y", task="regression")
    file = tmp_path / "d.csv"
    file.write_text("a,y\n1,2\nx,3\n")
    with pytest.raises(ValueError, match="param 'target_column': 'z' is not a column of .*d.csv"):
        call(run, "CSVDataset", path=str(file), target_column="z", task="regression")
    with pytest.raises(ValueError, match="line 3, column 'a': 'x' is not a number"):
        call(run, "CSVDataset", path=str(file), target_column="y", task="regression")


# ---------------------------------------------------------------------------------------------
# Models


def test_mlp_infers_sizes_and_seeded_init_is_reproducible(tmp_path):
    ds = call(make_run(tmp_path), "SyntheticClassification", n_samples=20, n_features=6, n_classes=4)["dataset"]
    a = call(make_run(tmp_path, seed=5), "MLP", dataset=ds, hidden=8, layers=2)["model"]
    b = call(make_run(tmp_path, seed=5), "MLP", dataset=ds, hidden=8, layers=2)["model"]
    assert a(ds.features).shape == (20, 4)
    assert not a.training
    assert sum(isinstance(m, torch.nn.Linear) for m in a) == 3
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


def test_mlp_without_sizes_names_the_param(run):
    with pytest.raises(ValueError, match="param 'in_features' is 0 and input 'dataset' is not connected"):
        call(run, "MLP")
    ds = call(run, "SyntheticRegression", n_samples=10, n_features=3)["dataset"]
    with pytest.raises(ValueError, match="param 'in_features' is 5"):
        call(run, "MLP", dataset=ds, in_features=5)


def test_optimizer_and_loss(run):
    model = call(run, "MLP", in_features=3, out_features=2)["model"]
    sgd = call(run, "Optimizer", model=model, kind="sgd", lr=0.5, momentum=0.9)["optimizer"]
    assert isinstance(sgd, torch.optim.SGD) and sgd.defaults["lr"] == 0.5 and sgd.defaults["momentum"] == 0.9
    adam = call(run, "Optimizer", model=model, kind="adam", lr=0.01)["optimizer"]
    assert isinstance(adam, torch.optim.Adam)
    auto = call(run, "Loss", kind="auto")["loss"]
    assert isinstance(auto.build("classification"), torch.nn.CrossEntropyLoss)
    assert isinstance(auto.build("regression"), torch.nn.MSELoss)
    with pytest.raises(ValueError, match="input 'loss' is cross_entropy"):
        call(run, "Loss", kind="cross_entropy")["loss"].build("regression")


def test_save_and_load_model_round_trip(run, tmp_path):
    model = call(run, "MLP", in_features=3, out_features=2, hidden=4)["model"]
    path = call(run, "SaveModel", model=model, filename="weights/m.pt")["path"]
    assert path == str((tmp_path / "weights" / "m.pt").resolve())
    [artifact] = [e for e in run.events if e["event"] == "artifact"]
    assert artifact["kind"] == "model" and artifact["path"] == path and artifact["meta"]["parameters"] == \
        sum(p.numel() for p in model.parameters()) == (3 * 4 + 4) + (4 * 4 + 4) + (4 * 2 + 2)
    fresh = call(run, "MLP", in_features=3, out_features=2, hidden=4)["model"]
    before = [p.clone() for p in fresh.parameters()]
    loaded = call(run, "LoadModel", model=fresh, path=path)["model"]
    assert all(torch.equal(p, q) for p, q in zip(loaded.parameters(), model.parameters()))
    assert all(torch.equal(p, q) for p, q in zip(fresh.parameters(), before))  # input left untouched
    by_name = call(run, "LoadModel", model=fresh, filename="weights/m.pt")["model"]
    assert all(torch.equal(p, q) for p, q in zip(by_name.parameters(), model.parameters()))


def test_model_file_errors_name_the_field(run):
    model = call(run, "MLP", in_features=3, out_features=2)["model"]
    with pytest.raises(FileNotFoundError, match="param 'filename': no such file"):
        call(run, "LoadModel", model=model, filename="missing.pt")
    with pytest.raises(FileNotFoundError, match="input 'path': no such file"):
        call(run, "LoadModel", model=model, path="/nonexistent/x.pt")
    with pytest.raises(ValueError, match="param 'filename'.*outside the run's data directory"):
        call(run, "SaveModel", model=model, filename="../escape.pt")


# ---------------------------------------------------------------------------------------------
# Training


def test_training_loop_lowers_the_loss_and_logs_per_epoch(run):
    setup = training_setup(run)
    before = [p.clone() for p in setup["model"].parameters()]
    out = call(run, "TrainingLoop", **setup, epochs=6)
    train_loss = metric_events(run, "train_loss")
    assert [e["step"] for e in train_loss] == [1, 2, 3, 4, 5, 6]
    assert train_loss[-1]["value"] < 0.5 * train_loss[0]["value"]
    assert [e["step"] for e in metric_events(run, "val_loss")] == [1, 2, 3, 4, 5, 6]
    assert metric_events(run, "val_accuracy")[-1]["value"] > 0.8
    assert out["history"]["train_loss"] == train_loss[-1]["value"] and out["history"]["epochs"] == 6
    # The input model (possibly a cached, shared output) is not trained in place.
    assert all(torch.equal(p, q) for p, q in zip(setup["model"].parameters(), before))
    assert not all(torch.equal(p, q) for p, q in zip(out["model"].parameters(), before))
    progress = [e for e in run.events if e["event"] == "progress"]
    assert len(progress) == 6 * 6 and progress[-1]["value"] == progress[-1]["total"] == 36
    assert progress[0]["label"] == "epoch 1/6"


def test_training_loop_regression_with_val_loader(run):
    setup = training_setup(run, task="regression")
    setup["val_loader"] = call(run, "DataLoader", dataset=setup.pop("val"), batch_size=16)["dataloader"]
    out = call(run, "TrainingLoop", **setup, epochs=8)
    val_loss = metric_events(run, "val_loss")
    assert len(val_loss) == 8 and val_loss[-1]["value"] < val_loss[0]["value"]
    assert not metric_events(run, "val_accuracy")
    assert set(out["history"]) == {"train_loss", "val_loss", "epochs"}


def test_training_loop_stops_within_one_batch_of_cancel(tmp_path):
    events = []
    state = make_run(tmp_path, events=events)
    progress_after_cancel = []

    def on_event(event):
        events.append(event)
        if event["event"] != "progress":
            return
        if state.cancel.is_set():
            progress_after_cancel.append(event)
        elif event["value"] == 3:
            state.cancel.cancel("test")

    state.callbacks = EngineCallbacks.all_to(on_event)
    setup = training_setup(make_run(tmp_path))
    with pytest.raises(RunCancelled):
        call(state, "TrainingLoop", **setup, epochs=50)
    assert progress_after_cancel == []
    assert [e["value"] for e in events if e["event"] == "progress"] == [1, 2, 3]


def test_checkpoints_are_written_and_resume_continues_the_same_training(tmp_path):
    full_run = make_run(tmp_path / "full", seed=11)
    full = call(full_run, "TrainingLoop", node_id="outer/train", **training_setup(full_run), epochs=4,
                checkpoint_every=2)
    ckpt_dir = tmp_path / "full" / "checkpoints"
    assert sorted(p.name for p in ckpt_dir.iterdir()) == ["outer_train-epoch2.pt", "outer_train-epoch4.pt"]
    artifacts = [e for e in full_run.events if e["event"] == "artifact"]
    assert [(a["kind"], a["meta"]["epoch"]) for a in artifacts] == [("checkpoint", 2), ("checkpoint", 4)]

    resumed_run = make_run(tmp_path / "resumed", seed=11)
    resumed = call(resumed_run, "TrainingLoop", node_id="outer/train", **training_setup(resumed_run), epochs=4,
                   resume_from=str(ckpt_dir / "outer_train-epoch2.pt"))
    assert [e["step"] for e in metric_events(resumed_run, "train_loss")] == [3, 4]
    assert [e["value"] for e in metric_events(resumed_run, "train_loss")] == \
        [e["value"] for e in metric_events(full_run, "train_loss")][2:]
    assert all(torch.equal(p, q) for p, q in zip(resumed["model"].parameters(), full["model"].parameters()))
    assert resumed["history"] == full["history"]


def test_cancel_with_checkpointing_leaves_a_resume_point(tmp_path):
    state = make_run(tmp_path)
    setup = training_setup(state)  # 180 training rows / 32 = 6 batches per epoch

    def on_event(event):
        state.events.append(event)
        if event["event"] == "progress" and event["value"] == 14:  # in epoch 3
            state.cancel.cancel()

    state.callbacks = EngineCallbacks.all_to(on_event)
    with pytest.raises(RunCancelled):
        call(state, "TrainingLoop", **setup, epochs=10, checkpoint_every=5)
    [artifact] = [e for e in state.events if e["event"] == "artifact"]
    assert artifact["meta"] == {"epoch": 2, "interrupted": True}
    saved = torch.load(artifact["path"], weights_only=True)
    assert saved["epoch"] == 2 and len(saved["history"]["train_loss"]) == 2


def test_resume_from_missing_checkpoint_names_the_param(run):
    with pytest.raises(FileNotFoundError, match="param 'resume_from'"):
        call(run, "TrainingLoop", **training_setup(run), epochs=2, resume_from="nope.pt")


def test_training_loop_rejects_a_loss_that_does_not_fit_the_task(run):
    setup = training_setup(run)
    setup["loss"] = call(run, "Loss", kind="mse")["loss"]
    with pytest.raises(ValueError, match="input 'loss' is mse"):
        call(run, "TrainingLoop", **setup, epochs=1)


# ---------------------------------------------------------------------------------------------
# Evaluation


def _linear(weight, bias):
    layer = torch.nn.Linear(len(weight[0]), len(weight))
    with torch.no_grad():
        layer.weight.copy_(torch.tensor(weight))
        layer.bias.copy_(torch.tensor(bias))
    return layer.eval()


def test_classification_metrics_on_a_known_case(run):
    # Identity weights: the prediction is the index of the larger feature.
    ds = Dataset(torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.0, 1.0]]), torch.tensor([0, 1, 1, 1]),
                 "classification", 2)
    out = call(run, "ClassificationMetrics", model=_linear([[1.0, 0.0], [0.0, 1.0]], [0.0, 0.0]), dataset=ds)
    assert out == {"metrics": {"accuracy": 0.75}, "accuracy": 0.75}
    assert [e["value"] for e in metric_events(run, "accuracy")] == [0.75]


def test_regression_metrics_on_a_known_case(run):
    # Predictions equal x; y differs from x in the last row only.
    ds = Dataset(torch.tensor([[1.0], [2.0], [3.0], [4.0]]), torch.tensor([[1.0], [2.0], [3.0], [5.0]]),
                 "regression")
    out = call(run, "RegressionMetrics", model=_linear([[1.0]], [0.0]), dataset=ds)
    assert out["mse"] == pytest.approx(0.25)
    assert out["r2"] == pytest.approx(1 - 1 / 8.75)
    assert out["metrics"] == {"mse": out["mse"], "r2": out["r2"]}
    assert metric_events(run, "mse")[0]["value"] == pytest.approx(0.25)
    assert metric_events(run, "r2")[0]["value"] == pytest.approx(1 - 1 / 8.75)


def test_metrics_nodes_reject_the_wrong_task(run):
    ds = Dataset(torch.zeros(3, 1), torch.zeros(3, 1), "regression")
    with pytest.raises(ValueError, match="input 'dataset' is a regression dataset"):
        call(run, "ClassificationMetrics", model=_linear([[1.0], [1.0]], [0.0, 0.0]), dataset=ds)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_training_on_cuda(tmp_path):
    state = make_run(tmp_path, device="cuda:0", seed=1)
    setup = training_setup(state)
    assert next(setup["model"].parameters()).is_cuda
    out = call(state, "TrainingLoop", **setup, epochs=3)
    assert next(out["model"].parameters()).is_cuda
    assert call(state, "ClassificationMetrics", model=out["model"], dataset=setup["val"])["accuracy"] > 0.6


# ---------------------------------------------------------------------------------------------
# Example graphs, end to end through run_graph

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load_example(name, **params):
    """The example graph, with `params` ({node_id: {param: value}}) overriding its node params."""
    graph = json.loads((EXAMPLES / name).read_text())
    for node_spec in graph["nodes"]:
        node_spec["params"].update(params.get(node_spec["id"], {}))
    return graph


def run_example(graph, tmp_path, **kwargs):
    from codefy_jupyter.engine import run_graph

    kwargs.setdefault("seed", graph["settings"].get("seed"))
    result = run_graph(graph, data_dir=tmp_path, **kwargs)
    assert result.status == "succeeded", result.error
    return result


def test_train_mlp_example_learns(tmp_path):
    result = run_example(load_example("train_mlp.json"), tmp_path)
    accuracy = result.outputs["eval"]["accuracy"]
    assert accuracy > 0.8  # three balanced classes: chance is 1/3
    assert result.metrics["accuracy"] == accuracy
    assert result.metrics["train_loss"] < 0.3 and result.metrics["val_accuracy"] > 0.8
    assert set(result.executed) == {"data", "split", "loader", "model", "opt", "loss", "train", "eval"}


def test_seeded_example_runs_are_bit_reproducible(tmp_path):
    graph = load_example("train_mlp.json", train={"epochs": 2})
    first = run_example(graph, tmp_path / "a", seed=5)
    second = run_example(graph, tmp_path / "b", seed=5)
    other = run_example(graph, tmp_path / "c", seed=6)
    assert first.metrics == second.metrics
    assert first.metrics["train_loss"] != other.metrics["train_loss"]


def test_cached_model_is_not_trained_in_place(tmp_path):
    # A session reuses the untrained MLP output across runs; training must not have changed it.
    from codefy_jupyter.engine import SessionCache

    cache = SessionCache()
    run_example(load_example("train_mlp.json", train={"epochs": 1}), tmp_path / "a", cache=cache)
    again = run_example(load_example("train_mlp.json", train={"epochs": 2}), tmp_path / "b", cache=cache)
    fresh = run_example(load_example("train_mlp.json", train={"epochs": 2}), tmp_path / "c")
    assert "model" in again.cached and "train" in again.executed
    assert again.metrics == fresh.metrics


def test_kfold_regression_example_fits_every_fold(tmp_path):
    for fold in (0, 3):
        graph = load_example("kfold_regression.json", kfold={"fold": fold})
        result = run_example(graph, tmp_path / str(fold))
        assert result.outputs["eval"]["r2"] > 0.9
        assert result.metrics["mse"] == result.outputs["eval"]["mse"] < 0.5
