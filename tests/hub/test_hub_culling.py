"""Idle culling under a real JupyterHub: `jupyterhub-idle-culler` runs as a Hub service (as the
docs/tutorials/jupyterhub.md configures it, with a short timeout) and must never stop a server while its queue has runs,
and must stop it once they are done. Nothing here touches the server after the submit (a request
would be activity of its own): the Hub's API says whether the server is up, and the user's
database, read once the server is gone, says when the run ended and how."""

from __future__ import annotations

import sqlite3
import sys
import time

import pytest

from hub_harness import proxy_missing, start_hub

pytestmark = [pytest.mark.slow, pytest.mark.timeout(480)]

EVE = "eve"
# 15 s: activity comes every second, and a busy machine may hold a few of them back; the run is two
# cull timeouts long, so a culler that saw no activity would stop the server mid-run.
CULL_TIMEOUT_S = 15
RUN_S = 2 * CULL_TIMEOUT_S


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    missing = proxy_missing()
    if missing:
        pytest.skip(missing)
    culler = [sys.executable, "-m", "jupyterhub_idle_culler", f"--timeout={CULL_TIMEOUT_S}", "--cull-every=1"]
    hub = start_hub(tmp_path_factory.mktemp("hub"), users=[EVE],
                    services=[{"name": "idle-culler", "command": culler}],
                    roles=[{"name": "idle-culler", "services": ["idle-culler"],
                            "scopes": ["list:users", "read:users:activity", "read:servers", "delete:servers"]}],
                    # Activity reaches the Hub every second (JupyterHub's default: 5 minutes), and
                    # codefy marks the server active every second while runs are (default: 30 s).
                    singleuser_args=["--ServerApp.tornado_settings=codefy_activity_interval_s=1"],
                    environment={"JUPYTERHUB_ACTIVITY_INTERVAL": "1"})
    try:
        yield hub
    finally:
        hub.close()


def test_the_culler_waits_for_the_queue_then_stops_the_server(hub):
    hub.token(EVE)
    hub.start_server(EVE)
    graph = {"nodes": [{"id": "k", "type": "Float", "params": {"value": 1}},
                       {"id": "nap", "type": "Sleep", "params": {"seconds": RUN_S}}],
             "edges": [{"source": "k", "source_port": "value", "target": "nap", "target_port": "value"}]}
    code, run = hub.codefy(EVE, EVE, "api", "runs", method="POST", body={"graph": graph})
    assert code == 201, run
    submitted = time.time()

    deadline = submitted + RUN_S + CULL_TIMEOUT_S + 90
    while hub.server(EVE) is not None:
        assert time.time() < deadline, f"the culler never stopped the idle server:\n{hub.log_tail()}"
        time.sleep(0.5)
    culled = time.time()

    database = hub.data_dir(EVE) / "codefy.sqlite"
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as db:
        status, finished_at = db.execute("SELECT status, finished_at FROM runs WHERE id = ?", (run["id"],)).fetchone()
    assert status == "succeeded", f"the run is {status}: the server was stopped under it"
    assert finished_at >= submitted + RUN_S - 1
    assert culled > finished_at
    # Idle from about the run's end: culled one timeout later, give or take the Hub's and the
    # culler's polling (seconds each), never a server left up for good.
    assert culled - finished_at < CULL_TIMEOUT_S + 40, (culled - finished_at)
