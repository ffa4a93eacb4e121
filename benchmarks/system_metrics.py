"""System metrics overhead benchmark: no-op runs on a real `codefy start`, sampling off vs on.

Each mode gets a `codefy start` of its own (run_queue.py's server, retention off), `--warmup`
uncounted runs, then `--runs` no-op runs (run_queue.py's Float -> Scale -> Scale on cpu) from
`--concurrency` keep-alive clients; modes alternate for `--rounds` rounds (drift on a shared machine
falls on every mode alike) and each figure is the median over rounds:

  off    CODEFY_SYSTEM_METRICS_INTERVAL_S=0: nothing sampled, no sampler thread
  on     the default (5 s): each run is added to and removed from the control plane's one sampler
  on_fast  0.2 s: the sampler reads the process for every run executing at each 0.2 s tick

Per mode: runs per second end to end (first submit -> last finished_at, server clock), each run's
started_at -> finished_at, and the server's CPU milliseconds per run (psutil, user + system; the
least noisy figure here). `overhead_pct`: each `on` mode against `off`. `sample_us`: what one sample
costs on the sampling thread (SystemSampler.sample with psutil, no NVML on a CPU machine), and its
share of one core at the default interval. `per_run_hook`: what sampling adds to each run on the
server's loop (its add to and remove from the sampler, measured alone over 20,000 runs), and its
share of an `off` run's started_at -> finished_at: the end-to-end figures on a shared 2-core machine
move by more than 1 % from round to round, this one does not.

    python benchmarks/system_metrics.py [--runs 400] [--rounds 3] [--concurrency 4] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

from codefy_jupyter.wire import system_metrics as sm
from common import publish
from run_queue import Http, codefy_server, spread, submit_all, wait_until

MODES = {"off": "0", "on": "5", "on_fast": "0.2"}


async def measure(state: dict[str, Any], runs: int, warmup: int, concurrency: int, timeout: float) -> dict[str, Any]:
    server = psutil.Process(state["pid"])
    control = Http(state)

    async def idle() -> bool:
        status, page = await control.request("GET", "runs?status=queued,running&limit=1")
        return status == 200 and page["total"] == 0

    try:
        await submit_all(state, warmup, 1)
        await wait_until(idle, timeout, "the warm-up runs to finish")
        cpu0, wall0 = server.cpu_times(), time.time()
        ids, _, errors = await submit_all(state, runs, concurrency)
        await wait_until(idle, timeout, "every run to finish")
        cpu1 = server.cpu_times()
        if errors:
            raise SystemExit(f"submits failed: {errors[:3]}")
        wanted, rows = set(ids), []
        for offset in range(0, runs + warmup + 50, 50):
            status, page = await control.request("GET", f"runs?limit=50&offset={offset}")
            rows += [r for r in page["runs"] if r["id"] in wanted]
    finally:
        control.close()
    e2e = max(r["finished_at"] for r in rows) - wall0
    durations = [r["finished_at"] - r["started_at"] for r in rows if r.get("started_at")]
    facts = [(r.get("execution_facts") or {}).get("system_metrics") for r in rows]
    return {"runs": len(rows), "runs_per_s": len(rows) / e2e,
            "server_cpu_ms_per_run": (sum(cpu1[:2]) - sum(cpu0[:2])) / len(rows) * 1000,
            "run_ms_p50": statistics.median(durations) * 1000, "run_ms": spread(durations, 1000),
            "sampled_runs": sum(f is not None for f in facts),
            "statuses": sorted({r["status"] for r in rows})}


def sample_cost(samples: int = 2000) -> dict[str, Any]:
    sampler = sm.SystemSampler(interval_s=5.0, psutil=psutil, nvml=None)
    sampler._open()  # the thread's first step, without the thread: samples are taken here
    sampler.add("bench", {}, lambda points: None)
    t = time.perf_counter()
    for _ in range(samples):
        sampler.sample()
    per = (time.perf_counter() - t) / samples
    return {"samples": samples, "sample_us": round(per * 1e6, 1),
            "share_of_a_core_at_5s_pct": round(per / 5.0 * 100, 5)}


def hook_cost(runs: int = 20000) -> dict[str, Any]:
    """What sampling adds to each in-process run on the server's loop: its add to the control
    plane's sampler at start and its remove (with the note) at the end."""
    from codefy_jupyter.core.runs import system_sampling

    async def loop() -> float:
        delivered: list[dict[str, Any]] = []
        system_sampling.stop(system_sampling.start(5.0, "warm", "cpu", delivered.append))
        t = time.perf_counter()
        for i in range(runs):
            system_sampling.stop(system_sampling.start(5.0, f"r{i}", "cpu", delivered.append))
        return (time.perf_counter() - t) / runs

    per = asyncio.run(loop())
    return {"runs": runs, "start_and_stop_us": round(per * 1e6, 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=400)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    results: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
    for _ in range(args.rounds):
        for mode, interval in MODES.items():
            with tempfile.TemporaryDirectory(prefix="codefy-sysmetrics-") as tmp, \
                    codefy_server(Path(tmp), cpu_limit=4,
                                  extra_env={"CODEFY_SYSTEM_METRICS_INTERVAL_S": interval}) as state:
                results[mode].append(asyncio.run(measure(state, args.runs, args.warmup, args.concurrency,
                                                          args.timeout)))
    keys = ("runs_per_s", "server_cpu_ms_per_run", "run_ms_p50")
    medians = {mode: {k: round(statistics.median(r[k] for r in rounds), 3) for k in keys}
               | {"sampled_runs": [r["sampled_runs"] for r in rounds], "statuses": rounds[0]["statuses"],
                  "rounds": [{k: round(r[k], 3) for k in keys} for r in rounds]}
               for mode, rounds in results.items()}
    off = medians["off"]
    overhead = {mode: {"server_cpu_per_run": round((m["server_cpu_ms_per_run"] / off["server_cpu_ms_per_run"] - 1) * 100, 2),
                       "runs_per_s": round((1 - m["runs_per_s"] / off["runs_per_s"]) * 100, 2),
                       "run_ms_p50": round((m["run_ms_p50"] / off["run_ms_p50"] - 1) * 100, 2)}
                for mode, m in medians.items() if mode != "off"}
    publish(args.out, started, config={"runs": args.runs, "warmup": args.warmup, "rounds": args.rounds,
                                       "concurrency": args.concurrency, "modes": MODES,
                                       "cores": os.cpu_count()},
            modes=medians, overhead_pct=overhead, goal_pct=1.0, sample=sample_cost(),
            per_run_hook={**(hook := hook_cost()), "share_of_an_off_run_pct": round(
                hook["start_and_stop_us"] / 1000 / off["run_ms_p50"] * 100, 3)})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
