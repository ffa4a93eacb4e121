"""What a node sees while it runs (`ctx`), and how its reports leave the engine.

The engine reports through three callbacks, each taking one event dict:
- `status`: node lifecycle and progress of top-level nodes (`node_status`, `progress`, `execution_cached`);
- `inner_status`: the same for nodes inside an expansion (ids `parent/inner`);
- `signal`: what nodes record: `metric`, `artifact`, `warning`.
Callbacks are called from the thread that runs the node, one at a time (the run holds a lock),
so a consumer sees a run's events in order.
"""

from __future__ import annotations

import functools
import hashlib
import os
import random
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from .errors import RunCancelled

EventFn = Callable[[dict[str, Any]], None]


@dataclass
class EngineCallbacks:
    status: EventFn | None = None
    inner_status: EventFn | None = None
    signal: EventFn | None = None

    @classmethod
    def all_to(cls, fn: EventFn | None) -> EngineCallbacks:
        return cls(fn, fn, fn)


class CancelToken:
    """A cooperative cancel flag shared by the run and whoever may stop it."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.reason: str | None = None
        self._callbacks: list[Callable[[], None]] = []
        self._lock = threading.Lock()

    def cancel(self, reason: str = "cancel requested") -> None:
        with self._lock:
            if self._event.is_set():
                return
            self.reason = reason
            self._event.set()
            callbacks = list(self._callbacks)
        for fn in callbacks:
            fn()

    def on_cancel(self, fn: Callable[[], None]) -> Callable[[], None]:
        """Call fn (from the cancelling thread) when cancel is requested; returns a remover."""
        with self._lock:
            if not self._event.is_set():
                self._callbacks.append(fn)
                return lambda: self._remove(fn)
        fn()
        return lambda: None

    def _remove(self, fn: Callable[[], None]) -> None:
        with self._lock:
            if fn in self._callbacks:
                self._callbacks.remove(fn)

    def is_set(self) -> bool:
        return self._event.is_set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()


def node_seed(run_seed: int, node_id: str) -> int:
    """Each node's seed: stable for (run seed, node id), independent of execution order."""
    digest = hashlib.sha256(f"{run_seed}/{node_id}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch's global generators before a node of a seeded run."""
    random.seed(seed)
    import numpy as np

    np.random.seed(seed)
    torch = sys.modules.get("torch")
    if torch is None:
        import importlib.util  # only seeded runs need it: not worth an import in every process

        if importlib.util.find_spec("torch") is not None:
            import torch  # noqa: F811 - a seeded run must seed torch even before a node imports it
    if torch is not None:
        if _cpu_generators_only(torch):
            torch.default_generator.manual_seed(seed)
            torch.mps.manual_seed(seed)  # nothing without MPS
        else:
            torch.manual_seed(seed)


@functools.cache
def _cpu_generators_only(torch: Any) -> bool:
    """Whether this torch build has no CUDA, XPU, MTIA or custom-device generators, so that
    torch.manual_seed seeds only the CPU's (and MPS's). Then it is not called: for each of those
    backends it still queues a lazy seeding and records the caller's whole stack to do it
    (traceback.format_stack, reading source lines): ~0.5 ms per node in a server's deep stack, most
    of what a small seeded run cost. Another torch than the one we know: torch.manual_seed."""
    try:
        return not (torch.backends.cuda.is_built() or torch.xpu._is_compiled() or torch.mtia._is_compiled()
                    or hasattr(torch, torch._C._get_privateuse1_backend_name()))
    except AttributeError:
        return False


class RunState:
    """Everything one run shares across its nodes: settings, cancel flag, event routing."""

    def __init__(
        self,
        *,
        run_id: str,
        seed: int | None,
        device: str,
        deterministic: bool,
        data_dir: Path,
        callbacks: EngineCallbacks,
        cancel: CancelToken | threading.Event | None,
        clock: Callable[[], float] = time.monotonic,
        cpu_threads: int | None = None,
        provenance: bool = False,
    ) -> None:
        self.run_id = run_id
        self.provenance = provenance
        self.inputs: list[dict[str, Any]] = []
        self.cpu_threads = cpu_threads
        self.seed = seed
        self.device = device
        self.deterministic = deterministic
        self.data_dir = data_dir
        self.callbacks = callbacks
        self.cancel = cancel if cancel is not None else CancelToken()
        self.clock = clock
        self.presets: Any = None
        # Set when the run stops for another reason (a node failed): nodes still running see it
        # through check_cancelled and stop early.
        self.stop = threading.Event()
        self._lock = threading.Lock()
        self.reports_status = callbacks.status is not None or callbacks.inner_status is not None

    @property
    def cancelled(self) -> bool:
        return self.cancel.is_set() or self.stop.is_set()

    def emit_status(self, event: dict[str, Any]) -> None:
        node_id = event.get("node_id")
        if node_id is not None and "/" in node_id:
            fn = self.callbacks.inner_status
            event = {**event, "event": "inner_" + event["event"], "parent": node_id.rsplit("/", 1)[0]}
        else:
            fn = self.callbacks.status
        if fn is not None:
            with self._lock:
                fn(event)

    def emit_signal(self, event: dict[str, Any]) -> None:
        fn = self.callbacks.signal
        if fn is not None:
            with self._lock:
                fn(event)


class ExecutionContext:
    """The `ctx` argument of every node."""

    def __init__(self, run: RunState, node_id: str, node_type: str) -> None:
        self._run = run
        self.node_id = node_id
        self.node_type = node_type
        self.checked_cancel = False

    # -- settings -------------------------------------------------------------------------------
    @property
    def run_id(self) -> str:
        return self._run.run_id

    @property
    def run_seed(self) -> int | None:
        return self._run.seed

    @property
    def seed(self) -> int | None:
        """This node's seed in a seeded run (derived from the run seed and node id), else None."""
        return None if self._run.seed is None else node_seed(self._run.seed, self.node_id)

    @property
    def device(self) -> str:
        return self._run.device

    @property
    def deterministic(self) -> bool:
        return self._run.deterministic

    @property
    def presets(self) -> Any:
        """The run's PresetLibrary (for nodes that expand presets)."""
        return self._run.presets

    @property
    def data_dir(self) -> Path:
        """Where nodes write run files (checkpoints, saved models). Created on first use."""
        path = self._run.data_dir
        # Owner only, and its parent too (the server's runs/ folder): checkpoints and saved models
        # are as private as the graph that made them.
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        path.mkdir(mode=0o700, exist_ok=True)
        return path

    # -- cancel ---------------------------------------------------------------------------------
    @property
    def cancelled(self) -> bool:
        self.checked_cancel = True
        return self._run.cancelled

    def check_cancelled(self) -> None:
        """Raise `RunCancelled` if the run was asked to stop. Long nodes call it every step."""
        self.checked_cancel = True
        if self._run.cancelled:
            raise RunCancelled(f"node {self.node_id!r} stopped: cancel requested")

    # -- reports --------------------------------------------------------------------------------
    def progress(self, value: float, total: float | None = None, label: str | None = None) -> None:
        self._run.emit_status(
            {"event": "progress", "node_id": self.node_id, "node_type": self.node_type,
             "value": value, "total": total, "label": label}
        )

    def log_metric(self, name: str, value: float, step: int | None = None) -> None:
        self._run.emit_signal(
            {"event": "metric", "node_id": self.node_id, "name": name, "value": float(value), "step": step}
        )

    def log_metrics(self, values: dict[str, float], step: int | None = None) -> None:
        for name, value in values.items():
            self.log_metric(name, value, step)

    def artifact(self, kind: str, path: str | os.PathLike[str], meta: dict[str, Any] | None = None) -> None:
        self._run.emit_signal(
            {"event": "artifact", "node_id": self.node_id, "kind": kind, "path": str(path), "meta": meta or {}}
        )

    def record_input(self, path: str | os.PathLike[str], kind: str, revision: str | None = None,
                     rows: int | None = None) -> dict[str, Any] | None:
        """Note that this node read `path` (kind "dataset" or "model"). Only a run queued with
        provenance on hashes the file and keeps the record; otherwise this costs nothing."""
        if not self._run.provenance:
            return None
        from .provenance import input_record

        record = input_record(self.node_id, path, kind=kind, revision=revision, rows=rows)
        with self._run._lock:
            self._run.inputs.append(record)
        return record

    def warn(self, message: str, code: str = "node_warning", **params: Any) -> None:
        self._run.emit_signal(
            {"event": "warning", "node_id": self.node_id, "code": code, "message": message, "params": params}
        )
