"""Per-owner quotas on a real server shared by two users, each signing in with their own token
(fake_identity.UserTokenIdentityProvider, as on a Hub): alice's runs past her running cap wait with
`owner_quota` while bob's, submitted later to the same queue, start; a submit past the queued cap is
429 and writes nothing; a sweep or study that would pass it is refused whole; `codefy run` with
bob's token submits as bob, against bob's quota."""

from __future__ import annotations

import asyncio
import json
import os
import sys

import pytest
from test_server_runs import SMALL, call, sleepy, wait_status

ALICE = {"Authorization": "token user-alice"}
BOB = {"Authorization": "token user-bob"}


@pytest.fixture
def jp_server_config(tmp_path):
    return {"ServerApp": {"jpserver_extensions": {"codefy_jupyter": True},
                          "identity_provider_class": "fake_identity.UserTokenIdentityProvider"},
            # cpu admits 4 at once: only the quotas hold runs back here
            "CodefyApp": {"data_dir": str(tmp_path / "codefy"), "run_queue_max_concurrent_cpu": 4,
                          "run_quota_max_running": 1, "run_quota_max_queued": 2}}


async def submit(jp_fetch, who, graph, **options):
    return await call(jp_fetch, "api", "runs", method="POST", body={"graph": graph, "options": options},
                      headers=who)


async def listing(jp_fetch):
    code, page = await call(jp_fetch, "api", "runs", headers=ALICE)
    assert code == 200
    return page


async def stop_all(jp_fetch, *run_ids):
    """Each run stopped by its owner (on a shared server no one else may)."""
    for run_id in run_ids:
        code, run = await call(jp_fetch, "api", "runs", run_id, headers=ALICE)
        owner = {"Authorization": f"token user-{run['owner']}"}
        code, body = await call(jp_fetch, "api", "runs", run_id, "cancel", method="POST", headers=owner)
        assert code in (200, 409), body  # 409: it has finished meanwhile
    for run_id in run_ids:
        await wait_status(jp_fetch, run_id, {"cancelled", "succeeded"}, headers=ALICE)


async def test_each_owner_is_capped_alone_and_never_blocks_the_other(jp_fetch):
    code, a1 = await submit(jp_fetch, ALICE, sleepy(30))
    assert code == 201 and a1["owner"] == "alice" and a1["status"] == "running", a1
    code, a2 = await submit(jp_fetch, ALICE, sleepy(30))
    assert code == 201 and a2["status"] == "queued", a2
    assert a2["queue_reason"] == {"code": "owner_quota", "message": "waiting for alice's run quota (1 running of 1)",
                                  "params": {"owner": "alice", "running": 1, "limit": 1}}
    code, a3 = await submit(jp_fetch, ALICE, sleepy(0))
    assert code == 201 and a3["queue_reason"]["code"] == "owner_quota"

    # bob's run joins the same cpu FIFO behind alice's two waiting runs, and starts at once.
    code, b1 = await submit(jp_fetch, BOB, sleepy(30))
    assert code == 201 and b1["owner"] == "bob" and b1["status"] == "running", b1
    assert b1["queue_key"] == a2["queue_key"] == "cpu"

    # alice's third waiting run is refused, and nothing of it is written.
    before = await listing(jp_fetch)
    code, body = await submit(jp_fetch, ALICE, SMALL)
    assert code == 429, body
    assert body["error"]["code"] == "owner_queue_full"
    assert body["error"]["params"] == {"setting": "run_quota_max_queued", "owner": "alice", "limit": 2, "queued": 2,
                                       "adding": 1}
    after = await listing(jp_fetch)
    assert after["total"] == before["total"] and [r["id"] for r in after["runs"]] == [r["id"] for r in before["runs"]]
    # bob's room is his own: his second run is queued (capped by his running run), not refused.
    code, b2 = await submit(jp_fetch, BOB, SMALL)
    assert code == 201 and b2["queue_reason"]["params"] == {"owner": "bob", "running": 1, "limit": 1}, b2

    # alice's next run starts when her running one ends, ahead of nothing of bob's.
    code, _ = await call(jp_fetch, "api", "runs", a1["id"], "cancel", method="POST", headers=ALICE)
    assert code == 200
    started = await wait_status(jp_fetch, a2["id"], {"running"}, headers=ALICE)
    assert started.get("queue_reason") is None
    code, seen = await call(jp_fetch, "api", "runs", a3["id"], headers=BOB)
    assert seen["status"] == "queued" and seen["queue_reason"]["code"] == "owner_quota"
    code, seen = await call(jp_fetch, "api", "runs", b1["id"], headers=BOB)
    assert seen["status"] == "running"
    await stop_all(jp_fetch, a2["id"], a3["id"], b1["id"], b2["id"])
    # Room again once the waiting runs left: alice may submit.
    code, again = await submit(jp_fetch, ALICE, SMALL)
    assert code == 201, again
    await wait_status(jp_fetch, again["id"], {"succeeded"}, headers=ALICE)


async def test_a_sweep_or_study_past_the_queued_cap_is_refused_whole(jp_fetch):
    code, running = await submit(jp_fetch, ALICE, sleepy(30))
    assert code == 201 and running["status"] == "running"
    mean = {"nodes": [{"id": "nap", "type": "Sleep", "params": {"seconds": 0}},
                      {"id": "vals", "type": "List", "params": {"values": [1, 2]}}, {"id": "m", "type": "Mean"}],
            "edges": [{"source": "vals", "source_port": "values", "target": "nap", "target_port": "value"},
                      {"source": "nap", "source_port": "value", "target": "m", "target_port": "values"}]}
    sweep = {"base_graph": mean, "name": "three",
             "sweep_spec": {"params": [{"node_id": "nap", "param": "seconds", "values": [0, 0.01, 0.02]}]},
             "objective": {"metric": "mean", "direction": "minimize"}}
    before = await listing(jp_fetch)
    code, body = await call(jp_fetch, "api", "sweeps", method="POST", body=sweep, headers=ALICE)
    assert code == 429 and body["error"]["code"] == "owner_queue_full", body
    assert body["error"]["params"]["adding"] == 3 and body["error"]["params"]["queued"] == 0
    study = {"name": "wide", "objective": {"node_id": "m", "metric": "mean", "direction": "minimize"},
             "base_graph": mean, "variants": [{"label": "a", "ops": []}, {"label": "b", "ops": []}],
             "repetitions": 2, "budget": {"max_parallel_runs": 3}}
    code, body = await call(jp_fetch, "api", "studies", method="POST", body=study, headers=ALICE)
    assert code == 429 and body["error"]["params"]["adding"] == 3, body
    for path in ("sweeps", "studies"):
        code, page = await call(jp_fetch, "api", path, headers=ALICE)
        assert code == 200 and page[path] == [], page
    assert (await listing(jp_fetch))["total"] == before["total"]

    # Two variants fit alice's two waiting places; they wait for her quota, and then her room is full.
    two = {**sweep, "name": "two",
           "sweep_spec": {"params": [{"node_id": "nap", "param": "seconds", "values": [0, 0.01]}]}}
    code, created = await call(jp_fetch, "api", "sweeps", method="POST", body=two, headers=ALICE)
    assert code == 201, created
    for variant in created["variants"]:
        code, child = await call(jp_fetch, "api", "runs", variant["run_id"], headers=ALICE)
        assert child["owner"] == "alice" and child["queue_reason"]["code"] == "owner_quota", child
    code, body = await submit(jp_fetch, ALICE, SMALL)
    assert code == 429, body
    code, theirs = await call(jp_fetch, "api", "sweeps", method="POST", body=two, headers=BOB)
    assert code == 201, theirs  # bob's room is untouched by alice's sweep
    await stop_all(jp_fetch, running["id"])
    for doc in (created, theirs):
        for variant in doc["variants"]:
            await wait_status(jp_fetch, variant["run_id"], {"succeeded"}, headers=ALICE)


async def test_codefy_run_with_bobs_token_is_bobs_and_counts_against_his_quota(jp_fetch, jp_http_port,
                                                                                jp_base_url, tmp_path):
    """What is enforceable from a terminal or kernel: the token. One that is bob's submits as bob."""
    code, b1 = await submit(jp_fetch, BOB, sleepy(30))
    assert code == 201 and b1["status"] == "running"
    graph = tmp_path / "small.json"
    graph.write_text(json.dumps(SMALL))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CODEFY_", "JUPYTER"))}
    env["HOME"] = str(tmp_path)
    url = f"http://localhost:{jp_http_port}{jp_base_url}"

    async def codefy_run(token):
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "codefy_jupyter.cli", "run", str(graph), "--json", "--detach", "--url", url,
            "--token", token, cwd=tmp_path, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        return proc.returncode, out.decode(), err.decode()

    rc, out, err = await codefy_run("user-bob")
    assert rc == 0, out + err
    mine = json.loads(out)
    assert mine["owner"] == "bob" and mine["status"] == "queued", mine
    assert mine["queue_reason"]["params"] == {"owner": "bob", "running": 1, "limit": 1}
    rc, out, err = await codefy_run("user-bob")
    assert rc == 0, out + err
    before = await listing(jp_fetch)
    rc, out, err = await codefy_run("user-bob")  # his third waiting run: refused, nothing written
    assert rc != 0, out
    assert json.loads(out)["error"]["code"] == "owner_queue_full", out
    assert (await listing(jp_fetch))["total"] == before["total"]
    rc, out, err = await codefy_run("user-alice")  # alice's quota is untouched
    assert rc == 0 and json.loads(out)["owner"] == "alice", out + err
    await stop_all(jp_fetch, b1["id"])
