"""Queues per device on a server whose GPUs are declared (a fake inventory: this machine has none).

The graphs use device-agnostic nodes, so a run 'on cuda:1' exercises the queue, not CUDA."""

from __future__ import annotations

import json

import pytest
from test_server_runs import call, sleepy, wait_status


@pytest.fixture
def jp_server_config(tmp_path):
    inventory = tmp_path / "devices.json"
    inventory.write_text(json.dumps({"devices": [{"key": "cuda:0", "uuid": "GPU-0"}, {"key": "cuda:1", "uuid": "GPU-1", "name": "Declared B"}]}))
    return {"ServerApp": {"jpserver_extensions": {"codefy_jupyter": True}},
            "CodefyApp": {"data_dir": str(tmp_path / "codefy"), "device_inventory": str(inventory)}}


async def submit(jp_fetch, graph, name=None, **options):
    body = {"graph": graph, "options": options, **({"name": name} if name else {})}
    code, run = await call(jp_fetch, "api", "runs", method="POST", body=body)
    assert code == 201, run
    return run


# The first run of each test holds its card for 3 s: long enough that the waits behind it are read
# while it runs, however slowly a busy machine answers the requests in between.
async def test_each_card_has_its_own_fifo_with_a_limit_of_one(jp_fetch):
    a = await submit(jp_fetch, sleepy(3), device="cuda")  # canonicalised onto cuda:0
    b = await submit(jp_fetch, sleepy(0.1), device="cuda:0")
    c = await submit(jp_fetch, sleepy(0.1), device="cuda:1")
    assert a["device"] == "cuda:0" and a["queue_key"] == "cuda:0"
    code, waiting = await call(jp_fetch, "api", "runs", b["id"])
    assert waiting["status"] == "queued" and waiting["queue_position"] == 1
    done_c = await wait_status(jp_fetch, c["id"], {"succeeded"})  # another card never waits on cuda:0
    done_a = await wait_status(jp_fetch, a["id"], {"succeeded"})
    done_b = await wait_status(jp_fetch, b["id"], {"succeeded"})
    assert done_c["finished_at"] < done_a["finished_at"]
    assert done_b["started_at"] >= done_a["finished_at"] - 0.05  # b waited for a's slot


async def test_a_device_set_reserves_its_cards_and_reports_why_it_waits(jp_fetch):
    first = await submit(jp_fetch, sleepy(3), device="cuda:1")
    # The set waits in its first device's queue (cuda:1, busy) and reserves cuda:0 meanwhile.
    pair = await submit(jp_fetch, sleepy(0.1), name="pair", target={"devices": ["cuda:1", "cuda:0"]})
    later = await submit(jp_fetch, sleepy(0.1), device="cuda:0")
    assert pair["devices"] == ["cuda:1", "cuda:0"] and pair["device"] == "cuda:1"
    code, pair_now = await call(jp_fetch, "api", "runs", pair["id"])
    assert pair_now["status"] == "queued" and pair_now["queue_position"] == 1
    code, later_now = await call(jp_fetch, "api", "runs", later["id"])
    assert later_now["status"] == "queued"  # cuda:0 is free, but reserved for the set run
    assert later_now["queue_reason"]["code"] == "device_reserved"
    assert later_now["queue_reason"]["params"] == {"device": "cuda:0", "run_id": pair["id"], "name": "pair"}
    assert later_now["queue_reason"]["message"] == "cuda:0 is reserved for run 'pair', which waits ahead of this run"
    done_first = await wait_status(jp_fetch, first["id"], {"succeeded"})
    done_pair = await wait_status(jp_fetch, pair["id"], {"succeeded"})
    done_later = await wait_status(jp_fetch, later["id"], {"succeeded"})
    assert done_pair["started_at"] >= done_first["finished_at"] - 0.05
    assert done_later["started_at"] >= done_pair["finished_at"] - 0.05


async def test_a_run_on_a_declared_card_names_it_in_its_cards(jp_fetch):
    run = await submit(jp_fetch, sleepy(3), device="cuda:1")
    behind = await submit(jp_fetch, sleepy(0), device="cuda:1")
    code, waiting = await call(jp_fetch, "api", "runs", behind["id"])
    assert waiting["status"] == "queued" and "cards" not in waiting  # it holds no card yet
    done = await wait_status(jp_fetch, run["id"], {"succeeded"})
    assert done["cards"] == [{"device": "cuda:1", "name": "Declared B", "in_run": "cuda:1"}]
    code, page = await call(jp_fetch, "api", "runs")
    listed = next(r for r in page["runs"] if r["id"] == run["id"])
    assert listed["cards"] == done["cards"]
    unnamed = await submit(jp_fetch, sleepy(0), device="cuda:0")
    done = await wait_status(jp_fetch, unnamed["id"], {"succeeded"})
    assert done["cards"] == [{"device": "cuda:0", "name": None, "in_run": "cuda:0"}]
    cpu = await submit(jp_fetch, sleepy(0), device="cpu")
    assert "cards" not in await wait_status(jp_fetch, cpu["id"], {"succeeded"})


async def test_auto_picks_the_first_card_and_an_absent_card_is_refused(jp_fetch):
    run = await submit(jp_fetch, sleepy(0), device="auto")
    assert run["device"] == "cuda:0" and run["options"]["requested_device"] == "auto"
    code, body = await call(jp_fetch, "api", "runs", method="POST",
                            body={"graph": sleepy(0), "options": {"device": "cuda:2"}})
    assert code == 400 and body["error"]["code"] == "device_unavailable"
    code, body = await call(jp_fetch, "api", "runs", method="POST",
                            body={"graph": sleepy(0), "options": {"target": {"devices": ["cuda:0", "cpu"]}}})
    assert code == 400 and body["error"]["code"] == "device_set_mixed_kinds"
    await wait_status(jp_fetch, run["id"], {"succeeded"})


async def test_a_seeded_run_executes_alone(jp_fetch):
    busy = await submit(jp_fetch, sleepy(3), device="cuda:1")
    seeded = await submit(jp_fetch, sleepy(0.1), device="cpu", seed=3)
    code, now = await call(jp_fetch, "api", "runs", seeded["id"])
    assert now["status"] == "queued" and now["queue_reason"]["code"] == "waiting_to_run_alone"
    other = await submit(jp_fetch, sleepy(0.1), device="cuda:0")  # submitted later: waits behind the gate
    done_busy = await wait_status(jp_fetch, busy["id"], {"succeeded"})
    done_seeded = await wait_status(jp_fetch, seeded["id"], {"succeeded"})
    done_other = await wait_status(jp_fetch, other["id"], {"succeeded"})
    assert done_seeded["started_at"] >= done_busy["finished_at"] - 0.05
    assert done_other["started_at"] >= done_seeded["finished_at"] - 0.05
