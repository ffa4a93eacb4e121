"""Real `codefy agent start` subprocesses against a real control plane on loopback: instances of one
enrolled worker name (`--instance`, one per Slurm job or pod) sharing its stored worker token, and a
worker removed (DELETE /workers/{name}) while its run executes and another waits for it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import psutil
import pytest

from test_server_runs import SMALL, all_events, call, wait_status
from test_workers_e2e import (  # noqa: F401  (fixtures)
    AgentProcess, agents, assert_gapless_without_duplicates, control, jp_server_config, naps, server_token, settings,
    submit, until_connected, until_event, worker_state,
)

pytestmark = pytest.mark.slow


async def enrollment_token(jp_fetch) -> str:
    code, issued = await call(jp_fetch, "api", "workers", "enrollments", method="POST", body={})
    assert code == 201, issued
    return issued["token"]


@pytest.fixture
def instances(tmp_path, control, request):
    """`codefy agent start --name <name> --instance <i>`: every instance in the same agent folder (so
    they share the name's stored credentials), each with its own log; listed as `<name>.<i>`."""
    shared = tmp_path / "agent"

    def start(name: str, instance: str, *args: str, token: str | None = None) -> AgentProcess:
        own = tmp_path / f"instance-{instance}"
        own.mkdir()
        # The later --data-dir wins (argparse): the shared folder, not the one AgentProcess derives.
        agent = AgentProcess(own, control, "--instance", instance, "--data-dir", str(shared), *args, name=name,
                             token=token)
        request.addfinalizer(agent.cleanup)
        agent.dir = shared
        agent.name = f"{name}.{instance}"  # what until_connected looks up
        return agent

    return start


@settings(worker_max_instances=1)
async def test_an_instance_past_the_cap_waits_for_room_and_connects_when_one_leaves(jp_fetch, instances, tmp_path):
    token = await enrollment_token(jp_fetch)
    a = instances("hpc", "a", "--one-shot", token=token)
    await until_connected(jp_fetch, a)
    b = instances("hpc", "b", "--one-shot")
    deadline = asyncio.get_running_loop().time() + 120
    while "hello refused (too_many_instances)" not in b.output():
        assert b.proc.poll() is None, b.output()
        assert asyncio.get_running_loop().time() < deadline, b.output()
        await asyncio.sleep(0.1)
    assert "worker_max_instances = 1" in b.output()
    _, listing = await call(jp_fetch, "api", "workers")
    assert "hpc.b" not in {w["name"] for w in listing["workers"]}

    # a takes a run and leaves; b, which kept dialling, takes its place and the next run.
    first = await submit(jp_fetch, SMALL, {"pool": "one-shot"})
    done = await wait_status(jp_fetch, first["id"], {"succeeded", "failed"}, timeout=120)
    assert done["status"] == "succeeded" and done["worker_id"] == "hpc.a", done
    assert await a.exited() == 0
    await until_connected(jp_fetch, b)
    second = await submit(jp_fetch, SMALL, {"pool": "one-shot"})
    done = await wait_status(jp_fetch, second["id"], {"succeeded", "failed"}, timeout=120)
    assert done["status"] == "succeeded" and done["worker_id"] == "hpc.b", done
    _, listing = await call(jp_fetch, "api", "workers")
    assert "hpc.a" not in {w["name"] for w in listing["workers"]}  # idle and gone: forgotten to make room


async def test_instances_share_one_enrollment_and_each_takes_one_run(jp_fetch, instances, tmp_path):
    token = await enrollment_token(jp_fetch)
    # The first instance spends the one-time token for the name `hpc`; the second finds the stored
    # worker token of `hpc` without being given any.
    a = instances("hpc", "a", "--one-shot", token=token)
    await until_connected(jp_fetch, a)
    stored = tmp_path / "agent" / "credentials" / "hpc.json"
    assert stored.exists()
    assert not (tmp_path / "agent" / "credentials" / "hpc.a.json").exists()
    b = instances("hpc", "b", "--one-shot")
    await until_connected(jp_fetch, b)
    assert f"token from stored in {stored}" in b.output()

    for agent in (a, b):
        worker = await worker_state(jp_fetch, agent.name)
        assert worker["state"] == "connected" and worker["one_shot"] is True and worker["enrolled"] is True
    code, listing = await call(jp_fetch, "api", "workers")
    assert code == 200
    assert {"hpc.a", "hpc.b"} <= {w["name"] for w in listing["workers"]}

    first = await submit(jp_fetch, naps(1, 0.5), {"pool": "one-shot"})
    done = await wait_status(jp_fetch, first["id"], {"succeeded", "failed"}, timeout=120)
    assert done["status"] == "succeeded", done
    assert done["worker_id"] in ("hpc.a", "hpc.b")
    took, other = (a, b) if done["worker_id"] == "hpc.a" else (b, a)
    assert await took.exited() == 0
    assert "one-shot: the run is done" in took.output()
    assert other.proc.poll() is None and (await worker_state(jp_fetch, other.name))["state"] == "connected"

    # The next run of the pool goes to the instance still waiting, which leaves in turn.
    second = await submit(jp_fetch, SMALL, {"pool": "one-shot"})
    done = await wait_status(jp_fetch, second["id"], {"succeeded", "failed"}, timeout=120)
    assert done["status"] == "succeeded" and done["worker_id"] == other.name, done
    assert await other.exited() == 0


async def test_removing_a_worker_ends_its_runs_disconnects_it_and_revokes_its_token(jp_fetch, agents):
    token = await enrollment_token(jp_fetch)
    agent = agents(name="doomed", token=token)
    assert (await until_connected(jp_fetch, agent))["enrolled"] is True
    # Both on one card (one run at a time there): the second waits its turn behind the first.
    running = await submit(jp_fetch, naps(1, 60), {"worker": "doomed", "devices": ["cuda:0"]})
    await until_event(jp_fetch, running["id"],
                      lambda e: e["type"] == "node_status" and e["payload"]["node_id"] == "nap0")
    waiting = await submit(jp_fetch, SMALL, {"worker": "doomed", "devices": ["cuda:0"]})
    code, row = await call(jp_fetch, "api", "runs", waiting["id"])
    assert code == 200 and row["status"] == "queued" and row["queue_position"] == 1, row
    family = agent.processes()
    assert len(family) >= 2  # the agent and at least the run's process

    code, _ = await call(jp_fetch, "api", "workers", "doomed", method="DELETE")
    assert code == 204

    # The executing run ends failed, its closing event naming the reason.
    done = await wait_status(jp_fetch, running["id"], {"failed", "cancelled", "interrupted", "succeeded"}, timeout=90)
    assert done["status"] == "failed", done
    assert done["error"]["code"] == "worker_removed" and done["error"]["params"] == {"worker": "doomed"}
    events = await all_events(jp_fetch, running["id"])
    assert_gapless_without_duplicates(events)
    assert events[-1]["type"] == "execution_error"
    assert events[-1]["payload"]["error"]["code"] == "worker_removed"
    assert events[-1]["payload"]["error"]["message"] == "worker doomed was removed"

    # The run that waited for it fails with the same reason.
    failed = await wait_status(jp_fetch, waiting["id"], {"failed", "queued"}, timeout=90)
    assert failed["status"] == "failed", failed
    assert failed["error"] == {"code": "worker_removed", "message": "worker doomed was removed",
                               "params": {"worker": "doomed"}}
    events = await all_events(jp_fetch, waiting["id"])
    assert events[-1]["type"] == "execution_error" and events[-1]["payload"]["error"]["code"] == "worker_removed"

    # The agent was disconnected for good: it exits 1 saying why, its run processes end with it.
    assert await agent.exited() == 1
    assert "(4410): this worker was removed from the control plane" in agent.output()
    deadline = asyncio.get_running_loop().time() + 90
    while any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in family[1:]):
        assert asyncio.get_running_loop().time() < deadline, "processes of the removed agent are still running"
        await asyncio.sleep(0.1)
    assert await worker_state(jp_fetch, "doomed") is None
    code, body = await call(jp_fetch, "api", "workers", "doomed")
    assert code == 404 and body["error"]["code"] == "worker_not_found"

    # Its token is revoked: started again with the stored worker token, the agent is refused.
    again = agents(name="doomed", token=None)
    assert await again.exited() == 1
    output = again.output()
    assert "token from stored in" in output
    assert "(4401): refused: the token is not valid here" in output
    assert await worker_state(jp_fetch, "doomed") is None
