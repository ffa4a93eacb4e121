"""Who may manage workers, on a real jupyter-server with a real SQLite file: on a shared server
admins manage every worker and a user only the workers they enrolled; everyone reads the listing.
Every worker route × an admin, the worker's owner and another user; a real `codefy agent start`
subprocess running one user's run that another user cannot remove (and so cannot fail); and a
single-user server, where nothing changes."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from codefy_jupyter._version import __version__
from codefy_jupyter.wire import protocol as wp
from codefy_jupyter.server.worker_handlers import HELLO_TIMEOUT_SETTING

from test_server_runs import call, wait_status
from test_worker_handlers import RawAgent, _close_agents  # noqa: F401 - the fixture closes the raw agents
from test_workers_e2e import AgentProcess, assert_gapless_without_duplicates, naps

BOSS, ALICE, BOB = "boss", "alice", "bob"
NO_SESSION = {"Authorization": ""}


@pytest.fixture
def jp_server_config(tmp_path):
    return {"ServerApp": {"jpserver_extensions": {"codefy_jupyter": True},
                          "identity_provider_class": "fake_identity.HeaderIdentityProvider",
                          "disable_check_xsrf": True,  # header identities carry no token
                          "tornado_settings": {HELLO_TIMEOUT_SETTING: 5.0}},
            "CodefyApp": {"data_dir": str(tmp_path / "codefy"), "shared_server": True, "admin_users": [BOSS]}}


@pytest.fixture
def server_token(jp_serverapp, http_server_client):
    return jp_serverapp.identity_provider.token


async def as_user(jp_fetch, user: str, *path: str, **kw: Any) -> tuple[int, Any]:
    return await call(jp_fetch, *path, headers={"X-Test-User": user}, **kw)


async def issue(jp_fetch, user: str, **body: Any) -> tuple[int, Any]:
    return await as_user(jp_fetch, user, "api", "workers", "enrollments", method="POST", body=body)


async def enroll_as(jp_fetch, user: str, name: str) -> str:
    """`user` issues a one-time token; an agent (no session) exchanges it under `name`."""
    code, issued = await issue(jp_fetch, user)
    assert code == 201, issued
    code, got = await call(jp_fetch, "api", "workers", "enroll", method="POST",
                           body={"token": issued["token"], "name": name}, headers=NO_SESSION)
    assert code == 201, got
    return got["worker_token"]


async def listing(jp_fetch, user: str) -> dict[str, dict[str, Any]]:
    code, body = await as_user(jp_fetch, user, "api", "workers")
    assert code == 200, body
    return {w["name"]: w for w in body["workers"]}


async def connect(jp_fetch, port: int, base: str, token: str, name: str, instance: str | None = None) -> RawAgent:
    """A raw agent with `token` (the server's, or a worker token), welcomed as `name[.instance]`."""
    code, nodes = await as_user(jp_fetch, BOSS, "api", "nodes")
    assert code == 200
    agent = await RawAgent.connect(port, base, token=token)
    await agent.send(wp.Hello(name=name, instance=instance, version=__version__, protocol_version=wp.PROTOCOL_VERSION,
                              catalog_hash=nodes["catalog"]["hash"], node_types=nodes["catalog"]["types"],
                              capabilities=["ack"], devices=[{"device": "cpu"}], platform="linux"))
    assert (await agent.expect(wp.Welcome)).name == (f"{name}.{instance}" if instance else name)
    return agent


def assert_refused(code: int, body: Any, worker: str | None, enrolled_by: str | None, action: str) -> None:
    assert code == 403, body
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "params"}
    assert body["error"]["code"] == "not_worker_owner"
    assert body["error"]["params"] == {"worker": worker, "enrolled_by": enrolled_by, "action": action}
    assert worker in body["error"]["message"]


# Who enrolled each worker of the matrix: a user, an admin, and nobody (the server's own token).
OWNERS = {"alice-box": ALICE, "boss-box": BOSS, "tok-box": None}


def allowed(user: str, worker: str) -> bool:
    return user == BOSS or OWNERS[worker] == user


async def test_every_worker_route_for_an_admin_the_owner_and_another_user(
        jp_fetch, jp_http_port, jp_base_url, server_token):
    await enroll_as(jp_fetch, ALICE, "alice-box")
    await enroll_as(jp_fetch, BOSS, "boss-box")
    tok_agent = await connect(jp_fetch, jp_http_port, jp_base_url, server_token, "tok-box")

    # Everyone reads the listing and one worker, and sees who enrolled each.
    for user in (BOSS, ALICE, BOB):
        workers = await listing(jp_fetch, user)
        assert {name: w["enrolled_by"] for name, w in workers.items()} == OWNERS
        for name, owner in OWNERS.items():
            code, one = await as_user(jp_fetch, user, "api", "workers", name)
            assert code == 200 and one["enrolled_by"] == owner

    # Drain, undrain and a re-issued token: admins for every worker, a user for their own only.
    for worker in OWNERS:
        for user in (BOB, ALICE, BOSS):
            for action in ("drain", "undrain"):
                before = (await listing(jp_fetch, BOSS))[worker]["draining"]
                code, body = await as_user(jp_fetch, user, "api", "workers", worker, action, method="POST")
                if allowed(user, worker):
                    assert code == 200 and body["draining"] is (action == "drain"), (user, worker, body)
                else:
                    assert_refused(code, body, worker, OWNERS[worker], action)
                    assert (await listing(jp_fetch, BOSS))[worker]["draining"] is before
            if worker == "tok-box":
                continue  # nothing enrolled it, so there is nothing to re-issue (404 for all)
            code, body = await issue(jp_fetch, user, worker=worker)
            if allowed(user, worker):
                assert code == 201 and body["worker"] == worker, body
            else:
                assert_refused(code, body, worker, OWNERS[worker], "reissue")

    # Anyone may issue a fresh token: the worker it enrolls is theirs.
    await enroll_as(jp_fetch, BOB, "bob-box")
    assert (await listing(jp_fetch, ALICE))["bob-box"]["enrolled_by"] == BOB
    # An admin re-keying alice's worker does not take it over.
    code, reissued = await issue(jp_fetch, BOSS, worker="alice-box")
    code, got = await call(jp_fetch, "api", "workers", "enroll", method="POST",
                           body={"token": reissued["token"], "name": "alice-box"}, headers=NO_SESSION)
    assert code == 201, got
    assert (await listing(jp_fetch, BOB))["alice-box"]["enrolled_by"] == ALICE

    # DELETE: refused to everyone but an admin and the owner, and then nothing changed.
    for worker in OWNERS:
        for user in (BOB, ALICE):
            if allowed(user, worker):
                continue
            code, body = await as_user(jp_fetch, user, "api", "workers", worker, method="DELETE")
            assert_refused(code, body, worker, OWNERS[worker], "remove")
    assert set(await listing(jp_fetch, BOSS)) == {*OWNERS, "bob-box"}
    assert (await listing(jp_fetch, BOSS))["tok-box"]["state"] == "connected"
    code, body = await as_user(jp_fetch, BOB, "api", "workers", "nobody", method="DELETE")
    assert code == 404 and body["error"]["code"] == "worker_not_found"

    code, _ = await as_user(jp_fetch, ALICE, "api", "workers", "alice-box", method="DELETE")
    assert code == 204
    code, _ = await as_user(jp_fetch, BOB, "api", "workers", "bob-box", method="DELETE")
    assert code == 204
    for worker in ("boss-box", "tok-box"):
        code, _ = await as_user(jp_fetch, BOSS, "api", "workers", worker, method="DELETE")
        assert code == 204
    assert await tok_agent.closed() == 4410
    assert await listing(jp_fetch, BOB) == {}


async def test_the_instances_of_a_users_worker_are_theirs_too(jp_fetch, jp_http_port, jp_base_url):
    token = await enroll_as(jp_fetch, ALICE, "alice-box")
    job = await connect(jp_fetch, jp_http_port, jp_base_url, token, "alice-box", instance="job1")
    assert (await listing(jp_fetch, BOB))["alice-box.job1"]["enrolled_by"] == ALICE
    for action in ("drain", "undrain"):
        code, body = await as_user(jp_fetch, BOB, "api", "workers", "alice-box.job1", action, method="POST")
        assert_refused(code, body, "alice-box.job1", ALICE, action)
        code, body = await as_user(jp_fetch, ALICE, "api", "workers", "alice-box.job1", action, method="POST")
        assert code == 200 and body["draining"] is (action == "drain")
    code, body = await as_user(jp_fetch, BOB, "api", "workers", "alice-box.job1", method="DELETE")
    assert_refused(code, body, "alice-box.job1", ALICE, "remove")
    assert (await listing(jp_fetch, BOB))["alice-box.job1"]["state"] == "connected"
    code, _ = await as_user(jp_fetch, ALICE, "api", "workers", "alice-box.job1", method="DELETE")
    assert code == 204
    assert await job.closed() == 4410


@pytest.mark.slow
async def test_another_user_cannot_remove_a_worker_and_so_cannot_fail_a_running_run(
        jp_fetch, tmp_path, jp_http_port, jp_base_url, server_token):
    code, issued = await issue(jp_fetch, ALICE)
    assert code == 201
    agent = AgentProcess(tmp_path, f"http://127.0.0.1:{jp_http_port}{jp_base_url}", name="alice-gpu",
                         token=issued["token"])
    try:
        deadline = asyncio.get_running_loop().time() + 120
        while (await listing(jp_fetch, BOB)).get("alice-gpu", {}).get("state") != "connected":
            assert agent.proc.poll() is None, f"the agent exited:\n{agent.output()}"
            assert asyncio.get_running_loop().time() < deadline, f"never connected:\n{agent.output()}"
            await asyncio.sleep(0.1)
        assert (await listing(jp_fetch, BOB))["alice-gpu"]["enrolled_by"] == ALICE

        # 10 s of naps: still on the worker when its listing is read below, however busy the machine.
        code, run = await as_user(jp_fetch, ALICE, "api", "runs", method="POST",
                                  body={"graph": naps(4, 2.5), "options": {"target": {"worker": "alice-gpu"}}})
        assert code == 201, run
        alice = {"X-Test-User": ALICE}
        await wait_status(jp_fetch, run["id"], {"running"}, headers=alice, timeout=120)

        for action, method in (("", "DELETE"), ("drain", "POST")):
            path = ("api", "workers", "alice-gpu", action) if action else ("api", "workers", "alice-gpu")
            code, body = await as_user(jp_fetch, BOB, *path, method=method)
            assert_refused(code, body, "alice-gpu", ALICE, action or "remove")
        worker = (await listing(jp_fetch, BOB))["alice-gpu"]
        assert worker["state"] == "connected" and worker["runs"] == [run["id"]]

        done = await wait_status(jp_fetch, run["id"], {"succeeded", "failed", "cancelled", "interrupted"},
                                 headers=alice, timeout=120)
        assert done["status"] == "succeeded", done
        events = await events_of(jp_fetch, ALICE, run["id"])
        assert_gapless_without_duplicates(events)
        assert events[-1]["type"] == "execution_complete"
        assert agent.proc.poll() is None  # still connected: nobody removed it

        # Its owner may remove it; the agent is told so and stops.
        code, _ = await as_user(jp_fetch, ALICE, "api", "workers", "alice-gpu", method="DELETE")
        assert code == 204
        assert "alice-gpu" not in await listing(jp_fetch, BOB)
    finally:
        agent.cleanup()


async def events_of(jp_fetch, user: str, run_id: str) -> list[dict[str, Any]]:
    events, cursor = [], 0
    while True:
        code, page = await as_user(jp_fetch, user, "api", "runs", run_id, "events", cursor=cursor)
        assert code == 200
        events += page["events"]
        cursor = page["cursor"]
        if not page["more"]:
            return events


class TestSingleUserServer:
    """One person's server (token login): they are the admin; workers record no enroller."""

    @pytest.fixture
    def jp_server_config(self, tmp_path):
        return {"ServerApp": {"jpserver_extensions": {"codefy_jupyter": True}},
                "CodefyApp": {"data_dir": str(tmp_path / "codefy")}}

    async def test_the_token_holder_manages_every_worker(self, jp_fetch):
        code, issued = await call(jp_fetch, "api", "workers", "enrollments", method="POST")
        assert code == 201
        code, got = await call(jp_fetch, "api", "workers", "enroll", method="POST",
                               body={"token": issued["token"], "name": "box"}, headers=NO_SESSION)
        assert code == 201
        code, box = await call(jp_fetch, "api", "workers", "box")
        assert code == 200 and box["enrolled_by"] is None
        for action in ("drain", "undrain"):
            code, body = await call(jp_fetch, "api", "workers", "box", action, method="POST")
            assert code == 200 and body["draining"] is (action == "drain")
        code, body = await call(jp_fetch, "api", "workers", "enrollments", method="POST", body={"worker": "box"})
        assert code == 201 and body["worker"] == "box"
        code, _ = await call(jp_fetch, "api", "workers", "box", method="DELETE")
        assert code == 204
