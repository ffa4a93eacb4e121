"""Per-user quotas on a shared single-user server under a real JupyterHub: alice shares her server
with bob; the quotas, set for every server from the Hub (`c.Spawner.args`), cap each of them
separately, and one's runs waiting for their quota never hold up the other's. A `codefy run` in
alice's terminal is hers, and counts against her quota."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from hub_harness import proxy_missing, start_hub
from test_hub_shared_server import ALICE, BOB, sleepy, wait_run

pytestmark = [pytest.mark.slow, pytest.mark.timeout(480)]


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    missing = proxy_missing()
    if missing:
        pytest.skip(missing)
    hub = start_hub(tmp_path_factory.mktemp("hub"), users=[ALICE, BOB],
                    singleuser_args=["--CodefyApp.run_quota_max_running=1", "--CodefyApp.run_quota_max_queued=1",
                                     "--CodefyApp.run_queue_max_concurrent_cpu=4"])
    try:
        hub.start_server(ALICE)
        hub.share(ALICE, BOB)
        yield hub
    finally:
        hub.close()


def test_two_hub_users_on_one_server_are_capped_separately(hub, tmp_path):
    def submit(user, seconds):
        code, run = hub.codefy(user, ALICE, "api", "runs", method="POST", body={"graph": sleepy(seconds)})
        return code, run

    code, a1 = submit(ALICE, 60)
    assert code == 201 and a1["owner"] == ALICE, a1
    wait_run(hub, a1["id"], {"running"})
    code, a2 = submit(ALICE, 0)
    assert code == 201 and a2["status"] == "queued", a2
    assert a2["queue_reason"]["code"] == "owner_quota" and a2["queue_reason"]["params"]["owner"] == ALICE, a2

    # bob's run goes behind alice's waiting one in the same queue, and starts: her quota is hers.
    code, b1 = submit(BOB, 60)
    assert code == 201 and b1["owner"] == BOB, b1
    assert wait_run(hub, b1["id"], {"running"})["queue_key"] == a2["queue_key"]
    code, b2 = submit(BOB, 0)
    assert code == 201 and b2["queue_reason"]["params"] == {"owner": BOB, "running": 1, "limit": 1}, b2

    # Each has one waiting run, the queued cap: a third is refused, for each, and nothing is written.
    code, before = hub.codefy(ALICE, ALICE, "api", "runs")
    for user in (ALICE, BOB):
        code, body = submit(user, 0)
        assert code == 429 and body["error"]["code"] == "owner_queue_full", body
        assert body["error"]["params"]["owner"] == user
    code, after = hub.codefy(ALICE, ALICE, "api", "runs")
    assert after["total"] == before["total"], (before, after)

    # In alice's terminal, `codefy run` uses the server's own token: the run would be alice's, so
    # her queued cap refuses it (it is not bob's, whoever typed it).
    graph = tmp_path / "small.json"
    graph.write_text(json.dumps(sleepy(0)))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CODEFY_", "JUPYTER"))}
    env["HOME"] = str(hub.root / "home" / ALICE)
    done = subprocess.run([sys.executable, "-m", "codefy_jupyter.cli", "run", str(graph), "--json", "--detach"],
                          env=env, cwd=env["HOME"], capture_output=True, text=True, timeout=120)
    assert done.returncode != 0, done.stdout + done.stderr
    error = json.loads(done.stdout)["error"]
    assert error["code"] == "owner_queue_full" and error["params"]["owner"] == ALICE, error

    # alice's waiting run starts when her running one ends, while bob's stays capped by his.
    code, body = hub.codefy(ALICE, ALICE, "api", "runs", a1["id"], "cancel", method="POST")
    assert code == 200, body
    assert wait_run(hub, a2["id"], {"succeeded"})["owner"] == ALICE
    code, seen = hub.codefy(ALICE, ALICE, "api", "runs", b2["id"])
    assert seen["status"] == "queued" and seen["queue_reason"]["code"] == "owner_quota", seen
    code, body = hub.codefy(BOB, ALICE, "api", "runs", b1["id"], "cancel", method="POST")
    assert code == 200, body
    assert wait_run(hub, b2["id"], {"succeeded"})["owner"] == BOB
