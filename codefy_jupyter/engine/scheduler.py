"""The dynamic topological scheduler (the seed's ExecutionList), pure and synchronous.

It decides which node runs next; it never runs anything. The executor stages a node (`pick`),
and after running it reports back: `complete` (SUCCESS), `unstage` (PENDING: the node added
dependencies or an external block and will be picked again) or stops (FAILURE).

Work per step does not grow with the graph:
- ready nodes sit in five buckets by pick class, decided once when a node is added, so picking is
  a look at five dicts;
- `complete` releases exactly the node's dependents through the blocking map;
- the pending set is never rescanned. Only when nothing is ready, nothing is staged and no
  external block is held does `find_cycle` walk the pending nodes (once, and the run then ends).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from typing import Callable, Iterable

from .graph import find_cycles

# Pick classes, in the seed's UX order: outputs first, async next (start I/O early), then nodes
# that feed an output directly, then two hops from one, then everything else in arrival order.
OUTPUT, ASYNC, BLOCKS_OUTPUT, TWO_HOPS, OTHER = range(5)


class ExecutionList:
    """Pending nodes, block counts, blocking map, external blocks and ready buckets.

    deps_of(node)        -> the nodes it needs now (strong links only)
    is_available(dep, n) -> True when dep's outputs already exist for n (cached or done); the
                            executor pins the value for n as a side effect
    pick_class(node)     -> one of OUTPUT..OTHER
    """

    def __init__(
        self,
        deps_of: Callable[[str], Iterable[str]],
        is_available: Callable[[str, str], bool],
        pick_class: Callable[[str], int],
    ) -> None:
        self._deps_of = deps_of
        self._is_available = is_available
        self._pick_class = pick_class
        self.pending: set[str] = set()
        self.block_count: dict[str, int] = {}
        self.blocking: dict[str, dict[str, int]] = {}  # dep -> {dependent: number of links}
        self.staged: set[str] = set()
        self.external_blocks = 0
        self._class: dict[str, int] = {}
        # OrderedDict, not dict: popping the first item of a plain dict again and again skips the
        # deleted slots in front of it, which turns a 100k-wide ready set quadratic.
        self._ready: tuple[OrderedDict[str, None], ...] = tuple(OrderedDict() for _ in range(5))
        self._event: asyncio.Event | None = None

    # -- graph growth ---------------------------------------------------------------------------
    def add_node(self, node_id: str) -> None:
        """Make node_id pending, with every strong dependency whose outputs do not exist yet."""
        if node_id in self.pending:
            return
        self._admit(node_id)
        self._expand_deps([node_id])

    def add_strong_link(self, dep: str, node_id: str) -> None:
        """node_id (pending) now needs dep: a lazy input asked for, or an expansion's output."""
        if self._is_available(dep, node_id):
            return
        if dep not in self.pending:
            self._admit(dep)
            self._expand_deps([dep])
        self._link(dep, node_id)

    def _admit(self, node_id: str) -> None:
        self.pending.add(node_id)
        self.block_count[node_id] = 0
        self._class[node_id] = self._pick_class(node_id)

    def _expand_deps(self, todo: list[str]) -> None:
        # Iterative: a 100,000-node chain must not touch the recursion limit.
        while todo:
            node_id = todo.pop()
            for dep in self._deps_of(node_id):
                if self._is_available(dep, node_id):
                    continue
                if dep not in self.pending:
                    self._admit(dep)
                    todo.append(dep)
                self._link(dep, node_id)
            if self.block_count[node_id] == 0 and node_id not in self.staged:
                self._ready[self._class[node_id]][node_id] = None

    def _link(self, dep: str, node_id: str) -> None:
        count = self.block_count[node_id]
        if count == 0:
            self._ready[self._class[node_id]].pop(node_id, None)
        self.block_count[node_id] = count + 1
        dependents = self.blocking.get(dep)
        if dependents is None:
            self.blocking[dep] = {node_id: 1}
        else:
            dependents[node_id] = dependents.get(node_id, 0) + 1

    # -- stage / unstage / complete -------------------------------------------------------------
    def pick(self) -> str | None:
        """Stage the best ready node, or None when nothing is ready."""
        for bucket in self._ready:
            if bucket:
                node_id = bucket.popitem(last=False)[0]
                self.staged.add(node_id)
                return node_id
        return None

    def unstage(self, node_id: str) -> None:
        """PENDING: the node stays in the graph and is picked again once unblocked."""
        self.staged.discard(node_id)
        if self.block_count[node_id] == 0:
            self._ready[self._class[node_id]][node_id] = None

    def complete(self, node_id: str) -> None:
        """SUCCESS: remove the node and release what it was blocking."""
        self.staged.discard(node_id)
        self.pending.discard(node_id)
        del self.block_count[node_id]
        del self._class[node_id]
        dependents = self.blocking.pop(node_id, None)
        if dependents:
            for dependent, n in dependents.items():
                left = self.block_count[dependent] - n
                self.block_count[dependent] = left
                if left == 0 and dependent not in self.staged:
                    self._ready[self._class[dependent]][dependent] = None

    # -- external blocks ------------------------------------------------------------------------
    @property
    def unblocked(self) -> asyncio.Event:
        """Set whenever an external block ends (and by the executor when a running node finishes)."""
        if self._event is None:
            self._event = asyncio.Event()
        return self._event

    def add_external_block(self, node_id: str) -> Callable[[], None]:
        """Hold node_id back until the returned function is called (once), e.g. an async task."""
        self.external_blocks += 1
        self._link_external(node_id)
        released = False

        def unblock() -> None:
            nonlocal released
            if released:
                return
            released = True
            self.external_blocks -= 1
            if node_id in self.block_count:
                left = self.block_count[node_id] - 1
                self.block_count[node_id] = left
                if left == 0 and node_id not in self.staged:
                    self._ready[self._class[node_id]][node_id] = None
            self.unblocked.set()

        return unblock

    def _link_external(self, node_id: str) -> None:
        if self.block_count[node_id] == 0:
            self._ready[self._class[node_id]].pop(node_id, None)
        self.block_count[node_id] += 1

    # -- state ----------------------------------------------------------------------------------
    def is_empty(self) -> bool:
        return not self.pending

    def has_ready(self) -> bool:
        return any(self._ready)

    def ready_count(self) -> int:
        return sum(len(b) for b in self._ready)

    def is_stuck(self) -> bool:
        """Nothing ready, nothing staged, no external block, yet nodes pending: a cycle."""
        return bool(self.pending) and not self.staged and not self.external_blocks and not self.has_ready()

    def find_cycle(self) -> list[list[str]]:
        """The cycles among pending nodes (only nodes on a cycle, not those downstream of one)."""
        deps: dict[str, list[str]] = {n: [] for n in self.pending}
        for dep, dependents in self.blocking.items():
            if dep in self.pending:
                for dependent in dependents:
                    if dependent in deps:
                        deps[dependent].append(dep)
        return find_cycles(sorted(self.pending), lambda n: deps[n])
