"""Evaluation nodes, and the scoring TrainingLoop shares for its validation metrics.

Scores are accumulated over batches in float64 on the model's device and read back once, so
evaluating a large dataset on a GPU costs one synchronisation rather than one per batch.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, Iterable, Iterator

from ..registry import node
from .models import module_device

if TYPE_CHECKING:
    import torch

EVAL_BATCH_SIZE = 4096


@contextlib.contextmanager
def evaluating(model: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """The model in eval mode, without gradients; a model left in train mode is restored after."""
    import torch

    was_training = model.training
    if was_training:
        model.eval()
    try:
        with torch.no_grad():
            yield model
    finally:
        if was_training:
            model.train()


def dataset_batches(dataset: Any, device: Any, batch_size: int = EVAL_BATCH_SIZE) -> Iterator[tuple[Any, Any]]:
    data = dataset.to(device)
    for start in range(0, len(data), batch_size):
        yield data.features[start:start + batch_size], data.targets[start:start + batch_size]


def score(model: torch.nn.Module, batches: Iterable[tuple[Any, Any]], task: str, criterion: Any = None,
          check_cancelled: Any = None) -> dict[str, float]:
    """Mean loss (with a criterion), accuracy (classification) or mse and r2 (regression)."""
    import torch

    device = module_device(model)
    zero = torch.zeros((), dtype=torch.float64, device=device)
    n, loss_sum, correct = 0, zero.clone(), zero.clone()
    sse = y_sum = y_sq_sum = None  # per target column, regression only
    with evaluating(model):
        for features, targets in batches:
            if check_cancelled is not None:
                check_cancelled()
            features, targets = features.to(device), targets.to(device)
            outputs = model(features)
            count = int(targets.shape[0])
            n += count
            if criterion is not None:
                loss_sum += criterion(outputs, targets).double() * count
            if task == "classification":
                correct += (outputs.argmax(dim=1) == targets).sum()
            else:
                y = targets.double().reshape(count, -1)
                err = outputs.double().reshape(count, -1) - y
                sse = (err ** 2).sum(0) if sse is None else sse + (err ** 2).sum(0)
                y_sum = y.sum(0) if y_sum is None else y_sum + y.sum(0)
                y_sq_sum = (y ** 2).sum(0) if y_sq_sum is None else y_sq_sum + (y ** 2).sum(0)
    if n == 0:
        raise ValueError("cannot score an empty dataset")
    out: dict[str, float] = {}
    if criterion is not None:
        out["loss"] = float(loss_sum) / n
    if task == "classification":
        out["accuracy"] = float(correct) / n
    else:
        assert sse is not None and y_sum is not None and y_sq_sum is not None
        out["mse"] = float(sse.sum()) / (n * sse.numel())
        out["r2"] = _r2(sse, y_sq_sum - y_sum ** 2 / n)
    return out


def _r2(sse: torch.Tensor, ss_tot: torch.Tensor) -> float:
    # Averaged over target columns; a constant column scores 1 if predicted exactly, else 0 (as sklearn).
    import torch

    constant = ss_tot <= 1e-12
    per_column = torch.where(constant, (sse <= 1e-12).double(), 1 - sse / torch.where(constant, 1.0, ss_tot))
    return float(per_column.mean())


def _check_task(dataset: Any, task: str) -> None:
    if dataset.task != task:
        raise ValueError(f"input 'dataset' is a {dataset.task} dataset; this node scores {task}")
    if len(dataset) == 0:
        raise ValueError("input 'dataset' has no rows")


@node("ClassificationMetrics", inputs={"model": "model", "dataset": "dataset"},
      outputs={"metrics": "metrics", "accuracy": "float"}, category="evaluation", output_node=True,
      description="Accuracy of the model on a classification dataset; logged as `accuracy`.")
def classification_metrics(ctx: Any, model: Any, dataset: Any) -> dict[str, Any]:
    _check_task(dataset, "classification")
    metrics = score(model, dataset_batches(dataset, module_device(model)), "classification",
                    check_cancelled=ctx.check_cancelled)
    ctx.log_metric("accuracy", metrics["accuracy"])
    return {"metrics": metrics, "accuracy": metrics["accuracy"]}


@node("RegressionMetrics", inputs={"model": "model", "dataset": "dataset"},
      outputs={"metrics": "metrics", "mse": "float", "r2": "float"}, category="evaluation", output_node=True,
      description="Mean squared error and R² of the model on a regression dataset; logged as `mse` and `r2`.")
def regression_metrics(ctx: Any, model: Any, dataset: Any) -> dict[str, Any]:
    _check_task(dataset, "regression")
    metrics = score(model, dataset_batches(dataset, module_device(model)), "regression",
                    check_cancelled=ctx.check_cancelled)
    ctx.log_metrics(metrics)
    return {"metrics": metrics, "mse": metrics["mse"], "r2": metrics["r2"]}
