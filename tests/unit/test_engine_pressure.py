"""The engine rules of the dynamic-scheduling seed around the output cache: RAM-pressure eviction in
its four steps (other workflows' entries, the run's large ones, pinned memory, the rest), checked at
every node boundary (a node going back to pending as well as one completing), and a consumer's
execution-local link writing an evicted value back into the main cache when it reads it."""

from __future__ import annotations

import pytest
from engine_nodes import chain, edge, run

from codefy_jupyter.engine import LRUCache, RAMPressureCache, SessionCache
from codefy_jupyter.engine.cache import release_pinned_memory


class Machine:
    """Available memory as the cache sees it: low until `enough_after` steps (an eviction, or the
    pinned-memory release) have happened; `steps` says which, in order."""

    def __init__(self, cache: RAMPressureCache, enough_after: int) -> None:
        self.cache = cache
        self.pinned_at: list[int] = []
        cache.probe = lambda: 100 if len(cache.evicted_keys) + len(self.pinned_at) >= enough_after else 0
        cache.release_pinned = lambda: self.pinned_at.append(len(cache.evicted_keys))

    @property
    def steps(self) -> list[str]:
        steps = list(self.cache.evicted_keys)
        for at in reversed(self.pinned_at):
            steps.insert(at, "pinned")
        return steps


def filled(large_bytes: int = 500) -> RAMPressureCache:
    cache = RAMPressureCache(min_available_bytes=100, probe=lambda: 1000, large_bytes=large_bytes)
    cache.begin_run("old")
    cache.set("old", {"v": b"x" * 10})
    cache.begin_run("now")
    cache.set("small", {"v": b"x" * 10})
    cache.set("mid", {"v": b"x" * 100})
    cache.set("big", {"v": b"x" * 1000})
    return cache


def test_pinned_memory_goes_after_the_large_entries_and_before_the_rest():
    cache = filled()
    machine = Machine(cache, enough_after=3)  # old, big, then pinned memory is enough
    cache.at_node_boundary()
    assert machine.steps == ["old", "big", "pinned"]
    assert cache.keys() == ["small", "mid"] and cache.pinned_releases == 1


def test_full_eviction_comes_last_largest_first_and_stops_once_memory_suffices():
    cache = filled()
    machine = Machine(cache, enough_after=4)
    cache.at_node_boundary()
    assert machine.steps == ["old", "big", "pinned", "mid"]
    assert cache.keys() == ["small"]


def test_each_step_runs_only_while_memory_is_short():
    cache = filled()
    machine = Machine(cache, enough_after=1)
    cache.at_node_boundary()
    assert machine.steps == ["old"] and cache.pinned_releases == 0
    cache = filled()
    machine = Machine(cache, enough_after=0)
    cache.at_node_boundary()
    assert machine.steps == [] and len(cache) == 4


def test_pinned_memory_is_left_alone_when_cuda_never_started():
    import sys

    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        pytest.skip("CUDA is initialised in this process")
    assert release_pinned_memory() is False  # and torch was not imported for it
    assert ("torch" in sys.modules) == (torch is not None)


class BoundaryLog(LRUCache):
    """Notes the latest node event at each node boundary."""

    def __init__(self, events: list) -> None:
        super().__init__(64)
        self.events = events
        self.seen: list[tuple[str, str]] = []

    def at_node_boundary(self) -> None:
        last = self.events[-1]
        self.seen.append((last["node_id"], last["status"]))


def test_a_node_that_goes_back_to_pending_is_a_node_boundary_too(reg):
    lazy = {"nodes": [{"id": "cond", "type": "Const", "params": {"value": 1.0}},
                      {"id": "src_a", "type": "Const", "params": {"value": 10.0}},
                      {"id": "src_b", "type": "Const", "params": {"value": 20.0}},
                      {"id": "pick", "type": "Pick"}],
            "edges": [edge("cond", "value", "pick", "cond"), edge("src_a", "value", "pick", "a"),
                      edge("src_b", "value", "pick", "b")]}
    events: list = []
    cache = BoundaryLog(events)
    assert run(lazy, reg, cache=cache, on_event=events.append, max_parallel_nodes=1).ok
    assert ("pick", "pending") in cache.seen
    assert cache.seen.count(("pick", "done")) == 1

    expanding = {"nodes": [{"id": "k", "type": "Const", "params": {"value": 3.0}}, {"id": "tw", "type": "Twice"}],
                 "edges": [edge("k", "value", "tw", "x")]}
    events.clear()
    cache = BoundaryLog(events)
    assert run(expanding, reg, cache=cache, on_event=events.append).ok
    assert cache.seen[:2] == [("k", "done"), ("tw", "pending")]


def detour(n: int = 6) -> dict:
    """n0 feeds `late` directly and through a chain of n - 1 nodes: by the time `late` reads n0's
    value, a small cache has dropped n0's entry."""
    graph = chain(n, factor=2.0)
    graph["nodes"].append({"id": "late", "type": "Add"})
    graph["edges"] += [edge("n0", "value", "late", "a"), edge(f"n{n - 1}", "y", "late", "b")]
    return graph


@pytest.mark.parametrize("wrap", [False, True], ids=["lru", "session"])
def test_a_consumer_reading_an_evicted_value_through_its_link_writes_it_back(reg, probe, wrap):
    policy = LRUCache(3)
    cache = SessionCache(policy) if wrap else policy
    result = run(detour(), reg, cache=cache, max_parallel_nodes=1)
    assert result.outputs["late"] == {"y": 1.0 + 32.0}
    # n0's entry went when n3 came; `late` read it through its link and wrote it back.
    assert {"value": 1.0} in [policy._entries[k] for k in policy.keys()]
    assert policy.evictions >= 3
    # A later run that needs n0 finds it in the cache.
    again = run({"nodes": [{"id": "n0", "type": "Const", "params": {"value": 1.0}}], "edges": []}, reg, cache=cache)
    assert again.cached == ["n0"] and probe.calls["n0"] == 1


def test_nothing_is_written_back_while_the_cache_has_dropped_nothing(reg):
    class Counting(LRUCache):
        backs = 0

        def write_back(self, key, outputs):
            Counting.backs += 1
            return super().write_back(key, outputs)

    cache = Counting(64)
    assert run(detour(), reg, cache=cache).ok
    assert Counting.backs == 0 and cache.evictions == 0
