"""Data nodes: synthetic and CSV datasets, splits, and a batch loader.

Data generation and splitting depend only on the nodes' own `seed` params, never on the run seed, so
the same graph always sees the same rows (a cross-validation sweep over `fold` relies on this).
Only batch shuffling follows the run seed. torch is imported inside the functions that need it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from ..registry import node, param

if TYPE_CHECKING:
    import torch

TASKS = ("classification", "regression")


@dataclass(frozen=True, eq=False, repr=False)
class Dataset:
    """A dataset held in memory.

    features: float32 [n_samples, n_features].
    targets:  int64 [n_samples] class indices (classification) or float32 [n_samples, n_outputs].
    """

    features: torch.Tensor
    targets: torch.Tensor
    task: str
    n_classes: int = 0
    feature_names: tuple[str, ...] | None = None
    class_names: tuple[str, ...] | None = None

    def __len__(self) -> int:
        return int(self.features.shape[0])

    @property
    def n_features(self) -> int:
        return int(self.features.shape[1])

    @property
    def out_features(self) -> int:
        """Width of a model output that fits this dataset: class count or target count."""
        return self.n_classes if self.task == "classification" else int(self.targets.shape[1])

    def subset(self, indices: torch.Tensor) -> Dataset:
        return Dataset(self.features[indices], self.targets[indices], self.task, self.n_classes,
                       self.feature_names, self.class_names)

    def to(self, device: Any) -> Dataset:
        features, targets = self.features.to(device), self.targets.to(device)
        if features is self.features and targets is self.targets:
            return self
        return Dataset(features, targets, self.task, self.n_classes, self.feature_names, self.class_names)

    def __repr__(self) -> str:
        extra = f", n_classes={self.n_classes}" if self.task == "classification" else ""
        return f"Dataset({self.task}, n_samples={len(self)}, n_features={self.n_features}{extra})"


def _generator(seed: int) -> torch.Generator:
    import torch

    return torch.Generator().manual_seed(int(seed))


def _order(n: int, shuffle: bool, seed: int) -> torch.Tensor:
    import torch

    return torch.randperm(n, generator=_generator(seed)) if shuffle else torch.arange(n)


# ---------------------------------------------------------------------------------------------
# Sources

_SEED = param.int(0, min=0, max=2**63 - 1, description="Seed of this node's own generator")


@node("SyntheticClassification", outputs={"dataset": "dataset"}, category="data",
      params={"n_samples": param.int(1000, min=2, max=10_000_000),
              "n_features": param.int(20, min=1, max=100_000),
              "n_classes": param.int(3, min=2, max=10_000),
              "noise": param.float(1.0, min=0, max=1000, description="Spread of each class around its centre"),
              "seed": _SEED},
      description="Gaussian blobs: one random centre per class, samples scattered around it by `noise`.")
def synthetic_classification(ctx: Any, n_samples: int, n_features: int, n_classes: int, noise: float,
                             seed: int) -> dict[str, Any]:
    import torch

    gen = _generator(seed)
    # Centres are drawn at a scale of 2 so that noise=1 gives well-separated yet overlapping classes.
    centres = torch.randn(n_classes, n_features, generator=gen) * 2.0
    # Balanced classes in a random order.
    labels = (torch.arange(n_samples) % n_classes)[torch.randperm(n_samples, generator=gen)]
    features = centres[labels] + noise * torch.randn(n_samples, n_features, generator=gen)
    return {"dataset": Dataset(features.float(), labels.long(), "classification", n_classes)}


@node("SyntheticRegression", outputs={"dataset": "dataset"}, category="data",
      params={"n_samples": param.int(1000, min=2, max=10_000_000),
              "n_features": param.int(10, min=1, max=100_000),
              "noise": param.float(0.1, min=0, max=1000, description="Std of the Gaussian noise added to y"),
              "seed": _SEED},
      description="y = x·w + b + noise·ε with x, w ~ N(0, 1); one target column.")
def synthetic_regression(ctx: Any, n_samples: int, n_features: int, noise: float, seed: int) -> dict[str, Any]:
    import torch

    gen = _generator(seed)
    features = torch.randn(n_samples, n_features, generator=gen)
    weights = torch.randn(n_features, 1, generator=gen)
    bias = torch.randn(1, generator=gen)
    targets = features @ weights + bias + noise * torch.randn(n_samples, 1, generator=gen)
    return {"dataset": Dataset(features.float(), targets.float(), "regression", 0)}


@node("CSVDataset", outputs={"dataset": "dataset"}, category="data",
      params={"path": param.string("", description="CSV file with a header row", file="input"),
              "target_column": param.string("", description="Header name of the target column"),
              "task": param.select("classification", TASKS)},
      description="Reads a CSV with a header row; every column but the target must be numeric.")
def csv_dataset(ctx: Any, path: str, target_column: str, task: str) -> dict[str, Any]:
    dataset = read_csv_dataset(path, target_column, task)
    ctx.record_input(path, kind="dataset", rows=int(dataset.features.shape[0]))
    return {"dataset": dataset}


@csv_dataset.fingerprint
def _csv_fingerprint(params: dict[str, Any]) -> tuple[str, int, int]:
    """A cached dataset is reused only while the file is unchanged."""
    stat = Path(params["path"]).expanduser().stat()
    return str(Path(params["path"]).expanduser().resolve()), stat.st_size, stat.st_mtime_ns


def read_csv_dataset(path: str, target_column: str, task: str) -> Dataset:
    import numpy as np
    import torch

    if not path:
        raise ValueError("param 'path' is empty: name a CSV file")
    file = Path(path).expanduser()
    if not file.is_file():
        raise FileNotFoundError(f"param 'path': no such file: {str(file)!r}")
    with file.open(newline="", encoding="utf-8-sig") as handle:
        import csv  # here, not at import: every process that loads the node packs would pay for it

        rows = list(csv.reader(handle))
    if not rows:
        raise ValueError(f"param 'path': {str(file)!r} is empty (expected a header row)")
    header = [h.strip() for h in rows[0]]
    if target_column not in header:
        raise ValueError(f"param 'target_column': {target_column!r} is not a column of {str(file)!r} "
                         f"(columns: {header})")
    body = [r for r in rows[1:] if any(cell.strip() for cell in r)]
    if not body:
        raise ValueError(f"param 'path': {str(file)!r} has a header but no data rows")
    target_at = header.index(target_column)
    feature_names = tuple(h for i, h in enumerate(header) if i != target_at)
    features = np.empty((len(body), len(feature_names)), dtype=np.float32)
    raw_targets = []
    for line_no, row in enumerate(body, start=2):
        if len(row) != len(header):
            raise ValueError(f"{str(file)!r} line {line_no}: {len(row)} fields, header has {len(header)}")
        raw_targets.append(row[target_at].strip())
        cells = [c for i, c in enumerate(row) if i != target_at]
        for col, cell in enumerate(cells):
            try:
                features[line_no - 2, col] = float(cell)
            except ValueError:
                raise ValueError(f"{str(file)!r} line {line_no}, column {feature_names[col]!r}: "
                                 f"{cell!r} is not a number") from None
    if task == "classification":
        class_names = tuple(sorted(set(raw_targets), key=_label_sort_key))
        index = {name: i for i, name in enumerate(class_names)}
        targets = torch.tensor([index[t] for t in raw_targets], dtype=torch.long)
        if len(class_names) < 2:
            raise ValueError(f"param 'target_column': {target_column!r} has only one class in {str(file)!r}")
        return Dataset(torch.from_numpy(features), targets, task, len(class_names), feature_names, class_names)
    try:
        values = [float(t) for t in raw_targets]
    except ValueError:
        raise ValueError(f"param 'target_column': {target_column!r} has non-numeric values, "
                         "which a regression task cannot use") from None
    targets = torch.tensor(values, dtype=torch.float32).unsqueeze(1)
    return Dataset(torch.from_numpy(features), targets, task, 0, feature_names)


def _label_sort_key(label: str) -> tuple[int, float, str]:
    # Numeric labels sort numerically ("2" before "10"), others alphabetically after them.
    try:
        return (0, float(label), label)
    except ValueError:
        return (1, 0.0, label)


# ---------------------------------------------------------------------------------------------
# Splits


@node("TrainTestSplit", inputs={"dataset": "dataset"}, outputs={"train": "dataset", "test": "dataset"},
      category="data",
      params={"test_fraction": param.float(0.2, min=0, max=1),
              "shuffle": param.bool(True),
              "seed": _SEED},
      description="Holds out test_fraction of the rows; the split depends only on this node's params.")
def train_test_split(ctx: Any, dataset: Dataset, test_fraction: float, shuffle: bool, seed: int) -> dict[str, Any]:
    n = len(dataset)
    n_test = round(n * test_fraction)
    if not 1 <= n_test <= n - 1:
        raise ValueError(f"param 'test_fraction' ({test_fraction}) leaves {n_test} of {n} rows for test; "
                         "both train and test need at least one row")
    order = _order(n, shuffle, seed)
    return {"train": dataset.subset(order[n_test:]), "test": dataset.subset(order[:n_test])}


@node("KFoldSplit", inputs={"dataset": "dataset"}, outputs={"train": "dataset", "test": "dataset"},
      category="data",
      params={"n_folds": param.int(5, min=2, max=100_000),
              "fold": param.int(0, min=0, description="Which fold is held out as test (0-based)"),
              "shuffle": param.bool(True),
              "seed": _SEED},
      description="Holds out fold `fold` of n_folds; folds depend only on n_folds, shuffle and seed.")
def kfold_split(ctx: Any, dataset: Dataset, n_folds: int, fold: int, shuffle: bool, seed: int) -> dict[str, Any]:
    import torch

    n = len(dataset)
    if fold >= n_folds:
        raise ValueError(f"param 'fold' ({fold}) must be < n_folds ({n_folds})")
    if n_folds > n:
        raise ValueError(f"param 'n_folds' ({n_folds}) exceeds the dataset's {n} rows")
    start, stop = fold_bounds(n, n_folds, fold)
    order = _order(n, shuffle, seed)
    train_idx = torch.cat([order[:start], order[stop:]])
    return {"train": dataset.subset(train_idx), "test": dataset.subset(order[start:stop])}


def fold_bounds(n: int, n_folds: int, fold: int) -> tuple[int, int]:
    """[start, stop) of `fold` in the ordered rows; the first n % n_folds folds get one row extra."""
    base, extra = divmod(n, n_folds)
    start = fold * base + min(fold, extra)
    return start, start + base + (1 if fold < extra else 0)


# ---------------------------------------------------------------------------------------------
# Batching


class BatchLoader:
    """Batches (features, targets) of a Dataset.

    Shuffled orders are a pure function of (seed, epoch), so one loader may feed several training
    loops at once, from a cache or not, and each still sees the same order a fresh loader would.
    """

    def __init__(self, dataset: Dataset, batch_size: int, shuffle: bool, seed: int) -> None:
        self.dataset = dataset
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = seed
        self._epochs_iterated = 0

    def __len__(self) -> int:
        return -(-len(self.dataset) // self.batch_size)

    def batches(self, epoch: int = 0, device: Any = None) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """The batches of `epoch`, with tensors on `device` (moved once, then sliced there)."""
        import torch

        data = self.dataset.to(device) if device is not None else self.dataset
        n = len(data)
        if self.shuffle:
            # Mix the epoch into the seed so successive epochs see different orders.
            gen = _generator((self.seed * 1_000_003 + epoch) % 2**63)
            order = torch.randperm(n, generator=gen).to(data.features.device)
            for start in range(0, n, self.batch_size):
                idx = order[start:start + self.batch_size]
                yield data.features[idx], data.targets[idx]
        else:
            for start in range(0, n, self.batch_size):
                yield data.features[start:start + self.batch_size], data.targets[start:start + self.batch_size]

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        # Plain iteration (for code outside the engine) advances the epoch on each pass.
        epoch, self._epochs_iterated = self._epochs_iterated, self._epochs_iterated + 1
        return self.batches(epoch)

    def __repr__(self) -> str:
        return f"BatchLoader({self.dataset!r}, batch_size={self.batch_size}, shuffle={self.shuffle})"


@node("DataLoader", inputs={"dataset": "dataset"}, outputs={"dataloader": "dataloader"}, category="data",
      params={"batch_size": param.int(32, min=1, max=10_000_000), "shuffle": param.bool(True)},
      description="Batches a dataset; shuffling follows the run seed, so a seeded run is reproducible.")
def data_loader(ctx: Any, dataset: Dataset, batch_size: int, shuffle: bool) -> dict[str, Any]:
    import torch

    if ctx.seed is not None:
        seed = ctx.seed
    else:
        # Unseeded run: draw from torch's global generator (seeded or not, as the caller chose).
        seed = int(torch.randint(0, 2**62, (1,)).item())
    return {"dataloader": BatchLoader(dataset, batch_size, shuffle, seed)}
