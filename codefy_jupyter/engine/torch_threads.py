"""Applying a run's CPU thread budget to torch on the threads that execute its nodes.

Why per thread: torch's intra-op count (`torch.set_num_threads`) is, under its OpenMP backend, the
calling thread's OpenMP setting (what `torch.get_num_threads()` reads back on that thread), so two
runs in one process, each setting it on its own node threads, each get their own budget. What
stays process-wide, whoever set it last: the count a thread that no run has touched starts from,
MKL's own count, and the inter-op pool, which torch sizes once per process (the first budget
applied here sizes it; later calls are refused by torch and ignored).

torch is never imported here: a node imports it. When the budget arrives before torch does, an
import hook applies it on the thread that imports torch (inside a node), before the node's own work.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
from types import ModuleType
from typing import Any

_local = threading.local()  # .budget: this thread's run's budget; .applied: what torch has here
_lock = threading.Lock()
_interop_done = False
_watch: _TorchImportWatch | None = None


def use(budget: int | None) -> None:
    """The calling thread now executes a node of a run with this budget (None: no budget)."""
    _local.budget = budget
    if budget is None or getattr(_local, "applied", None) == budget:
        return
    torch = sys.modules.get("torch")
    if torch is None or not hasattr(torch, "set_num_threads"):  # absent, or still importing
        _watch_torch()
        return
    _apply(torch, budget)


def _apply(torch: ModuleType, budget: int) -> None:
    global _interop_done
    # Read first: torch sizes a thread's OpenMP team lazily on its first parallel call, from the
    # count set last anywhere in the process, which would undo a value set here before it.
    torch.get_num_threads()
    torch.set_num_threads(budget)
    _local.applied = budget
    with _lock:
        if not _interop_done:
            _interop_done = True
            try:
                torch.set_num_interop_threads(budget)
            except RuntimeError:  # inter-op work already started in this process: it keeps its pool
                pass


def _torch_loaded(module: ModuleType) -> None:
    global _watch
    with _lock:
        if _watch is not None and _watch in sys.meta_path:
            sys.meta_path.remove(_watch)
        _watch = None
    budget = getattr(_local, "budget", None)
    if budget is not None:
        _apply(module, budget)


class _TorchImportWatch(importlib.abc.MetaPathFinder):
    """Finds nothing itself; wraps the loader that does find `torch` so that the importing thread's
    budget is applied as soon as torch's module has executed."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if name != "torch":
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Loader(spec.loader)
                return spec
        return None


class _Loader(importlib.abc.Loader):
    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        # The real loader goes back in first: torch reads its own __spec__/__loader__ (resources).
        module.__loader__ = self.inner
        if module.__spec__ is not None:
            module.__spec__.loader = self.inner
        self.inner.exec_module(module)
        _torch_loaded(module)


def _watch_torch() -> None:
    global _watch
    with _lock:
        if _watch is None and "torch" not in sys.modules:
            _watch = _TorchImportWatch()
            sys.meta_path.insert(0, _watch)
