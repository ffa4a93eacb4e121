"""Model nodes: an MLP, its optimizer and loss, and saving/loading weights.

Node outputs may be cached and shared by several consumers, so no node here changes a module it
receives: TrainingLoop and LoadModel work on copies. Modules leave these nodes in eval mode, so a
consumer that only predicts never has to flip a shared module's mode.
"""

from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from ..registry import node, optional, param

if TYPE_CHECKING:
    import torch

ACTIVATIONS = ("relu", "tanh", "gelu")
OPTIMIZERS = ("sgd", "adam")
LOSSES = ("auto", "cross_entropy", "mse")


@contextlib.contextmanager
def autograd_enabled() -> Iterator[None]:
    """Gradients on, even when the engine runs nodes under torch.inference_mode or no_grad."""
    import torch

    with torch.inference_mode(False), torch.enable_grad():
        yield


def module_device(model: torch.nn.Module) -> torch.device:
    import torch

    for tensor in model.parameters():
        return tensor.device
    for tensor in model.buffers():
        return tensor.device
    return torch.device("cpu")


def resolve_in_data_dir(ctx: Any, name: str, field: str) -> Path:
    """An absolute path stays as is; a relative one lives under the run's data_dir and may not leave it."""
    if not name:
        raise ValueError(f"{field} is empty: name a file")
    path = Path(name).expanduser()
    if path.is_absolute():
        return path
    root = ctx.data_dir.resolve()
    resolved = (root / path).resolve()
    if not resolved.is_relative_to(root):
        raise ValueError(f"{field} ({name!r}) points outside the run's data directory")
    return resolved


# ---------------------------------------------------------------------------------------------
# MLP


@node("MLP", inputs={"dataset": optional("dataset")}, outputs={"model": "model"}, category="model",
      params={"in_features": param.int(0, min=0, max=10_000_000, description="0: take it from the dataset"),
              "out_features": param.int(0, min=0, max=10_000_000, description="0: take it from the dataset"),
              "hidden": param.int(64, min=1, max=1_000_000),
              "layers": param.int(2, min=0, max=1000, description="Hidden layers; 0 is a linear model"),
              "activation": param.select("relu", ACTIVATIONS),
              "dropout": param.float(0.0, min=0, max=0.95)},
      description="A multilayer perceptron on the run's device; sizes can come from a dataset.")
def mlp(ctx: Any, in_features: int, out_features: int, hidden: int, layers: int, activation: str,
        dropout: float, dataset: Any = None) -> dict[str, Any]:
    import torch

    in_features = _size("in_features", in_features, None if dataset is None else dataset.n_features)
    out_features = _size("out_features", out_features, None if dataset is None else dataset.out_features)
    with contextlib.ExitStack() as stack:
        stack.enter_context(torch.inference_mode(False))  # parameters must be trainable tensors
        if ctx.seed is not None:
            # Initialise from the node's own seed on CPU, so CPU and CUDA runs start from the same weights.
            stack.enter_context(torch.random.fork_rng(devices=[]))
            torch.manual_seed(ctx.seed)
        model = _sequential(in_features, out_features, hidden, layers, activation, dropout)
    with torch.inference_mode(False):
        model = model.to(ctx.device)
    return {"model": model.eval()}


def _sequential(in_features: int, out_features: int, hidden: int, layers: int, activation: str,
                dropout: float) -> torch.nn.Module:
    from torch import nn

    act = {"relu": nn.ReLU, "tanh": nn.Tanh, "gelu": nn.GELU}[activation]
    blocks: list[nn.Module] = []
    width = in_features
    for _ in range(layers):
        blocks += [nn.Linear(width, hidden), act()]
        if dropout > 0:
            blocks.append(nn.Dropout(dropout))
        width = hidden
    blocks.append(nn.Linear(width, out_features))
    return nn.Sequential(*blocks)


def _size(name: str, given: int, from_dataset: int | None) -> int:
    if given == 0:
        if from_dataset is None:
            raise ValueError(f"param {name!r} is 0 and input 'dataset' is not connected: "
                             f"set {name} or connect a dataset")
        return from_dataset
    if from_dataset is not None and given != from_dataset:
        raise ValueError(f"param {name!r} is {given} but the connected dataset needs {from_dataset} "
                         f"(set it to 0 to take it from the dataset)")
    return given


# ---------------------------------------------------------------------------------------------
# Optimizer and loss


@node("Optimizer", inputs={"model": "model"}, outputs={"optimizer": "optimizer"}, category="model",
      params={"kind": param.select("adam", OPTIMIZERS),
              "lr": param.float(1e-3, min=0, max=10),
              "momentum": param.float(0.0, min=0, max=1, description="SGD only"),
              "weight_decay": param.float(0.0, min=0, max=1)},
      description="An optimizer over the model's parameters (TrainingLoop rebinds it to its own copy).")
def optimizer(ctx: Any, model: Any, kind: str, lr: float, momentum: float, weight_decay: float) -> dict[str, Any]:
    import torch

    params = list(model.parameters())
    if not params:
        raise ValueError("input 'model' has no parameters to optimise")
    if kind == "sgd":
        opt = torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay)
    else:
        if momentum:
            ctx.warn(f"param 'momentum' ({momentum}) is ignored by adam", code="param_ignored", param="momentum")
        opt = torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    return {"optimizer": opt}


@dataclass(frozen=True)
class LossSpec:
    """Which loss to train with; `auto` picks by the training data's task when training starts."""

    kind: str

    def build(self, task: str) -> Any:
        from torch import nn

        kind = self.kind
        if kind == "auto":
            kind = "cross_entropy" if task == "classification" else "mse"
        if kind == "cross_entropy" and task != "classification":
            raise ValueError(f"input 'loss' is cross_entropy but the training data is a {task} dataset")
        if kind == "mse" and task != "regression":
            raise ValueError(f"input 'loss' is mse but the training data is a {task} dataset "
                             "(use cross_entropy or auto)")
        return nn.CrossEntropyLoss() if kind == "cross_entropy" else nn.MSELoss()


@node("Loss", outputs={"loss": "loss"}, params={"kind": param.select("auto", LOSSES)}, category="model",
      description="The training loss; auto is cross-entropy for classification and MSE for regression.")
def loss(ctx: Any, kind: str) -> dict[str, Any]:
    return {"loss": LossSpec(kind)}


# ---------------------------------------------------------------------------------------------
# Saving and loading


@node("SaveModel", inputs={"model": "model"}, outputs={"path": "path"}, category="model",
      params={"filename": param.string("model.pt", description="Relative to the run's data directory", file="output")},
      output_node=True, cacheable=False,
      description="Writes the model's state_dict and records it as a `model` artifact.")
def save_model(ctx: Any, model: Any, filename: str) -> dict[str, Any]:
    import torch

    path = resolve_in_data_dir(ctx, filename, "param 'filename'")
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), path)
    n_params = sum(p.numel() for p in model.parameters())
    ctx.artifact("model", path, {"format": "state_dict", "parameters": n_params, "bytes": path.stat().st_size,
                                 "class": type(model).__name__})
    return {"path": str(path)}


@node("LoadModel", inputs={"model": "model", "path": optional("path")}, outputs={"model": "model"},
      category="model",
      params={"filename": param.string("", description="Used when input 'path' is not connected; "
                                                       "relative to the run's data directory", file="input")},
      description="A copy of `model` with weights loaded from a saved state_dict.")
def load_model(ctx: Any, model: Any, filename: str, path: str | None = None) -> dict[str, Any]:
    import torch

    field = "input 'path'" if path else "param 'filename'"
    if not path and not filename:
        raise ValueError("input 'path' is not connected and param 'filename' is empty: name the weights file")
    file = resolve_in_data_dir(ctx, path or filename, field)
    if not file.is_file():
        raise FileNotFoundError(f"{field}: no such file: {str(file)!r}")
    state = torch.load(file, map_location=module_device(model), weights_only=True)
    with torch.inference_mode(False):
        loaded = copy.deepcopy(model)
        try:
            loaded.load_state_dict(state)
        except RuntimeError as exc:
            raise ValueError(f"{field}: {str(file)!r} does not fit input 'model': {exc}") from None
    ctx.record_input(file, kind="model")
    return {"model": loaded.eval()}
