"""Storage benchmark: the transfer backend moving a large input to a worker agent on loopback.

A real `codefy start` and a real `codefy agent start` (declaring a machine id of its own, so that
it is not a same-machine worker and gets the transfer backend). The input is an upload of `--mib`
MiB in the data folder; a run whose CSVDataset reads it is queued on the agent twice:

- first run: the control plane hashes the file (file_hashes), the agent downloads it into its cache
  while hashing it: MB/s = bytes / the agent's own download time (request to verified file);
- second run, same input: served from the agent's cache after a hash check, nothing downloaded.

The file is not CSV, so each run then fails at once reading it: only the transfer is measured.
The figures are the agent's own (execution_facts.run_facts `transfer`).

S3 (`--s3-runs N`, 0 skips it): the same with `CODEFY_S3_ENABLED` against a local S3-compatible
server (`moto_server` on loopback) and an agent with boto3: N runs read the same `--s3-mib` input.
The control plane puts it in the bucket once (execution_facts.s3_inputs_uploaded: 1, then 0), the
agent downloads it from the bucket once (then its cache serves it); the bucket ends with one input
object.

Upload and slots (`--upload-hidden N`, 0 skips it): a server whose cpu queue admits one run, an
agent with the transfer backend, a first run that saves an MLP (hidden N, two layers: about
4*(N*N*2) bytes) and a second run queued behind it on the same slot. Measured: seconds from the
first run's process exit (its pid polled every 2 ms) to the second run's `started_at`, with the
agent offering `run_released` (the slot is freed as the process exits) and playing an older agent
without it (the slot is held through the upload), `--upload-repeats` times each (median).

    python benchmarks/storage.py [--mib 256] [--s3-runs 5] [--s3-mib 64] [--upload-hidden 4096] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

from common import free_port, publish
from run_queue import Http, codefy_server

TARGETS = {"transfer_mb_per_s": 200.0}


def write_input(path: Path, mib: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    block = os.urandom(1 << 20)
    with open(path, "wb") as f:
        for i in range(mib):
            f.write(i.to_bytes(8, "little") + block[8:])  # every MiB differs


def graph(path: Path) -> dict[str, Any]:
    return {"nodes": [{"id": "csv", "type": "CSVDataset", "params": {"path": str(path), "target_column": "y"}}],
            "edges": []}


async def wait_finished(http: Http, run_id: str, timeout: float = 600.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        code, run = await http.request("GET", f"runs/{run_id}")
        if run["status"] in ("succeeded", "failed", "cancelled", "interrupted"):
            return run
        await asyncio.sleep(0.05)
    raise SystemExit(f"run {run_id} did not finish within {timeout:g} s")


async def connected(http: Http, name: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _, body = await http.request("GET", "workers")
        if any(w["name"] == name and w["state"] == "connected" for w in body["workers"]):
            return
        await asyncio.sleep(0.1)
    raise SystemExit(f"agent {name} did not connect")


def transfer_facts(run: dict[str, Any]) -> dict[str, Any]:
    for item in (run.get("execution_facts") or {}).get("run_facts", []):
        if item.get("kind") == "transfer":
            return item["facts"]
    raise SystemExit(f"run {run['id']} reported no transfer: {run.get('error')}")


def start_agent(state: dict[str, Any], name: str, agent_dir: Path, machine_id: str,
                extra_env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """A real `codefy agent start` on loopback, enrolled with the server's own token; its own
    machine id, so it counts as another machine (the transfer backend, not a borrowed folder)."""
    control = f"http://127.0.0.1:{state['port']}{state['base_url']}"
    env = {**os.environ, "CODEFY_AGENT_MACHINE_ID": machine_id, **(extra_env or {})}
    return subprocess.Popen([sys.executable, "-m", "codefy_jupyter.cli", "agent", "start", "--control", control,
                             "--token", state["token"], "--name", name, "--data-dir", str(agent_dir)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def measure(state: dict[str, Any], data_dir: Path, agent_dir: Path, mib: int) -> dict[str, Any]:
    upload = data_dir / "uploads" / "big.bin"
    write_input(upload, mib)
    agent = start_agent(state, "bench", agent_dir, "storage-benchmark-worker")
    http = Http(state)
    try:
        await connected(http, "bench")
        rows = []
        for attempt in ("first", "cached"):
            started = time.perf_counter()
            code, run = await http.request("POST", "runs", {"graph": graph(upload), "options": {
                "target": {"worker": "bench", "devices": ["cpu"]}}})
            assert code == 201, run
            done = await wait_finished(http, run["id"])
            facts = transfer_facts(done)
            rows.append({"run": attempt, "submit_to_end_s": round(time.perf_counter() - started, 3), **facts})
        first, cached = rows
        size = mib << 20
        return {
            "input_mib": mib,
            "transfer_mb_per_s": round(size / first["seconds"] / 1e6, 1) if first["downloaded_bytes"] == size else None,
            "first": first, "cached": cached,
            "cached_downloaded_bytes": cached["downloaded_bytes"],
            "targets": TARGETS,
        }
    finally:
        http.close()
        agent.terminate()
        try:
            agent.wait(timeout=30)
        except subprocess.TimeoutExpired:
            agent.kill()


def saving(hidden: int) -> dict[str, Any]:
    e = {"source": "model", "source_port": "model", "target": "save", "target_port": "model"}
    return {"nodes": [{"id": "model", "type": "MLP", "params": {"in_features": hidden, "out_features": 2,
                                                                "hidden": hidden, "layers": 2}},
                      {"id": "save", "type": "SaveModel", "params": {"filename": "big.pt"}}], "edges": [e]}


SMALL = {"nodes": [{"id": "k", "type": "Float", "params": {"value": 2}}], "edges": []}


async def process_exit(http: Http, run_id: str, timeout: float = 600.0) -> float:
    """time.time() when the run's process (execution_facts.worker_pid) is seen gone."""
    deadline = time.monotonic() + timeout
    pid = None
    while pid is None:
        _, run = await http.request("GET", f"runs/{run_id}")
        pid = (run.get("execution_facts") or {}).get("worker_pid")
        if run["status"] not in ("queued", "running") or time.monotonic() > deadline:
            raise SystemExit(f"run {run_id} ended ({run['status']}) before its process was seen")
        await asyncio.sleep(0.005)
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return time.time()
        if time.monotonic() > deadline:
            raise SystemExit(f"the process of run {run_id} did not exit")
        await asyncio.sleep(0.002)


async def measure_upload_slot(state: dict[str, Any], agent_dir: Path, hidden: int, repeats: int) -> dict[str, Any]:
    http = Http(state)
    out: dict[str, Any] = {"hidden": hidden, "repeats": repeats}
    try:
        for label, extra in (("with_run_released", {}),
                             ("without_run_released", {"CODEFY_AGENT_TEST_WITHOUT_CAPABILITIES": "run_released"})):
            name = f"bench-{label.replace('_', '-')}"
            agent = start_agent(state, name, agent_dir / name, f"storage-benchmark-{name}", extra)
            try:
                await connected(http, name)
                rows = []
                for _ in range(repeats):
                    target = {"target": {"worker": name, "devices": ["cpu"]}}
                    _, first = await http.request("POST", "runs", {"graph": saving(hidden), "options": target})
                    _, second = await http.request("POST", "runs", {"graph": SMALL, "options": target})
                    exited = await process_exit(http, first["id"])
                    a, b = await wait_finished(http, first["id"]), await wait_finished(http, second["id"])
                    if a["status"] != "succeeded" or b["status"] != "succeeded":
                        raise SystemExit(f"runs ended {a['status']} / {b['status']}: {a.get('error')}")
                    rows.append({"exit_to_next_start_s": round(b["started_at"] - exited, 4),
                                 "exit_to_first_end_s": round(a["finished_at"] - exited, 4),
                                 "upload_bytes": (a.get("execution_facts") or {}).get("released_upload_bytes")})
                gaps = sorted(r["exit_to_next_start_s"] for r in rows)
                out[label] = {"exit_to_next_start_s_median": gaps[len(gaps) // 2], "runs": rows}
            finally:
                agent.terminate()
                try:
                    agent.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    agent.kill()
        return out
    finally:
        http.close()


@contextlib.contextmanager
def moto_server() -> Iterator[str]:
    """A local S3-compatible endpoint (moto_server, no authentication) with the bucket `bench`."""
    import boto3

    port = free_port()
    proc = subprocess.Popen([str(Path(sys.executable).with_name("moto_server")), "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise SystemExit("moto_server did not start")
                time.sleep(0.1)
        boto3.client("s3", endpoint_url=url, region_name="us-east-1", aws_access_key_id="bench",
                     aws_secret_access_key="bench").create_bucket(Bucket="bench")
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


async def measure_s3(state: dict[str, Any], url: str, data_dir: Path, agent_dir: Path, mib: int,
                     runs: int) -> dict[str, Any]:
    import boto3

    upload = data_dir / "uploads" / "shared.bin"
    write_input(upload, mib)
    agent = start_agent(state, "bench-s3", agent_dir, "storage-benchmark-s3-worker")
    http = Http(state)
    try:
        await connected(http, "bench-s3")
        rows = []
        for i in range(runs):
            started = time.perf_counter()
            code, run = await http.request("POST", "runs", {"graph": graph(upload), "options": {
                "target": {"worker": "bench-s3", "devices": ["cpu"]}}})
            assert code == 201, run
            done = await wait_finished(http, run["id"])
            facts = transfer_facts(done)
            rows.append({"run": i + 1, "submit_to_end_s": round(time.perf_counter() - started, 3),
                         "backend": facts.get("backend"),
                         "control_plane_uploads": (done.get("execution_facts") or {}).get("s3_inputs_uploaded"),
                         "agent_downloaded_bytes": facts["downloaded_bytes"], "agent_seconds": facts["seconds"]})
        bucket = boto3.client("s3", endpoint_url=url, region_name="us-east-1", aws_access_key_id="bench",
                              aws_secret_access_key="bench")
        objects = bucket.list_objects_v2(Bucket="bench", Prefix="inputs/").get("KeyCount", 0)
        size = mib << 20
        first = rows[0]
        return {
            "input_mib": mib, "runs": runs,
            "input_uploads_total": sum(r["control_plane_uploads"] or 0 for r in rows),
            "input_objects_in_bucket": objects,
            "agent_downloads_total": sum(1 for r in rows if r["agent_downloaded_bytes"]),
            "first_download_mb_per_s": round(size / first["agent_seconds"] / 1e6, 1)
            if first["agent_downloaded_bytes"] == size else None,
            "per_run": rows,
            "targets": {"input_uploads_total": 1},
        }
    finally:
        http.close()
        agent.terminate()
        try:
            agent.wait(timeout=30)
        except subprocess.TimeoutExpired:
            agent.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--s3-runs", type=int, default=5)
    parser.add_argument("--s3-mib", type=int, default=64)
    parser.add_argument("--upload-hidden", type=int, default=4096)
    parser.add_argument("--upload-repeats", type=int, default=3)
    parser.add_argument("--out")
    args = parser.parse_args()
    started = time.perf_counter()
    sections: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="codefy-storage-bench-") as tmp:
        data_dir, agent_dir = Path(tmp) / "data", Path(tmp) / "agent"
        with codefy_server(data_dir, cpu_limit=2) as state:
            sections["transfer"] = asyncio.run(measure(state, data_dir, agent_dir, args.mib))
        if args.upload_hidden > 0:
            data_dir, agent_dir = Path(tmp) / "data-upload", Path(tmp) / "agent-upload"
            with codefy_server(data_dir, cpu_limit=1) as state:
                sections["upload_slot"] = asyncio.run(measure_upload_slot(state, agent_dir, args.upload_hidden,
                                                                          args.upload_repeats))
        if args.s3_runs > 0:
            data_dir, agent_dir = Path(tmp) / "data-s3", Path(tmp) / "agent-s3"
            with moto_server() as url:
                s3_env = {"CODEFY_S3_ENABLED": "1", "CODEFY_S3_BUCKET": "bench", "CODEFY_S3_ENDPOINT_URL": url,
                          "CODEFY_S3_CREDENTIALS": "bench:bench"}
                with codefy_server(data_dir, cpu_limit=2, extra_env=s3_env) as state:
                    sections["s3"] = asyncio.run(measure_s3(state, url, data_dir, agent_dir, args.s3_mib,
                                                            args.s3_runs))
    publish(args.out, started, **sections)


if __name__ == "__main__":
    main()
