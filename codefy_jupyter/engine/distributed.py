"""The rank a process trains as, when a run's TrainingLoop trains with DDP (seed #792).

agent/ddp.py starts one process per device of the run, sets up torch.distributed in each and then
`set_rank` here; the TrainingLoop with `strategy: ddp` reads `current()`. Anywhere else (a run on
the control plane, a worker run with fewer than two cards) there is no rank and the loop trains in
one process, with a warning. The loop's collective steps live here so the node reads as training:

- each global batch is split across the ranks (`shard`), and gradients are summed after scaling
  each rank's mean-loss gradient by its share of the batch, which equals one process's gradient on
  the whole batch whatever the split;
- the loops agree on the stop flag every batch (`agree_stop`): any rank cancelled stops them all
  at the same batch, so none waits in a collective for a rank that left.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Rank:
    rank: int
    world: int
    backend: str  # "gloo" or "nccl"


_CURRENT: Rank | None = None


def set_rank(rank: Rank | None) -> None:
    global _CURRENT
    _CURRENT = rank


def current() -> Rank | None:
    return _CURRENT


def shard(rank: Rank, features: Any, targets: Any) -> tuple[Any, Any]:
    """This rank's contiguous part of a global batch (parts differ by at most one row)."""
    return features.tensor_split(rank.world)[rank.rank], targets.tensor_split(rank.world)[rank.rank]


def broadcast_parameters(model: Any) -> None:
    """Every rank starts from rank 0's weights (they agree already when seeded alike; this makes sure)."""
    import torch.distributed as dist

    for p in model.state_dict().values():
        dist.broadcast(p, src=0)


def reduce_gradients(params: list[Any], share: float) -> None:
    """Sum each rank's gradient scaled by its share of the global batch, in one collective."""
    import torch
    import torch.distributed as dist

    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = torch.cat([g.reshape(-1) for g in grads]) * share
    dist.all_reduce(flat)
    offset = 0
    for p, g in zip(params, grads):
        n = g.numel()
        p.grad = flat[offset:offset + n].view_as(g).clone()
        offset += n


def agree_stop(stop: bool, device: Any) -> bool:
    """Whether any rank wants to stop (one small all_reduce per batch)."""
    import torch
    import torch.distributed as dist

    flag = torch.tensor([1.0 if stop else 0.0], device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item() > 0)


def sum_all(*values: Any) -> list[float]:
    """Sums across ranks of a few numbers (the epoch's loss total and rows seen)."""
    import torch
    import torch.distributed as dist

    t = torch.tensor([float(v) for v in values], dtype=torch.float64)
    dist.all_reduce(t)
    return [float(x) for x in t]
