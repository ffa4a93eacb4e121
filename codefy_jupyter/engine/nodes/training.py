"""TrainingLoop: trains a copy of its model, with validation, checkpoints, resume and cancel.

The input model and optimizer may be cached outputs shared with other consumers, so the loop trains
a deep copy and rebinds the optimizer to it; its inputs are never changed.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Iterator

from .. import distributed
from ..errors import RunCancelled
from ..registry import node, optional, param
from .evaluation import dataset_batches, score
from .models import LossSpec, autograd_enabled, module_device


@node("TrainingLoop",
      inputs={"model": "model", "optimizer": "optimizer", "loss": "loss", "train": "dataloader",
              "val": optional("dataset"), "val_loader": optional("dataloader")},
      outputs={"model": "model", "history": "metrics"}, category="training",
      params={"epochs": param.int(5, min=1, max=1_000_000),
              "checkpoint_every": param.int(0, min=0, max=1_000_000,
                                            description="Save a checkpoint every N epochs; 0 is off", file="writes"),
              "resume_from": param.string("", description="A checkpoint to continue from; empty starts fresh",
                                         file="input"),
              "strategy": param.select("single", ["single", "ddp"],
                                       description="ddp: on a worker run with a device set of 2 or more cards, one "
                                       "process per card (DistributedDataParallel); elsewhere one process, with a "
                                       "warning")},
      description="Trains the model for `epochs`, logging train_loss (and val_loss, val_accuracy) per epoch.")
def training_loop(ctx: Any, model: Any, optimizer: Any, loss: Any, train: Any, epochs: int,
                  checkpoint_every: int, resume_from: str, strategy: str = "single", val: Any = None,
                  val_loader: Any = None) -> dict[str, Any]:
    import torch

    rank = distributed.current() if strategy == "ddp" else None
    if strategy == "ddp" and rank is None:
        ctx.warn("strategy ddp trains in one process here: DDP needs a worker run with a device set of 2 or more "
                 "cards (options.target.devices)", code="ddp_single_process")
    lead = rank is None or rank.rank == 0  # the rank that validates, saves checkpoints and reports

    if val is not None and val_loader is not None:
        raise ValueError("inputs 'val' and 'val_loader' are both connected: connect one of them")
    task = _task_of(train)
    criterion = loss.build(task) if isinstance(loss, LossSpec) else loss
    n_batches = len(train)
    if n_batches == 0:
        raise ValueError("input 'train' yields no batches")
    device = module_device(model)

    with autograd_enabled():
        trained = copy.deepcopy(model)
        opt = rebind_optimizer(optimizer, model, trained)
        if rank is not None:
            distributed.broadcast_parameters(trained)
        params = [p for p in trained.parameters() if p.requires_grad]
        start_epoch, series = 0, {}
        if resume_from:
            start_epoch, series = _load_checkpoint(ctx, resume_from, trained, opt, device)
            if start_epoch >= epochs:
                ctx.warn(f"checkpoint {resume_from!r} is at epoch {start_epoch}, param 'epochs' is {epochs}: "
                         "nothing left to train", code="nothing_to_train")
        last_saved = start_epoch
        epoch = start_epoch
        try:
            for epoch in range(start_epoch + 1, epochs + 1):
                trained.train()
                total = torch.zeros((), dtype=torch.float64, device=device)
                seen = 0
                for batch_no, (features, targets) in enumerate(_epoch_batches(train, epoch, device), start=1):
                    if rank is None:
                        ctx.check_cancelled()
                    elif distributed.agree_stop(ctx.cancelled, device):
                        ctx.check_cancelled()
                        raise RunCancelled("another rank of this run stopped")
                    opt.zero_grad(set_to_none=True)
                    n_global = int(features.shape[0])
                    if rank is not None:
                        features, targets = distributed.shard(rank, features, targets)
                    batch_loss = criterion(trained(features), targets) if features.shape[0] else None
                    if batch_loss is not None:
                        batch_loss.backward()
                        total += batch_loss.detach().double() * features.shape[0]
                    if rank is not None:
                        distributed.reduce_gradients(params, features.shape[0] / n_global)
                    opt.step()
                    seen += int(features.shape[0])
                    ctx.progress((epoch - 1) * n_batches + batch_no, epochs * n_batches, f"epoch {epoch}/{epochs}")
                epoch_total, epoch_seen = (float(total), seen) if rank is None else distributed.sum_all(total, seen)
                _record(ctx, series, "train_loss", epoch_total / max(epoch_seen, 1), epoch)
                trained.eval()
                if lead and (val is not None or val_loader is not None):
                    _validate(ctx, trained, criterion, task, val, val_loader, series, epoch)
                if lead and checkpoint_every and epoch % checkpoint_every == 0:
                    _save_checkpoint(ctx, trained, opt, epoch, series)
                    last_saved = epoch
        except RunCancelled:
            # Keep what finished: a cancelled run with checkpointing on leaves a resume point.
            completed = epoch - 1
            if lead and checkpoint_every and completed > last_saved:
                _save_checkpoint(ctx, trained, opt, completed, series, interrupted=True)
            raise
    history = {name: values[-1] for name, values in series.items() if values}
    history["epochs"] = float(max(start_epoch, epochs))
    return {"model": trained.eval(), "history": history}


def _task_of(train: Any) -> str:
    dataset = getattr(train, "dataset", None)
    task = getattr(dataset, "task", None)
    if task not in ("classification", "regression"):
        raise ValueError("input 'train' must be a dataloader over a dataset with a task "
                         "(classification or regression), such as the DataLoader node's output")
    return task


def _epoch_batches(train: Any, epoch: int, device: Any) -> Iterator[tuple[Any, Any]]:
    if hasattr(train, "batches"):
        yield from train.batches(epoch, device)  # BatchLoader: per-epoch order, data moved once
        return
    for features, targets in train:  # any other iterable of (features, targets)
        yield features.to(device), targets.to(device)


def rebind_optimizer(optimizer: Any, model: Any, trained: Any) -> Any:
    """A new optimizer of the same kind and settings over `trained`, the deep copy of `model`."""
    index = {id(p): i for i, p in enumerate(model.parameters())}
    copies = list(trained.parameters())
    groups = []
    for group in optimizer.param_groups:
        try:
            params = [copies[index[id(p)]] for p in group["params"]]
        except KeyError:
            raise ValueError("input 'optimizer' was built for a different model than input 'model'") from None
        groups.append({**{k: v for k, v in group.items() if k != "params"}, "params": params})
    rebound = type(optimizer)(groups, **optimizer.defaults)
    # Copy the state too, so stepping the new optimizer never touches the input's buffers.
    rebound.load_state_dict(copy.deepcopy(optimizer.state_dict()))
    return rebound


def _record(ctx: Any, series: dict[str, list[float]], name: str, value: float, epoch: int) -> None:
    series.setdefault(name, []).append(value)
    ctx.log_metric(name, value, step=epoch)


def _validate(ctx: Any, model: Any, criterion: Any, task: str, val: Any, val_loader: Any,
              series: dict[str, list[float]], epoch: int) -> None:
    if val is not None:
        if val.task != task:
            raise ValueError(f"input 'val' is a {val.task} dataset but the training data is {task}")
        batches = dataset_batches(val, module_device(model))
    else:
        batches = _epoch_batches(val_loader, 0, module_device(model))
    scores = score(model, batches, task, criterion, check_cancelled=ctx.check_cancelled)
    _record(ctx, series, "val_loss", scores["loss"], epoch)
    if task == "classification":
        _record(ctx, series, "val_accuracy", scores["accuracy"], epoch)


# ---------------------------------------------------------------------------------------------
# Checkpoints


def _checkpoint_path(ctx: Any, epoch: int, interrupted: bool) -> Path:
    suffix = "-interrupted" if interrupted else ""
    return ctx.data_dir / "checkpoints" / f"{ctx.node_id.replace('/', '_')}-epoch{epoch}{suffix}.pt"


def _save_checkpoint(ctx: Any, model: Any, opt: Any, epoch: int, series: dict[str, list[float]],
                     interrupted: bool = False) -> None:
    import torch

    path = _checkpoint_path(ctx, epoch, interrupted)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Write then rename, so a crash mid-write never leaves a truncated checkpoint under the real name.
    partial = path.with_name(path.name + ".partial")
    torch.save({"epoch": epoch, "model": model.state_dict(), "optimizer": opt.state_dict(),
                "history": {k: list(v) for k, v in series.items()}}, partial)
    partial.replace(path)
    meta: dict[str, Any] = {"epoch": epoch}
    if interrupted:
        meta["interrupted"] = True
    ctx.artifact("checkpoint", path, meta)


def _load_checkpoint(ctx: Any, resume_from: str, model: Any, opt: Any, device: Any) -> tuple[int, dict[str, list[float]]]:
    import torch

    path = Path(resume_from).expanduser()
    if not path.is_absolute() and not path.is_file():
        path = ctx.data_dir / path  # a relative name may refer to this run's own checkpoints
    if not path.is_file():
        raise FileNotFoundError(f"param 'resume_from': no such checkpoint: {resume_from!r}")
    state = torch.load(path, map_location=device, weights_only=True)
    if not isinstance(state, dict) or not {"epoch", "model", "optimizer"} <= set(state):
        raise ValueError(f"param 'resume_from': {resume_from!r} is not a TrainingLoop checkpoint")
    try:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
    except (RuntimeError, ValueError, KeyError) as exc:
        raise ValueError(f"param 'resume_from': {resume_from!r} does not fit this model/optimizer: {exc}") from None
    ctx.record_input(path, kind="model")
    series = {k: [float(x) for x in v] for k, v in state.get("history", {}).items()}
    return int(state["epoch"]), series
