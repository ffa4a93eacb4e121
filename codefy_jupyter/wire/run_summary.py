"""The one "final loss" rule: which of a run's metric series is its loss, and which value of it is
final. The API computes it for the run view (`final_loss`), and the CLI and the notebook RunsTable
show that field, so a run shows the same loss wherever it is listed.

The built-in Train node logs `train_loss` every epoch and, with validation data, `val_loss` after
it (engine/nodes/training.py); the metrics nodes log accuracy, mse and r2, which are no loss. A
validation loss says how the model does on data it did not fit, so it wins over the training loss:
  val_loss > train_loss > loss > any other series whose name ends in "loss" (case-insensitive; a
  name starting with "val" first, then by name)
and the final value is the series' last point as logged (the log order is the epoch order, also
after a resume)."""

from __future__ import annotations

from typing import Any, Iterable, Mapping, TypedDict

PREFERRED = ("val_loss", "train_loss", "loss")


class FinalLoss(TypedDict):
    name: str
    value: float


def is_loss_series(name: str) -> bool:
    """Whether a series could be the final loss (readers may keep only these points)."""
    return name.lower().endswith("loss")


def _rank(name: str) -> tuple[int, int, str]:
    if name in PREFERRED:
        return (0, PREFERRED.index(name), name)
    return (1, 0 if name.lower().startswith("val") else 1, name)


def final_loss(points: Iterable[Mapping[str, Any]]) -> FinalLoss | None:
    """{name, value} of the run's final loss from its metric points in log order, or None when it
    logged no loss. Points that are not a name and a finite number are skipped."""
    last: dict[str, float] = {}
    for p in points:
        name, value = p.get("name"), p.get("value")
        if (not isinstance(name, str) or not is_loss_series(name) or isinstance(value, bool)
                or not isinstance(value, (int, float)) or value != value or value in (float("inf"), float("-inf"))):
            continue
        last[name] = float(value)
    if not last:
        return None
    name = min(last, key=_rank)
    return {"name": name, "value": last[name]}
