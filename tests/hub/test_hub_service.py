"""The team control plane as a JupyterHub service, under a real JupyterHub: the Hub starts
`codefy start` as the managed service `codefy` (one declared card, cuda:0), and every single-user
server is told where it is (`CODEFY_SERVICE_URL` in `c.Spawner.environment`), so alice's and bob's
servers open no queue of their own and pass their codefy routes on to it, as the user who made
each request. The configuration is docs/tutorials/jupyterhub.md's ("JupyterHub", "A team queue"): a role granting
the service's access scope to the team, the same scope allowed to the single-user servers' OAuth
tokens and to the token each server is given, and nothing granted to the service itself.

alice, bob and dave (in `gpu-admins`, the service's admin_groups) are the team; carol is a Hub
admin; erin has a Hub login but no access to the service."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from hub_harness import Hub, SERVICE_TOKEN, free_port, proxy_missing, request, start_hub
from test_workers_e2e import AgentProcess, naps

pytestmark = [pytest.mark.slow, pytest.mark.timeout(480)]

ALICE, BOB, CAROL, DAVE, ERIN = "alice", "bob", "carol", "dave", "erin"
SERVICE = "codefy"
ACCESS = f"access:services!service={SERVICE}"


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


class Team:
    """The Hub, the service's data dir, and calls to the service itself through the Hub's proxy."""

    def __init__(self, hub: Hub, data_dir: Path) -> None:
        self.hub, self.data_dir = hub, data_dir

    def call(self, user: str | None, *path: str, method: str = "GET", body: Any = None) -> tuple[int, Any]:
        url = f"{self.hub.url}/services/{SERVICE}/codefy/" + "/".join(path)
        return request(url, method=method, body=body, token=self.hub.token(user) if user else None)

    def state(self) -> dict[str, Any] | None:
        try:
            return json.loads((self.data_dir / "server.json").read_text())
        except (OSError, ValueError):
            return None

    def wait_run(self, run_id: str, statuses: set[str], timeout: float = 120.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            code, run = self.call(ALICE, "api", "runs", run_id)
            if code == 200 and run["status"] in statuses:
                return run
            assert time.monotonic() < deadline, f"run {run_id}: {code} {run}"
            time.sleep(0.2)


@pytest.fixture(scope="module")
def team(tmp_path_factory):
    missing = proxy_missing()
    if missing:
        pytest.skip(missing)
    root = tmp_path_factory.mktemp("hub")
    data_dir = root / "codefy-service"
    config_dir = root / "codefy-service-config"
    config_dir.mkdir()
    # The service's own Jupyter config: who its admins are besides the Hub's admins.
    (config_dir / "jupyter_server_config.py").write_text('c.CodefyApp.admin_groups = ["gpu-admins"]\n')
    inventory = root / "devices.json"
    inventory.write_text(json.dumps({"devices": [{"key": "cuda:0", "uuid": "GPU-team-0"}]}))
    port = free_port()
    service = {"name": SERVICE, "url": f"http://127.0.0.1:{port}",
               "command": [sys.executable, "-m", "codefy_jupyter.cli", "start", "--data-dir", str(data_dir)],
               "environment": {"JUPYTER_CONFIG_DIR": str(config_dir), "CODEFY_DEVICE_INVENTORY": str(inventory),
                               "JUPYTER_PLATFORM_DIRS": "0"}}
    hub = start_hub(root, users=[ALICE, BOB, DAVE, ERIN], admins=[CAROL], groups={"gpu-admins": [DAVE]},
                    services=[service],
                    roles=[{"name": "codefy-team", "users": [ALICE, BOB, CAROL, DAVE], "scopes": [ACCESS]}],
                    environment={"CODEFY_SERVICE_URL": f"http://127.0.0.1:{port}/services/{SERVICE}/"},
                    extra=f"""
c.Spawner.oauth_client_allowed_scopes = [{ACCESS!r}]
c.Spawner.server_token_scopes = ["users:activity!user", "access:servers!server", {ACCESS!r}]
""")
    team = Team(hub, data_dir)
    try:
        deadline = time.monotonic() + 90
        while True:  # the Hub starts its managed services with itself; the queue recovers, then answers
            try:
                code, _ = team.call(ALICE, "api", "runs")
            except OSError:
                code = 0
            if code == 200:
                break
            assert time.monotonic() < deadline, f"the service never answered ({code}):\n{hub.log_tail()}"
            time.sleep(0.3)
        for user in (ALICE, BOB):
            hub.start_server(user)
        yield team
    finally:
        hub.close()


def test_the_hub_runs_the_service_and_only_the_team_gets_in(team):
    state = team.state()
    assert state is not None and state["hub_service"] == SERVICE and state["token"] is None, state
    assert state["url"].endswith(f"/services/{SERVICE}/"), state
    code, listing = team.call(BOB, "api", "runs")
    assert code == 200 and "runs" in listing, listing
    total = listing["total"]
    for user in (ERIN, None):
        code, body = team.call(user, "api", "runs")
        assert code == 403 and body["error"]["code"] in ("forbidden", "unauthenticated"), (user, body)
        code, body = team.call(user, "api", "runs", method="POST", body={"graph": sleepy(0)})
        assert code == 403, (user, body)
    # The service's own Hub token is not a way in either: it was granted nothing.
    code, body = request(f"{team.hub.url}/services/{SERVICE}/codefy/api/runs", token=SERVICE_TOKEN)
    assert code == 403, body
    code, listing = team.call(ALICE, "api", "runs")
    assert code == 200 and listing["total"] == total, listing  # the refused submits left nothing


def test_two_users_runs_through_their_own_servers_wait_for_one_card(team):
    hub = team.hub
    code, first = hub.codefy(ALICE, ALICE, "api", "runs", method="POST",
                             body={"graph": sleepy(2.5), "options": {"device": "cuda:0"}})
    assert code == 201 and first["owner"] == ALICE and first["device"] == "cuda:0", first
    team.wait_run(first["id"], {"running"})
    code, second = hub.codefy(BOB, BOB, "api", "runs", method="POST",
                              body={"graph": sleepy(0.2), "options": {"device": "cuda:0"}})
    assert code == 201 and second["owner"] == BOB, second

    # One queue: bob's run waits behind alice's, and each server shows both.
    code, waiting = hub.codefy(BOB, BOB, "api", "runs", second["id"])
    assert code == 200 and waiting["status"] == "queued" and waiting["queue_position"] >= 1, waiting
    for user in (ALICE, BOB):
        code, listing = hub.codefy(user, user, "api", "runs")
        assert code == 200 and {first["id"], second["id"]} <= {r["id"] for r in listing["runs"]}, listing
    done_first = team.wait_run(first["id"], {"succeeded"})
    done_second = team.wait_run(second["id"], {"succeeded"})
    assert done_second["started_at"] >= done_first["finished_at"] - 0.05, (done_first, done_second)

    # Neither single-user server opened a run database of its own.
    for user in (ALICE, BOB):
        assert not (hub.data_dir(user) / "codefy.sqlite").exists(), user
    assert (team.data_dir / "codefy.sqlite").exists()


def test_the_authorization_matrix_of_the_team_queue(team):
    """Runs, sweeps, studies, workers and enrollment tokens: the owner and the admins (carol, a Hub
    admin; dave, in gpu-admins) may stop, delete or manage; another team member may only read."""
    hub = team.hub
    runs = {}
    for user in (ALICE, BOB):
        code, run = team.call(user, "api", "runs", method="POST", body={"graph": sleepy(60)})
        assert code == 201 and run["owner"] == user, run
        runs[user] = run["id"]
    code, body = team.call(BOB, "api", "runs", runs[ALICE], "cancel", method="POST")
    assert code == 403 and body["error"]["code"] == "forbidden" and body["error"]["params"]["owner"] == ALICE, body
    code, body = team.call(BOB, "api", "runs", runs[ALICE], method="DELETE")
    assert code == 403, body
    assert team.wait_run(runs[ALICE], {"queued", "running"})["status"] in ("queued", "running")
    code, body = team.call(BOB, "api", "runs", runs[BOB], "cancel", method="POST")
    assert code == 200, body
    code, body = team.call(DAVE, "api", "runs", runs[ALICE], "cancel", method="POST")
    assert code == 200, body
    team.wait_run(runs[ALICE], {"cancelled"})
    code, body = team.call(CAROL, "api", "runs", runs[ALICE], method="DELETE")
    assert code == 204, body
    team.wait_run(runs[BOB], {"cancelled"})
    code, body = team.call(BOB, "api", "runs", runs[BOB], method="DELETE")
    assert code == 204, body

    sweep = {"base_graph": mean_graph([2, 4], nap=60), "name": "naps",
             "sweep_spec": {"params": [{"node_id": "nap", "param": "seconds", "values": [60, 61]}]},
             "objective": {"metric": "mean", "direction": "minimize"}}
    code, created = team.call(ALICE, "api", "sweeps", method="POST", body=sweep)
    assert code == 201, created
    code, body = team.call(BOB, "api", "sweeps", created["sweep_id"], "cancel", method="POST")
    assert code == 403 and body["error"]["params"]["owner"] == ALICE, body
    code, body = team.call(CAROL, "api", "sweeps", created["sweep_id"], "cancel", method="POST")
    assert code == 200, body

    study = {"name": "tiny", "objective": {"node_id": "m", "metric": "mean", "direction": "minimize"},
             "base_graph": mean_graph([2, 4], nap=60),
             "variants": [{"label": "base", "ops": []}, {"label": "low", "graph": mean_graph([1, 2], nap=60)}],
             "repetitions": 2, "seed": 7}
    code, doc = team.call(BOB, "api", "studies", method="POST", body=study)
    assert code == 201 and doc["owner"] == BOB, doc
    code, body = team.call(ALICE, "api", "studies", doc["id"], "cancel", method="POST", body={})
    assert code == 403 and body["error"]["params"]["owner"] == BOB, body
    code, body = team.call(DAVE, "api", "studies", doc["id"], "cancel", method="POST", body={})
    assert code == 200, body

    # Workers: enrolled by alice through her own server, by bob at the service.
    code, issued = hub.codefy(ALICE, ALICE, "api", "workers", "enrollments", method="POST", body={})
    assert code == 201, issued
    # where agents reach the service: through the Hub's proxy, at the service's prefix
    assert f"--control {hub.url}/services/{SERVICE}/ " in issued["command"], issued
    code, got = team.call(None, "api", "workers", "enroll", method="POST",
                          body={"token": issued["token"], "name": "alice-box"})
    assert code == 201, got
    code, issued = team.call(BOB, "api", "workers", "enrollments", method="POST", body={})
    code, got = team.call(None, "api", "workers", "enroll", method="POST",
                          body={"token": issued["token"], "name": "bob-box"})
    assert code == 201, got
    code, listing = team.call(BOB, "api", "workers")
    assert {w["name"]: w["enrolled_by"] for w in listing["workers"]} == {"alice-box": ALICE, "bob-box": BOB}
    for action in ("drain", "undrain"):
        code, body = team.call(BOB, "api", "workers", "alice-box", action, method="POST")
        assert code == 403 and body["error"]["code"] == "not_worker_owner", body
        assert body["error"]["params"] == {"worker": "alice-box", "enrolled_by": ALICE, "action": action}
    code, body = team.call(BOB, "api", "workers", "enrollments", method="POST", body={"worker": "alice-box"})
    assert code == 403 and body["error"]["params"]["action"] == "reissue", body
    code, body = team.call(ERIN, "api", "workers", "enrollments", method="POST", body={})
    assert code == 403, body
    code, body = team.call(BOB, "api", "workers", "alice-box", method="DELETE")
    assert code == 403 and body["error"]["params"]["action"] == "remove", body
    code, body = team.call(DAVE, "api", "workers", "alice-box", "drain", method="POST")
    assert code == 200 and body["draining"] is True, body
    code, body = team.call(BOB, "api", "workers", "bob-box", method="DELETE")
    assert code == 204, body
    code, body = team.call(CAROL, "api", "workers", "alice-box", method="DELETE")
    assert code == 204, body
    code, listing = team.call(ALICE, "api", "workers")
    assert listing["workers"] == [], listing
    # The service said what it is, on its first owner check.
    assert "codefy: shared server (JupyterHub service 'codefy')" in hub.log_tail(10**6)


def test_lab_in_bobs_browser_and_codefy_run_in_alices_terminal_act_as_themselves(team, tmp_path):
    """Lab's panels (session cookie + XSRF header on bob's own server, passed on with the OAuth
    token that cookie holds), and `codefy run` and the client in alice's terminal or kernel (her
    server's runtime file and the token the Hub gave the server), unchanged."""
    hub = team.hub
    browser = hub.browser(BOB, BOB)
    code, run = browser.codefy("api", "runs", method="POST", body={"graph": sleepy(0)})
    assert code == 201 and run["owner"] == BOB, run
    code, body = browser.codefy("api", "runs", method="POST", body={"graph": sleepy(0)}, xsrf=False)
    assert code == 403, body  # a cookie alone is refused by bob's server, before anything is passed on
    team.wait_run(run["id"], {"succeeded"})

    graph = tmp_path / "small.json"
    graph.write_text(json.dumps(sleepy(0)))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CODEFY_", "JUPYTER"))}
    env["HOME"] = str(hub.root / "home" / ALICE)
    done = subprocess.run([sys.executable, "-m", "codefy_jupyter.cli", "run", str(graph), "--json"], env=env,
                          cwd=env["HOME"], capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)
    assert result["server"]["url"].endswith(f"/user/{ALICE}/"), result["server"]
    code, seen = team.call(BOB, "api", "runs", result["id"])
    assert code == 200 and seen["owner"] == ALICE and seen["status"] == "succeeded", seen

    # The Python client in a kernel of her server (what `%codefy` uses): found the same way.
    script = ("import json, sys\nfrom codefy_jupyter.client.client import Client\n"
              "with Client() as c:\n    run = c.submit(json.load(open(sys.argv[1])))\n"
              "    print(json.dumps({'url': c.url, **c.wait(run['id'])}))\n")
    done = subprocess.run([sys.executable, "-c", script, str(graph)], env=env, cwd=env["HOME"],
                          capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert f"/user/{ALICE}/" in result["url"] and result["owner"] == ALICE and result["status"] == "succeeded", result

    # A script anywhere, with bob's Hub token and the service's address through the Hub.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CODEFY_", "JUPYTER"))}
    env["HOME"] = str(tmp_path)
    done = subprocess.run([sys.executable, "-m", "codefy_jupyter.cli", "run", str(graph), "--json",
                           "--url", f"{hub.url}/services/{SERVICE}/", "--token", hub.token(BOB)], env=env,
                          cwd=tmp_path, capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["owner"] == BOB


def test_the_execution_socket_through_a_single_user_server(team):
    """Lab's Runs panel follows runs on `codefy/ws/execution`: through bob's server, from the
    service, whether the socket carries bob's Hub token or his browser's session cookie."""
    from tornado import httpclient, websocket

    hub = team.hub
    code, run = team.call(BOB, "api", "runs", method="POST", body={"graph": naps(3, 0.2)})
    assert code == 201, run

    async def follow(headers: dict[str, str]) -> list[str]:
        url = f"ws://127.0.0.1:{hub.port}/user/{BOB}/codefy/ws/execution"
        conn = await websocket.websocket_connect(httpclient.HTTPRequest(url, headers=headers))
        try:
            await conn.write_message(json.dumps({"type": "subscribe", "run_id": run["id"], "cursor": 0}))
            types: list[str] = []
            while "execution_complete" not in types:
                message = await asyncio.wait_for(conn.read_message(), 60)
                assert message is not None, (conn.close_code, conn.close_reason, types)
                frame = json.loads(message)
                assert frame["type"] == "events", frame
                types += [e["type"] for e in frame["events"]]
            return types
        finally:
            conn.close()
            await asyncio.sleep(0.2)  # the close handshake, before this loop ends

    # with bob's Hub token, as a script would; with his browser's session cookie, as Lab does
    types = asyncio.run(follow({"Authorization": f"token {hub.token(BOB)}"}))
    assert types[-1] == "execution_complete", types
    browser = hub.browser(BOB, BOB)
    cookies = "; ".join(f"{c.name}={c.value}" for c in browser.session.cookies
                        if c.path in ("/", f"/user/{BOB}/"))
    types = asyncio.run(follow({"Cookie": cookies}))
    assert types[-1] == "execution_complete", types
    # erin, without the service's access scope, is refused the socket before any upgrade
    code, body = request(f"{hub.url}/services/{SERVICE}/codefy/ws/execution", token=hub.token(ERIN))
    assert code == 403, body


def test_an_agent_enrolls_against_the_service_and_runs_bobs_run(team, tmp_path):
    hub = team.hub
    code, issued = team.call(BOB, "api", "workers", "enrollments", method="POST", body={})
    assert code == 201, issued
    agent = AgentProcess(tmp_path, f"{hub.url}/services/{SERVICE}/", name="team-gpu", token=issued["token"])
    try:
        deadline = time.monotonic() + 120
        while True:
            code, listing = team.call(ALICE, "api", "workers")
            worker = next((w for w in listing["workers"] if w["name"] == "team-gpu"), {})
            if worker.get("state") == "connected":
                break
            assert agent.proc.poll() is None, f"the agent exited:\n{agent.output()}"
            assert time.monotonic() < deadline, f"never connected:\n{agent.output()}"
            time.sleep(0.2)
        assert worker["enrolled_by"] == BOB
        code, run = hub.codefy(ALICE, ALICE, "api", "runs", method="POST",
                               body={"graph": naps(2, 0.3), "options": {"target": {"worker": "team-gpu"}}})
        assert code == 201 and run["owner"] == ALICE, run
        done = team.wait_run(run["id"], {"succeeded", "failed", "cancelled", "interrupted"})
        assert done["status"] == "succeeded" and done["worker_id"] == "team-gpu", done
        code, body = team.call(ALICE, "api", "workers", "team-gpu", method="DELETE")
        assert code == 403 and body["error"]["params"]["enrolled_by"] == BOB, body
        code, body = team.call(BOB, "api", "workers", "team-gpu", method="DELETE")
        assert code == 204, body
    finally:
        agent.cleanup()


def test_a_service_restart_keeps_runs_and_their_owners(team):
    code, done = team.call(BOB, "api", "runs", method="POST", body={"graph": sleepy(0)})
    assert code == 201, done
    team.wait_run(done["id"], {"succeeded"})
    code, cut = team.call(ALICE, "api", "runs", method="POST", body={"graph": sleepy(60), "options": {"device": "cpu"}})
    assert code == 201, cut
    team.wait_run(cut["id"], {"running"})

    # The service stops (as a crash or a kill would end it); the Hub starts it again by itself.
    before = team.state()
    assert before is not None
    os.kill(before["pid"], signal.SIGTERM)
    deadline = time.monotonic() + 120
    while True:
        state = team.state()
        if state is not None and state["pid"] != before["pid"]:
            try:
                code, run = team.call(ALICE, "api", "runs", cut["id"])
            except OSError:
                code = 0
            if code == 200:
                break
        assert time.monotonic() < deadline, f"the Hub did not restart the service:\n{team.hub.log_tail()}"
        time.sleep(0.5)

    run = team.wait_run(cut["id"], {"interrupted"})
    assert run["owner"] == ALICE
    code, body = team.call(BOB, "api", "runs", cut["id"], method="DELETE")
    assert code == 403 and body["error"]["params"]["owner"] == ALICE, body
    code, run = team.hub.codefy(BOB, BOB, "api", "runs", done["id"])
    assert code == 200 and run["owner"] == BOB and run["status"] == "succeeded", run
