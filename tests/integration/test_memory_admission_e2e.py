"""Memory admission on a real agent (`codefy agent start --share-memory cuda:0`) with a declared
inventory: one fake 8 GiB card whose free memory the test sets in the inventory file, which the
agent reads again for every heartbeat (the card is the edge; everything else is real)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from test_server_runs import SMALL, call, sleepy, wait_status
from test_worker_placement_e2e import (  # noqa: F401  (fixtures)
    agents, control, jp_server_config, post_run, queued, server, server_token, until_reason,
)
from test_workers_e2e import until_connected

pytestmark = pytest.mark.slow

CARD = {"key": "cuda:0", "name": "Shared", "uuid": "GPU-shared-0", "memory_total_mib": 8192, "memory_free_mib": 8192}


def write_card(path: Path, free_mib: int) -> None:
    path.write_text(json.dumps({"devices": [{**CARD, "memory_free_mib": free_mib}]}))


async def until_card_free(jp_fetch, free_mib: int, timeout: float = 90.0) -> None:
    """Until the scheduler's ledger of box's card has a heartbeat's `free_mib` (not a fixed number of
    heartbeat periods: a busy machine's agent may beat late)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        _, listing = await call(jp_fetch, "api", "workers")
        card = next((d for w in listing["workers"] if w["name"] == "box" for d in w["devices"]
                     if d["device"] == "cuda:0"), None)
        if card is not None and (card.get("memory") or {}).get("free_mib") == free_mib:
            return
        assert asyncio.get_running_loop().time() < deadline, card
        await asyncio.sleep(0.1)


async def running(jp_fetch, run_id: str) -> dict[str, Any]:
    return await wait_status(jp_fetch, run_id, {"running"}, timeout=120)


@server(worker_heartbeat_s=2, execution_cuda_context_mib=512)  # 2 s: a busy agent beating late stays connected
async def test_runs_share_a_card_by_budget_and_wait_with_reasons(jp_fetch, agents, tmp_path):
    # A budget applies to a worker's card only.
    code, body = await post_run(jp_fetch, SMALL, target={"memory_gib": 2})
    assert code == 400 and body["error"]["code"] == "memory_budget_local", body
    assert body["error"]["params"]["field"] == "options.target.memory_gib"

    inventory = tmp_path / "shared-card.json"
    write_card(inventory, 8192)
    box = agents("--share-memory", "cuda:0", name="box", env={"CODEFY_DEVICE_INVENTORY": str(inventory)})
    worker = await until_connected(jp_fetch, box)
    card = next(d for d in worker["devices"] if d["device"] == "cuda:0")
    assert card.get("share") == "memory", worker["devices"]

    # Larger than the card can ever hold (budget + CUDA context): refused at once.
    code, body = await post_run(jp_fetch, SMALL, device="cuda:0", target={"worker": "box", "memory_gib": 8})
    assert code == 400 and body["error"]["code"] == "memory_over_card", body

    # Two 3 GiB runs share the card (3.5 GiB each with the context); a third waits for memory. They
    # hold the card until cancelled below, not for a time a busy machine could outlast.
    target = {"worker": "box", "memory_gib": 3}
    a = await queued(jp_fetch, sleepy(300), device="cuda:0", target=target)
    b = await queued(jp_fetch, sleepy(300), device="cuda:0", target=target)
    await running(jp_fetch, a["id"])
    await running(jp_fetch, b["id"])
    _, listing = await call(jp_fetch, "api", "workers")
    box_card = next(d for w in listing["workers"] if w["name"] == "box" for d in w["devices"] if d["device"] == "cuda:0")
    assert box_card["memory"]["runs"] == 2 and box_card["memory"]["committed_mib"] == 2 * (3 * 1024 + 512)
    # c runs long enough for the reason of the run behind it to be read while it holds the card.
    c = await queued(jp_fetch, sleepy(10), device="cuda:0", target={**target, "memory_source": "estimate"})
    reason = await until_reason(jp_fetch, c["id"], "memory_wait")
    assert reason["params"]["need_mib"] == 3 * 1024 + 512 and reason["params"]["device"] == "box/cuda:0"
    _, row = await call(jp_fetch, "api", "runs", c["id"])
    assert row["options"]["target"]["memory_gib"] == 3 and row["options"]["target"]["memory_source"] == "estimate"

    # wait: false refuses instead of waiting.
    code, body = await post_run(jp_fetch, SMALL, device="cuda:0", target={**target, "wait": False})
    assert code == 409 and body["error"]["code"] == "memory_unavailable", body
    why = body["error"]["params"]["reason"]  # behind c, which waits for memory
    ahead = why["params"].pop("ahead")  # c's own reason, whose free memory is the card's last report
    assert why["code"] == "behind_waiting_run" and why["params"] == {"run_id": c["id"], "name": None,
                                                                      "queue": "box/cuda:0", "code": "memory_wait"}
    assert ahead["code"] == "memory_wait" and ahead["params"]["need_mib"] == 3 * 1024 + 512
    # Who is ahead (unnamed: its id as every surface shows it) and why, in GiB.
    assert why["message"].startswith(f"behind run {c['id'][:12]} in the box/cuda:0 queue, which is held up: "
                                     "waiting for memory on box/cuda:0: "), why
    assert why["message"].endswith(" GiB free of 3.5 GiB needed (budget and CUDA context)"), why

    # A run without a budget on the shared card takes it whole: it waits for the card to empty.
    whole = await queued(jp_fetch, SMALL, device="cuda:0", target={"worker": "box"})
    assert (await until_reason(jp_fetch, whole["id"], "behind_waiting_run"))["params"]["code"] == "memory_wait"

    for held in (a, b):
        code, _ = await call(jp_fetch, "api", "runs", held["id"], "cancel", method="POST")
        assert code == 200
    await running(jp_fetch, c["id"])
    reason = await until_reason(jp_fetch, whole["id"], "memory_no_budget")
    assert reason["params"]["whole"] is True
    done = await wait_status(jp_fetch, c["id"], {"succeeded", "failed"}, timeout=120)
    assert done["status"] == "succeeded", done
    done = await wait_status(jp_fetch, whole["id"], {"succeeded", "failed"}, timeout=120)
    assert done["status"] == "succeeded", done
    # The run's own process reports its peak (the CPU's resident set here), exact.
    peak = done["execution_facts"]["peak_memory"]
    assert peak["cpu"]["exact"] is True and peak["cpu"]["bytes"] > 0

    # Something else takes most of the card: the next heartbeat holds budgeted runs back.
    write_card(inventory, 1024)
    await until_card_free(jp_fetch, 1024)
    d = await queued(jp_fetch, SMALL, device="cuda:0", target={"worker": "box", "memory_gib": 1})
    reason = await until_reason(jp_fetch, d["id"], "memory_wait")
    assert reason["params"]["free_mib"] == 1024
    write_card(inventory, 8192)
    done = await wait_status(jp_fetch, d["id"], {"succeeded", "failed"}, timeout=120)
    assert done["status"] == "succeeded", done


@server()
async def test_a_run_here_reports_its_peak_as_not_exact(jp_fetch):
    run = await queued(jp_fetch, SMALL)
    done = await wait_status(jp_fetch, run["id"], {"succeeded", "failed"}, timeout=120)
    assert done["status"] == "succeeded", done
    facts = done["execution_facts"]
    # Runs here share the control plane's process: its peak is an upper bound, not the run's own.
    assert facts["peak_memory"]["cpu"]["exact"] is False and facts["peak_memory"]["cpu"]["bytes"] > 0
    assert "cpu_threads" in facts  # the facts written at its start are kept
