"""CPU thread budget benchmark: examples/train_mlp.json at 120 epochs, `--runs` concurrent runs on
a real `codefy start` while `--busy` other processes each keep a core busy, unbudgeted and budgeted.

Each mode gets a server of its own (torch's inter-op pool is sized once per process), cpu queue of
`--runs` slots, and one short warm-up run (torch's import in the server is not what is measured):

  unbudgeted  every run sized to the whole machine: CODEFY_RUN_CPU_THREADS = torch's own default
              intra-op count in a fresh process (what each run used before budgets existed)
  budgeted    the automatic budget: the machine's cores divided among the cpu queue's slots

The runs are submitted unseeded (`"seed": null`): a seeded run executes alone, which would hide the
contention measured here; the data itself stays seeded by its nodes' own `seed` params. Per run:
`started_at -> finished_at` (server clock); per mode: first submit -> last finish, and the thread
budget from each run's `execution_facts.cpu_threads`.

    python benchmarks/cpu_threads.py [--epochs 120] [--runs 2] [--busy 1] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from codefy_jupyter.wire.cpu_threads import available_cores
from common import publish
from run_queue import codefy_server

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "train_mlp.json"
FINISHED = {"succeeded", "failed", "cancelled", "interrupted"}


def spin() -> None:
    while True:
        pass


def api(state: dict[str, Any], method: str, path: str, body: Any = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"{state['url']}codefy/api/{path}", data=data, method=method,
                                 headers={"Authorization": f"token {state['token']}",
                                          "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as response:
        return json.loads(response.read())


def graph(epochs: int) -> dict[str, Any]:
    g = json.loads(EXAMPLE.read_text())
    for node in g["nodes"]:
        if node["type"] == "TrainingLoop":
            node["params"]["epochs"] = epochs
    return g


def wait_all(state: dict[str, Any], ids: list[str], timeout: float = 1800) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while True:
        runs = [api(state, "GET", f"runs/{i}") for i in ids]
        if all(r["status"] in FINISHED for r in runs):
            return runs
        if time.monotonic() > deadline:
            raise SystemExit(f"runs still going after {timeout} s: {[r['status'] for r in runs]}")
        time.sleep(0.2)


def torch_default_threads() -> int:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    out = subprocess.run([sys.executable, "-c", "import torch; print(torch.get_num_threads())"], env=env,
                         capture_output=True, text=True, check=True)
    return int(out.stdout)


def measure(mode: str, threads_env: str | None, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    extra = {"CODEFY_RUN_CPU_THREADS": threads_env} if threads_env else {}
    before = {k: os.environ.get(k) for k in extra}
    os.environ.update(extra)  # codefy_server passes this process's environment to `codefy start`
    try:
        with codefy_server(work / mode, args.runs) as state:
            warm = api(state, "POST", "runs", {"graph": graph(1), "options": {"seed": None}})
            wait_all(state, [warm["id"]])
            busy = [multiprocessing.Process(target=spin, daemon=True) for _ in range(args.busy)]
            for p in busy:
                p.start()
            try:
                submitted = time.time()
                ids = [api(state, "POST", "runs", {"graph": graph(args.epochs), "name": f"{mode}-{i}",
                                                   "options": {"seed": None}})["id"] for i in range(args.runs)]
                runs = wait_all(state, ids)
            finally:
                for p in busy:
                    p.kill()
                    p.join()
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    bad = [r for r in runs if r["status"] != "succeeded"]
    if bad:
        raise SystemExit(f"{mode}: a run did not succeed: {bad[0].get('error')}")
    durations = sorted(round(r["finished_at"] - r["started_at"], 2) for r in runs)
    return {"cpu_threads": sorted({(r.get("execution_facts") or {}).get("cpu_threads", {}).get("threads")
                                   for r in runs}, key=str),
            "run_s": durations, "max_run_s": durations[-1],
            "wall_s": round(max(r["finished_at"] for r in runs) - submitted, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=120)
    parser.add_argument("--runs", type=int, default=2, help="concurrent runs (and cpu queue slots)")
    parser.add_argument("--busy", type=int, default=1, help="processes spinning on a core meanwhile")
    parser.add_argument("--out", help="also write the JSON report here")
    args = parser.parse_args()
    started = time.perf_counter()
    default = torch_default_threads()
    with tempfile.TemporaryDirectory(prefix="codefy-bench-threads-") as tmp:
        work = Path(tmp)
        unbudgeted = measure("unbudgeted", str(default), args, work)
        budgeted = measure("budgeted", None, args, work)
    publish(args.out, started,
            setup={"example": "examples/train_mlp.json", "epochs": args.epochs, "concurrent_runs": args.runs,
                   "busy_cores": args.busy, "cores": available_cores(), "torch_default_threads": default},
            unbudgeted=unbudgeted, budgeted=budgeted,
            speedup_wall=round(unbudgeted["wall_s"] / budgeted["wall_s"], 2))


if __name__ == "__main__":
    main()
