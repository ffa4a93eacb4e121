"""Run-queue benchmark: a real `codefy start` on loopback, 2,000 tiny runs, 10 live followers.

It starts its own headless server (`python -m codefy_jupyter.cli start`, i.e. `codefy start`) on a
free port in a temporary data dir, cpu limit raised (CODEFY_RUN_QUEUE_MAX_CONCURRENT_CPU,
`--cpu-limit`), retention off (CODEFY_RUN_RETENTION_KEEP_LAST=-1), and always `codefy stop`s it.
Every run is the no-op graph Float -> Scale -> Scale on cpu (8 events: execution_start, six
node_status, execution_complete), so what is measured is control-plane overhead.

  1. `--subscribers` WebSockets on /codefy/ws/execution send {"type":"subscribe","all":true}
     (with `--batch`, also "batch":true: the events frames ready at once come in one message);
     `--warmup` uncounted runs then prove each one live (and warm the server).
  2. submit latency: `--runs` POSTs to /codefy/api/runs from `--concurrency` clients, each on its
     own keep-alive HTTP/1.1 connection (a minimal client on asyncio streams: tornado's
     AsyncHTTPClient opens a connection per request); request written -> response read. With
     several clients each waiting for its answer, the p50 is about clients / throughput (queueing).
     Separately, once every measured run has finished, `--one-client` submits from a single client
     one at a time (`one_client_latency_ms`): the latency without queueing. Neither counts in 3-6.
  3. submit -> start: `started_at - submitted_at` of each run (server clock), from the run list.
  4. end to end: runs / (first submit -> last `finished_at`; one machine, one clock).
  5. fan-out: the events each subscriber got for the measured runs until it saw every closing
     event, over (first submit -> that moment); total: all of them over (first submit -> the last
     subscriber done). Each run's log must arrive whole and gapless (seq 1, 2, ..., no duplicate).
  6. server RSS (psutil, the pid in server.json) after the warm-up and after the last run, peak
     sampled every 0.25 s; server and client CPU seconds show who was busy (and the server's
     main thread alone: its event loop serves every request, socket and run).

    python benchmarks/run_queue.py [--runs 2000] [--subscribers 10] [--concurrency 8] [--batch] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, Iterator

import psutil
from tornado.httpclient import HTTPRequest
from tornado.websocket import websocket_connect

from codefy_jupyter.server.headless import read_state
from common import machine, publish

TARGETS = {"submit_p50_ms": 5.0, "runs_per_s": 200.0, "events_per_s": 20_000.0, "rss_growth_mb": 50.0}
CLOSING = {"execution_complete", "execution_error", "execution_stopped"}
GRAPH = {
    "nodes": [{"id": "a", "type": "Float", "params": {"value": 1.0}},
              {"id": "b", "type": "Scale", "params": {"factor": 2.0}},
              {"id": "c", "type": "Scale", "params": {"factor": 0.5}}],
    "edges": [{"source": "a", "source_port": "value", "target": "b", "target_port": "x"},
              {"source": "b", "source_port": "y", "target": "c", "target_port": "x"}],
    "settings": {"device": "cpu"},
}
MB = 1024 * 1024


# -- the server -----------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def codefy_server(data_dir: Path, cpu_limit: int) -> Iterator[dict[str, Any]]:
    env = {**os.environ, "CODEFY_DATA_DIR": str(data_dir), "CODEFY_RUN_QUEUE_MAX_CONCURRENT_CPU": str(cpu_limit),
           "CODEFY_RUN_RETENTION_KEEP_LAST": "-1"}
    codefy = [sys.executable, "-m", "codefy_jupyter.cli"]
    try:
        done = subprocess.run([*codefy, "start", "--data-dir", str(data_dir), "--port", str(free_port())],
                              env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"codefy start failed ({done.returncode}):\n{done.stderr or done.stdout}")
        yield read_state(data_dir) or {}
    finally:
        if read_state(data_dir) is not None:
            subprocess.run([*codefy, "stop", "--data-dir", str(data_dir)], env=env, capture_output=True)


class Http:
    """One keep-alive HTTP/1.1 connection to the API, JSON in and out."""

    def __init__(self, state: dict[str, Any]) -> None:
        self.host, self.port, self.token = "127.0.0.1", state["port"], state["token"]
        self.prefix = f"{state['base_url']}codefy/api/"
        self.streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        if self.streams is None:
            self.streams = await asyncio.open_connection(self.host, self.port)
        reader, writer = self.streams
        data = b"" if body is None else json.dumps(body).encode()
        writer.write(f"{method} {self.prefix}{path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
                     f"Authorization: token {self.token}\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
        await writer.drain()
        status_line, *lines = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in lines if h)}
        payload = await reader.readexactly(int(headers.get("content-length", 0)))
        if headers.get("connection", "").lower() == "close":
            self.close()
        return int(status_line.split()[1]), json.loads(payload) if payload else None

    def close(self) -> None:
        if self.streams is not None:
            self.streams[1].close()
            self.streams = None


# -- the subscribers ------------------------------------------------------------------------------
class Subscriber:
    """Follows every run; per run: events received, last seq, gaps, duplicates, when it closed."""

    def __init__(self, batch: bool = False) -> None:
        self.batch = batch
        self.runs: dict[str, list[int]] = {}  # run -> [events, last seq, gaps, dups, frames]
        self.closed: dict[str, float] = {}
        self.errors: list[Any] = []
        self.messages = 0

    async def follow(self, state: dict[str, Any]) -> None:
        url = f"ws://127.0.0.1:{state['port']}{state['base_url']}codefy/ws/execution"
        ws = await websocket_connect(HTTPRequest(url, headers={"Authorization": f"token {state['token']}"}))
        subscribe = {"type": "subscribe", "all": True, **({"batch": True} if self.batch else {})}
        await ws.write_message(json.dumps(subscribe))
        try:
            while (message := await ws.read_message()) is not None:
                self.messages += 1
                frame = json.loads(message)
                for f in frame["frames"] if frame.get("type") == "batch" else [frame]:
                    self.take(f)
        finally:
            ws.close()

    def take(self, frame: dict[str, Any]) -> None:
        if frame.get("type") != "events":
            self.errors.append(frame)
            return
        run = self.runs.setdefault(frame["run_id"], [0, 0, 0, 0, 0])
        run[4] += 1
        for event in frame["events"]:
            run[0] += 1
            seq = event["seq"]
            if seq <= run[1]:
                run[3] += 1
            else:
                run[2] += seq != run[1] + 1
                run[1] = seq
            if event["type"] in CLOSING:
                self.closed[frame["run_id"]] = time.perf_counter()


async def wait_until(check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}")
        await asyncio.sleep(0.05)


# -- measuring ------------------------------------------------------------------------------------
def pct(values: list[float], p: float) -> float:
    """Nearest-rank percentile."""
    s = sorted(values)
    return s[max(0, min(len(s) - 1, math.ceil(p / 100 * len(s)) - 1))]


def loop_cpu(server: psutil.Process) -> float:
    """CPU seconds of the server's main thread (its event loop: HTTP, WebSockets, the run service)."""
    return next((t.user_time + t.system_time for t in server.threads() if t.id == server.pid), 0.0)


def spread(values: list[float], scale: float = 1.0) -> dict[str, float]:
    return {"p50": round(pct(values, 50) * scale, 3), "p99": round(pct(values, 99) * scale, 3),
            "max": round(max(values) * scale, 3), "mean": round(sum(values) / len(values) * scale, 3)}


async def bench(args: argparse.Namespace, state: dict[str, Any]) -> dict[str, Any]:
    server = psutil.Process(state["pid"])
    control = Http(state)

    async def idle() -> bool:
        status, page = await control.request("GET", "runs?status=queued,running&limit=1")
        return status == 200 and page["total"] == 0

    subs = [Subscriber(args.batch) for _ in range(args.subscribers)]
    followers = [asyncio.create_task(s.follow(state)) for s in subs]
    await asyncio.sleep(0.5)  # let the server take the subscribe frames

    async def submit_all(n: int, concurrency: int) -> tuple[list[str], list[float], list[Any]]:
        ids: list[str] = []
        latencies: list[float] = []
        errors: list[Any] = []
        left = iter(range(n))  # shared by the clients: each takes the next submit

        async def client() -> None:
            conn = Http(state)
            try:
                for _ in left:
                    t = time.perf_counter()
                    status, run = await conn.request("POST", "runs", {"graph": GRAPH})
                    latencies.append(time.perf_counter() - t)
                    if status == 201:
                        ids.append(run["id"])
                    else:
                        errors.append((status, run))
            finally:
                conn.close()

        await asyncio.gather(*(client() for _ in range(concurrency)))
        return ids, latencies, errors

    warm_ids, warm_latencies, warm_errors = await submit_all(args.warmup, 1)
    if warm_errors:
        raise SystemExit(f"warm-up submits failed: {warm_errors[:3]}")

    async def followed(ids: set[str]) -> bool:
        if any(f.done() for f in followers):
            raise RuntimeError(f"a subscriber stopped: {[f.exception() for f in followers if f.done()]}")
        return all(ids <= s.closed.keys() for s in subs)

    await wait_until(lambda: followed(set(warm_ids)), args.timeout, "the warm-up runs")
    await wait_until(idle, args.timeout, "the warm-up runs to finish")

    rss_before, cpu_before, client_cpu = server.memory_info().rss, server.cpu_times(), time.process_time()
    loop_before = loop_cpu(server)
    peak = rss_before

    async def sample_rss() -> None:
        nonlocal peak
        while True:
            peak = max(peak, server.memory_info().rss)
            await asyncio.sleep(0.25)

    sampler = asyncio.create_task(sample_rss())
    messages_before = sum(s.messages for s in subs)
    t0, wall0 = time.perf_counter(), time.time()
    ids, latencies, errors = await submit_all(args.runs, args.concurrency)
    submit_s = time.perf_counter() - t0
    if not ids:
        raise SystemExit(f"every submit failed: {errors[:3]}")
    measured = set(ids)
    await wait_until(lambda: followed(measured), args.timeout, "the subscribers to see every run close")
    messages = sum(s.messages for s in subs) - messages_before  # WebSocket messages (batch frames count once)
    await wait_until(idle, args.timeout, "every run to finish")
    sampler.cancel()
    rss_after, cpu_after, loop_after = server.memory_info().rss, server.cpu_times(), loop_cpu(server)
    client_cpu = time.process_time() - client_cpu
    # Not counted above: one client submitting one run at a time (the latency a person or a script
    # sees from an otherwise idle server; the subscribers still follow).
    one_ids, one_latencies, one_errors = await submit_all(args.one_client, 1) if args.one_client else ([], [], [])
    await wait_until(idle, args.timeout, "the one-client runs to finish")
    for f in followers:
        f.cancel()

    rows: dict[str, dict[str, Any]] = {}
    for offset in range(0, len(ids) + len(warm_ids) + len(one_ids), 50):
        status, page = await control.request("GET", f"runs?limit=50&offset={offset}")
        rows.update((r["id"], r) for r in page["runs"] if r["id"] in measured)
    control.close()
    mine = [rows[i] for i in ids if i in rows]
    e2e_s = max(r["finished_at"] for r in mine) - wall0

    fanout: dict[str, Any] = {"subscribers": len(subs), "batch_frames": args.batch}
    if subs:
        runs = [[s.runs.get(i, [0] * 5) for i in ids] for s in subs]
        sums = [sum(r[k] for rs in runs for r in rs) for k in range(5)]
        done = [max(s.closed[i] for i in ids) - t0 for s in subs]
        per_sub = [sum(r[0] for r in rs) / d for rs, d in zip(runs, done)]
        incomplete = sum(r[0] != r[1] for rs in runs for r in rs)  # gapless from seq 1: events == last seq
        fanout.update(events=sums[0], frames=sums[4], messages=messages,
                      events_per_run=round(sums[0] / len(subs) / len(ids), 2),
                      events_per_s_per_subscriber={"min": round(min(per_sub)), "max": round(max(per_sub))},
                      events_per_s_total=round(sums[0] / max(done)), lag_s=round(max(done) - e2e_s, 3),
                      gaps=sums[2], duplicates=sums[3], incomplete_runs=incomplete,
                      gapless=sums[2] == sums[3] == incomplete == 0, errors=[e for s in subs for e in s.errors][:5])
    return {
        "submit": {"latency_ms": spread(latencies, 1000), "warmup_latency_ms": spread(warm_latencies, 1000),
                   "one_client_latency_ms": spread(one_latencies, 1000) if one_latencies else None,
                   "one_client_errors": len(one_errors),
                   "errors": len(errors), "first_errors": errors[:3],
                   "wall_s": round(submit_s, 3), "per_s": round(len(latencies) / submit_s, 1)},
        "submit_to_start_ms": spread([r["started_at"] - r["submitted_at"] for r in mine if r["started_at"]], 1000),
        "end_to_end": {"runs": len(mine), "wall_s": round(e2e_s, 3), "runs_per_s": round(len(mine) / e2e_s, 1),
                       "statuses": dict(Counter(r["status"] for r in mine))},
        "fanout": fanout,
        "server": {"pid": state["pid"], "rss_before_mb": round(rss_before / MB, 1),
                   "rss_after_mb": round(rss_after / MB, 1), "rss_peak_mb": round(peak / MB, 1),
                   "rss_growth_mb": round((rss_after - rss_before) / MB, 1),
                   "cpu_s": round(sum(cpu_after[:2]) - sum(cpu_before[:2]), 2),
                   "loop_thread_cpu_s": round(loop_after - loop_before, 2)},
        "client_cpu_s": round(client_cpu, 2),
    }


def verdict(r: dict[str, Any]) -> dict[str, bool | None]:
    """Each target met or not (None: not measured), plus the correctness checks."""
    f, e2e = r["fanout"], r["end_to_end"]
    return {"submit_p50_ms": r["submit"]["latency_ms"]["p50"] <= TARGETS["submit_p50_ms"],
            "runs_per_s": e2e["runs_per_s"] >= TARGETS["runs_per_s"],
            "events_per_s": f["events_per_s_total"] >= TARGETS["events_per_s"] if "events" in f else None,
            "rss_growth_mb": r["server"]["rss_growth_mb"] <= TARGETS["rss_growth_mb"],
            "gapless": f.get("gapless"),
            "all_succeeded": r["submit"]["errors"] == 0 and e2e["statuses"] == {"succeeded": e2e["runs"]}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=2000, help="measured runs (default 2000)")
    ap.add_argument("--subscribers", type=int, default=10, help="WebSocket subscribers to every run (default 10)")
    ap.add_argument("--concurrency", type=int, default=8, help="concurrent submitting connections (default 8)")
    ap.add_argument("--cpu-limit", type=int, default=8, help="the cpu queue's concurrent runs (default 8)")
    ap.add_argument("--warmup", type=int, default=10, help="uncounted runs before measuring (default 10)")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for each phase (default 600)")
    ap.add_argument("--one-client", type=int, default=200,
                    help="after the measured runs, submits from one client, one at a time, for the unloaded "
                         "submit latency (not counted elsewhere; default 200, 0: skip)")
    ap.add_argument("--batch", action="store_true",
                    help='subscribers ask for batch frames ({"subscribe", "all": true, "batch": true}: the events '
                         'frames ready at once arrive together) instead of one message per events frame')
    ap.add_argument("--out", help="also write the JSON to this file")
    args = ap.parse_args(argv)
    if (args.runs < 1 or args.subscribers < 0 or args.concurrency < 1 or args.cpu_limit < 1 or args.warmup < 1
            or args.one_client < 0):
        ap.error("--runs, --concurrency, --cpu-limit and --warmup must be >= 1, --subscribers and --one-client >= 0")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="codefy-bench-") as tmp, codefy_server(Path(tmp), args.cpu_limit) as state:
        results = asyncio.run(bench(args, state))
    report = {
        "machine": machine(),
        "parameters": {"runs": args.runs, "subscribers": args.subscribers, "concurrency": args.concurrency,
                       "cpu_limit": args.cpu_limit, "warmup": args.warmup, "one_client": args.one_client,
                       "graph": "Float -> Scale -> Scale (cpu)",
                       "http_client": "keep-alive HTTP/1.1 on asyncio streams, one connection per client",
                       "ws_client": "tornado websocket_connect",
                       "ws_frames": "batch" if args.batch else "one message per events frame"},
        "targets": TARGETS,
        "met": verdict(results),
        "results": results,
        "wall_s": round(time.perf_counter() - started, 2),
    }
    publish(report, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
