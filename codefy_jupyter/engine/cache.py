"""Output caches keyed by input signatures (see `signatures.py`).

The cache is the *global* store: it may drop any entry at any time. A run never depends on it to
stay correct, because the executor keeps execution-local links from each consumer to the values
it still needs; the cache only saves recomputation.

Modes: `NoCache`, `LRUCache(n)`, `RAMPressureCache` (evicts at node boundaries while available
memory is low). `SessionCache` is the one an interactive session keeps across its runs, so a
re-run with one changed param executes only that node and what depends on it.
"""

from __future__ import annotations

import sys
import threading
from collections import OrderedDict
from typing import Any, Callable

Outputs = dict[str, Any]


class OutputCache:
    """Interface. `begin_run`/`end_run` bracket a run; `at_node_boundary` runs between nodes."""

    def get(self, key: str) -> Outputs | None:
        raise NotImplementedError

    def set(self, key: str, outputs: Outputs) -> None:
        raise NotImplementedError

    def clear(self) -> None:
        raise NotImplementedError

    def __len__(self) -> int:
        raise NotImplementedError

    def __contains__(self, key: str) -> bool:
        return self.get(key) is not None

    def begin_run(self, run_id: str) -> None:
        pass

    def end_run(self, run_id: str) -> None:
        pass

    def at_node_boundary(self) -> None:
        pass

    def evicted_count(self) -> int:
        """How many entries this cache has dropped so far (0: links can have nothing to write back)."""
        return 0

    def write_back(self, key: str, outputs: Outputs) -> bool:
        """A value a consumer still reads through its execution-local link, put back when the cache
        dropped it, so later consumers and later runs find it here again. Whether it was put back."""
        if key in self:
            return False
        self.set(key, outputs)
        return True


class NoCache(OutputCache):
    """Keeps nothing: every node runs every time (links still carry values within a run)."""

    def get(self, key: str) -> Outputs | None:
        return None

    def set(self, key: str, outputs: Outputs) -> None:
        pass

    def clear(self) -> None:
        pass

    def __len__(self) -> int:
        return 0


class _DictCache(OutputCache):
    def __init__(self) -> None:
        self._entries: OrderedDict[str, Outputs] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        self.evictions = 0

    def get(self, key: str) -> Outputs | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            self._touched(key)
            return entry

    def set(self, key: str, outputs: Outputs) -> None:
        with self._lock:
            self._entries[key] = outputs
            self._entries.move_to_end(key)
            self._touched(key)
            self._after_set()

    def __contains__(self, key: str) -> bool:
        return key in self._entries  # a look, not a use: no hit, no miss, no recency

    def evicted_count(self) -> int:
        return self.evictions

    def _touched(self, key: str) -> None:
        pass

    def _after_set(self) -> None:
        pass

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)

    def keys(self) -> list[str]:
        with self._lock:
            return list(self._entries)


class LRUCache(_DictCache):
    """At most `max_entries` node outputs; the least recently used go first."""

    def __init__(self, max_entries: int = 256) -> None:
        if max_entries < 1:
            raise ValueError("LRUCache max_entries must be at least 1")
        super().__init__()
        self.max_entries = max_entries

    def _after_set(self) -> None:
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)
            self.evictions += 1


def available_memory_bytes() -> int:
    import psutil

    return int(psutil.virtual_memory().available)


def estimate_bytes(value: Any, _depth: int = 0) -> int:
    """Rough size of a node's outputs: tensors and arrays by their buffers, containers summed."""
    if _depth > 4:
        return 0
    if hasattr(value, "element_size") and hasattr(value, "nelement"):
        try:
            return int(value.element_size() * value.nelement())
        except Exception:  # a tensor-like that cannot tell its size is counted as small
            return 64
    nbytes = getattr(value, "nbytes", None)
    if isinstance(nbytes, int):
        return nbytes
    if hasattr(value, "parameters") and callable(value.parameters):
        try:
            return sum(estimate_bytes(p, _depth + 1) for p in value.parameters())
        except Exception:
            return 64
    if isinstance(value, dict):
        return sum(estimate_bytes(v, _depth + 1) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(estimate_bytes(v, _depth + 1) for v in value)
    if hasattr(value, "__dict__") and not isinstance(value, type):
        return sum(estimate_bytes(v, _depth + 1) for v in vars(value).values())
    return sys.getsizeof(value)


class RAMPressureCache(_DictCache):
    """Keeps everything until available memory runs low, then frees at node boundaries (after a node
    completes, and after one goes back to pending), in the seed's order, each step only while memory
    is still short:

    1. entries the current run has not touched (older workflows), oldest first;
    2. the current run's large entries (`large_bytes` and more), largest first;
    3. pinned host memory (`release_pinned`; by default torch's cached pinned buffers, when torch is
       loaded and CUDA is initialised: nothing is imported for it);
    4. the rest of the current run's entries, largest first (full eviction).

    `probe` returns available bytes (injectable so tests can apply pressure on demand).
    """

    def __init__(
        self, min_available_bytes: int = 2 * 1024**3, probe: Callable[[], int] = available_memory_bytes, *,
        large_bytes: int = 64 * 1024**2, release_pinned: Callable[[], object] | None = None,
    ) -> None:
        super().__init__()
        self.min_available_bytes = min_available_bytes
        self.probe = probe
        self.large_bytes = large_bytes
        self.release_pinned = release_pinned if release_pinned is not None else release_pinned_memory
        self._run_keys: set[str] = set()
        self._sizes: dict[str, int] = {}
        self.evicted_keys: list[str] = []
        self.pinned_releases = 0

    def begin_run(self, run_id: str) -> None:
        self._run_keys = set()

    def _touched(self, key: str) -> None:
        self._run_keys.add(key)

    def set(self, key: str, outputs: Outputs) -> None:
        self._sizes[key] = estimate_bytes(outputs)
        super().set(key, outputs)

    def _short(self) -> bool:
        return self.probe() < self.min_available_bytes

    def _evict(self, keys: list[str]) -> bool:
        """Drop `keys` in order until memory suffices; whether it does."""
        for key in keys:
            if key not in self._entries:
                continue
            self._entries.pop(key)
            self._sizes.pop(key, None)
            self.evictions += 1
            self.evicted_keys.append(key)
            if not self._short():
                return True
        return False

    def _active(self, *, large: bool) -> list[str]:
        keys = [k for k in self._entries if k in self._run_keys
                and (not large or self._sizes.get(k, 0) >= self.large_bytes)]
        return sorted(keys, key=lambda k: self._sizes.get(k, 0), reverse=True)

    def at_node_boundary(self) -> None:
        if not self._short():
            return
        with self._lock:
            stale = [k for k in self._entries if k not in self._run_keys]  # already oldest first
            if self._evict(stale) or self._evict(self._active(large=True)):
                return
        self.pinned_releases += 1
        self.release_pinned()
        if not self._short():
            return
        with self._lock:
            self._evict(self._active(large=False))


def release_pinned_memory() -> bool:
    """Give torch's cached pinned (page-locked) host buffers back to the system. Only when torch is
    already loaded and CUDA initialised: importing torch or starting CUDA would cost more memory than
    this frees. Whether anything was asked of torch."""
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    empty = getattr(getattr(torch, "_C", None), "_host_emptyCache", None)
    if cuda is None or empty is None or not cuda.is_initialized():
        return False
    empty()
    return True


class SessionCache(OutputCache):
    """The cache one session (a notebook kernel, a lab document) keeps across its runs.

    It wraps a policy (LRU by default) and counts what each run reused.
    """

    def __init__(self, policy: OutputCache | None = None) -> None:
        self.policy = policy if policy is not None else LRUCache(512)
        self.runs = 0

    def get(self, key: str) -> Outputs | None:
        return self.policy.get(key)

    def set(self, key: str, outputs: Outputs) -> None:
        self.policy.set(key, outputs)

    def clear(self) -> None:
        self.policy.clear()

    def __len__(self) -> int:
        return len(self.policy)

    def begin_run(self, run_id: str) -> None:
        self.runs += 1
        self.policy.begin_run(run_id)

    def end_run(self, run_id: str) -> None:
        self.policy.end_run(run_id)

    def at_node_boundary(self) -> None:
        self.policy.at_node_boundary()

    def evicted_count(self) -> int:
        return self.policy.evicted_count()

    def write_back(self, key: str, outputs: Outputs) -> bool:
        return self.policy.write_back(key, outputs)
