"""The control plane's Prometheus metrics, scraped from a real jupyter-server's own `/metrics` over
HTTP while runs queue, start, fail and end, with a real `codefy agent start` over loopback: the
values move as the runs do. Every figure is read as a change from a scrape taken at the start of
the test, and waited for with a deadline, never timed."""

from __future__ import annotations

import asyncio
import json
import re
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from tornado.httpclient import AsyncHTTPClient, HTTPClientError

from test_server_runs import SMALL, call, edge, sleepy, wait_status
from test_workers_e2e import agents, control, server_token, until_connected  # noqa: F401  (fixtures)

Samples = dict[tuple[str, frozenset], float]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def jp_server_config(tmp_path):
    # One run at a time on the cpu queue: the next ones wait in its FIFO.
    return {"ServerApp": {"jpserver_extensions": {"codefy_jupyter": True}},
            "CodefyApp": {"data_dir": str(tmp_path / "codefy"), "run_queue_max_concurrent_cpu": 1}}


async def first_scrape(jp_fetch) -> Samples:
    """A scrape once the run queue is up (a real server starts it with itself; pytest-jupyter's,
    on the first request)."""
    code, _ = await call(jp_fetch, "api", "runs")
    assert code == 200
    return await scrape(jp_fetch)


async def scrape(jp_fetch) -> Samples:
    response = await jp_fetch("metrics", method="GET")
    assert response.code == 200
    assert response.headers["Content-Type"].startswith("text/plain")
    samples: Samples = {}
    for family in text_string_to_metric_families(response.body.decode()):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sum of `name`'s samples whose labels include `labels` (0 when there are none)."""
    want = set(labels.items())
    return sum(v for (n, have), v in samples.items() if n == name and want <= have)


def bucket(samples: Samples, name: str, le: str, **labels: str) -> float:
    return value(samples, f"{name}_bucket", le=le, **labels)


async def until(jp_fetch, test, what: str, timeout: float = 120.0) -> Samples:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        samples = await scrape(jp_fetch)
        if test(samples):
            return samples
        assert asyncio.get_running_loop().time() < deadline, f"{what}; last scrape:\n" + "\n".join(
            f"{n}{dict(sorted(lbl))} {v}" for (n, lbl), v in sorted(samples.items(), key=str) if n.startswith("codefy_"))
        await asyncio.sleep(0.1)


async def submit(jp_fetch, graph: dict[str, Any], **options: Any) -> dict[str, Any]:
    code, run = await call(jp_fetch, "api", "runs", method="POST", body={"graph": graph, "options": options})
    assert code == 201, run
    return run


DIVIDE_BY_ZERO = {"nodes": [{"id": "a", "type": "Float", "params": {"value": 1}},
                            {"id": "z", "type": "Float", "params": {"value": 0}},
                            {"id": "d", "type": "Divide", "params": {}}],
                  "edges": [edge("a", "value", "d", "a"), edge("z", "value", "d", "b")]}


async def test_queue_depth_counters_and_histograms_follow_the_runs(jp_fetch):
    before = await first_scrape(jp_fetch)
    assert value(before, "codefy_queue_slots", queue="cpu") == 1
    long = await submit(jp_fetch, sleepy(300))
    await wait_status(jp_fetch, long["id"], {"running"})
    behind = [await submit(jp_fetch, SMALL) for _ in range(2)]
    # The two wait behind the one slot: the queue's depth and the runs gauge say so.
    seen = await until(jp_fetch, lambda s: value(s, "codefy_queue_depth", queue="cpu") == 2
                       and value(s, "codefy_runs", status="queued", queue="cpu") == 2
                       and value(s, "codefy_runs", status="running", queue="cpu") == 1, "the queue never showed 2 waiting")
    assert value(seen, "codefy_queue_slots_in_use", queue="cpu") == 1
    assert value(seen, "codefy_runs_started_total", queue="cpu") == value(before, "codefy_runs_started_total",
                                                                           queue="cpu") + 1

    code, _ = await call(jp_fetch, "api", "runs", long["id"], "cancel", method="POST")
    assert code == 200
    for run in behind:
        assert (await wait_status(jp_fetch, run["id"], {"succeeded", "failed"}))["status"] == "succeeded"
    failing = await submit(jp_fetch, DIVIDE_BY_ZERO)
    failed = await wait_status(jp_fetch, failing["id"], {"succeeded", "failed"})
    assert failed["status"] == "failed"
    reason = failed["error"]["code"]

    def moved(name: str, by: float, **labels: str):
        return lambda s: value(s, name, **labels) - value(before, name, **labels) == by

    after = await until(jp_fetch, lambda s: value(s, "codefy_queue_depth", queue="cpu") == 0
                        and moved("codefy_runs_finished_total", 1, status="failed", reason=reason)(s),
                        "the failed run was never counted")
    checks = {
        "started": moved("codefy_runs_started_total", 4, queue="cpu"),
        "succeeded": moved("codefy_runs_finished_total", 2, status="succeeded", reason="completed"),
        "cancelled": moved("codefy_runs_finished_total", 1, status="cancelled", reason="cancelled"),
        "durations of the succeeded": moved("codefy_run_duration_seconds_count", 2, status="succeeded"),
        "durations of the cancelled": moved("codefy_run_duration_seconds_count", 1, status="cancelled"),
        "durations of the failed": moved("codefy_run_duration_seconds_count", 1, status="failed"),
        "waits": moved("codefy_run_queue_wait_seconds_count", 4, queue="cpu"),
        "nothing queued": lambda s: value(s, "codefy_runs", status="queued") == 0,
        "nothing running": lambda s: value(s, "codefy_runs", status="running") == 0,
    }
    assert {what: check(after) for what, check in checks.items()} == dict.fromkeys(checks, True)
    # A histogram's buckets are cumulative and end at +Inf = its count.
    name = "codefy_run_queue_wait_seconds"
    assert bucket(after, name, "+Inf", queue="cpu") == value(after, f"{name}_count", queue="cpu")
    assert bucket(after, name, "1.0", queue="cpu") <= bucket(after, name, "86400.0", queue="cpu")
    # Each of the runs' events went through the log's writer: its lag and the store's commits grew.
    assert value(after, "codefy_event_log_lag_seconds_count") > value(before, "codefy_event_log_lag_seconds_count")
    assert value(after, "codefy_store_commit_seconds_count") > value(before, "codefy_store_commit_seconds_count")
    assert value(after, "codefy_store_commit_seconds_sum") >= 0


@pytest.mark.slow
async def test_a_worker_agent_shows_in_the_worker_gauges_and_its_frames_are_counted(jp_fetch, agents):
    before = await first_scrape(jp_fetch)
    assert value(before, "codefy_workers", state="connected") == 0
    agent = agents()
    await until_connected(jp_fetch, agent)
    seen = await until(jp_fetch, lambda s: value(s, "codefy_workers", state="connected") == 1,
                       "the worker never showed connected")
    # It offers cpu and the two declared cards (test_workers_e2e's inventory), none in use yet.
    assert value(seen, "codefy_worker_slots", state="connected", kind="cuda") == 2
    assert value(seen, "codefy_worker_slots", state="connected", kind="cpu") >= 1
    assert value(seen, "codefy_worker_slots_in_use", state="connected") == 0

    nap = await submit(jp_fetch, sleepy(300), target={"worker": "box", "devices": ["cuda:1"]})
    busy = await until(jp_fetch, lambda s: value(s, "codefy_worker_slots_in_use", state="connected", kind="cuda") == 1
                       and value(s, "codefy_runs", status="running", queue="box/cuda:1") == 1,
                       "the worker's card never showed in use")
    assert value(busy, "codefy_runs_started_total", queue="box/cuda:1") == 1
    code, _ = await call(jp_fetch, "api", "runs", nap["id"], "cancel", method="POST")
    assert code == 200
    assert (await wait_status(jp_fetch, nap["id"], {"cancelled", "failed", "succeeded"}))["status"] == "cancelled"
    run = await submit(jp_fetch, SMALL, target={"worker": "box"})
    assert (await wait_status(jp_fetch, run["id"], {"succeeded", "failed"}))["status"] == "succeeded"
    after = await until(jp_fetch, lambda s: value(s, "codefy_worker_slots_in_use", state="connected") == 0,
                        "the worker's slots were never given back")
    received = value(after, "codefy_worker_frames_received_total") - value(before, "codefy_worker_frames_received_total")
    # Both runs sent at least their run_started, node events and run_finished.
    assert received >= 6
    assert value(after, "codefy_worker_frames_received_total", type="run_finished") - value(
        before, "codefy_worker_frames_received_total", type="run_finished") == 2
    assert value(after, "codefy_runs_finished_total", status="succeeded", reason="completed") - value(
        before, "codefy_runs_finished_total", status="succeeded", reason="completed") == 1
    # No reconnect happened: nothing was replayed.
    assert value(after, "codefy_worker_frames_replayed_total") == value(before, "codefy_worker_frames_replayed_total")


async def test_sweeps_are_counted_by_state(jp_fetch):
    before = await first_scrape(jp_fetch)
    sweep = {"base_graph": SMALL, "name": "factors", "objective": {"metric": "score", "direction": "minimize"},
             "sweep_spec": {"params": [{"node_id": "s", "param": "factor", "values": [1.0, 2.0]}]}}
    code, made = await call(jp_fetch, "api", "sweeps", method="POST", body=sweep)
    assert code == 201, made
    counted = await until(jp_fetch, lambda s: value(s, "codefy_sweeps") == value(before, "codefy_sweeps") + 1,
                          "the sweep was never counted")
    states = {dict(labels)["state"] for (name, labels) in counted if name == "codefy_sweeps"}
    assert states <= {"running", "cancelling", "finished", "failed"} and states, states
    assert value(counted, "codefy_studies") == value(before, "codefy_studies")


async def test_metrics_need_the_token_like_the_rest_of_the_server(jp_http_port, jp_base_url, jp_fetch):
    # jupyter-server's ServerApp.authenticate_prometheus (on by default): a scrape without the token is refused.
    await first_scrape(jp_fetch)
    with pytest.raises(HTTPClientError) as refused:
        await AsyncHTTPClient().fetch(f"http://127.0.0.1:{jp_http_port}{jp_base_url}metrics")
    assert refused.value.code == 403


async def test_every_exported_metric_is_documented_and_the_dashboard_uses_only_those(jp_fetch):
    await first_scrape(jp_fetch)
    response = await jp_fetch("metrics", method="GET")
    exported = {}
    for family in text_string_to_metric_families(response.body.decode()):
        if family.name.startswith("codefy_"):
            exported[family.name + ("_total" if family.type == "counter" else "")] = family.type
    page = (ROOT / "docs" / "reference" / "metrics.md").read_text()
    documented = dict(re.findall(r"^\| `(codefy_[a-z_]+)` \| (gauge|counter|histogram) \|", page, re.M))
    assert documented == exported
    board = json.loads((ROOT / "deploy" / "grafana" / "codefy.json").read_text())
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    used = {re.sub(r"_(bucket|sum|count)$", "", name) for e in exprs for name in re.findall(r"codefy_[a-z_]+", e)}
    assert used and used <= set(exported), used - set(exported)
    assert used == set(exported)  # every metric has a panel


@pytest.mark.slow
def test_codefy_start_serves_the_same_metrics_with_its_token(tmp_path, request):
    # `codefy start` is a headless jupyter-server: /metrics there, with the token in <data_dir>/token.
    from test_headless import Servers, api, submit as submit_headless, wait_status as wait_headless

    servers = Servers(tmp_path)
    request.addfinalizer(servers.kill_leftovers)
    state = servers.start()
    try:
        url = f"{state['url']}metrics"

        def fetch(token: str | None) -> tuple[int, Samples]:
            req = urllib.request.Request(url, headers={"Authorization": f"token {token}"} if token else {})
            try:
                with urllib.request.urlopen(req, timeout=15) as response:
                    text = response.read().decode()
            except urllib.error.HTTPError as err:
                err.close()
                return err.code, {}
            return 200, {(s.name, frozenset(s.labels.items())): s.value
                         for f in text_string_to_metric_families(text) for s in f.samples}

        assert fetch(None)[0] == 403
        assert (servers.data_dir / "token").read_text().strip() == state["token"]
        run = submit_headless(state, SMALL, name="small")
        assert wait_headless(state, run["id"], {"succeeded", "failed"})["status"] == "succeeded"
        code, samples = fetch(state["token"])
        assert code == 200
        assert value(samples, "codefy_runs_finished_total", status="succeeded", reason="completed") == 1
        assert value(samples, "codefy_runs_started_total", queue="cpu") == 1
        assert value(samples, "codefy_queue_slots", queue="cpu") == 2  # the default cpu limit
        assert api(state, "GET", "runs")[0] == 200
    finally:
        assert servers.stop().returncode == 0
