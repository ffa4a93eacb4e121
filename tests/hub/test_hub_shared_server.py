"""A shared single-user server under a real JupyterHub: alice's server carries the extension and she
shares it with bob and dave (JupyterHub 5's shares). Every request reaches the extension through the
Hub's proxy with the caller's own Hub token, so the identity it sees is the Hub's: bob's runs,
workers, sweeps and studies are bob's; bob may not stop or delete alice's, nor manage the workers
she enrolled; carol (a Hub admin) and dave (in the Hub group named by `admin_groups`) may; erin,
with no share, never reaches the server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

import pytest

from hub_harness import Hub, proxy_missing, start_hub
from test_workers_e2e import AgentProcess, naps

pytestmark = [pytest.mark.slow, pytest.mark.timeout(480)]

ALICE, BOB, CAROL, DAVE, ERIN = "alice", "bob", "carol", "dave", "erin"


def edge(s: str, sp: str, t: str, tp: str) -> dict[str, str]:
    return {"source": s, "source_port": sp, "target": t, "target_port": tp}


def sleepy(seconds: float) -> dict[str, Any]:
    return {"nodes": [{"id": "k", "type": "Float", "params": {"value": 1}},
                      {"id": "nap", "type": "Sleep", "params": {"seconds": seconds}}],
            "edges": [edge("k", "value", "nap", "value")]}


def mean_graph(values: list[float], nap: float = 0.0) -> dict[str, Any]:
    return {"nodes": [{"id": "nap", "type": "Sleep", "params": {"seconds": nap}},
                      {"id": "vals", "type": "List", "params": {"values": values}},
                      {"id": "m", "type": "Mean"}],
            "edges": [edge("vals", "values", "nap", "value"), edge("nap", "value", "m", "values")]}


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    missing = proxy_missing()
    if missing:
        pytest.skip(missing)
    hub = start_hub(tmp_path_factory.mktemp("hub"), users=[ALICE, BOB, DAVE, ERIN], admins=[CAROL],
                    groups={"gpu-admins": [DAVE]},
                    # the documented way to name the admin group on every single-user server
                    singleuser_args=["--CodefyApp.admin_groups=gpu-admins"])
    try:
        hub.start_server(ALICE)
        hub.share(ALICE, BOB)
        hub.share(ALICE, DAVE)
        yield hub
    finally:
        hub.close()


def wait_run(hub: Hub, run_id: str, statuses: set[str], timeout: float = 120.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        code, run = hub.codefy(ALICE, ALICE, "api", "runs", run_id)
        assert code == 200, run
        if run["status"] in statuses:
            return run
        assert time.monotonic() < deadline, f"run {run_id} stayed {run['status']}"
        time.sleep(0.2)


def test_each_hub_user_is_themselves_and_owns_what_they_submit(hub):
    runs = {}
    for user in (ALICE, BOB):
        code, run = hub.codefy(user, ALICE, "api", "runs", method="POST", body={"graph": sleepy(60)})
        assert code == 201, run
        assert run["owner"] == user
        runs[user] = run["id"]

    # Everyone the Hub lets in reads every run; erin, with no share, is refused by the Hub itself.
    for user in (ALICE, BOB, CAROL, DAVE):
        for run_id in runs.values():
            code, run = hub.codefy(user, ALICE, "api", "runs", run_id)
            assert code == 200 and run["id"] == run_id, (user, run)
    code, body = hub.codefy(ERIN, ALICE, "api", "runs")
    assert code == 403 and body["error"]["code"] == "unauthenticated", body
    assert "JupyterHub login with access to this server" in body["error"]["message"], body
    code, body = hub.codefy(BOB, ALICE, "api", "runs", token=None)  # no token: no way in either
    assert code == 403 and body["error"]["code"] == "unauthenticated", body

    # bob may not stop or delete alice's run...
    code, body = hub.codefy(BOB, ALICE, "api", "runs", runs[ALICE], "cancel", method="POST")
    assert code == 403 and body["error"]["code"] == "forbidden", body
    assert body["error"]["params"]["owner"] == ALICE
    code, body = hub.codefy(BOB, ALICE, "api", "runs", runs[ALICE], method="DELETE")
    assert code == 403 and body["error"]["params"]["owner"] == ALICE
    assert wait_run(hub, runs[ALICE], {"queued", "running"})["status"] in ("queued", "running")
    # ...but stops his own.
    code, body = hub.codefy(BOB, ALICE, "api", "runs", runs[BOB], "cancel", method="POST")
    assert code == 200, body
    wait_run(hub, runs[BOB], {"cancelled"})

    # dave, in the admin group, stops alice's run; carol, a Hub admin, deletes it.
    code, body = hub.codefy(DAVE, ALICE, "api", "runs", runs[ALICE], "cancel", method="POST")
    assert code == 200, body
    wait_run(hub, runs[ALICE], {"cancelled"})
    code, body = hub.codefy(BOB, ALICE, "api", "runs", runs[ALICE], method="DELETE")
    assert code == 403, body
    code, body = hub.codefy(CAROL, ALICE, "api", "runs", runs[ALICE], method="DELETE")
    assert code == 204, body
    code, body = hub.codefy(BOB, ALICE, "api", "runs", runs[BOB], method="DELETE")
    assert code == 204, body
    code, listing = hub.codefy(ALICE, ALICE, "api", "runs")
    assert code == 200 and not {r["id"] for r in listing["runs"]} & set(runs.values())
    # The server found itself on a Hub, and said so (once, on the first owner check).
    assert "codefy: shared server (JupyterHub single-user server of 'alice')" in hub.log_tail(10**6)


def test_bobs_browser_session_on_alices_server_is_bob(hub):
    """Signed in on the Hub's page and through its OAuth prompt, as Lab's panels talk to the server:
    the session cookie and the XSRF header."""
    browser = hub.browser(BOB, ALICE)
    code, run = browser.codefy("api", "runs", method="POST", body={"graph": sleepy(60)})
    assert code == 201 and run["owner"] == BOB, run
    code, body = browser.codefy("api", "runs", method="POST", body={"graph": sleepy(0)}, xsrf=False)
    assert code == 403, body  # a cookie alone, as a cross-site form would send it
    code, mine = hub.codefy(ALICE, ALICE, "api", "runs", method="POST", body={"graph": sleepy(60)})
    assert code == 201, mine
    code, body = browser.codefy("api", "runs", mine["id"], "cancel", method="POST")
    assert code == 403 and body["error"]["params"]["owner"] == ALICE, body
    for run_id in (run["id"], mine["id"]):
        code, body = hub.codefy(ALICE, ALICE, "api", "runs", run_id, "cancel", method="POST")
        assert code == 200, body


def enroll(hub: Hub, user: str, name: str) -> None:
    """`user` asks alice's server for a one-time token; an agent (no Hub token) exchanges it."""
    code, issued = hub.codefy(user, ALICE, "api", "workers", "enrollments", method="POST", body={})
    assert code == 201, issued
    # where agents reach the server: through the Hub's proxy
    assert f"--control {hub.url}/user/alice/ " in issued["command"], issued
    code, got = hub.codefy(user, ALICE, "api", "workers", "enroll", method="POST",
                           body={"token": issued["token"], "name": name}, token=None)
    assert code == 201, got


def test_workers_are_managed_by_who_enrolled_them_and_the_hub_admins(hub):
    enroll(hub, ALICE, "alice-box")
    enroll(hub, BOB, "bob-box")
    code, listing = hub.codefy(BOB, ALICE, "api", "workers")
    assert code == 200, listing
    assert {w["name"]: w["enrolled_by"] for w in listing["workers"]} == {"alice-box": ALICE, "bob-box": BOB}

    for action in ("drain", "undrain"):
        code, body = hub.codefy(BOB, ALICE, "api", "workers", "alice-box", action, method="POST")
        assert code == 403 and body["error"]["code"] == "not_worker_owner", body
        assert body["error"]["params"] == {"worker": "alice-box", "enrolled_by": ALICE, "action": action}
        code, body = hub.codefy(BOB, ALICE, "api", "workers", "bob-box", action, method="POST")
        assert code == 200 and body["draining"] is (action == "drain"), body
    code, body = hub.codefy(BOB, ALICE, "api", "workers", "enrollments", method="POST", body={"worker": "alice-box"})
    assert code == 403 and body["error"]["params"]["action"] == "reissue", body
    code, body = hub.codefy(BOB, ALICE, "api", "workers", "alice-box", method="DELETE")
    assert code == 403 and body["error"]["params"]["action"] == "remove", body

    code, body = hub.codefy(DAVE, ALICE, "api", "workers", "alice-box", "drain", method="POST")
    assert code == 200 and body["draining"] is True, body
    code, body = hub.codefy(CAROL, ALICE, "api", "workers", "bob-box", method="DELETE")
    assert code == 204, body
    code, body = hub.codefy(ALICE, ALICE, "api", "workers", "alice-box", method="DELETE")
    assert code == 204, body
    code, listing = hub.codefy(ALICE, ALICE, "api", "workers")
    assert code == 200 and listing["workers"] == []


def test_sweeps_and_studies_are_stopped_by_their_owner_or_an_admin(hub):
    sweep = {"base_graph": mean_graph([2, 4], nap=60), "name": "naps",
             "sweep_spec": {"params": [{"node_id": "nap", "param": "seconds", "values": [60, 61]}]},
             "objective": {"metric": "mean", "direction": "minimize"}}
    code, created = hub.codefy(ALICE, ALICE, "api", "sweeps", method="POST", body=sweep)
    assert code == 201, created
    sweep_id = created["sweep_id"]
    code, doc = hub.codefy(BOB, ALICE, "api", "sweeps", sweep_id)
    assert code == 200 and doc["owner"] == ALICE, doc
    code, body = hub.codefy(BOB, ALICE, "api", "sweeps", sweep_id, "cancel", method="POST")
    assert code == 403 and body["error"]["params"]["owner"] == ALICE, body
    code, body = hub.codefy(DAVE, ALICE, "api", "sweeps", sweep_id, "cancel", method="POST")
    assert code == 200, body

    study = {"name": "tiny", "objective": {"node_id": "m", "metric": "mean", "direction": "minimize"},
             "base_graph": mean_graph([2, 4], nap=60),
             "variants": [{"label": "base", "ops": []}, {"label": "low", "graph": mean_graph([1, 2], nap=60)}],
             "repetitions": 2, "seed": 7}
    studies = {}
    for user in (ALICE, BOB):
        code, doc = hub.codefy(user, ALICE, "api", "studies", method="POST", body={**study, "name": user})
        assert code == 201, doc
        assert doc["owner"] == user
        studies[user] = doc["id"]
    code, body = hub.codefy(BOB, ALICE, "api", "studies", studies[ALICE], "cancel", method="POST", body={})
    assert code == 403 and body["error"]["params"]["owner"] == ALICE, body
    code, body = hub.codefy(BOB, ALICE, "api", "studies", studies[BOB], "cancel", method="POST", body={})
    assert code == 200, body
    code, body = hub.codefy(ERIN, ALICE, "api", "studies", studies[ALICE], "cancel", method="POST", body={})
    assert code == 403
    code, body = hub.codefy(CAROL, ALICE, "api", "studies", studies[ALICE], "cancel", method="POST", body={})
    assert code == 200, body


def test_a_real_agent_enrolled_through_the_hub_runs_bobs_run_that_bob_cannot_cut(hub, tmp_path):
    """alice enrolls an agent through the proxy (socket included); bob's run goes to it; bob may not
    remove or drain it (which would end his own run), and alice may."""
    code, issued = hub.codefy(ALICE, ALICE, "api", "workers", "enrollments", method="POST", body={})
    assert code == 201, issued
    agent = AgentProcess(tmp_path, f"{hub.url}/user/{ALICE}/", name="alice-gpu", token=issued["token"])
    try:
        deadline = time.monotonic() + 120
        while True:
            code, listing = hub.codefy(BOB, ALICE, "api", "workers")
            worker = next((w for w in listing["workers"] if w["name"] == "alice-gpu"), {})
            if worker.get("state") == "connected":
                break
            assert agent.proc.poll() is None, f"the agent exited:\n{agent.output()}"
            assert time.monotonic() < deadline, f"never connected:\n{agent.output()}"
            time.sleep(0.2)
        assert worker["enrolled_by"] == ALICE

        code, run = hub.codefy(BOB, ALICE, "api", "runs", method="POST",
                               body={"graph": naps(4, 1.5), "options": {"target": {"worker": "alice-gpu"}}})
        assert code == 201 and run["owner"] == BOB, run
        wait_run(hub, run["id"], {"running"})
        for path, method, action in ((("alice-gpu",), "DELETE", "remove"), (("alice-gpu", "drain"), "POST", "drain")):
            code, body = hub.codefy(BOB, ALICE, "api", "workers", *path, method=method)
            assert code == 403 and body["error"]["params"]["action"] == action, body
        done = wait_run(hub, run["id"], {"succeeded", "failed", "cancelled", "interrupted"})
        assert done["status"] == "succeeded" and done["worker_id"] == "alice-gpu", done
        code, page = hub.codefy(BOB, ALICE, "api", "runs", run["id"], "events")
        assert code == 200 and page["events"][-1]["type"] == "execution_complete", page

        code, _ = hub.codefy(ALICE, ALICE, "api", "workers", "alice-gpu", method="DELETE")
        assert code == 204
    finally:
        agent.cleanup()


def test_codefy_in_alices_terminal_runs_as_her_and_with_bobs_hub_token_as_him(hub, tmp_path):
    """What a terminal or kernel on alice's server sees: her HOME, no codefy settings. `codefy run`
    finds the server from its runtime file (the token in it is the one the Hub gave the server)."""
    graph = tmp_path / "small.json"
    graph.write_text(json.dumps(sleepy(0)))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CODEFY_", "JUPYTER"))}
    env["HOME"] = str(hub.root / "home" / ALICE)
    done = subprocess.run([sys.executable, "-m", "codefy_jupyter.cli", "run", str(graph), "--json"], env=env,
                          cwd=env["HOME"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)
    assert result["server"]["url"].endswith(f"/user/{ALICE}/"), result["server"]
    run_id = result["id"]
    code, run = hub.codefy(BOB, ALICE, "api", "runs", run_id)
    assert code == 200 and run["owner"] == ALICE and run["status"] == "succeeded", run

    # bob, anywhere, with his own Hub token and the server's address through the Hub: his run.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CODEFY_", "JUPYTER"))}
    env["HOME"] = str(tmp_path)
    done = subprocess.run([sys.executable, "-m", "codefy_jupyter.cli", "run", str(graph), "--json",
                           "--url", f"{hub.url}/user/{ALICE}/", "--token", hub.token(BOB)], env=env,
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["owner"] == BOB


def test_a_restart_under_the_hub_keeps_runs_and_their_owners(hub):
    code, done = hub.codefy(BOB, ALICE, "api", "runs", method="POST", body={"graph": sleepy(0)})
    assert code == 201, done
    wait_run(hub, done["id"], {"succeeded"})
    code, cut = hub.codefy(ALICE, ALICE, "api", "runs", method="POST", body={"graph": sleepy(60)})
    assert code == 201, cut
    wait_run(hub, cut["id"], {"running"})

    hub.stop_server(ALICE)
    hub.start_server(ALICE)

    # The run the stop cut short is recovered as interrupted, still alice's; bob's is still bob's,
    # and the share still lets bob in.
    run = wait_run(hub, cut["id"], {"interrupted"})
    assert run["owner"] == ALICE
    code, body = hub.codefy(BOB, ALICE, "api", "runs", cut["id"], method="DELETE")
    assert code == 403 and body["error"]["params"]["owner"] == ALICE, body
    code, run = hub.codefy(BOB, ALICE, "api", "runs", done["id"])
    assert code == 200 and run["owner"] == BOB and run["status"] == "succeeded", run
    code, body = hub.codefy(BOB, ALICE, "api", "runs", done["id"], method="DELETE")
    assert code == 204, body
