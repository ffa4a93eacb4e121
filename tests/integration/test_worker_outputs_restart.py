"""A finished worker run's recorded outputs after the control plane restarts: real `codefy start`
servers on one data dir and a real same-machine `codefy agent start` (it reads the server's token
from server.json and dials again). The run is found again from its row (worker + record_outputs)
and reads the same as before the restart."""

from __future__ import annotations

from typing import Any

import pytest
import test_headless as headless
from test_agent_survives_restart import connected_worker, local_agent, servers  # noqa: F401  (fixtures)

pytestmark = pytest.mark.slow

GRAPH = {"nodes": [{"id": "k", "type": "Float", "params": {"value": 2}},
                   {"id": "s", "type": "Scale", "params": {"factor": 3}}],
         "edges": [{"source": "k", "source_port": "value", "target": "s", "target_port": "x"}]}


def read(state: dict[str, Any], *path: str) -> tuple[int, Any]:
    return headless.api(state, "GET", "/".join(("execution", "outputs") + path))


@pytest.mark.timeout(240)
def test_a_finished_worker_runs_outputs_are_found_again_after_a_restart(servers, local_agent):
    port = headless.free_port()
    state = servers.start(port)
    agent = local_agent(state["url"])
    connected_worker(state, agent)
    run = headless.submit(state, GRAPH, options={"record_outputs": True, "target": {"worker": "box"}})
    done = headless.wait_status(state, run["id"], {"succeeded", "failed", "interrupted"}, timeout=90)
    assert done["status"] == "succeeded", (done, agent.output())
    before = [read(state, run["id"]), read(state, run["id"], "s", "y")]
    assert [code for code, _ in before] == [200, 200], before
    assert before[1][1]["value"] == 6.0
    stopped = servers.stop()
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    state = servers.start(port)
    connected_worker(state, agent)
    after = [read(state, run["id"]), read(state, run["id"], "s", "y")]
    assert after == before
