"""A same-machine agent on the server's own token survives `codefy stop` / `codefy start`: real
`codefy start` servers and a real `codefy agent start` that found its token in the server's
server.json. The token persists across restarts of a data dir; a server restarted with another
token is followed by the agent, which reads server.json again before it dials."""

from __future__ import annotations

import time
from typing import Any

import pytest
import test_headless as headless
from test_workers_e2e import SMALL, AgentProcess

pytestmark = pytest.mark.slow


def connected_worker(state: dict[str, Any], agent: AgentProcess, timeout: float = 90.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        code, listing = headless.api(state, "GET", "workers")
        assert code == 200, listing
        found = next((w for w in listing["workers"] if w["name"] == agent.name and w["state"] == "connected"), None)
        if found is not None:
            return found
        assert agent.proc.poll() is None, f"the agent exited:\n{agent.output()}"
        assert time.monotonic() < deadline, f"the agent never connected:\n{agent.output()}"
        time.sleep(0.1)


def run_on_the_agent(state: dict[str, Any], agent: AgentProcess) -> dict[str, Any]:
    run = headless.submit(state, SMALL, options={"target": {"worker": agent.name}})
    done = headless.wait_status(state, run["id"], {"succeeded", "failed", "interrupted", "cancelled"}, timeout=90)
    assert done["status"] == "succeeded", (done, agent.output())
    assert done["worker_id"] == agent.name
    return done


@pytest.fixture
def servers(tmp_path, request) -> headless.Servers:
    s = headless.Servers(tmp_path)
    request.addfinalizer(s.kill_leftovers)
    return s


@pytest.fixture
def local_agent(tmp_path, servers, request):
    """An agent given no token: it takes the one the local `codefy start` server recorded."""

    def start(url: str) -> AgentProcess:
        agent = AgentProcess(tmp_path, url, name="box", env={"CODEFY_DATA_DIR": str(servers.data_dir)})
        request.addfinalizer(agent.cleanup)
        return agent

    return start


def start_with_token(servers: headless.Servers, port: int, token: str) -> dict[str, Any]:
    proc = servers.codefy("start", "--data-dir", str(servers.data_dir), "--port", str(port), "--token", token)
    if servers.state_file.exists():
        servers.pids.add(servers.state()["pid"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return servers.state()


def test_the_agent_reconnects_by_itself_after_codefy_stop_and_start(servers, local_agent):
    port = headless.free_port()
    state = servers.start(port)
    agent = local_agent(state["url"])
    connected_worker(state, agent)
    assert "token from the codefy start server on this machine" in agent.output()
    run_on_the_agent(state, agent)

    stopped = servers.stop()
    assert stopped.returncode == 0, stopped.stderr
    headless.wait_gone(state["pid"])
    assert agent.proc.poll() is None, agent.output()  # the agent waits for the server to come back

    again = servers.start(port)
    assert again["token"] == state["token"]  # the data dir kept it
    connected_worker(again, agent)
    run_on_the_agent(again, agent)
    assert agent.output().count("connected to ") >= 2
    assert "(4401)" not in agent.output()  # it never needed another token
    assert servers.stop().returncode == 0


def test_the_agent_follows_a_server_restarted_with_another_token(servers, local_agent):
    port = headless.free_port()
    state = start_with_token(servers, port, "the-first-token")
    agent = local_agent(state["url"])
    connected_worker(state, agent)

    assert servers.stop().returncode == 0
    headless.wait_gone(state["pid"])
    again = start_with_token(servers, port, "the-second-token")
    assert again["token"] == "the-second-token"
    connected_worker(again, agent)
    run_on_the_agent(again, agent)
    assert "the local codefy server's token changed (it restarted): using the new one" in agent.output()
    assert agent.proc.poll() is None
    assert servers.stop().returncode == 0


def test_an_agent_given_several_urls_follows_the_control_plane_to_whichever_answers(servers, tmp_path, request):
    """`--control URL1,URL2`: the agent dials the URL that answers, and when that control plane dies
    (kill -9) and one comes up at the other URL on the same data, the agent follows it there and its
    run in flight is adopted with a gapless log, as a leader's standby taking over would see it."""
    import os
    import signal

    from test_workers_e2e import assert_gapless_without_duplicates, naps

    first, second = headless.free_port(), headless.free_port()
    state = start_with_token(servers, second, "the-token")
    agent = AgentProcess(tmp_path, f"http://127.0.0.1:{first}/,http://127.0.0.1:{second}/", name="box",
                         token="the-token")
    request.addfinalizer(agent.cleanup)
    connected_worker(state, agent)
    assert f"trying the next control-plane URL: http://127.0.0.1:{second}/" in agent.output()
    run_on_the_agent(state, agent)

    run = headless.submit(state, naps(8, 0.5), options={"target": {"worker": "box"}})
    deadline = time.monotonic() + 120  # started on the agent: its first node's events are in the log
    while not any(e["type"] == "node_status" for e in headless.all_events(state, run["id"])):
        assert time.monotonic() < deadline, agent.output()
        time.sleep(0.1)
    os.kill(state["pid"], signal.SIGKILL)
    headless.wait_gone(state["pid"])
    again = start_with_token(servers, first, "the-token")
    assert again["url"].rstrip("/").endswith(f":{first}")
    done = headless.wait_status(again, run["id"], {"succeeded", "failed", "interrupted", "cancelled"}, timeout=120)
    assert done["status"] == "succeeded" and done["worker_id"] == "box", (done, agent.output())
    events = headless.all_events(again, run["id"])
    assert_gapless_without_duplicates(events)
    assert "worker_reconnected" in {e["payload"].get("code") for e in events if e["type"] == "run_warning"}
    assert f"connected to http://127.0.0.1:{first}/" in agent.output()
    run_on_the_agent(again, agent)
    assert servers.stop().returncode == 0
