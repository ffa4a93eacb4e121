"""Run-queue benchmark: a real `codefy start` on loopback, 2,000 tiny runs, 10 live followers.

It starts its own headless server (`python -m codefy_jupyter.cli start`, i.e. `codefy start`) on a
free port in a temporary data dir, cpu limit raised (CODEFY_RUN_QUEUE_MAX_CONCURRENT_CPU,
`--cpu-limit`), retention off (CODEFY_RUN_RETENTION_KEEP_LAST=-1), and always `codefy stop`s it.
Every run is the no-op graph Float -> Scale -> Scale on cpu (8 events: execution_start, six
node_status, execution_complete), so what is measured is control-plane overhead.

  0. `--subscribers` WebSockets on /codefy/ws/execution, in a process of their own, send
     {"type":"subscribe","all":true} (with `--batch`, also "batch":true: the events frames ready
     at once come in one message); `--warmup` uncounted runs prove each one live.
  1. throughput: `--runs` POSTs to /codefy/api/runs from `--concurrency` clients, each on its own
     keep-alive HTTP/1.1 connection (a minimal client on asyncio streams) and each waiting for
     its answer before the next submit. Their latency is reported (`submit_concurrent`) but is
     queueing: about clients / throughput (`queueing_ms`).
     - submit -> start: `started_at - submitted_at` of each run (server clock), from the run list;
     - end to end: runs / (first submit -> last `finished_at`; one machine, one clock);
     - fan-out: the events each subscriber got for these runs until it saw every closing event,
       over (first submit -> that moment); total: all of them over (first submit -> the last
       subscriber done). Each run's log must arrive whole and gapless (seq 1, 2, ..., no duplicate);
     - server RSS (psutil, the pid in server.json) before and after, peak sampled every 0.25 s;
       server, client and subscriber CPU seconds (and the server's main thread alone: its event
       loop serves every request, socket and run).
  2. submit latency (`submit`, the target's figure): one client submits `--latency-runs` runs,
     each once the previous one is answered (request written -> answer read), while its runs
     execute and the subscribers follow them.
  3. the floor under any request (`request_floor`): `--floor-requests` GETs of one run, one at a
     time on the idle server, and the server loop's CPU per request (jupyter-server's and
     tornado's handling, auth, one store read).

`--store postgresql` runs the server on a throwaway PostgreSQL server started as the tests start
one (common.ThrowawayPostgres); `--store-url postgresql://...` on an empty database of your own.

    python benchmarks/run_queue.py [--runs 2000] [--subscribers 10] [--concurrency 8] [--latency-runs 2000] [--batch]
                                   [--store sqlite|postgresql] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, Iterator

import psutil

from codefy_jupyter.server.headless import read_state
from common import ThrowawayPostgres, free_port, publish
from ws_client import WsReader

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
@contextlib.contextmanager
def codefy_server(data_dir: Path, cpu_limit: int, extra_env: dict[str, str] | None = None) -> Iterator[dict[str, Any]]:
    """A `codefy start` on `data_dir` (retention off) for the duration; its server.json state."""
    env = {**os.environ, "CODEFY_DATA_DIR": str(data_dir), "CODEFY_RUN_QUEUE_MAX_CONCURRENT_CPU": str(cpu_limit),
           "CODEFY_RUN_RETENTION_KEEP_LAST": "-1", **(extra_env or {})}
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
        ws = await WsReader.connect("127.0.0.1", state["port"], f"{state['base_url']}codefy/ws/execution",
                                    {"Authorization": f"token {state['token']}"}, self.on_message)
        try:
            ws.send_text(json.dumps({"type": "subscribe", "all": True, **({"batch": True} if self.batch else {})}))
            await ws.closed
        finally:
            ws.close()

    def on_message(self, message: bytes) -> None:
        self.messages += 1
        frame = json.loads(message)
        for f in frame["frames"] if frame.get("type") == "batch" else [frame]:
            self.take(f)

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


# -- the subscribers, in a process of their own ----------------------------------------------------
# They decode every frame of every run: in the submitting clients' process they would hold its
# event loop (and GIL) when a submit's answer arrives, and the latency measured would be theirs.
# Their `closed` stamps are time.perf_counter(), CLOCK_MONOTONIC on Linux: one clock across
# processes, so they compare with the submitters' stamps.
def fanout_process(state: dict[str, Any], count: int, batch: bool, conn: Any) -> None:
    asyncio.run(_fanout(state, count, batch, conn))


async def _fanout(state: dict[str, Any], count: int, batch: bool, conn: Any) -> None:
    subs = [Subscriber(batch) for _ in range(count)]
    followers = [asyncio.create_task(s.follow(state)) for s in subs]
    loop = asyncio.get_running_loop()
    await asyncio.sleep(0.5)  # let the server take the subscribe frames
    conn.send(("ready", None))

    async def followed(ids: set[str]) -> bool:
        if any(f.done() for f in followers):
            raise RuntimeError(f"a subscriber stopped: {[f.exception() for f in followers if f.done()]}")
        return all(ids <= s.closed.keys() for s in subs)

    try:
        while True:
            command, arg = await loop.run_in_executor(None, conn.recv)
            if command == "stop":
                return
            if command == "messages":
                conn.send(("ok", sum(s.messages for s in subs)))
            elif command == "wait":  # (run ids, timeout): once every subscriber saw each one close
                ids, timeout = arg
                try:
                    await wait_until(lambda: followed(set(ids)), timeout, "the subscribers to see every run close")
                except Exception as err:
                    conn.send(("error", repr(err)))
                    continue
                conn.send(("ok", {"messages": sum(s.messages for s in subs),
                                  "subscribers": [{"runs": [s.runs.get(i, [0] * 5) for i in ids],
                                                   "closed": [s.closed[i] for i in ids], "errors": s.errors[:5]}
                                                  for s in subs]}))
    finally:
        for f in followers:
            f.cancel()


class Fanout:
    """The parent's handle on the subscriber process."""

    def __init__(self, state: dict[str, Any], count: int, batch: bool) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=fanout_process, args=(state, count, batch, child), daemon=True)
        self.process.start()

    async def ask(self, command: str, arg: Any = None, timeout: float = 600.0) -> Any:
        if command != "ready":
            self.conn.send((command, arg))
        loop = asyncio.get_running_loop()
        if not await loop.run_in_executor(None, self.conn.poll, timeout):
            raise TimeoutError(f"the subscriber process did not answer {command!r} within {timeout:g} s")
        status, value = self.conn.recv()
        if status == "error":
            raise RuntimeError(f"subscribers: {value}")
        return value

    def cpu_s(self) -> float:
        times = psutil.Process(self.process.pid).cpu_times()
        return times.user + times.system

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self.conn.send(("stop", None))
        self.process.join(10)
        if self.process.is_alive():
            self.process.kill()


async def submit_all(state: dict[str, Any], n: int, concurrency: int) -> tuple[list[str], list[float], list[Any]]:
    """`n` submits from `concurrency` clients, each waiting for its answer before the next."""
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


async def bench(args: argparse.Namespace, state: dict[str, Any]) -> dict[str, Any]:
    server = psutil.Process(state["pid"])
    control = Http(state)

    async def idle() -> bool:
        status, page = await control.request("GET", "runs?status=queued,running&limit=1")
        return status == 200 and page["total"] == 0

    fanout = Fanout(state, args.subscribers, args.batch) if args.subscribers else None
    try:
        if fanout is not None:
            await fanout.ask("ready")
        warm_ids, _, warm_errors = await submit_all(state, args.warmup, 1)
        if warm_errors:
            raise SystemExit(f"warm-up submits failed: {warm_errors[:3]}")
        if fanout is not None:
            await fanout.ask("wait", (warm_ids, args.timeout), args.timeout + 10)
        await wait_until(idle, args.timeout, "the warm-up runs to finish")
        return await _measure(args, state, server, control, idle, fanout)
    finally:
        control.close()
        if fanout is not None:
            fanout.stop()


async def _measure(args: argparse.Namespace, state: dict[str, Any], server: psutil.Process, control: Http,
                   idle: Any, fanout: Fanout | None) -> dict[str, Any]:
    # 1. Throughput: `--concurrency` clients submit `--runs` runs as fast as they are answered.
    rss_before, cpu_before, client_cpu = server.memory_info().rss, server.cpu_times(), time.process_time()
    loop_before = loop_cpu(server)
    subs_cpu = fanout.cpu_s() if fanout else 0.0
    peak = rss_before

    async def sample_rss() -> None:
        nonlocal peak
        while True:
            peak = max(peak, server.memory_info().rss)
            await asyncio.sleep(0.25)

    sampler = asyncio.create_task(sample_rss())
    messages_before = await fanout.ask("messages") if fanout else 0
    t0, wall0 = time.perf_counter(), time.time()
    ids, latencies, errors = await submit_all(state, args.runs, args.concurrency)
    submit_s = time.perf_counter() - t0
    if not ids:
        raise SystemExit(f"every submit failed: {errors[:3]}")
    followed = await fanout.ask("wait", (ids, args.timeout), args.timeout + 10) if fanout else None
    await wait_until(idle, args.timeout, "every run to finish")
    sampler.cancel()
    rss_after, cpu_after, loop_after = server.memory_info().rss, server.cpu_times(), loop_cpu(server)
    client_cpu = time.process_time() - client_cpu
    subs_cpu = (fanout.cpu_s() - subs_cpu) if fanout else 0.0

    # 2. Latency: one client submits `--latency-runs` runs, each once the previous one is answered,
    # while its runs execute and the subscribers follow them.
    lat_ids, lat_latencies, lat_errors = await submit_all(state, args.latency_runs, 1) if args.latency_runs else ([], [], [])
    await wait_until(idle, args.timeout, "the latency phase's runs to finish")
    if fanout is not None and lat_ids:
        await fanout.ask("wait", (lat_ids, args.timeout), args.timeout + 10)

    # 3. The floor under any request: a GET of one run (auth, routing, one store read, the answer),
    # one at a time on an idle server, and the server loop's CPU for each.
    floor_ms: list[float] = []
    floor_loop = loop_cpu(server)
    for _ in range(args.floor_requests):
        t = time.perf_counter()
        await control.request("GET", f"runs/{ids[0]}")
        floor_ms.append(time.perf_counter() - t)
    floor_loop_ms = (loop_cpu(server) - floor_loop) / max(1, args.floor_requests) * 1000

    measured = set(ids)
    rows: dict[str, dict[str, Any]] = {}
    total = args.warmup + len(ids) + len(lat_ids)
    for offset in range(0, total + 50, 50):
        status, page = await control.request("GET", f"runs?limit=50&offset={offset}")
        rows.update((r["id"], r) for r in page["runs"] if r["id"] in measured)
    mine = [rows[i] for i in ids if i in rows]
    e2e_s = max(r["finished_at"] for r in mine) - wall0

    fan: dict[str, Any] = {"subscribers": args.subscribers, "batch_frames": args.batch,
                           "process": "its own (the submitting clients do not decode events)"}
    if followed is not None:
        subs = followed["subscribers"]
        sums = [sum(r[k] for sub in subs for r in sub["runs"]) for k in range(5)]
        done = [max(sub["closed"]) - t0 for sub in subs]
        per_sub = [sum(r[0] for r in sub["runs"]) / d for sub, d in zip(subs, done)]
        incomplete = sum(r[0] != r[1] for sub in subs for r in sub["runs"])  # gapless from seq 1: events == last seq
        fan.update(events=sums[0], frames=sums[4], messages=followed["messages"] - messages_before,
                   events_per_run=round(sums[0] / len(subs) / len(ids), 2),
                   events_per_s_per_subscriber={"min": round(min(per_sub)), "max": round(max(per_sub))},
                   events_per_s_total=round(sums[0] / max(done)), lag_s=round(max(done) - e2e_s, 3),
                   gaps=sums[2], duplicates=sums[3], incomplete_runs=incomplete,
                   gapless=sums[2] == sums[3] == incomplete == 0,
                   errors=[e for sub in subs for e in sub["errors"]][:5], cpu_s=round(subs_cpu, 2))
    return {
        "submit": {"clients": 1, "runs": len(lat_latencies), "latency_ms": spread(lat_latencies, 1000)
                   if lat_latencies else None, "errors": len(lat_errors), "first_errors": lat_errors[:3]},
        "submit_concurrent": {"clients": args.concurrency, "latency_ms": spread(latencies, 1000),
                              "queueing_ms": round(args.concurrency / (len(latencies) / submit_s) * 1000, 1),
                              "errors": len(errors), "first_errors": errors[:3],
                              "wall_s": round(submit_s, 3), "per_s": round(len(latencies) / submit_s, 1)},
        "request_floor": {"what": "GET runs/{id}, one at a time, idle server", "latency_ms": spread(floor_ms, 1000),
                          "loop_cpu_ms": round(floor_loop_ms, 3)},
        "submit_to_start_ms": spread([r["started_at"] - r["submitted_at"] for r in mine if r["started_at"]], 1000),
        "end_to_end": {"runs": len(mine), "wall_s": round(e2e_s, 3), "runs_per_s": round(len(mine) / e2e_s, 1),
                       "statuses": dict(Counter(r["status"] for r in mine))},
        "fanout": fan,
        "server": {"pid": state["pid"], "rss_before_mb": round(rss_before / MB, 1),
                   "rss_after_mb": round(rss_after / MB, 1), "rss_peak_mb": round(peak / MB, 1),
                   "rss_growth_mb": round((rss_after - rss_before) / MB, 1),
                   "cpu_s": round(sum(cpu_after[:2]) - sum(cpu_before[:2]), 2),
                   "loop_thread_cpu_s": round(loop_after - loop_before, 2)},
        "client_cpu_s": round(client_cpu, 2),
    }


def verdict(r: dict[str, Any]) -> dict[str, bool | None]:
    """Each target met or not (None: not measured), plus the correctness checks. The submit target
    is read on one client's latency (phase 2): with N clients each waiting for its answer the p50
    is about N / throughput (phase 1's `queueing_ms`), a throughput figure, not a latency."""
    f, e2e, one = r["fanout"], r["end_to_end"], r["submit"]["latency_ms"]
    return {"submit_p50_ms": one["p50"] <= TARGETS["submit_p50_ms"] if one else None,
            "runs_per_s": e2e["runs_per_s"] >= TARGETS["runs_per_s"],
            "events_per_s": f["events_per_s_total"] >= TARGETS["events_per_s"] if "events" in f else None,
            "rss_growth_mb": r["server"]["rss_growth_mb"] <= TARGETS["rss_growth_mb"],
            "gapless": f.get("gapless"),
            "all_succeeded": r["submit"]["errors"] == r["submit_concurrent"]["errors"] == 0
            and e2e["statuses"] == {"succeeded": e2e["runs"]}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=2000, help="measured runs (default 2000)")
    ap.add_argument("--subscribers", type=int, default=10, help="WebSocket subscribers to every run (default 10)")
    ap.add_argument("--concurrency", type=int, default=8, help="concurrent submitting connections (default 8)")
    ap.add_argument("--cpu-limit", type=int, default=8, help="the cpu queue's concurrent runs (default 8)")
    ap.add_argument("--warmup", type=int, default=10, help="uncounted runs before measuring (default 10)")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for each phase (default 600)")
    ap.add_argument("--latency-runs", type=int, default=2000,
                    help="phase 2: runs submitted by one client, each once the previous submit is answered, "
                         "while they execute and the subscribers follow (default 2000, 0: skip)")
    ap.add_argument("--floor-requests", type=int, default=300,
                    help="phase 3: GETs of one run on the idle server, the floor under any request (default 300)")
    ap.add_argument("--batch", action="store_true",
                    help='subscribers ask for batch frames ({"subscribe", "all": true, "batch": true}: the events '
                         'frames ready at once arrive together) instead of one message per events frame')
    ap.add_argument("--store", choices=("sqlite", "postgresql"), default="sqlite",
                    help="the run database: the SQLite file (default), or a throwaway PostgreSQL server started "
                         "as the tests start one")
    ap.add_argument("--store-url", default="",
                    help="the server's store_url: a postgresql:// database (empty: the SQLite file, the default); "
                         "the database should be empty, as the SQLite file starts")
    ap.add_argument("--out", help="also write the JSON to this file")
    args = ap.parse_args(argv)
    if (args.runs < 1 or args.subscribers < 0 or args.concurrency < 1 or args.cpu_limit < 1 or args.warmup < 1
            or args.latency_runs < 0 or args.floor_requests < 1):
        ap.error("--runs, --concurrency, --cpu-limit, --warmup and --floor-requests must be >= 1, "
                 "--subscribers and --latency-runs >= 0")
    started = time.perf_counter()
    with contextlib.ExitStack() as stack:
        url = args.store_url
        pg_version = None
        if args.store == "postgresql" and not url:
            pg = stack.enter_context(ThrowawayPostgres())
            url, pg_version = pg.create_database(), pg.version()
        # One server on this machine: its run files are where any replica would reach them.
        store_env = {"CODEFY_STORE_URL": url, "CODEFY_RUN_FILES_SHARED": "1"} if url else {}
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="codefy-bench-"))
        state = stack.enter_context(codefy_server(Path(tmp), args.cpu_limit, store_env))
        results = asyncio.run(bench(args, state))
    publish(args.out, started,
            parameters={"runs": args.runs, "subscribers": args.subscribers, "concurrency": args.concurrency,
                        "cpu_limit": args.cpu_limit, "warmup": args.warmup, "latency_runs": args.latency_runs,
                        "floor_requests": args.floor_requests,
                        "store": "postgresql" if url else "sqlite", "postgresql_version": pg_version,
                        "graph": "Float -> Scale -> Scale (cpu)",
                        "http_client": "keep-alive HTTP/1.1 on asyncio streams, one connection per client",
                        "ws_client": "a read-only asyncio Protocol (benchmarks/ws_client.py)",
                        "ws_frames": "batch" if args.batch else "one message per events frame"},
            targets=TARGETS, met=verdict(results), results=results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
