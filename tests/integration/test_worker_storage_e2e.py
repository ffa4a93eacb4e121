"""Files for worker runs, end to end: a real control plane (jupyter-server with the extension, real
SQLite) and real `codefy agent start` subprocesses on loopback. A graph that reads an uploaded CSV
and writes a checkpoint runs on a worker that mounts the data folder (`--mount data=...`) and on one
that does not (the transfer backend: input downloaded into the agent's cache, checkpoint uploaded);
the artifacts are readable from the control plane afterwards. Then the refusals: a worker that can
reach no files, a file outside the data folder, a path that climbs out of the run's folder, an
oversized upload, another worker's token.

The agents run on this machine, so each declares a machine id of its own (CODEFY_AGENT_MACHINE_ID):
otherwise they would be same-machine workers, which simply borrow this server's folder."""

from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from test_server_runs import call, wait_status
from test_workers_e2e import (  # noqa: F401  (fixtures)
    AgentProcess, agents, control, server_token, until_connected, worker_state,
)

pytestmark = pytest.mark.slow


@pytest.fixture
def jp_server_config(tmp_path, request):
    codefy = {"data_dir": str(tmp_path / "codefy")}
    codefy.update(getattr(request, "param", {}))
    return {"ServerApp": {"jpserver_extensions": {"codefy_jupyter": True}}, "CodefyApp": codefy}


def edge(s: str, sp: str, t: str, tp: str) -> dict[str, str]:
    return {"source": s, "source_port": sp, "target": t, "target_port": tp}


def training(csv_path: str) -> dict[str, Any]:
    """Reads the CSV, trains two epochs, checkpoints each."""
    return {
        "nodes": [
            {"id": "csv", "type": "CSVDataset", "params": {"path": csv_path, "target_column": "y"}},
            {"id": "loader", "type": "DataLoader", "params": {"batch_size": 8, "shuffle": False}},
            {"id": "model", "type": "MLP", "params": {"hidden": 8, "layers": 1}},
            {"id": "opt", "type": "Optimizer", "params": {"kind": "sgd", "lr": 0.01}},
            {"id": "loss", "type": "Loss", "params": {"kind": "auto"}},
            {"id": "train", "type": "TrainingLoop", "params": {"epochs": 2, "checkpoint_every": 1}},
        ],
        "edges": [edge("csv", "dataset", "loader", "dataset"), edge("csv", "dataset", "model", "dataset"),
                  edge("model", "model", "opt", "model"), edge("model", "model", "train", "model"),
                  edge("opt", "optimizer", "train", "optimizer"), edge("loss", "loss", "train", "loss"),
                  edge("loader", "dataloader", "train", "train")],
    }


def upload_csv(tmp_path: Path, name: str = "train.csv") -> Path:
    folder = tmp_path / "codefy" / "uploads"
    folder.mkdir(parents=True, exist_ok=True)
    rows = ["a,b,y"] + [f"{i % 7},{(i * 3) % 5},{i % 2}" for i in range(40)]
    path = folder / name
    path.write_text("\n".join(rows) + "\n")
    return path


def other_machine(name: str) -> dict[str, str]:
    return {"CODEFY_AGENT_MACHINE_ID": f"test-machine-{name}"}


async def submit(jp_fetch, graph: dict[str, Any], target: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    return await call(jp_fetch, "api", "runs", method="POST", body={"graph": graph, "options": {"target": target}})


async def artifacts(jp_fetch, run_id: str) -> list[dict[str, Any]]:
    code, body = await call(jp_fetch, "api", "runs", run_id, "artifacts")
    assert code == 200, body
    return body["artifacts"]


def checkpoints(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if r["kind"] == "checkpoint"]


async def test_a_worker_with_the_mount_reads_and_writes_the_data_folder_through_it(jp_fetch, agents, tmp_path):
    csv = upload_csv(tmp_path)
    # The "NAS": the control plane's data folder as the worker sees it, under another path.
    nas = tmp_path / "nas"
    nas.symlink_to(tmp_path / "codefy")
    agent = agents("--mount", f"data={nas}", name="mounted", env=other_machine("mounted"))
    worker = await until_connected(jp_fetch, agent)
    assert worker["same_host"] is False and {"mounts", "transfer"} <= set(worker["capabilities"])
    code, run = await submit(jp_fetch, training(str(csv)), {"worker": "mounted", "devices": ["cpu"]})
    assert code == 201, run
    done = await wait_status(jp_fetch, run["id"], {"succeeded", "failed"}, timeout=90)
    assert done["status"] == "succeeded", (done, agent.output()[-3000:])
    rows = checkpoints(await artifacts(jp_fetch, run["id"]))
    assert len(rows) == 2
    for row in rows:
        assert row["backend"] == "mount" and row["mount_label"] == "data"
        assert row["relative_path"].startswith(f"runs/{run['id']}/checkpoints/")
        # Mapped back to this server's folder, where the worker wrote it through the mount.
        assert row["path"] == str(tmp_path / "codefy" / row["relative_path"])
        assert Path(row["path"]).stat().st_size > 0
    # Nothing was transferred: the agent's cache is empty and its own run folder holds no data.
    assert not (agent.dir / "agent-cache").exists() or not any((agent.dir / "agent-cache").iterdir())


async def test_a_worker_without_the_mount_gets_the_input_by_transfer_and_uploads_the_checkpoint(jp_fetch, agents,
                                                                                              tmp_path):
    csv = upload_csv(tmp_path)
    sha = hashlib.sha256(csv.read_bytes()).hexdigest()
    agent = agents(name="remote", env=other_machine("remote"))
    await until_connected(jp_fetch, agent)
    code, run = await submit(jp_fetch, training(str(csv)), {"worker": "remote", "devices": ["cpu"]})
    assert code == 201, run
    done = await wait_status(jp_fetch, run["id"], {"succeeded", "failed"}, timeout=90)
    assert done["status"] == "succeeded", (done, agent.output()[-3000:])
    # The input came into the agent's cache by its hash.
    assert (agent.dir / "agent-cache" / sha / "blob").read_bytes() == csv.read_bytes()
    rows = checkpoints(await artifacts(jp_fetch, run["id"]))
    assert len(rows) == 2
    for row in rows:
        assert row["backend"] == "transfer" and row["relative_path"].startswith("checkpoints/")
        local = Path(row["path"])
        assert local == tmp_path / "codefy" / "runs" / run["id"] / row["relative_path"]
        # Uploaded before run_finished: there as soon as the run is over.
        remote = agent.dir / "agent-runs" / run["id"] / "data" / row["relative_path"]
        assert local.read_bytes() == remote.read_bytes()
    facts = [f["facts"] for f in done["execution_facts"].get("run_facts", []) if f["kind"] == "transfer"]
    assert facts and facts[0]["downloaded_bytes"] == csv.stat().st_size
    # A second run with the same input is served from the cache: nothing downloaded.
    code, again = await submit(jp_fetch, training(str(csv)), {"worker": "remote", "devices": ["cpu"]})
    done = await wait_status(jp_fetch, again["id"], {"succeeded", "failed"}, timeout=90)
    assert done["status"] == "succeeded", done
    facts = [f["facts"] for f in done["execution_facts"].get("run_facts", []) if f["kind"] == "transfer"]
    assert facts[0]["downloaded_bytes"] == 0 and facts[0]["cached_inputs"] == 1
    # Deleting the run keeps its checkpoint files on disk, as for any run (run queue: Delete).
    code, _ = await call(jp_fetch, "api", "runs", run["id"], method="DELETE")
    assert code == 204
    folder = tmp_path / "codefy" / "runs" / run["id"]
    assert [p.name for p in folder.iterdir()] == ["checkpoints"]
    assert all(Path(r["path"]).is_file() for r in rows)
    assert (await call(jp_fetch, "api", "runs", run["id"]))[0] == 404


async def test_a_same_machine_worker_borrows_the_folder_without_declaring_it(jp_fetch, agents, tmp_path):
    csv = upload_csv(tmp_path)
    agent = agents(name="here")
    assert (await until_connected(jp_fetch, agent))["same_host"] is True
    code, run = await submit(jp_fetch, training(str(csv)), {"worker": "here", "devices": ["cpu"]})
    done = await wait_status(jp_fetch, run["id"], {"succeeded", "failed"}, timeout=90)
    assert done["status"] == "succeeded", (done, agent.output()[-3000:])
    rows = checkpoints(await artifacts(jp_fetch, run["id"]))
    assert rows and all(r["backend"] == "local" for r in rows)
    assert all(r["path"].startswith(str(tmp_path / "codefy" / "runs" / run["id"])) for r in rows)


async def test_runs_wait_for_a_worker_that_can_reach_their_files_and_say_why(jp_fetch, agents, tmp_path):
    csv = upload_csv(tmp_path)
    (tmp_path / "codefy" / "datasets").mkdir()
    shutil.copy(csv, tmp_path / "codefy" / "datasets" / "train.csv")
    agent = agents(name="remote", env=other_machine("remote"))
    await until_connected(jp_fetch, agent)
    # Not an upload: only the mount label serves it, and this worker has none.
    code, run = await submit(jp_fetch, training(str(tmp_path / "codefy" / "datasets" / "train.csv")),
                             {"worker": "remote", "devices": ["cpu"]})
    assert code == 201, run
    code, view = await call(jp_fetch, "api", "runs", run["id"])
    assert view["status"] == "queued"
    assert view["queue_reason"]["code"] == "waiting_for_storage", view
    data = tmp_path / "codefy"
    detail = f"it reads {data / 'datasets' / 'train.csv'}, which is not an upload ({data / 'uploads'}/)"
    assert view["queue_reason"]["params"] == {"worker": "remote", "need": "mount", "label": "data",
                                              "why": "not_uploads", "detail": detail}
    # The why in words too (the message catalog's), so every client can say it without the server's English.
    assert view["queue_reason"]["message"] == f"worker remote lacks the mount label data (the data folder, mounted): {detail}"
    await call(jp_fetch, "api", "runs", run["id"], "cancel", method="POST")
    # A file outside the data folder can never reach another machine: refused at once.
    outside = tmp_path / "elsewhere.csv"
    shutil.copy(csv, outside)
    code, body = await submit(jp_fetch, training(str(outside)), {"worker": "remote", "devices": ["cpu"]})
    assert code == 400 and body["error"]["code"] == "worker_storage_unavailable", body


@pytest.mark.parametrize("jp_server_config", [{"transfer_max_input_bytes": 64}], indirect=True)
async def test_uploads_over_the_transfer_limit_wait_for_the_mount_and_say_why(jp_fetch, agents, tmp_path):
    csv = upload_csv(tmp_path)
    agent = agents(name="remote", env=other_machine("remote"))
    await until_connected(jp_fetch, agent)
    code, run = await submit(jp_fetch, training(str(csv)), {"worker": "remote", "devices": ["cpu"]})
    assert code == 201, run
    reason = run["queue_reason"]
    assert reason["code"] == "waiting_for_storage" and reason["params"]["why"] == "inputs_too_big", reason
    assert "over CODEFY_TRANSFER_MAX_INPUT_BYTES (64)" in reason["message"]
    # The same agent started again with the mount: the run goes.
    agent.proc.terminate()
    await agent.exited()
    mounted = agents("--mount", f"data={tmp_path / 'codefy'}", name="remote", env=other_machine("remote"))
    await until_connected(jp_fetch, mounted)
    done = await wait_status(jp_fetch, run["id"], {"succeeded", "failed"}, timeout=90)
    assert done["status"] == "succeeded", (done, mounted.output()[-3000:])
    assert {r["backend"] for r in checkpoints(await artifacts(jp_fetch, run["id"]))} == {"mount"}


def raw(url: str, token: str, *, method: str = "GET", body: bytes | None = None,
        headers: dict[str, str] | None = None) -> tuple[int, dict[str, Any] | bytes]:
    request = urllib.request.Request(url, data=body, method=method,
                                     headers={"Authorization": f"token {token}", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            data = response.read()
            code = response.status
            kind = response.headers.get("Content-Type", "")
    except urllib.error.HTTPError as err:
        data, code, kind = err.read(), err.code, err.headers.get("Content-Type", "")
    return code, (json.loads(data) if kind.startswith("application/json") and data else data)


async def araw(*args: Any, **kwargs: Any) -> tuple[int, Any]:
    # In a thread: the server under test runs on this test's event loop.
    return await asyncio.to_thread(raw, *args, **kwargs)


@pytest.mark.parametrize("jp_server_config", [{"transfer_max_input_bytes": 4096}], indirect=True)
async def test_transfer_routes_refuse_traversal_oversize_and_strangers(jp_fetch, agents, tmp_path, control,
                                                                      server_token):
    csv = upload_csv(tmp_path)
    agent = agents(name="remote", env=other_machine("remote"))
    await until_connected(jp_fetch, agent)
    code, run = await submit(jp_fetch, training(str(csv)), {"worker": "remote", "devices": ["cpu"]})
    await wait_status(jp_fetch, run["id"], {"succeeded", "failed"}, timeout=90)
    upload = f"{control}codefy/api/runs/{run['id']}/artifacts/upload"
    for bad in ("../../escape.txt", "/etc/passwd", "a/../../b", ""):
        code, body = await araw(f"{upload}?path={urllib.request.quote(bad)}", server_token, method="POST", body=b"x")
        assert code == 400 and body["error"]["code"] == "bad_upload_path", (bad, body)
    assert not (tmp_path / "codefy" / "escape.txt").exists()
    code, body = await araw(f"{upload}?path=big.bin", server_token, method="POST", body=b"x" * 4097)
    assert code == 413 and body["error"]["code"] == "upload_too_large", body
    assert not (tmp_path / "codefy" / "runs" / run["id"] / "big.bin").exists()
    code, body = await araw(f"{upload}?path=ok.bin", server_token, method="POST", body=b"fine")
    assert code == 201 and body["path"] == "ok.bin"
    assert (tmp_path / "codefy" / "runs" / run["id"] / "ok.bin").read_bytes() == b"fine"
    # Without a token the agent would hold: 401; a made-up worker token: 401 too.
    code, body = await araw(f"{upload}?path=ok.bin", "cfw_not-a-token", method="POST", body=b"x")
    assert code == 401, body
    sha = hashlib.sha256(csv.read_bytes()).hexdigest()
    inputs = f"{control}codefy/api/runs/{run['id']}/inputs"
    code, data = await araw(f"{inputs}/{sha}", server_token)
    assert code == 200 and data == csv.read_bytes()
    code, body = await araw(f"{inputs}/{'0' * 64}", server_token)
    assert code == 404 and body["error"]["code"] == "input_not_found"
    # A worker's token moves only that worker's runs' files.
    code, issued = await call(jp_fetch, "api", "workers", "enrollments", method="POST", body={})
    other = agents(name="other", token=issued["token"], env=other_machine("other"))
    await until_connected(jp_fetch, other)
    token = json.loads((other.dir / "credentials" / "other.json").read_text())["worker_token"]
    code, body = await araw(f"{inputs}/{sha}", token)
    assert code == 403 and body["error"]["code"] == "not_this_workers_run", body
