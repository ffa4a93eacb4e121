"""Basic nodes called directly: constants, arithmetic, Switch's lazy choice, async Sleep."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from codefy_jupyter.engine import registry
from codefy_jupyter.engine.context import CancelToken, EngineCallbacks, ExecutionContext, RunState
from codefy_jupyter.engine.errors import RunCancelled
from codefy_jupyter.engine.nodes import basic  # noqa: F401 - registers the nodes

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def run(tmp_path):
    events: list[dict] = []
    state = RunState(run_id="t", seed=None, device="cpu", deterministic=False, data_dir=tmp_path,
                     callbacks=EngineCallbacks.all_to(events.append), cancel=CancelToken())
    state.events = events
    return state


def call(run, node_type, node_id=None, **kwargs):
    """Call a node the way the engine does: params defaulted, inputs and params as keywords."""
    nd = registry.REGISTRY.get(node_type)
    values = {name: spec.default for name, spec in nd.params.items()}
    values.update(kwargs)
    return nd.fn(ExecutionContext(run, node_id or node_type.lower(), node_type), **values)


@pytest.mark.parametrize("node_type,value", [("Int", 7), ("Float", 2.5), ("String", "hi"), ("Bool", True)])
def test_constants_output_their_value(run, node_type, value):
    assert call(run, node_type, value=value) == {"value": value}
    assert registry.REGISTRY.get(node_type).category == "basic"


@pytest.mark.parametrize("node_type,expected", [("Add", 9.0), ("Subtract", 3.0), ("Multiply", 18.0), ("Divide", 2.0)])
def test_arithmetic(run, node_type, expected):
    out = call(run, node_type, a=6, b=3)
    assert out == {"result": expected}
    assert isinstance(out["result"], float)


def test_divide_by_zero_names_input_b(run):
    with pytest.raises(ValueError, match="input 'b' is zero"):
        call(run, "Divide", a=1.0, b=0.0)


def test_scale_matches_design_contract(run):
    nd = registry.REGISTRY.get("Scale")
    assert nd.definition()["params"]["factor"] == {"type": "float", "default": 1.0, "min": 0, "max": 100}
    assert call(run, "Scale", x=2.0, factor=3.5) == {"y": 7.0}


def test_switch_lazy_status_requests_only_the_chosen_branch(run):
    nd = registry.REGISTRY.get("Switch")
    ctx = ExecutionContext(run, "sw", "Switch")
    assert nd.inputs["on_true"].lazy and nd.inputs["on_false"].lazy and not nd.inputs["condition"].lazy
    assert nd.lazy_check(ctx, condition=True, on_true=None, on_false=None) == ["on_true"]
    assert nd.lazy_check(ctx, condition=False, on_true=None, on_false=None) == ["on_false"]
    # Once the chosen branch has a value nothing more is needed, whatever the other branch holds.
    assert nd.lazy_check(ctx, condition=True, on_true=5, on_false=None) == []
    assert nd.lazy_check(ctx, condition=False, on_true=None, on_false="x") == []


def test_switch_passes_the_chosen_value(run):
    assert call(run, "Switch", condition=True, on_true=1, on_false=None) == {"value": 1}
    assert call(run, "Switch", condition=False, on_true=None, on_false=[2]) == {"value": [2]}


def test_switch_with_chosen_branch_unconnected_names_it(run):
    with pytest.raises(ValueError, match="'on_false'"):
        call(run, "Switch", condition=False, on_true=1, on_false=None)


def test_sleep_is_async_uncacheable_and_passes_value_through(run):
    nd = registry.REGISTRY.get("Sleep")
    assert nd.is_async and not nd.cacheable
    started = time.monotonic()
    out = asyncio.run(call(run, "Sleep", seconds=0.12, value={"a": 1}))
    assert out == {"value": {"a": 1}}
    assert time.monotonic() - started >= 0.12


def test_sleep_stops_soon_after_cancel(run):
    timer = threading.Timer(0.1, run.cancel.cancel)
    timer.start()
    started = time.monotonic()
    try:
        with pytest.raises(RunCancelled):
            asyncio.run(call(run, "Sleep", seconds=60.0))
    finally:
        timer.cancel()
    assert time.monotonic() - started < 30  # not the 60 s sleep


def test_node_packs_import_without_torch():
    # The engine and every built-in pack of ours must import on a machine (or agent) without torch.
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "from codefy_jupyter.engine.nodes import basic, data, models, training, evaluation\n"
        "from codefy_jupyter.engine import registry\n"
        "assert registry.REGISTRY.get('TrainingLoop') is not None\n"
        "print('ok')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


@pytest.mark.parametrize("condition,chosen,skipped,expected", [(True, "sum", "product", 90.0),
                                                                (False, "product", "sum", 180.0)])
def test_lazy_switch_example_evaluates_only_the_chosen_branch(tmp_path, condition, chosen, skipped, expected):
    from codefy_jupyter.engine import run_graph

    graph = json.loads((REPO / "examples" / "lazy_switch.json").read_text())
    [flag] = [n for n in graph["nodes"] if n["id"] == "use_sum"]
    flag["params"]["value"] = condition
    result = run_graph(graph, data_dir=tmp_path)
    assert result.status == "succeeded", result.error
    assert result.outputs["scaled"]["y"] == expected
    assert chosen in result.executed and skipped not in result.executed
