"""A run's CPU thread budget on a real control plane: what its record says, what its node sees of
torch in-process, and what a worker run's process sees (OMP_NUM_THREADS and torch) from a real agent."""

from __future__ import annotations

import importlib
from typing import Any

import pytest

from codefy_jupyter.wire.cpu_threads import available_cores
from test_server_runs import all_events, call, wait_status
from test_workers_e2e import (  # noqa: F401 - fixtures
    agents, control, jp_server_config, pack_env, server_token, settings, until_connected,
)

THREADS = {"nodes": [{"id": "t", "type": "Threads"}], "edges": []}
CORES = available_cores()


@pytest.fixture
def threads_node():
    """The test pack's `Threads` node in this process's registry: in-process runs execute it here."""
    from codefy_jupyter.engine import default_registry

    registry = default_registry()
    before = dict(registry._defs)
    import agent_nodes

    importlib.reload(agent_nodes)
    yield
    registry._defs.clear()
    registry._defs.update(before)


async def _run(jp_fetch, options: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Submit the Threads graph, wait for its end; the run and what its node saw."""
    code, run = await call(jp_fetch, "api", "runs", method="POST", body={"graph": THREADS, "options": options})
    assert code == 201, run
    done = await wait_status(jp_fetch, run["id"], {"succeeded", "failed"}, timeout=90)
    assert done["status"] == "succeeded", done
    events = await all_events(jp_fetch, run["id"])
    seen = next(e["payload"]["params"] for e in events
                if e["type"] == "run_warning" and e["payload"].get("code") == "threads")
    return done, seen


@settings(run_queue_max_concurrent_cpu=2)
async def test_an_in_process_run_gets_the_cores_divided_among_the_cpu_slots(jp_fetch, threads_node):
    done, seen = await _run(jp_fetch, {})
    expected = max(1, CORES // 2)
    assert done["execution_facts"]["cpu_threads"] == {"threads": expected, "source": "auto", "cores": CORES,
                                                      "slots": 2}
    assert "cpu_threads" not in done["options"]  # the run did not ask
    assert seen["torch_threads"] == expected


async def test_an_in_process_run_gets_what_it_asks_for(jp_fetch, threads_node):
    done, seen = await _run(jp_fetch, {"cpu_threads": 3})
    assert done["options"]["cpu_threads"] == 3
    assert done["execution_facts"]["cpu_threads"]["threads"] == 3
    assert done["execution_facts"]["cpu_threads"]["source"] == "option"
    assert seen["torch_threads"] == 3
    # The next run, on the same reused engine thread, is back to the server's budget.
    done, seen = await _run(jp_fetch, {"cpu_threads": 1})
    assert seen["torch_threads"] == 1 and done["execution_facts"]["cpu_threads"]["threads"] == 1


@settings(run_cpu_threads=2, run_queue_max_concurrent_cpu=4)
async def test_the_server_setting_beats_automatic(jp_fetch, threads_node):
    done, seen = await _run(jp_fetch, {})
    assert done["execution_facts"]["cpu_threads"] == {"threads": 2, "source": "setting", "cores": CORES, "slots": 4}
    assert seen["torch_threads"] == 2


@pytest.mark.parametrize("value", [0, -2, 4096, "4", True, 2.5])
async def test_a_bad_cpu_threads_is_refused_with_422_naming_the_field(jp_fetch, value):
    code, body = await call(jp_fetch, "api", "runs", method="POST",
                            body={"graph": {"nodes": [], "edges": []}, "options": {"cpu_threads": value}})
    assert code == 422, body
    assert body["error"]["params"]["field"] == "options.cpu_threads"


@pytest.mark.slow
@settings(run_queue_max_concurrent="box/cpu=1")
async def test_a_worker_runs_process_gets_the_budget_in_its_environment_and_torch(jp_fetch, agents, pack_env):
    agent = agents(env=pack_env)
    await until_connected(jp_fetch, agent)
    target = {"target": {"worker": "box"}}
    # Automatic on the worker: its own cores (from its hello), its own cpu queue's slots (box/cpu=1).
    done, seen = await _run(jp_fetch, target)
    assert done["execution_facts"]["cpu_threads"] == {"threads": CORES, "source": "auto", "cores": CORES,
                                                      "slots": 1}
    assert seen["OMP_NUM_THREADS"] == seen["MKL_NUM_THREADS"] == seen["OPENBLAS_NUM_THREADS"] == str(CORES)
    assert seen["torch_threads"] == CORES
    # Asked for: the run's process (forked from the agent's warm process, torch already loaded) obeys.
    done, seen = await _run(jp_fetch, {**target, "cpu_threads": 3})
    assert done["execution_facts"]["cpu_threads"]["threads"] == 3
    assert seen["OMP_NUM_THREADS"] == "3" and seen["torch_threads"] == 3
    assert agent.proc.poll() is None
