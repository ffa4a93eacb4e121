"""The S3 backend frees the card as the transfer backend does: a real control plane with S3 on, a
local S3-compatible server (moto_server, from test_worker_storage_s3), a real agent with boto3.
The first run's file goes to the bucket while the next run on the same slot executes."""

from __future__ import annotations

from typing import Any

import pytest

from test_server_runs import wait_status
from test_upload_slot_e2e import BIG, SMALL, UPLOAD_DELAY_S, artifacts, get, started_while_first_runs, submit
from test_worker_storage_s3 import BUCKET, REGION, moto  # noqa: F401  (fixtures)
from test_workers_e2e import agents, control, server_token, until_connected  # noqa: F401  (fixtures)

pytestmark = pytest.mark.slow


@pytest.fixture
def jp_server_config(tmp_path, moto):  # noqa: F811
    codefy: dict[str, Any] = {
        "data_dir": str(tmp_path / "codefy"), "run_queue_max_concurrent_cpu": 1, "s3_enabled": 1, "s3_bucket": BUCKET,
        "s3_endpoint_url": moto.url, "s3_region": REGION, "s3_credentials": f"{moto.key}:{moto.secret}",
        "s3_role_arn": moto.role_arn}
    return {"ServerApp": {"jpserver_extensions": {"codefy_jupyter": True}}, "CodefyApp": codefy}


async def test_the_next_run_starts_while_the_first_uploads_to_the_bucket(jp_fetch, agents, moto):  # noqa: F811
    agent = agents(name="remote", env={"CODEFY_AGENT_MACHINE_ID": "test-machine-remote",
                                       "CODEFY_AGENT_TEST_UPLOAD_DELAY_S": str(UPLOAD_DELAY_S)})
    worker = await until_connected(jp_fetch, agent)
    assert {"s3", "run_released"} <= set(worker["capabilities"])
    first = await submit(jp_fetch, BIG)
    second = await submit(jp_fetch, SMALL)
    await started_while_first_runs(jp_fetch, first["id"], second["id"])
    done_b = await wait_status(jp_fetch, second["id"], {"succeeded", "failed"}, timeout=120)
    done_a = await wait_status(jp_fetch, first["id"], {"succeeded", "failed", "cancelled"}, timeout=120)
    assert done_a["status"] == "succeeded", (done_a, agent.output()[-3000:])
    assert done_b["status"] == "succeeded"
    assert done_a["started_at"] < done_b["started_at"] < done_a["finished_at"]
    assert done_a["execution_facts"]["released_at"] <= done_b["started_at"]
    rows = [r for r in await artifacts(jp_fetch, first["id"]) if r["kind"] == "model"]
    assert len(rows) == 1 and rows[0]["backend"] == "s3", rows
    key = rows[0]["key"]
    remote = agent.dir / "agent-runs" / first["id"] / "data" / "big.pt"
    assert moto.keys(f"runs/{first['id']}/")[key]["Size"] == remote.stat().st_size > 10_000_000
    assert (await get(jp_fetch, second["id"]))["worker_id"] == "remote"
