"""Suggested budgets (seed #794) on a real server and a real agent with a declared 8 GiB card shared
by memory: POST memory-estimate answers the static estimate, a run that accepted a lower estimate is
raised to the server's at submit and waits with budget_raised, and refusals write nothing."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from test_memory_admission_e2e import running, write_card
from test_server_runs import SMALL, call, sleepy, wait_status
from test_worker_placement_e2e import (  # noqa: F401  (fixtures)
    agents, control, jp_server_config, post_run, queued, server, server_token, until_reason,
)
from test_workers_e2e import until_connected

pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def wide_mlp(hidden: int) -> dict:
    """The example training graph with a wide model: an estimate of a few GiB. It never runs here."""
    graph = copy.deepcopy(json.loads((EXAMPLES / "train_mlp.json").read_text()))
    for node in graph["nodes"]:
        if node["id"] == "model":
            node["params"]["hidden"] = hidden
    return graph


async def run_count(jp_fetch) -> int:
    _, page = await call(jp_fetch, "api", "runs")
    return page["total"]


@server()
async def test_the_api_answers_the_estimate_and_refuses_what_it_cannot_read(jp_fetch):
    code, est = await call(jp_fetch, "api", "memory-estimate", method="POST",
                           body={"graph": json.loads((EXAMPLES / "train_mlp.json").read_text())})
    assert code == 200, est
    assert est["parameters"] == 20 * 64 + 64 + 64 * 64 + 64 + 64 * 3 + 3
    assert est["memory_gib"] == 0.25 and est["unknown"] == []
    assert set(est["parts"]) == {"parameters", "gradients", "optimizer_state", "activations", "data"}

    code, wide = await call(jp_fetch, "api", "memory-estimate", method="POST", body={"graph": wide_mlp(8000)})
    assert code == 200 and wide["memory_gib"] > 1, wide

    before = await run_count(jp_fetch)
    code, body = await call(jp_fetch, "api", "memory-estimate", method="POST",
                            body={"graph": {"nodes": [{"id": "x", "type": "NoSuchNode"}], "edges": []}})
    assert code == 400 and body["error"]["code"] == "invalid_graph", body
    code, body = await call(jp_fetch, "api", "memory-estimate", method="POST", body={"graph": SMALL, "devices": "cuda:0"})
    assert code == 422 and body["error"]["params"]["field"] == "devices", body
    code, body = await call(jp_fetch, "api", "memory-estimate", method="POST", body={"graph": SMALL, "extra": 1})
    assert code == 422, body
    assert await run_count(jp_fetch) == before  # an estimate writes no run


@server(worker_heartbeat_s=2, execution_cuda_context_mib=512)  # 2 s: a busy agent beating late stays connected
async def test_an_accepted_estimate_below_the_servers_is_raised_and_waits_with_budget_raised(jp_fetch, agents, tmp_path):
    inventory = tmp_path / "shared-card.json"
    write_card(inventory, 8192)
    box = agents("--share-memory", "cuda:0", name="box", env={"CODEFY_DEVICE_INVENTORY": str(inventory)})
    await until_connected(jp_fetch, box)
    graph = wide_mlp(8000)
    _, est = await call(jp_fetch, "api", "memory-estimate", method="POST", body={"graph": graph})
    figure = est["memory_gib"]
    assert 1 < figure < 3, est

    # 6 GiB runs on the card: 1536 MiB are left, room for 0.5 GiB + context but not for the estimate.
    hold = await queued(jp_fetch, sleepy(30), device="cuda:0", target={"worker": "box", "memory_gib": 6})
    await running(jp_fetch, hold["id"])

    # wait: false with the same stale estimate is refused with the reason it would have had; nothing is written.
    before = (await call(jp_fetch, "api", "runs"))[1]["total"]
    code, body = await post_run(jp_fetch, graph, device="cuda:0",
                                target={"worker": "box", "memory_gib": 0.5, "memory_source": "estimate", "wait": False})
    assert code == 409 and body["error"]["params"]["reason"]["code"] == "budget_raised", body
    assert (await call(jp_fetch, "api", "runs"))[1]["total"] == before

    run = await queued(jp_fetch, graph, device="cuda:0",
                       target={"worker": "box", "memory_gib": 0.5, "memory_source": "estimate"})
    target = run["options"]["target"]
    assert target["memory_gib"] == figure and target["estimate_raised_from"] == 0.5
    assert target["memory_source"] == "estimate"
    reason = await until_reason(jp_fetch, run["id"], "budget_raised")
    assert reason["params"]["estimate_gib"] == 0.5 and reason["params"]["memory_gib"] == figure
    assert reason["params"]["need_mib"] == int(figure * 1024) + 512 and reason["params"]["free_mib"] == 1536

    # An estimate at or above the server's stands as given; a declared budget is never raised.
    small = await queued(jp_fetch, SMALL, device="cuda:0",
                         target={"worker": "box", "memory_gib": 1, "memory_source": "estimate"})
    assert small["options"]["target"]["memory_gib"] == 1 and "estimate_raised_from" not in small["options"]["target"]
    declared = await queued(jp_fetch, graph, device="cuda:0", target={"worker": "box", "memory_gib": 0.5})
    assert declared["options"]["target"]["memory_gib"] == 0.5

    # Those behind the waiting head first, so none of them starts the wide graph.
    for rid in (declared["id"], small["id"], run["id"], hold["id"]):
        await call(jp_fetch, "api", "runs", rid, "cancel", method="POST")
    for rid in (run["id"], declared["id"]):
        done = await wait_status(jp_fetch, rid, {"cancelled", "succeeded", "failed"}, timeout=120)
        assert done["status"] == "cancelled", done
