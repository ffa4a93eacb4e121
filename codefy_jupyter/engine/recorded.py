"""Recorded node outputs (`options.record_outputs`): the store that keeps a run's captures in
memory, their description (type and shape, for listing without loading), their summaries (what a
read of one port answers), and their files on a worker (one `torch.save` file per port plus
`index.json`). torch is imported only when a value is a tensor or a file is touched.

The answers themselves are wire/output_reads.py's, given `index_of` and `summarize` from here by
the control plane (core/runs/recorded.py) and by a worker's read helper (agent/output_reader.py),
so a read gives the same body whether the captures are in this process or on a worker.
"""

from __future__ import annotations

import json
import math
import os
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable

OUTPUT_STORE_RUNS = 20
# The file that lists a worker run's recorded ports (wire/output_reads.py reads it by the same name).
INDEX = "index.json"
# What a summary shows of a value's elements.
PREVIEW_ITEMS = 64

Captures = dict[str, dict[str, Any]]  # node id -> port -> value


def _torch() -> Any:
    import sys

    return sys.modules.get("torch")


def _is_tensor(value: Any) -> bool:
    torch = _torch()
    return torch is not None and isinstance(value, torch.Tensor)


def describe(value: Any) -> dict[str, Any]:
    """Type and shape of a value, without copying it."""
    if _is_tensor(value):
        return {"type": "tensor", "shape": list(value.shape), "dtype": str(value.dtype).replace("torch.", ""),
                "bytes": int(value.numel() * value.element_size())}
    if isinstance(value, bool):
        return {"type": "bool", "shape": None}
    if isinstance(value, (int, float, str)):
        return {"type": type(value).__name__, "shape": None}
    if isinstance(value, (list, tuple)):
        return {"type": type(value).__name__, "shape": [len(value)]}
    if isinstance(value, dict):
        return {"type": "dict", "shape": [len(value)]}
    return {"type": type(value).__name__, "shape": None}


def size_of(value: Any) -> int:
    if _is_tensor(value):
        return int(value.numel() * value.element_size())
    if isinstance(value, (list, tuple)):
        return sum(size_of(v) for v in value)
    if isinstance(value, dict):
        return sum(size_of(v) for v in value.values())
    return 64


def to_cpu(value: Any) -> Any:
    """A copy on the CPU, detached: what outlives the run's device memory."""
    if _is_tensor(value):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, list):
        return [to_cpu(v) for v in value]
    if isinstance(value, tuple):
        return tuple(to_cpu(v) for v in value)
    if isinstance(value, dict):
        return {k: to_cpu(v) for k, v in value.items()}
    return value


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def summarize(value: Any) -> dict[str, Any]:
    """What a read of one port shows: statistics and the first elements."""
    if _is_tensor(value):
        flat = value.detach().reshape(-1)
        out: dict[str, Any] = {"numel": int(flat.numel())}
        if flat.numel() and not flat.dtype.is_complex:
            f = flat.double()
            out["stats"] = {"min": _finite(float(f.min())), "max": _finite(float(f.max())),
                            "mean": _finite(float(f.mean())),
                            "std": _finite(float(f.std())) if flat.numel() > 1 else 0.0}
        items = flat[:PREVIEW_ITEMS].tolist()
        out["preview"] = [(_finite(v) if isinstance(v, float) else v) for v in items]
        out["truncated"] = flat.numel() > PREVIEW_ITEMS
        return out
    if isinstance(value, bool) or isinstance(value, (int, str)) or value is None:
        return {"value": value}
    if isinstance(value, float):
        return {"value": _finite(value)}
    if isinstance(value, (list, tuple)):
        return {"preview": [repr(v)[:200] for v in value[:PREVIEW_ITEMS]], "truncated": len(value) > PREVIEW_ITEMS}
    torch = _torch()
    if torch is not None and isinstance(value, torch.nn.Module):
        return {"repr": repr(value)[:2000], "parameters": int(sum(p.numel() for p in value.parameters()))}
    fields = {k: v for k, v in getattr(value, "__dict__", {}).items() if not k.startswith("_")}
    if fields:  # a record of tensors and numbers (a dataset): each field described, tensors with stats
        return {"fields": {k: {**describe(v), **({"stats": summarize(v).get("stats")} if _is_tensor(v) else
                                                 {"value": _finite(v) if isinstance(v, float) else v}
                                                 if isinstance(v, (bool, int, float, str)) else {})}
                           for k, v in list(fields.items())[:32]}}
    return {"repr": repr(value)[:2000]}


def index_of(captures: Captures) -> dict[str, Any]:
    return {"nodes": {node: {port: describe(v) for port, v in ports.items()} for node, ports in captures.items()}}


class RunOutputStore:
    """Captures of the newest runs, in memory: at most `max_runs` runs and `max_bytes` in all, the
    oldest dropped first, never the one just put. Thread-safe (runs end on engine threads)."""

    def __init__(self, *, max_runs: int = OUTPUT_STORE_RUNS, max_bytes: int | None = None) -> None:
        self.max_runs = max_runs
        self.max_bytes = max_bytes
        self._runs: OrderedDict[str, tuple[Captures, int]] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, run_id: str, captures: Captures) -> list[str]:
        """Keep a run's captures; the runs evicted to make room."""
        size = sum(size_of(v) for ports in captures.values() for v in ports.values())
        evicted: list[str] = []
        with self._lock:
            self._runs.pop(run_id, None)
            self._runs[run_id] = (captures, size)
            while len(self._runs) > 1 and (len(self._runs) > self.max_runs or (
                    self.max_bytes is not None and sum(s for _, s in self._runs.values()) > self.max_bytes)):
                oldest = next(iter(self._runs))
                del self._runs[oldest]
                evicted.append(oldest)
        return evicted

    def get(self, run_id: str) -> Captures | None:
        with self._lock:
            kept = self._runs.get(run_id)
        return kept[0] if kept is not None else None

    def drop(self, run_id: str) -> bool:
        with self._lock:
            return self._runs.pop(run_id, None) is not None

    def run_ids(self) -> list[str]:
        with self._lock:
            return list(self._runs)



# -- files on a worker ---------------------------------------------------------------------------------
def write_outputs(folder: Path, captures: Captures, *, deadline: float | None = None,
                  clock: Callable[[], float] | None = None) -> dict[str, Any]:
    """One torch.save file per port, then index.json (written last: a folder without it is
    incomplete). A value that cannot be saved is listed with its error."""
    import time

    import torch

    now = clock or time.monotonic
    folder.mkdir(parents=True, exist_ok=True)
    index: dict[str, Any] = {"nodes": {}}
    number = 0
    for node, ports in captures.items():
        for port, value in ports.items():
            entry = describe(value)
            if deadline is not None and now() > deadline:
                entry["error"] = "not written: the write time ran out"
            else:
                name = f"{number}.pt"
                number += 1
                try:
                    torch.save(value, folder / name)
                    entry["file"] = name
                except Exception as err:  # an object torch cannot pickle: listed, not kept
                    entry["error"] = f"{type(err).__name__}: {err}"[:500]
                    (folder / name).unlink(missing_ok=True)
            index["nodes"].setdefault(node, {})[port] = entry
    tmp = folder / (INDEX + ".tmp")
    tmp.write_text(json.dumps(index))
    os.replace(tmp, folder / INDEX)
    return index


def load_port(folder: Path, index: dict[str, Any], node_id: str, port: str) -> Any:
    """One port's value, mapped from its file on the CPU (not read into memory up front)."""
    import torch

    entry = index["nodes"][node_id][port]
    return torch.load(folder / entry["file"], map_location="cpu", mmap=True, weights_only=False)
