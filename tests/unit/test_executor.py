"""run_graph end to end, observed through counters, timestamps and outputs (no mocks)."""

from __future__ import annotations

import threading
import time

import pytest
from engine_nodes import chain, edge, run

from codefy_jupyter.engine import (
    CancelToken, Graph, GraphError, LRUCache, NoCache, RAMPressureCache, SessionCache, parse_graph,
)
from codefy_jupyter.engine.presets import PresetLibrary


def test_chain_outputs_and_executed_order(reg):
    result = run(chain(4, factor=2.0), reg)
    assert result.status == "succeeded" and result.ok
    assert result.outputs == {"n3": {"y": 8.0}}
    assert result.executed == ["n0", "n1", "n2", "n3"]
    assert result.cached == [] and result.error is None


def test_keep_outputs_all_returns_intermediate_values(reg):
    result = run(chain(3, factor=3.0), reg, keep_outputs="all")
    assert result.outputs == {"n0": {"value": 1.0}, "n1": {"y": 3.0}, "n2": {"y": 9.0}}


def test_lazy_input_skips_the_unused_branch(reg, probe):
    graph = {
        "nodes": [{"id": "cond", "type": "Const", "params": {"value": 1.0}},
                  {"id": "src_a", "type": "Const", "params": {"value": 10.0}},
                  {"id": "src_b", "type": "Const", "params": {"value": 20.0}},
                  {"id": "heavy_b", "type": "Scale", "params": {"factor": 5}},
                  {"id": "pick", "type": "Pick"}],
        "edges": [edge("cond", "value", "pick", "cond"), edge("src_a", "value", "pick", "a"),
                  edge("src_b", "value", "heavy_b", "x"), edge("heavy_b", "y", "pick", "b")],
    }
    events = []
    result = run(graph, reg, on_event=events.append)
    assert result.outputs["pick"] == {"y": 10.0}
    assert probe.calls["src_b"] == 0 and probe.calls["heavy_b"] == 0
    assert probe.calls["src_a"] == 1
    assert "heavy_b" not in result.executed
    pending = [e for e in events if e.get("status") == "pending"]
    assert pending == [{"event": "node_status", "node_id": "pick", "node_type": "Pick", "status": "pending",
                        "reason": "lazy_inputs", "inputs": ["a"]}]
    # The other branch when the condition flips.
    graph["nodes"][0]["params"]["value"] = -1.0
    result = run(graph, reg)
    assert result.outputs["pick"] == {"y": 100.0}
    assert probe.calls["heavy_b"] == 1


def test_expansion_uses_flattened_ids_and_links_outputs_back(reg):
    graph = {"nodes": [{"id": "k", "type": "Const", "params": {"value": 3.0}}, {"id": "tw", "type": "Twice"},
                       {"id": "after", "type": "Scale", "params": {"factor": 10}}],
             "edges": [edge("k", "value", "tw", "x"), edge("tw", "y", "after", "x")]}
    events = []
    result = run(graph, reg, on_event=events.append, keep_outputs="all")
    assert result.outputs["tw"] == {"y": 12.0}
    assert result.outputs["tw/first"] == {"y": 6.0} and result.outputs["tw/second"] == {"y": 12.0}
    assert result.outputs["after"] == {"y": 120.0}
    assert result.executed == ["k", "tw/first", "tw/second", "tw", "after"]
    inner = [(e["node_id"], e["status"]) for e in events if e["event"] == "inner_node_status"]
    assert inner == [("tw/first", "running"), ("tw/first", "done"), ("tw/second", "running"), ("tw/second", "done")]
    assert all(e["parent"] == "tw" for e in events if e["event"] == "inner_node_status")
    statuses = [e["status"] for e in events if e["event"] == "node_status" and e["node_id"] == "tw"]
    assert statuses == ["running", "pending", "done"]


def test_invalid_expansion_fails_the_parent_with_the_inner_problem(reg):
    graph = {"nodes": [{"id": "k", "type": "Const"}, {"id": "bad", "type": "BadExpand"}],
             "edges": [edge("k", "value", "bad", "x")]}
    result = run(graph, reg)
    assert result.status == "failed"
    assert result.error.node_id == "bad" and result.error.code == "invalid_expansion"
    assert "bad/k" in result.error.message and "'Nope'" in result.error.message


def test_two_async_sleeps_overlap(reg, probe):
    graph = {"nodes": [{"id": "k", "type": "Const"}, {"id": "w1", "type": "Wait"}, {"id": "w2", "type": "Wait"}],
             "edges": [edge("k", "value", "w1", "x"), edge("k", "value", "w2", "x")]}
    started = time.monotonic()
    result = run(graph, reg)
    elapsed = time.monotonic() - started
    assert result.ok
    (s1, e1), (s2, e2) = probe.spans["w1"], probe.spans["w2"]
    assert max(s1, s2) < min(e1, e2)  # both were sleeping at the same moment
    # Shorter than the two sleeps one after the other, however slow a busy machine makes each.
    assert elapsed < (e1 - s1) + (e2 - s2), f"two 1 s sleeps took {elapsed:.2f} s"


def test_async_node_overlaps_with_sync_work(reg, probe):
    graph = {"nodes": [{"id": "k", "type": "Const"}, {"id": "w", "type": "Wait", "params": {"seconds": 0.5}},
                       {"id": "h", "type": "Hold", "params": {"seconds": 0.5}}],
             "edges": [edge("k", "value", "w", "x"), edge("k", "value", "h", "x")]}
    result = run(graph, reg, max_parallel_nodes=1)
    assert result.ok
    (ws, we), (hs, he) = probe.spans["w"], probe.spans["h"]
    assert max(ws, hs) < min(we, he)


@pytest.mark.parametrize("limit", [1, 2, 3])
def test_parallel_sync_nodes_reach_the_limit_and_never_exceed_it(reg, probe, limit):
    graph = {"nodes": [{"id": "k", "type": "Const"}] +
             [{"id": f"h{i}", "type": "Hold", "params": {"seconds": 0.15}} for i in range(6)],
             "edges": [edge("k", "value", f"h{i}", "x") for i in range(6)]}
    result = run(graph, reg, max_parallel_nodes=limit)
    assert result.ok
    assert probe.peak == limit


def test_seeded_run_is_sequential_and_bit_for_bit_reproducible(reg, probe):
    graph = {"nodes": [{"id": "k", "type": "Const"}] + [{"id": f"r{i}", "type": "Noise"} for i in range(4)] +
             [{"id": f"h{i}", "type": "Hold", "params": {"seconds": 0.05}} for i in range(3)],
             "edges": [edge("k", "value", f"r{i}", "x") for i in range(4)] +
             [edge("k", "value", f"h{i}", "x") for i in range(3)]}
    first = run(graph, reg, seed=1234, max_parallel_nodes=4, keep_outputs="all")
    assert probe.peak == 1  # one node at a time despite max_parallel_nodes=4
    second = run(graph, reg, seed=1234, max_parallel_nodes=4, keep_outputs="all")
    values1 = [first.outputs[f"r{i}"]["y"] for i in range(4)]
    values2 = [second.outputs[f"r{i}"]["y"] for i in range(4)]
    assert values1 == values2
    assert len(set(values1)) == 4  # each node draws from its own seed
    other = run(graph, reg, seed=99, keep_outputs="all")
    assert [other.outputs[f"r{i}"]["y"] for i in range(4)] != values1


def test_failure_stops_downstream_and_reports_what_ran(reg, probe):
    graph = {"nodes": [{"id": "k", "type": "Const", "params": {"value": 7}}, {"id": "ok", "type": "Scale"},
                       {"id": "boom", "type": "Boom"}, {"id": "after", "type": "Scale"}],
             "edges": [edge("k", "value", "ok", "x"), edge("ok", "y", "boom", "x"), edge("boom", "y", "after", "x")]}
    events = []
    result = run(graph, reg, on_event=events.append)
    assert result.status == "failed"
    err = result.error
    assert (err.node_id, err.node_type, err.exception_type) == ("boom", "Boom", "ValueError")
    assert err.message == "boom at 7.0"
    assert "raise ValueError" in err.traceback
    assert err.executed == ["k", "ok"] and err.outputs_present == ["k", "ok"]
    assert probe.calls["after"] == 0
    assert {"event": "node_status", "node_id": "boom", "node_type": "Boom", "status": "failed",
            "error": "boom at 7.0"} in events


@pytest.mark.parametrize("mode,field,needle", [
    ("missing", "outputs.y", "no value for output 'y'"),
    ("extra", "outputs.z", "unknown output 'z'"),
    ("scalar", "outputs", "returns a dict"),
])
def test_wrong_outputs_name_the_node_and_port(reg, mode, field, needle):
    graph = {"nodes": [{"id": "k", "type": "Const"}, {"id": "w", "type": "WrongOut", "params": {"mode": mode}}],
             "edges": [edge("k", "value", "w", "x")]}
    result = run(graph, reg)
    assert result.status == "failed"
    assert (result.error.node_id, result.error.field, result.error.code) == ("w", field, "bad_node_output")
    assert needle in result.error.message


def test_invalid_graph_raises_before_anything_runs(reg, probe):
    with pytest.raises(GraphError):
        run({"nodes": [{"id": "k", "type": "Const"}, {"id": "x", "type": "Missing"}]}, reg)
    assert probe.calls == {}


def test_runtime_cycle_is_reported_with_only_the_cycle(reg, probe):
    # Validation refuses cycles, so build the Graph by hand: a <-> b, c downstream, d independent.
    valid = parse_graph({"nodes": [{"id": n, "type": "Scale"} for n in "abc"] + [{"id": "d", "type": "Const"}],
                         "edges": [edge("a", "y", "b", "x"), edge("b", "y", "c", "x")]} | {}, reg,
                        bound={("a", "x")})
    inputs = dict(valid.inputs)
    inputs["a"] = {"x": ("b", "y")}
    consumers = {k: list(v) for k, v in valid.consumers.items()}
    consumers["b"].append("a")
    cyclic = Graph(valid.nodes, inputs, consumers)
    result = run(cyclic, reg)
    assert result.status == "failed"
    assert result.error.code == "cycle" and result.error.params["cycle"] == ["a", "b"]
    assert "'c'" not in result.error.message
    assert result.error.executed == ["d"]


def test_cancel_between_nodes_stops_the_run(reg, probe):
    token = CancelToken()
    graph = {"nodes": [{"id": "k", "type": "Const"}, {"id": "h", "type": "Hold", "params": {"seconds": 60}},
                       {"id": "after", "type": "Scale"}],
             "edges": [edge("k", "value", "h", "x"), edge("h", "y", "after", "x")]}
    threading.Timer(0.2, token.cancel).start()
    started = time.monotonic()
    result = run(graph, reg, cancel=token)
    assert result.status == "cancelled"
    assert time.monotonic() - started < 30  # not the 60 s hold: its cancel check ended it
    assert probe.calls["after"] == 0
    assert "h" not in result.executed


def test_a_node_that_never_checks_cancel_finishes_and_is_named(reg, probe):
    token = CancelToken()
    graph = {"nodes": [{"id": "k", "type": "Const"}, {"id": "s", "type": "Stubborn"}, {"id": "after", "type": "Scale"}],
             "edges": [edge("k", "value", "s", "x"), edge("s", "y", "after", "x")]}
    threading.Timer(0.1, token.cancel).start()
    result = run(graph, reg, cancel=token)
    assert result.status == "cancelled"
    assert probe.calls["s"] == 1 and probe.calls["after"] == 0
    (warning,) = result.warnings
    assert warning["code"] == "cancel_not_checked" and warning["node_id"] == "s"


def test_cancel_during_async_wait_ends_promptly(reg, probe):
    token = CancelToken()
    graph = {"nodes": [{"id": "k", "type": "Const"}, {"id": "w1", "type": "Wait", "params": {"seconds": 30}},
                       {"id": "w2", "type": "Wait", "params": {"seconds": 30}}],
             "edges": [edge("k", "value", "w1", "x"), edge("k", "value", "w2", "x")]}
    threading.Timer(0.2, token.cancel).start()
    started = time.monotonic()
    result = run(graph, reg, cancel=token)
    assert result.status == "cancelled"
    assert time.monotonic() - started < 15  # not the 30 s waits


def test_session_cache_reruns_only_the_changed_node_and_its_descendants(reg, probe):
    # k -> a -> b -> c, and k -> side: change b's factor.
    graph = {"nodes": [{"id": "k", "type": "Const", "params": {"value": 2}}, {"id": "a", "type": "Scale"},
                       {"id": "b", "type": "Scale"}, {"id": "c", "type": "Scale"}, {"id": "side", "type": "Scale"}],
             "edges": [edge("k", "value", "a", "x"), edge("a", "y", "b", "x"), edge("b", "y", "c", "x"),
                       edge("k", "value", "side", "x")]}
    cache = SessionCache()
    first = run(graph, reg, cache=cache)
    assert sorted(first.executed) == ["a", "b", "c", "k", "side"]
    graph["nodes"][2]["params"] = {"factor": 5}
    second = run(graph, reg, cache=cache)
    assert sorted(second.executed) == ["b", "c"]
    assert second.outputs == {"c": {"y": 10.0}, "side": {"y": 2.0}}
    assert probe.calls == {"k": 1, "a": 1, "b": 2, "c": 2, "side": 1}
    third = run(graph, reg, cache=cache)
    assert third.executed == [] and sorted(third.cached) == ["c", "side"]
    assert third.outputs == second.outputs


def test_uncacheable_nodes_and_their_descendants_always_run(reg, probe):
    graph = {"nodes": [{"id": "k", "type": "Const"}, {"id": "w", "type": "Wait", "params": {"seconds": 0}},
                       {"id": "after", "type": "Scale"}],
             "edges": [edge("k", "value", "w", "x"), edge("w", "y", "after", "x")]}
    cache = SessionCache()
    run(graph, reg, cache=cache)
    second = run(graph, reg, cache=cache)
    assert sorted(second.executed) == ["after", "w"]
    assert probe.calls["k"] == 1


def test_lru_cache_keeps_at_most_n_entries(reg):
    cache = LRUCache(2)
    run(chain(5), reg, cache=cache)
    assert len(cache) == 2


def test_ram_pressure_eviction_keeps_running_consumers_correct(reg, probe):
    # k feeds 'late' through a long detour, so k's value must survive many node boundaries
    # while the cache, under constant pressure, evicts everything it holds.
    graph = chain(6, factor=2.0)
    graph["nodes"].append({"id": "late", "type": "Add"})
    graph["edges"] += [edge("n0", "value", "late", "a"), edge("n5", "y", "late", "b")]
    pressure = {"low": True}
    cache = RAMPressureCache(min_available_bytes=1, probe=lambda: 0 if pressure["low"] else 10)
    result = run(graph, reg, cache=cache, max_parallel_nodes=1)
    assert result.ok
    assert result.outputs["late"] == {"y": 1.0 + 32.0}
    assert cache.evictions >= 6 and len(cache) == 0
    assert probe.calls["n0"] == 1  # never recomputed: the consumer's link kept the value
    reference = run(graph, reg, cache=NoCache())
    assert reference.outputs == result.outputs
    # Without pressure the same cache keeps what it was given.
    pressure["low"] = False
    run(graph, reg, cache=cache)
    assert len(cache) == 7


def test_ram_pressure_evicts_other_runs_entries_first_then_largest():
    cache = RAMPressureCache(min_available_bytes=100, probe=lambda: 0)
    free = {"bytes": 0}
    cache.probe = lambda: free["bytes"]
    cache.begin_run("old")
    cache.set("old-small", {"v": b"x" * 10})
    cache.begin_run("new")
    cache.set("new-small", {"v": b"x" * 10})
    cache.set("new-big", {"v": b"x" * 1000})
    evicted = cache.evicted_keys

    def probe():
        return 100 if len(evicted) >= 2 else 0

    cache.probe = probe
    cache.at_node_boundary()
    assert evicted == ["old-small", "new-big"]
    assert cache.keys() == ["new-small"]


def test_100k_node_chain_runs(reg):
    result = run(chain(100_000), reg, max_parallel_nodes=1)
    assert result.ok
    assert len(result.executed) == 100_000
    assert result.outputs == {"n99999": {"y": 1.0}}


def test_100k_node_chain_with_session_cache_hits_on_rerun(reg):
    cache = SessionCache(LRUCache(200_000))
    run(chain(100_000), reg, cache=cache)
    again = run(chain(100_000), reg, cache=cache)
    assert again.executed == [] and again.cached == ["n99999"]


def test_run_graph_works_inside_a_running_event_loop(reg):
    import asyncio

    async def inside():
        return run(chain(3, factor=2.0), reg)

    assert asyncio.run(inside()).outputs == {"n2": {"y": 4.0}}


def test_runtime_cycle_inside_a_block_is_attributed_to_the_block(reg):
    # Nodes inside a block (ids 'blk/...') are not shown on their own; the error names the block.
    valid = parse_graph({"nodes": [{"id": "blk", "type": "Const"}, {"id": "a", "type": "Scale"},
                                   {"id": "b", "type": "Scale"}, {"id": "out", "type": "Scale"}],
                         "edges": [edge("a", "y", "b", "x"), edge("b", "y", "out", "x")]}, reg, bound={("a", "x")})
    rename = {"blk": "blk", "a": "blk/a", "b": "blk/b", "out": "out"}
    nodes = {rename[k]: v for k, v in valid.nodes.items()}
    for new_id, spec in nodes.items():
        spec.id = new_id
    inputs = {"blk": {}, "blk/a": {"x": ("blk/b", "y")}, "blk/b": {"x": ("blk/a", "y")}, "out": {"x": ("blk/b", "y")}}
    consumers = {"blk": [], "blk/a": ["blk/b"], "blk/b": ["blk/a", "out"], "out": []}
    result = run(Graph(nodes, inputs, consumers), reg)
    assert result.status == "failed"
    assert (result.error.node_id, result.error.node_type, result.error.code) == ("blk", "Const", "cycle")
    assert result.error.params["cycle"] == ["blk/a", "blk/b"]
    assert result.error.executed == ["blk"]


def test_ready_nodes_run_in_the_ux_order_of_their_distance_to_an_output(reg):
    # Four sources ready at once: `s` is an output itself, `a` feeds one, `b` is two hops from one,
    # `c` three. The graph lists them in the opposite order, so only the classes decide.
    nodes = [{"id": i, "type": "Const"} for i in ("c", "b", "a", "s")]
    nodes += [{"id": i, "type": "Scale"} for i in ("c1", "c2", "C", "b1", "B", "A")]
    edges = [edge("c", "value", "c1", "x"), edge("c1", "y", "c2", "x"), edge("c2", "y", "C", "x"),
             edge("b", "value", "b1", "x"), edge("b1", "y", "B", "x"), edge("a", "value", "A", "x")]
    result = run({"nodes": nodes, "edges": edges}, reg, max_parallel_nodes=1)
    assert result.ok
    assert [n for n in result.executed if n in ("s", "a", "b", "c")] == ["s", "a", "b", "c"]
    assert result.executed[:3] == ["s", "a", "A"]  # an output, once ready, goes before any producer


def test_a_producer_with_many_consumers_is_seen_feeding_an_output_wherever_that_consumer_is(reg):
    # `wide` feeds each node of a 79-node chain (its first 79 consumers) and, as its 80th, `direct`,
    # an output: it feeds an output directly, so it goes before `other`, two hops from one. (Pick
    # classes used to look at the first 64 consumers only, and called `wide` "other".)
    nodes = [{"id": "other", "type": "Const"}, {"id": "wide", "type": "Const"}, {"id": "o1", "type": "Scale"},
             {"id": "out", "type": "Scale"}]
    edges = [edge("other", "value", "o1", "x"), edge("o1", "y", "out", "x")]
    prev = None
    for i in range(79):
        nodes.append({"id": f"w{i}", "type": "Scale" if prev is None else "Add"})
        edges.append(edge("wide", "value", f"w{i}", "x" if prev is None else "a"))
        if prev is not None:
            edges.append(edge(prev, "y", f"w{i}", "b"))
        prev = f"w{i}"
    nodes.append({"id": "direct", "type": "Scale"})
    edges.append(edge("wide", "value", "direct", "x"))
    result = run({"nodes": nodes, "edges": edges}, reg, max_parallel_nodes=1)
    assert result.ok
    assert result.executed.index("wide") < result.executed.index("other")


def test_a_value_is_released_after_its_last_consumer_even_when_a_lazy_consumer_finished_without_it():
    # `pick` finishes first, never asking for `p`; `p` then runs for `d`. Once `d` is done nothing
    # may hold p's value any more: not a link to `pick`, which no longer needs one.
    import weakref

    from codefy_jupyter.engine import NodeRegistry, lazy

    class Value:
        pass

    refs: list[weakref.ref[Value]] = []
    alive_after_d: list[bool] = []
    reg = NodeRegistry()
    reg.node("Const", outputs={"y": "any"})(lambda ctx: {"y": 1})

    @reg.node("Make", inputs={"x": "any"}, outputs={"y": "any"})
    def make(ctx, x):
        value = Value()
        refs.append(weakref.ref(value))
        return {"y": value}

    @reg.node("Pick", inputs={"cond": "any", "a": lazy("any"), "b": lazy("any")}, outputs={"y": "any"})
    def pick(ctx, cond, a, b):
        return {"y": a}

    @pick.check_lazy_status
    def pick_needs(ctx, cond, a, b):
        return ["a"]

    reg.node("Use", inputs={"x": "any"}, outputs={"y": "any"})(lambda ctx, x: {"y": 0})

    @reg.node("After", inputs={"x": "any"}, outputs={"y": "any"})
    def after(ctx, x):
        alive_after_d.append(refs[0]() is not None)
        return {"y": 0}

    # `p` waits behind q1 -> q2, so `pick` (an output, ready once cond and a ran) goes first.
    nodes = [{"id": "pick", "type": "Pick"}, {"id": "cond", "type": "Const"}, {"id": "a", "type": "Const"},
             {"id": "q1", "type": "Const"}, {"id": "q2", "type": "Use"}, {"id": "p", "type": "Make"},
             {"id": "d", "type": "Use"}, {"id": "e", "type": "After"}]
    edges = [edge("cond", "y", "pick", "cond"), edge("a", "y", "pick", "a"), edge("p", "y", "pick", "b"),
             edge("q1", "y", "q2", "x"), edge("q2", "y", "p", "x"), edge("p", "y", "d", "x"),
             edge("d", "y", "e", "x")]
    result = run({"nodes": nodes, "edges": edges}, reg, max_parallel_nodes=1)
    assert result.ok
    assert result.executed.index("pick") < result.executed.index("p"), result.executed
    assert alive_after_d == [False]


@pytest.mark.parametrize("edge_order", ["ports", "reversed", "partial"])
def test_a_node_gets_its_inputs_in_the_order_of_its_ports_whatever_the_order_of_the_edges(edge_order):
    from codefy_jupyter.engine import NodeRegistry, param
    from codefy_jupyter.engine.registry import PortSpec

    seen: list[list[tuple[str, object]]] = []
    reg = NodeRegistry()
    reg.node("Const", outputs={"y": "any"}, params={"value": param.int(0)})(lambda ctx, value: {"y": value})
    reg.node("Gather", outputs={"y": "any"}, params={"count": param.int(1, min=1)},
             dynamic_ports=lambda params, resolver, nid: (
                 {f"x{i}": PortSpec("any", optional=True) for i in range(params["count"])}, {"y": "any"}, []),
             )(lambda ctx, count, **xs: seen.append(list(xs.items())) or {"y": None})
    wired = {"ports": [0, 1, 2, 3], "reversed": [3, 2, 1, 0], "partial": [0, 2, 3]}[edge_order]
    graph = {"nodes": [{"id": f"c{i}", "type": "Const", "params": {"value": i}} for i in range(4)]
             + [{"id": "g", "type": "Gather", "params": {"count": 4}}],
             "edges": [edge(f"c{i}", "y", "g", f"x{i}") for i in wired]}
    result = run(graph, reg)
    assert result.ok, result.error
    assert seen == [[(f"x{i}", i if i in wired else None) for i in range(4)]]


def test_a_parsed_graph_runs_the_same_from_its_maps_by_id(reg):
    parsed = parse_graph(chain(5, factor=2.0), reg, PresetLibrary(include_env=False))
    assert list(parsed.nodes) == [f"n{i}" for i in range(5)]
    assert parsed.inputs["n1"] == {"x": ("n0", "value")} and parsed.consumers["n3"] == ["n4"]
    by_hand = Graph(parsed.nodes, parsed.inputs, parsed.consumers)
    assert run(by_hand, reg).outputs == run(parsed, reg).outputs == {"n4": {"y": 16.0}}
    parsed.consumers = dict(parsed.consumers)  # replaced by hand: the graph keeps to its maps
    assert parsed.index is None and run(parsed, reg).outputs == {"n4": {"y": 16.0}}


def test_execution_cached_names_the_cached_nodes_before_any_node_runs(reg, probe):
    # Seed (dynamic scheduling, cached nodes): the run says which nodes come from the cache first.
    graph = {"nodes": [{"id": "k", "type": "Const", "params": {"value": 2}}, {"id": "a", "type": "Scale"},
                       {"id": "b", "type": "Scale"}],
             "edges": [edge("k", "value", "a", "x"), edge("a", "y", "b", "x")]}
    cache = SessionCache()
    run(graph, reg, cache=cache)
    graph["nodes"][2]["params"] = {"factor": 3}
    events = []
    second = run(graph, reg, cache=cache, on_event=events.append)
    assert second.executed == ["b"] and second.cached == ["a"]
    assert events[0] == {"event": "execution_cached", "nodes": ["a"]}
    assert [(e["node_id"], e["status"]) for e in events if e["event"] == "node_status"] == [("b", "running"),
                                                                                          ("b", "done")]
    quiet = []
    run(chain(2), reg, cache=SessionCache(), on_event=quiet.append)
    assert not [e for e in quiet if e["event"] == "execution_cached"]  # nothing cached, nothing said


def test_a_node_equal_to_one_that_just_ran_is_served_from_the_cache_at_its_turn(reg, probe):
    # `a` and `b` have one signature. Neither is cached when the run starts; `b` is asked for again
    # when its turn comes (seed: the defensive look-up at execute), and `a` has filled the cache.
    graph = {"nodes": [{"id": "k", "type": "Const"}, {"id": "a", "type": "Scale", "params": {"factor": 2}},
                       {"id": "b", "type": "Scale", "params": {"factor": 2}}],
             "edges": [edge("k", "value", "a", "x"), edge("k", "value", "b", "x")]}
    result = run(graph, reg, cache=SessionCache(), max_parallel_nodes=1)
    assert result.ok
    assert result.executed == ["k", "a"] and result.cached == ["b"]
    assert probe.calls["b"] == 0 and result.outputs == {"a": {"y": 2.0}, "b": {"y": 2.0}}
    assert run(graph, reg, cache=NoCache(), max_parallel_nodes=1).executed == ["k", "a", "b"]


def test_the_cache_is_told_the_run_ended_whether_it_succeeded_failed_or_was_cancelled(reg):
    class Recording(LRUCache):
        def __init__(self):
            super().__init__(8)
            self.calls = []

        def begin_run(self, run_id):
            self.calls.append(("begin", run_id))

        def end_run(self, run_id):
            self.calls.append(("end", run_id))

    failing = {"nodes": [{"id": "k", "type": "Const"}, {"id": "boom", "type": "Boom"}],
               "edges": [edge("k", "value", "boom", "x")]}
    stopped = CancelToken()
    stopped.cancel()
    for graph, kw, status in [(chain(2), {}, "succeeded"), (failing, {}, "failed"),
                              (chain(2), {"cancel": stopped}, "cancelled")]:
        cache = Recording()
        result = run(graph, reg, cache=cache, run_id="r1", **kw)
        assert result.status == status
        assert cache.calls == [("begin", "r1"), ("end", "r1")], status
