"""Storage benchmark: the transfer backend moving a large input to a worker agent on loopback.

A real `codefy start` and a real `codefy agent start` (declaring a machine id of its own, so that
it is not a same-machine worker and gets the transfer backend). The input is an upload of `--mib`
MiB in the data folder; a run whose CSVDataset reads it is queued on the agent twice:

- first run: the control plane hashes the file (file_hashes), the agent downloads it into its cache
  while hashing it: MB/s = bytes / the agent's own download time (request to verified file);
- second run, same input: served from the agent's cache after a hash check, nothing downloaded.

The file is not CSV, so each run then fails at once reading it: only the transfer is measured.
The figures are the agent's own (execution_facts.run_facts `transfer`).

    python benchmarks/storage.py [--mib 256] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import publish
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


async def measure(state: dict[str, Any], data_dir: Path, agent_dir: Path, mib: int) -> dict[str, Any]:
    upload = data_dir / "uploads" / "big.bin"
    write_input(upload, mib)
    control = f"http://127.0.0.1:{state['port']}{state['base_url']}"
    env = {**os.environ, "CODEFY_AGENT_MACHINE_ID": "storage-benchmark-worker"}
    agent = subprocess.Popen([sys.executable, "-m", "codefy_jupyter.cli", "agent", "start", "--control", control,
                              "--token", state["token"], "--name", "bench", "--data-dir", str(agent_dir)],
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--out")
    args = parser.parse_args()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="codefy-storage-bench-") as tmp:
        data_dir, agent_dir = Path(tmp) / "data", Path(tmp) / "agent"
        with codefy_server(data_dir, cpu_limit=2) as state:
            report = asyncio.run(measure(state, data_dir, agent_dir, args.mib))
    publish(args.out, started, transfer=report)


if __name__ == "__main__":
    main()
