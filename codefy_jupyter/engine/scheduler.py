"""The dynamic topological scheduler (the seed's ExecutionList), pure and synchronous.

It decides which node runs next; it never runs anything. The executor stages a node (`pick`),
and after running it reports back: `complete` (SUCCESS), `unstage` (PENDING: the node added
dependencies or an external block and will be picked again) or stops (FAILURE).

Nodes are dense integer handles (0..n-1, growing as expansions add nodes); the executor maps
them to ids. All state lives in flat lists indexed by handle, so each step is a few list reads
and writes, and the cost per node stays flat from a thousand nodes to a hundred thousand:
- ready nodes sit in five FIFO buckets by pick class, decided once when a node is admitted, so
  picking looks at five deques;
- `complete` releases exactly the node's dependents through the blocking lists;
- the pending set is never rescanned. Only when nothing is ready, nothing is staged and no
  external block is held does `find_cycle` walk the pending nodes (once, and the run then ends).
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Callable, Iterable

from .graph import find_cycles

# Pick classes, in the seed's UX order: outputs first, async next (start I/O early), then nodes
# that feed an output directly, then two hops from one, then everything else in arrival order.
OUTPUT, ASYNC, BLOCKS_OUTPUT, TWO_HOPS, OTHER = range(5)

NOT_PENDING = -1


class ExecutionList:
    """Pending nodes, block counts, blocking lists, external blocks and ready buckets.

    deps_of(node)        -> the nodes it needs now (strong links only)
    is_available(dep, n) -> True when dep's outputs already exist for n (cached or done); the
                            executor pins the value for n as a side effect
    pick_class(node)     -> one of OUTPUT..OTHER
    """

    def __init__(
        self,
        deps_of: Callable[[int], Iterable[int]],
        is_available: Callable[[int, int], bool],
        pick_class: Callable[[int], int],
        size: int = 0,
    ) -> None:
        self._deps_of = deps_of
        self._is_available = is_available
        self._pick_class = pick_class
        # block_count[n] is NOT_PENDING for nodes outside the pending graph.
        self.block_count: list[int] = []
        # blocking[dep]: its dependents, once per link: None, one handle, or a list of handles.
        # Links are only ever added and all of a node's are released together when it completes.
        # Most nodes feed one consumer; storing that handle inline spares a list object per node,
        # which keeps the scheduler's memory (and its cost per node) flat on big graphs.
        self.blocking: list[int | list[int] | None] = []
        self._class = bytearray()
        self._in_ready = bytearray()  # 1 while the node sits in a ready bucket (removal is lazy)
        self.staged: set[int] = set()
        self.pending_count = 0
        self.external_blocks = 0
        self._ready: tuple[deque[int], ...] = tuple(deque() for _ in range(5))
        self._event: asyncio.Event | None = None
        self.grow(size)

    def grow(self, size: int) -> None:
        """Make room for handles up to size - 1 (an expansion added nodes)."""
        extra = size - len(self.block_count)
        if extra > 0:
            self.block_count.extend([NOT_PENDING] * extra)
            self.blocking.extend([None] * extra)
            self._class.extend(bytes(extra))
            self._in_ready.extend(bytes(extra))

    # -- graph growth ---------------------------------------------------------------------------
    def is_pending(self, node: int) -> bool:
        return self.block_count[node] != NOT_PENDING

    def pending(self) -> list[int]:
        return [n for n, count in enumerate(self.block_count) if count != NOT_PENDING]

    def add_node(self, node: int) -> None:
        """Make node pending, with every strong dependency whose outputs do not exist yet."""
        if self.block_count[node] != NOT_PENDING:
            return
        self._admit(node)
        self._expand_deps([node])

    def add_strong_link(self, dep: int, node: int) -> None:
        """node (pending) now needs dep: a lazy input asked for, or an expansion's output."""
        if self._is_available(dep, node):
            return
        if self.block_count[dep] == NOT_PENDING:
            self._admit(dep)
            self._expand_deps([dep])
        self._link(dep, node)

    def _admit(self, node: int) -> None:
        self.block_count[node] = 0
        self.pending_count += 1
        self._class[node] = self._pick_class(node)

    def _expand_deps(self, todo: list[int]) -> None:
        # Iterative: a 100,000-node chain must not touch the recursion limit.
        block_count = self.block_count
        while todo:
            node = todo.pop()
            for dep in self._deps_of(node):
                if self._is_available(dep, node):
                    continue
                if block_count[dep] == NOT_PENDING:
                    self._admit(dep)
                    todo.append(dep)
                self._link(dep, node)
            if block_count[node] == 0 and node not in self.staged:
                self._make_ready(node)

    def _link(self, dep: int, node: int) -> None:
        self._in_ready[node] = 0  # a queued entry, if any, is now stale
        self.block_count[node] += 1
        dependents = self.blocking[dep]
        if dependents is None:
            self.blocking[dep] = node
        elif type(dependents) is int:
            self.blocking[dep] = [dependents, node]
        else:
            dependents.append(node)

    def _make_ready(self, node: int) -> None:
        if not self._in_ready[node]:
            self._in_ready[node] = 1
            self._ready[self._class[node]].append(node)

    # -- stage / unstage / complete -------------------------------------------------------------
    def pick(self) -> int | None:
        """Stage the best ready node, or None when nothing is ready."""
        in_ready = self._in_ready
        for bucket in self._ready:
            while bucket:
                node = bucket.popleft()
                if in_ready[node]:
                    in_ready[node] = 0
                    self.staged.add(node)
                    return node
        return None

    def unstage(self, node: int) -> None:
        """PENDING: the node stays in the graph and is picked again once unblocked."""
        self.staged.discard(node)
        if self.block_count[node] == 0:
            self._make_ready(node)

    def complete(self, node: int) -> None:
        """SUCCESS: remove the node and release what it was blocking."""
        self.staged.discard(node)
        block_count = self.block_count
        block_count[node] = NOT_PENDING
        self._in_ready[node] = 0
        self.pending_count -= 1
        dependents = self.blocking[node]
        if dependents is None:
            return
        self.blocking[node] = None
        for dependent in (dependents,) if type(dependents) is int else dependents:
            left = block_count[dependent] - 1
            block_count[dependent] = left
            if left == 0 and dependent not in self.staged:
                self._make_ready(dependent)

    # -- external blocks ------------------------------------------------------------------------
    @property
    def unblocked(self) -> asyncio.Event:
        """Set whenever an external block ends (and by the executor when a running node finishes)."""
        if self._event is None:
            self._event = asyncio.Event()
        return self._event

    def add_external_block(self, node: int) -> Callable[[], None]:
        """Hold node back until the returned function is called (once), e.g. an async task."""
        self.external_blocks += 1
        self._in_ready[node] = 0
        self.block_count[node] += 1
        released = False

        def unblock() -> None:
            nonlocal released
            if released:
                return
            released = True
            self.external_blocks -= 1
            if self.block_count[node] != NOT_PENDING:
                left = self.block_count[node] - 1
                self.block_count[node] = left
                if left == 0 and node not in self.staged:
                    self._make_ready(node)
            self.unblocked.set()

        return unblock

    # -- state ----------------------------------------------------------------------------------
    def is_empty(self) -> bool:
        return self.pending_count == 0

    def has_ready(self) -> bool:
        in_ready = self._in_ready
        for bucket in self._ready:
            while bucket and not in_ready[bucket[0]]:
                bucket.popleft()  # drop stale entries so the answer is exact
            if bucket:
                return True
        return False

    def ready_count(self) -> int:
        return sum(1 for bucket in self._ready for n in bucket if self._in_ready[n])

    def is_stuck(self) -> bool:
        """Nothing ready, nothing staged, no external block, yet nodes pending: a cycle."""
        return self.pending_count > 0 and not self.staged and not self.external_blocks and not self.has_ready()

    def find_cycle(self) -> list[list[int]]:
        """The cycles among pending nodes (only nodes on a cycle, not those downstream of one)."""
        pending = self.pending()
        deps: dict[int, list[int]] = {n: [] for n in pending}
        for dep in pending:
            dependents = self.blocking[dep]
            for dependent in {dependents} if type(dependents) is int else set(dependents or ()):
                if dependent in deps:
                    deps[dependent].append(dep)
        return find_cycles(pending, lambda n: deps[n])
