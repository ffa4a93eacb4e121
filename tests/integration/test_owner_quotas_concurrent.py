"""The queued cap (`run_quota_max_queued`) under concurrent submits, on a real server: 50 mixed
submits at once (plain runs, sweeps of 3, studies) never leave the owner more than the cap queued,
read from GET runs while they arrive and while the studies' later children replace finished ones;
and a study whose next child finds no room holds it back (`study_waiting`) until a place frees,
then submits every repetition exactly once."""

from __future__ import annotations

import asyncio

import pytest
from test_server_runs import call, sleepy, wait_status

ALICE = {"Authorization": "token user-alice"}
CAP = 5


@pytest.fixture
def jp_server_config(tmp_path, request):
    codefy = {"data_dir": str(tmp_path / "codefy"), "run_queue_max_concurrent_cpu": 4, "run_quota_max_queued": CAP}
    codefy.update(getattr(request, "param", {}))
    return {"ServerApp": {"jpserver_extensions": {"codefy_jupyter": True},
                          "identity_provider_class": "fake_identity.UserTokenIdentityProvider"},
            "CodefyApp": codefy}


def settings(**values):
    return pytest.mark.parametrize("jp_server_config", [values], indirect=True,
                                   ids=[",".join(f"{k}={v}" for k, v in values.items())])


def mean(seconds):
    return {"nodes": [{"id": "nap", "type": "Sleep", "params": {"seconds": seconds}},
                      {"id": "vals", "type": "List", "params": {"values": [1, 2]}}, {"id": "m", "type": "Mean"}],
            "edges": [{"source": "vals", "source_port": "values", "target": "nap", "target_port": "value"},
                      {"source": "nap", "source_port": "value", "target": "m", "target_port": "values"}]}


def sweep_of_3(name):
    return {"base_graph": mean(0), "name": name,
            "sweep_spec": {"params": [{"node_id": "nap", "param": "seconds", "values": [0, 0.01, 0.02]}]},
            "objective": {"metric": "mean", "direction": "minimize"}}


def study(name, seconds, parallel, repetitions=2):
    return {"name": name, "objective": {"node_id": "m", "metric": "mean", "direction": "minimize"},
            "base_graph": mean(seconds), "variants": [{"label": "a", "ops": []}, {"label": "b", "ops": []}],
            "repetitions": repetitions, "budget": {"max_parallel_runs": parallel}}


async def queued_now(jp_fetch):
    code, page = await call(jp_fetch, "api", "runs", headers=ALICE, status="queued", limit=1)
    assert code == 200, page
    return page["total"]


async def all_runs(jp_fetch):
    out, offset = [], 0
    while True:
        code, page = await call(jp_fetch, "api", "runs", headers=ALICE, offset=offset, limit=50)
        assert code == 200
        out += page["runs"]
        offset += len(page["runs"])
        if not page["runs"] or offset >= page["total"]:
            return out


class Watch:
    """Reads GET runs over and over while the test runs; keeps the most runs seen queued."""

    def __init__(self, jp_fetch):
        self.jp_fetch, self.most, self.reads = jp_fetch, 0, 0
        self.task = asyncio.ensure_future(self._loop())

    async def _loop(self):
        while True:
            self.most = max(self.most, await queued_now(self.jp_fetch))
            self.reads += 1
            await asyncio.sleep(0.005)

    async def stop(self):
        self.task.cancel()
        try:
            await self.task
        except asyncio.CancelledError:
            pass
        self.most = max(self.most, await queued_now(self.jp_fetch))


async def until(predicate, timeout=60.0, what="condition"):
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = await predicate()
        if value:
            return value
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def study_doc(jp_fetch, study_id):
    code, doc = await call(jp_fetch, "api", "studies", study_id, headers=ALICE)
    assert code == 200, doc
    return doc


async def study_events(jp_fetch, study_id):
    code, page = await call(jp_fetch, "api", "studies", study_id, "events", headers=ALICE)
    assert code == 200, page
    return page["events"]


async def assert_exactly_once(jp_fetch, study_id, runs):
    """Every repetition has one attempt, run once: a child run per attempt, none twice, none lost."""
    doc = await study_doc(jp_fetch, study_id)
    attempts = [a for v in doc["variants"] for a in v["attempts"]]
    assert len(attempts) == 4 and all(a["status"] == "succeeded" for a in attempts), attempts
    children = [r for r in runs if r.get("study_id") == study_id]
    assert sorted(r["id"] for r in children) == sorted(a["run_id"] for a in attempts)
    assert sorted(r["study_attempt_id"] for r in children) == sorted(a["id"] for a in attempts)


@settings(run_quota_max_running=1)
async def test_fifty_concurrent_mixed_submits_never_leave_more_than_the_cap_queued(jp_fetch):
    code, blocker = await call(jp_fetch, "api", "runs", method="POST", body={"graph": sleepy(60)}, headers=ALICE)
    assert code == 201 and blocker["status"] == "running", blocker  # the rest wait for alice's running cap
    watch = Watch(jp_fetch)

    def submit(i):
        kind = (i + 2) % 3  # a study first, then a sweep, then a plain run, and again
        if kind == 0:
            return call(jp_fetch, "api", "runs", method="POST", body={"graph": sleepy(0.01)}, headers=ALICE)
        if kind == 1:
            return call(jp_fetch, "api", "sweeps", method="POST", body=sweep_of_3(f"s{i}"), headers=ALICE)
        return call(jp_fetch, "api", "studies", method="POST", body=study(f"t{i}", 0.01, 2), headers=ALICE)

    answers = await asyncio.gather(*(submit(i) for i in range(50)))
    admitted = 0
    studies = []
    for i, (code, body) in enumerate(answers):
        if code == 429:
            params = body["error"]["params"]
            assert body["error"]["code"] == "owner_queue_full" and params["limit"] == CAP
            # refused only when what was already counted and this submit's runs do not fit together
            assert params["queued"] + params["adding"] > CAP, params
            continue
        assert code in (200, 201), body
        admitted += {0: 1, 1: 3, 2: 2}[(i + 2) % 3]
        if (i + 2) % 3 == 2:
            studies.append(body["id"])
    assert await queued_now(jp_fetch) == admitted <= CAP  # every admitted child is queued; no more
    assert admitted > CAP - 3  # a plain submit would fit in anything left: the room was used, not lost

    # Let them run: the queue drains one at a time while more plain submits and more studies race
    # the studies' later children for the places that free; the cap holds throughout.
    code, _ = await call(jp_fetch, "api", "runs", blocker["id"], "cancel", method="POST", headers=ALICE)
    assert code == 200

    async def plain_runs():
        for _ in range(30):
            code, body = await call(jp_fetch, "api", "runs", method="POST", body={"graph": sleepy(0.01)},
                                    headers=ALICE)
            assert code in (201, 429), body
            await asyncio.sleep(0.02)

    async def another_study(n):
        while True:  # refused (429) while alice's room is full; admitted once it has two places
            code, body = await call(jp_fetch, "api", "studies", method="POST", body=study(f"late{n}", 0.01, 2),
                                    headers=ALICE)
            if code == 201:
                studies.append(body["id"])
                return
            assert code == 429 and body["error"]["code"] == "owner_queue_full", body
            await asyncio.sleep(0.02)

    await asyncio.wait_for(asyncio.gather(plain_runs(), *(another_study(n) for n in range(4))), 120)

    async def settled():
        docs = [await study_doc(jp_fetch, s) for s in studies]
        return all(d["status"] not in ("queued", "running") for d in docs) and await queued_now(jp_fetch) == 0

    await until(settled, what="the studies to finish and the queue to drain")
    await watch.stop()
    assert watch.reads > 10 and watch.most <= CAP, watch.most
    runs = await all_runs(jp_fetch)
    for study_id in studies:
        assert (await study_doc(jp_fetch, study_id))["status"] == "succeeded"
        await assert_exactly_once(jp_fetch, study_id, runs)


@settings(worker_one_shot_queue_timeout_s=3600)
async def test_a_studys_next_child_waits_for_room_under_the_cap_then_runs_once(jp_fetch):
    # Runs for the one-shot pool wait (no such worker here) and hold places of alice's cap.
    async def park():
        code, run = await call(jp_fetch, "api", "runs", method="POST",
                               body={"graph": sleepy(0), "options": {"target": {"pool": "one-shot"}}}, headers=ALICE)
        assert code == 201 and run["status"] == "queued", run
        return run["id"]

    parked = [await park() for _ in range(CAP - 1)]
    code, created = await call(jp_fetch, "api", "studies", method="POST", body=study("held", 0.3, 1), headers=ALICE)
    assert code == 201, created
    study_id = created["id"]

    async def a_child_running():
        runs = await all_runs(jp_fetch)
        return any(r.get("study_id") == study_id and r["status"] == "running" for r in runs)

    await until(a_child_running, what="the study's first child to run")
    parked.append(await park())  # alice's cap is full now: the study's next child has no place

    async def waiting_event():
        return [e for e in await study_events(jp_fetch, study_id) if e["type"] == "study_waiting"]

    held = (await until(waiting_event, what="study_waiting"))[0]
    reason = held["payload"]["reason"]
    assert reason["code"] == "owner_queue_full", reason
    assert reason["params"]["limit"] == CAP and reason["params"]["owner"] == "alice"
    doc = await study_doc(jp_fetch, study_id)
    assert doc["status"] == "running"
    statuses = [a["status"] for v in doc["variants"] for a in v["attempts"]]
    assert "pending" in statuses and not {"submitting", "queued", "running"} & set(statuses), statuses
    assert await queued_now(jp_fetch) == CAP

    # A place frees (a parked run is cancelled): the study goes on, one child at a time, to the end.
    code, _ = await call(jp_fetch, "api", "runs", parked.pop(), "cancel", method="POST", headers=ALICE)
    assert code == 200

    async def finished():
        return (await study_doc(jp_fetch, study_id))["status"] == "succeeded"

    await until(finished, what="the study to finish")
    assert await queued_now(jp_fetch) == CAP - 1
    await assert_exactly_once(jp_fetch, study_id, await all_runs(jp_fetch))
    assert len(await waiting_event()) == 1  # one hold, one event
    for run_id in parked:
        code, _ = await call(jp_fetch, "api", "runs", run_id, "cancel", method="POST", headers=ALICE)
        assert code == 200
        await wait_status(jp_fetch, run_id, {"cancelled"}, headers=ALICE)
