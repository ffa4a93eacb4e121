"""A run's CPU thread budget: the pure decision, the request field, the wire fields, and the engine
applying it to torch on the threads that execute the run's nodes."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading

import pytest

from codefy_jupyter.wire import cpu_threads as ct
from codefy_jupyter.core.runs.requests import SchemaError, parse_submit
from codefy_jupyter.wire.protocol import Assign, Hello, ProtocolError, decode, encode
from codefy_jupyter.engine import NodeRegistry, run_graph

GRAPH = {"nodes": [], "edges": []}


# -- the decision ---------------------------------------------------------------------------------

@pytest.mark.parametrize("cores,slots,threads", [
    (2, 2, 1), (2, 1, 2), (8, 3, 2), (16, 4, 4), (1, 4, 1), (3, 8, 1), (64, 1, 64), (5, 0, 5), (5, -1, 5)])
def test_automatic_is_the_cores_divided_among_the_cpu_slots_at_least_one(cores, slots, threads):
    budget = ct.decide(requested=None, setting=0, cores=cores, cpu_slots=slots)
    assert budget == ct.CpuBudget(threads, ct.AUTO, cores, max(1, slots))


def test_the_setting_beats_automatic_and_the_run_beats_the_setting():
    assert ct.decide(requested=None, setting=3, cores=2, cpu_slots=2) == ct.CpuBudget(3, ct.SETTING, 2, 2)
    assert ct.decide(requested=5, setting=3, cores=2, cpu_slots=2) == ct.CpuBudget(5, ct.OPTION, 2, 2)
    # A run's own value holds even where the machine's cores are unknown.
    assert ct.decide(requested=5, setting=0, cores=None, cpu_slots=2) == ct.CpuBudget(5, ct.OPTION, None, 2)
    assert ct.decide(requested=None, setting=4, cores=None, cpu_slots=2) == ct.CpuBudget(4, ct.SETTING, None, 2)


@pytest.mark.parametrize("setting", [0, -1, -8])
def test_a_setting_of_zero_or_less_is_automatic(setting):
    assert ct.decide(requested=None, setting=setting, cores=8, cpu_slots=2).source == ct.AUTO


def test_automatic_without_the_machines_cores_is_no_budget():
    # A worker agent too old to report its cores: no budget rather than one sized for this machine.
    assert ct.decide(requested=None, setting=0, cores=None, cpu_slots=2) is None
    assert ct.decide(requested=None, setting=0, cores=0, cpu_slots=2) is None


def test_the_record_and_the_thread_variables():
    assert ct.CpuBudget(2, ct.AUTO, 4, 2).to_dict() == {"threads": 2, "source": "auto", "cores": 4, "slots": 2}
    assert ct.thread_environment(3) == {"OMP_NUM_THREADS": "3", "MKL_NUM_THREADS": "3", "OPENBLAS_NUM_THREADS": "3"}
    assert 1 <= ct.available_cores()


# -- the request ----------------------------------------------------------------------------------

def test_options_cpu_threads_is_kept_and_null_means_the_servers_budget():
    assert parse_submit({"graph": GRAPH, "options": {"cpu_threads": 3}}).options.cpu_threads == 3
    assert parse_submit({"graph": GRAPH, "options": {"cpu_threads": ct.MAX_CPU_THREADS}}).options.cpu_threads == 1024
    assert parse_submit({"graph": GRAPH, "options": {"cpu_threads": None}}).options.cpu_threads is None
    assert parse_submit({"graph": GRAPH}).options.cpu_threads is None


@pytest.mark.parametrize("value", [0, -1, 1025, True, 1.5, "2", [2], {}])
def test_a_bad_cpu_threads_is_refused_naming_the_field(value):
    with pytest.raises(SchemaError) as err:
        parse_submit({"graph": GRAPH, "options": {"cpu_threads": value}})
    assert err.value.field == "options.cpu_threads" and err.value.status == 422


# -- the wire -------------------------------------------------------------------------------------

def test_assign_carries_the_budget_and_leaves_it_out_when_there_is_none():
    text = encode(Assign(run_id="r", graph=GRAPH, device="cpu", cpu_threads=2))
    assert '"cpu_threads":2' in text and decode(text, sender="server").cpu_threads == 2
    bare = encode(Assign(run_id="r", graph=GRAPH, device="cpu"))
    assert "cpu_threads" not in bare and decode(bare, sender="server").cpu_threads is None


@pytest.mark.parametrize("value,problem", [(0, "must be at least 1"), (True, "expected an integer"),
                                           ("2", "expected an integer")])
def test_a_bad_budget_on_the_wire_names_its_field(value, problem):
    frame = {"type": "assign", "run_id": "r", "graph": {}, "device": "cpu", "cpu_threads": value}
    with pytest.raises(ProtocolError) as err:
        decode(__import__("json").dumps(frame), sender="server")
    assert err.value.path == "assign.cpu_threads" and problem in str(err.value)


def test_hello_says_how_many_cores_the_agent_has():
    hello = Hello(name="box", version="1", protocol_version=3, cpu_count=8)
    assert decode(encode(hello), sender="agent").cpu_count == 8
    older = encode(Hello(name="box", version="1", protocol_version=3))
    assert "cpu_count" not in older and decode(older, sender="agent").cpu_count is None


# -- the engine -----------------------------------------------------------------------------------

def _threads_registry() -> NodeRegistry:
    reg = NodeRegistry()

    @reg.node("TorchThreads", inputs={}, outputs={"n": "int"}, cacheable=False)
    def torch_threads(ctx):
        import torch

        return {"n": torch.get_num_threads()}

    return reg


def _wide(n: int) -> dict:
    return {"nodes": [{"id": f"t{i}", "type": "TorchThreads"} for i in range(n)], "edges": []}


@pytest.mark.parametrize("parallel", [1, 3])
def test_every_node_thread_of_a_run_sees_its_budget(parallel):
    pytest.importorskip("torch")
    reg = _threads_registry()
    result = run_graph(_wide(6), registry=reg, max_parallel_nodes=parallel, cpu_threads=1)
    assert result.status == "succeeded", result.error
    assert {out["n"] for out in result.outputs.values()} == {1}
    result = run_graph(_wide(6), registry=reg, max_parallel_nodes=parallel, cpu_threads=3)
    assert {out["n"] for out in result.outputs.values()} == {3}


def test_two_runs_at_once_in_one_process_each_keep_their_own_budget():
    pytest.importorskip("torch")
    reg = _threads_registry()
    seen: dict[int, set[int]] = {}
    barrier = threading.Barrier(2)

    def run(budget: int) -> None:
        barrier.wait()
        for _ in range(5):
            result = run_graph(_wide(4), registry=reg, max_parallel_nodes=2, cpu_threads=budget)
            seen.setdefault(budget, set()).update(out["n"] for out in result.outputs.values())

    threads = [threading.Thread(target=run, args=(b,)) for b in (1, 3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert seen == {1: {1}, 3: {3}}


def test_a_bad_budget_is_refused_by_the_engine():
    with pytest.raises(ValueError, match="cpu_threads"):
        run_graph(GRAPH, cpu_threads=0)


def test_the_budget_holds_for_the_node_that_imports_torch_first():
    """In a fresh interpreter torch is not loaded when the run starts: the node that imports it must
    already compute under the budget (the import hook), not only the nodes after it."""
    pytest.importorskip("torch")
    script = textwrap.dedent("""
        import sys
        from codefy_jupyter.engine import NodeRegistry, run_graph
        reg = NodeRegistry()

        @reg.node("First", inputs={}, outputs={"n": "int"}, cacheable=False)
        def first(ctx):
            import torch
            return {"n": torch.get_num_threads()}

        assert "torch" not in sys.modules
        result = run_graph({"nodes": [{"id": "a", "type": "First"}], "edges": []}, registry=reg, cpu_threads=1)
        print(result.status, result.outputs["a"]["n"], type(sys.modules["torch"].__spec__.loader).__name__)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=110,
                          env={"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "2"})
    assert proc.returncode == 0, proc.stderr
    status, threads, loader = proc.stdout.split()
    assert (status, threads) == ("succeeded", "1")
    assert loader != "_Loader"  # torch keeps its own loader
