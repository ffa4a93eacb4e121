"""The collector hold: the policy against a recording stand-in for `gc`, then real runs against the
real collector (what a node sees, what is frozen while nodes run, what is left afterwards)."""

from __future__ import annotations

import gc

import pytest

from codefy_jupyter.engine import GraphError, NodeRegistry, run_graph
from codefy_jupyter.engine.collector import PROCESS_HOLD, CollectorHold
from codefy_jupyter.engine.presets import PresetLibrary


class RecordingGC:
    """The four calls the hold makes, on a pretend collector whose state a test can read."""

    def __init__(self, *, enabled: bool = True, frozen: int = 0) -> None:
        self.enabled = enabled
        self.frozen = frozen
        self.calls: list[str] = []

    def isenabled(self) -> bool:
        return self.enabled

    def get_freeze_count(self) -> int:
        return self.frozen

    def disable(self) -> None:
        self.calls.append("disable")
        self.enabled = False

    def enable(self) -> None:
        self.calls.append("enable")
        self.enabled = True

    def freeze(self) -> None:
        self.calls.append("freeze")
        self.frozen += 1

    def unfreeze(self) -> None:
        self.calls.append("unfreeze")
        self.frozen = 0


def test_one_run_pauses_while_building_then_collects_and_unfreezes_at_the_end():
    fake = RecordingGC()
    hold = CollectorHold(fake)
    assert hold.hold() is True
    assert fake.calls == ["disable", "freeze"] and not fake.enabled
    hold.built()
    assert fake.calls[2:] == ["freeze", "enable"] and fake.enabled and fake.frozen == 2
    hold.release()
    assert fake.calls[4:] == ["unfreeze"] and fake.frozen == 0 and hold.runs == 0


def test_refused_when_the_collector_is_off_or_someone_else_froze_objects():
    for fake in (RecordingGC(enabled=False), RecordingGC(frozen=3)):
        hold = CollectorHold(fake)
        assert hold.hold() is False
        assert fake.calls == [] and hold.runs == 0


def test_concurrent_runs_share_the_hold_and_the_last_one_out_unfreezes():
    fake = RecordingGC()
    hold = CollectorHold(fake)
    assert hold.hold() and hold.hold()  # the second joins although the heap is frozen by now
    hold.built()
    assert not fake.enabled  # the other run is still building
    hold.built()
    assert fake.enabled
    hold.release()
    assert "unfreeze" not in fake.calls and hold.runs == 1
    hold.release()
    assert fake.calls[-1] == "unfreeze" and hold.runs == 0


def test_a_run_that_ends_while_building_turns_collection_back_on():
    fake = RecordingGC()
    hold = CollectorHold(fake)
    hold.hold()
    hold.release(building=True)
    assert fake.enabled and fake.frozen == 0 and fake.calls == ["disable", "freeze", "enable", "unfreeze"]


# -- the real collector --------------------------------------------------------------------------
@pytest.fixture
def seen():
    return {}


@pytest.fixture
def reg(seen):
    reg = NodeRegistry()

    @reg.node("Look", outputs={"y": "any"})
    def look(ctx):
        # What the collector can reach while a node runs: the caller's graph was built before the
        # run, so it is frozen; the node's own objects are not.
        mine = []
        seen.update(enabled=gc.isenabled(), freeze_count=gc.get_freeze_count(),
                    graph_reachable=any(o is seen["nodes_list"] for o in gc.get_objects()),
                    own_reachable=any(o is mine for o in gc.get_objects()))
        return {"y": 1}

    @reg.node("Pass", inputs={"x": "any"}, outputs={"y": "any"})
    def pass_(ctx, x):
        return {"y": x}

    return reg


def graph_of(seen, n=50):
    nodes = [{"id": "look", "type": "Look"}] + [{"id": f"p{i}", "type": "Pass"} for i in range(n)]
    edges = [{"source": "look" if i == 0 else f"p{i - 1}", "source_port": "y", "target": f"p{i}",
              "target_port": "x"} for i in range(n)]
    seen["nodes_list"] = nodes
    return {"nodes": nodes, "edges": edges}


def test_run_graph_keeps_the_collector_off_its_structures_while_nodes_run(reg, seen):
    assert gc.get_freeze_count() == 0 and gc.isenabled()
    result = run_graph(graph_of(seen), registry=reg, presets=PresetLibrary(include_env=False))
    assert result.ok
    assert seen["enabled"] is True  # a node's own cyclic garbage is collected as usual
    assert seen["freeze_count"] > 0 and seen["graph_reachable"] is False and seen["own_reachable"] is True
    assert gc.get_freeze_count() == 0 and gc.isenabled() and PROCESS_HOLD.runs == 0


def test_execute_graph_callers_and_opt_out_leave_the_collector_alone(reg, seen):
    result = run_graph(graph_of(seen), registry=reg, presets=PresetLibrary(include_env=False), freeze_gc=False)
    assert result.ok and seen["freeze_count"] == 0 and seen["graph_reachable"] is True


def test_a_heap_frozen_by_someone_else_stays_frozen(reg, seen):
    gc.freeze()  # as the headless server does with its startup heap
    try:
        before = gc.get_freeze_count()
        assert run_graph(graph_of(seen), registry=reg, presets=PresetLibrary(include_env=False)).ok
        # Still frozen, and nothing frozen on top (an unfreeze, or a freeze of the run's structures,
        # would count every object the test has made since). Fewer is fine: a frozen object that
        # is freed (here, or on a thread of the test runner) leaves the permanent generation.
        after = gc.get_freeze_count()
        assert 0 < after <= before and before - after < 1000, (before, after)
        assert seen["graph_reachable"] is True
    finally:
        gc.unfreeze()


def test_an_invalid_graph_leaves_the_collector_as_it_was(reg):
    with pytest.raises(GraphError):
        run_graph({"nodes": [{"id": "a", "type": "Nope"}], "edges": []}, registry=reg,
                  presets=PresetLibrary(include_env=False))
    assert gc.isenabled() and gc.get_freeze_count() == 0 and PROCESS_HOLD.runs == 0
