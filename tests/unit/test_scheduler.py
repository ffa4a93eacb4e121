"""The pure scheduler (ExecutionList): block counts, pick order, unstage, external blocks, cycles."""

from __future__ import annotations

import asyncio

import pytest

from codefy_jupyter.engine.scheduler import ASYNC, BLOCKS_OUTPUT, NOT_PENDING, OTHER, OUTPUT, TWO_HOPS, ExecutionList


class Named:
    """An ExecutionList over named nodes: the scheduler itself works on integer handles."""

    def __init__(self, deps: dict[str, list[str]], classes: dict[str, int] | None = None,
                 available: set[str] = frozenset()) -> None:
        self.names = list(deps)
        self.h = {n: i for i, n in enumerate(self.names)}
        hdeps = [[self.h[d] for d in deps[n]] for n in self.names]
        classes = classes or {}
        self.el = ExecutionList(lambda i: hdeps[i], lambda d, i: self.names[d] in available,
                                lambda i: classes.get(self.names[i], OTHER), size=len(self.names))

    def __getattr__(self, name):
        return getattr(self.el, name)

    def add_node(self, n):
        self.el.add_node(self.h[n])

    def add_strong_link(self, dep, n):
        self.el.add_strong_link(self.h[dep], self.h[n])

    def pick(self):
        i = self.el.pick()
        return None if i is None else self.names[i]

    def complete(self, n):
        self.el.complete(self.h[n])

    def unstage(self, n):
        self.el.unstage(self.h[n])

    def add_external_block(self, n):
        return self.el.add_external_block(self.h[n])

    @property
    def pending(self):
        return {self.names[i] for i in self.el.pending()}

    @property
    def staged(self):
        return {self.names[i] for i in self.el.staged}

    def count(self, n):
        return self.el.block_count[self.h[n]]

    def cycles(self):
        return [[self.names[i] for i in c] for c in self.el.find_cycle()]


make = Named


def drain(el) -> list[str]:
    order = []
    while (n := el.pick()) is not None:
        order.append(n)
        el.complete(n)
    return order


def test_dependencies_run_before_dependents():
    el = make({"a": [], "b": ["a"], "c": ["a", "b"]})
    el.add_node("c")
    assert el.pending == {"a", "b", "c"}
    assert [el.count(n) for n in "abc"] == [0, 1, 2]
    assert drain(el) == ["a", "b", "c"]
    assert el.is_empty()


def test_available_dependencies_are_not_pending():
    el = make({"a": [], "b": ["a"], "c": ["b"]}, available={"b"})
    el.add_node("c")
    assert el.pending == {"c"}
    assert drain(el) == ["c"]


def test_pick_order_follows_the_ux_classes():
    # Five independent ready nodes added in the worst order; the pick order is by class.
    classes = {"other": OTHER, "two": TWO_HOPS, "blocks": BLOCKS_OUTPUT, "async": ASYNC, "out": OUTPUT}
    el = make({n: [] for n in classes}, classes)
    for n in ["other", "two", "blocks", "async", "out"]:
        el.add_node(n)
    assert drain(el) == ["out", "async", "blocks", "two", "other"]


def test_same_class_is_first_in_first_out():
    el = make({"x": [], "y": [], "z": []})
    for n in ["y", "z", "x"]:
        el.add_node(n)
    assert drain(el) == ["y", "z", "x"]


def test_staged_nodes_are_not_picked_twice_and_several_can_be_staged():
    el = make({"a": [], "b": [], "c": ["a", "b"]})
    el.add_node("c")
    first, second = el.pick(), el.pick()
    assert {first, second} == {"a", "b"}
    assert el.staged == {"a", "b"}
    assert el.pick() is None  # c is blocked by both
    el.complete(first)
    assert el.pick() is None
    el.complete(second)
    assert el.pick() == "c"


def test_unstage_then_new_dependency_blocks_until_it_completes():
    deps = {"sw": [], "branch": []}
    el = make(deps)
    el.add_node("sw")
    assert el.pick() == "sw"
    el.add_strong_link("branch", "sw")  # a lazy input asked for
    el.unstage("sw")
    assert el.count("sw") == 1
    assert el.pick() == "branch"
    assert el.pick() is None
    el.complete("branch")
    assert el.pick() == "sw"


def test_unstage_without_new_dependency_makes_the_node_ready_again():
    el = make({"a": []})
    el.add_node("a")
    assert el.pick() == "a"
    el.unstage("a")
    assert el.pick() == "a"


def test_two_links_to_the_same_dependency_are_counted_and_released_together():
    el = make({"a": [], "b": ["a", "a"]})
    el.add_node("b")
    assert el.count("b") == 2
    assert el.blocking[el.h["a"]] == [el.h["b"], el.h["b"]]
    assert el.blocking[el.h["b"]] is None
    assert drain(el) == ["a", "b"]


def test_external_block_holds_the_node_and_sets_the_event():
    async def scenario():
        el = make({"a": []})
        el.add_node("a")
        assert el.pick() == "a"
        unblock = el.add_external_block("a")
        el.unstage("a")
        assert el.external_blocks == 1
        assert el.pick() is None
        assert not el.is_stuck()  # waiting, not a cycle
        asyncio.get_running_loop().call_later(0.01, unblock)
        await asyncio.wait_for(el.unblocked.wait(), 1)
        assert el.external_blocks == 0
        unblock()  # a second call changes nothing
        assert el.external_blocks == 0
        assert el.pick() == "a"

    asyncio.run(scenario())


def test_cycle_names_only_the_nodes_on_the_cycle():
    # a <-> b is a cycle; c depends on it; d is independent and runs first.
    el = make({"a": ["b"], "b": ["a"], "c": ["b"], "d": []})
    el.add_node("c")
    el.add_node("d")
    assert drain(el) == ["d"]
    assert el.is_stuck()
    assert el.cycles() == [["a", "b"]]


def test_self_loop_is_a_cycle():
    el = make({"a": ["a"]})
    el.add_node("a")
    assert el.is_stuck()
    assert el.cycles() == [["a"]]


def test_long_chain_is_added_without_recursion():
    n = 200_000
    deps = {f"n{i}": ([f"n{i - 1}"] if i else []) for i in range(n)}
    el = make(deps)
    el.add_node(f"n{n - 1}")
    assert el.pending_count == n
    order = drain(el)
    assert order[0] == "n0" and order[-1] == f"n{n - 1}" and len(order) == n


@pytest.mark.parametrize("width", [1, 5, 50])
def test_fan_in_releases_the_sink_only_after_every_source(width):
    deps = {f"s{i}": [] for i in range(width)}
    deps["sink"] = [f"s{i}" for i in range(width)]
    el = make(deps)
    el.add_node("sink")
    order = drain(el)
    assert order[-1] == "sink" and len(order) == width + 1


def test_expansion_growth_adds_handles():
    el = ExecutionList(lambda i: [], lambda d, i: False, lambda i: OTHER, size=1)
    el.add_node(0)
    assert el.pick() == 0
    el.grow(3)
    assert el.block_count[1:] == [NOT_PENDING, NOT_PENDING]
    el.add_strong_link(1, 0)
    el.add_strong_link(2, 0)
    el.unstage(0)
    assert sorted([el.pick(), el.pick()]) == [1, 2]
    el.complete(1)
    el.complete(2)
    assert el.pick() == 0


def test_a_node_blocked_while_queued_is_not_picked_until_released():
    # 'late' is ready, then gains a dependency before it is picked (lazy bucket removal).
    el = ExecutionList(lambda i: [], lambda d, i: False, lambda i: OTHER, size=3)
    el.add_node(0)
    el.add_node(1)
    el.add_strong_link(2, 1)
    assert el.pick() == 0
    assert el.pick() == 2
    assert el.pick() is None
    el.complete(2)
    assert el.pick() == 1
