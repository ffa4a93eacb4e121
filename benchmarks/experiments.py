"""Experiments benchmark: a study's bookkeeping and a sweep's fan-out, on a real `codefy start`.

It starts its own headless server (`python -m codefy_jupyter.cli start`) on a free port in a
temporary data dir, cpu limit raised (`--cpu-limit`), retention off, and the sweep caps raised
(CODEFY_MAX_SWEEP_RUNS / CODEFY_MAX_SWEEP_DOMAIN = 1000, so that a study may have `--variants`
variants and a sweep 1,000), and always `codefy stop`s it. Every child is a no-op graph (List ->
Mean, the Mean logs `mean`, the objective): what is measured is control-plane overhead.

  1. plain runs (the baseline): as many runs as the study has attempts, the same graphs with a
     seed as a study's children have, POSTed to /codefy/api/runs from `--concurrency` clients;
     the server process's CPU seconds (all threads, psutil: utime + stime) from the first submit
     to the last run's end. A seeded run seeds torch before each node, which costs more than the
     no-op graph itself; the same runs without a seed are measured too (`plain_unseeded`), to show
     how much.
  2. study bookkeeping: a study of `--variants` x `--repetitions` attempts, max_parallel_runs 32
     (the cap), POSTed once; the server's CPU from the POST to the study's end (the client
     watches `GET studies?status=...&limit=1`, a summary row, every 0.25 s). Per attempt: raw
     (CPU / attempts), and net of phase 1's CPU per plain run: the study's own bookkeeping (its
     decisions, attempt rows, audit log, evidence and ranking). Phase 1's figure includes the
     HTTP submit each plain run needs and a study child does not, so net is a slight
     under-estimate by about one request's handling (`request_floor_cpu_ms`, measured too).
  3. the same study again with two readers, as the clients read it (`codefy study`, Client.watch_study,
     StudyView and the Lab's study view): one follows GET studies/{id}?view=summary by its long-poll
     (`&revision=R&wait=10`, back to back, R the revision of its last answer), the other follows
     studies/{id}/events?wait=10 with its cursor; the study's wall time with vs. without them
     (phase 2): the target. Then once more with the first reader polling instead, the summary form
     back to back with a 50 ms pause and no long-poll (a client of its own that ignores it), for
     comparison.
  4. sweeps of 32 and 1,000 variants (one Float param, grid): POST -> answer (every child queued
     when the 201 is written), and POST -> the first child's started_at (server clock, same machine)
     vs. a plain run's POST -> its started_at, on the idle server.

    python benchmarks/experiments.py [--variants 32] [--repetitions 32] [--cpu-limit 8] [--repeat 3]
                                     [--only studies|sweeps] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

from common import publish
from run_queue import Http, codefy_server, spread, wait_until

TARGETS = {"study_net_cpu_ms_per_attempt": 2.0, "sweep_32_post_ms": 50.0, "sweep_1000_post_ms": 1000.0,
           "sweep_first_start_vs_plain_ms": 5.0, "readers_slowdown_pct": 10.0}
CAPS = 1000
CAP_ENV = {"CODEFY_MAX_SWEEP_RUNS": str(CAPS), "CODEFY_MAX_SWEEP_DOMAIN": str(CAPS)}
PARALLEL = 32  # the study's max_parallel_runs cap


def edge(s: str, sp: str, t: str, tp: str) -> dict[str, str]:
    return {"source": s, "source_port": sp, "target": t, "target_port": tp}


def mean_graph(i: int) -> dict[str, Any]:
    return {"nodes": [{"id": "vals", "type": "List", "params": {"values": [i, i + 1]}},
                      {"id": "m", "type": "Mean"}],
            "edges": [edge("vals", "values", "m", "values")], "settings": {"device": "cpu"}}


FLOAT = {"nodes": [{"id": "f", "type": "Float", "params": {"value": 1.0}}], "edges": [], "settings": {"device": "cpu"}}


def cpu_s(p: psutil.Process) -> float:
    t = p.cpu_times()
    return t.user + t.system


class Bench:
    def __init__(self, state: dict[str, Any], args: argparse.Namespace) -> None:
        self.state, self.args = state, args
        self.server = psutil.Process(state["pid"])
        self.control = Http(state)

    async def ok(self, method: str, path: str, body: Any = None, conn: Http | None = None) -> Any:
        status, doc = await (conn or self.control).request(method, path, body)
        if status not in (200, 201):
            raise SystemExit(f"{method} {path}: {status} {doc}")
        return doc

    async def idle(self) -> bool:
        page = await self.ok("GET", "runs?status=queued,running&limit=1")
        return page["total"] == 0

    # -- 1. plain runs ----------------------------------------------------------------------------
    async def plain(self, n: int, seeded: bool = True) -> dict[str, Any]:
        left = iter(range(n))
        ids: list[str] = []

        async def client() -> None:
            conn = Http(self.state)
            try:
                for i in left:
                    body = {"graph": mean_graph(i % self.args.variants), **({"options": {"seed": i}} if seeded else {})}
                    ids.append((await self.ok("POST", "runs", body, conn))["id"])
            finally:
                conn.close()

        cpu0, t0 = cpu_s(self.server), time.perf_counter()
        await asyncio.gather(*(client() for _ in range(self.args.concurrency)))
        await wait_until(self.idle, self.args.timeout, "the plain runs to finish")
        wall, cpu = time.perf_counter() - t0, cpu_s(self.server) - cpu0
        return {"runs": len(ids), "wall_s": round(wall, 3), "server_cpu_s": round(cpu, 3),
                "cpu_ms_per_run": round(cpu / len(ids) * 1000, 3)}

    async def request_floor(self, run_id: str, n: int = 200) -> float:
        cpu0 = cpu_s(self.server)
        for _ in range(n):
            await self.ok("GET", f"runs/{run_id}")
        return (cpu_s(self.server) - cpu0) / n * 1000

    # -- 2./3. a study ----------------------------------------------------------------------------
    def study_body(self, name: str) -> dict[str, Any]:
        return {"name": name, "objective": {"node_id": "m", "metric": "mean", "direction": "minimize"},
                "variants": [{"label": f"v{i}", "graph": mean_graph(i)} for i in range(self.args.variants)],
                "repetitions": self.args.repetitions, "seed": 1, "budget": {"max_parallel_runs": PARALLEL}}

    async def study(self, name: str, readers: str | None) -> dict[str, Any]:
        """`readers`: None, "follow" (the GET reader on the long-poll) or "poll" (every 50 ms)."""
        attempts = self.args.variants * self.args.repetitions
        stop = asyncio.Event()
        counts: dict[str, Any] = {"gets": 0, "get_ms": [], "event_polls": 0, "events": 0}

        async def getter(study_id: str) -> None:
            conn, revision = Http(self.state), None
            try:
                while not stop.is_set():
                    follow = readers == "follow" and revision is not None
                    t = time.perf_counter()
                    doc = await self.ok("GET", f"studies/{study_id}?view=summary"
                                        + (f"&revision={revision}&wait=10" if follow else ""), conn=conn)
                    if not follow:  # a long-poll's time is mostly its wait
                        counts["get_ms"].append((time.perf_counter() - t) * 1000)
                    counts["gets"] += 1
                    revision = doc["revision"]
                    if readers == "follow":
                        if doc["status"] not in ("queued", "running", "cancel_requested"):
                            return
                    else:
                        await asyncio.sleep(0.05)
            finally:
                conn.close()

        async def follower(study_id: str) -> None:
            conn, cursor = Http(self.state), 0
            try:
                while not stop.is_set():
                    page = await self.ok("GET", f"studies/{study_id}/events?cursor={cursor}&wait=10", conn=conn)
                    counts["event_polls"] += 1
                    counts["events"] += len(page["events"])
                    cursor = page["cursor"]
                    if page["status"] not in ("queued", "running", "cancel_requested") and not page["more"]:
                        return
            finally:
                conn.close()

        async def done() -> bool:
            page = await self.ok("GET", "studies?status=queued,running,cancel_requested&limit=1")
            return not page["studies"]

        cpu0, loop0, t0 = cpu_s(self.server), self.loop_cpu(), time.perf_counter()
        doc = await self.ok("POST", "studies", self.study_body(name))
        post_ms = (time.perf_counter() - t0) * 1000
        tasks = [asyncio.create_task(getter(doc["id"])), asyncio.create_task(follower(doc["id"]))] if readers else []
        await wait_until(done, self.args.timeout, f"study {name} to end")
        wall, cpu, loop = time.perf_counter() - t0, cpu_s(self.server) - cpu0, self.loop_cpu() - loop0
        stop.set()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        final = await self.ok("GET", f"studies/{doc['id']}")
        succeeded = final["counts"]["succeeded"]
        out = {"attempts": attempts, "status": final["status"], "succeeded": succeeded, "post_ms": round(post_ms, 1),
               "wall_s": round(wall, 3), "server_cpu_s": round(cpu, 3), "loop_thread_cpu_s": round(loop, 3),
               "cpu_ms_per_attempt": round(cpu / attempts * 1000, 3)}
        if readers:
            out["readers"] = {"view": readers, "study_gets": counts["gets"], "study_get_ms": spread(counts["get_ms"])
                              if counts["get_ms"] else None,
                              "event_polls": counts["event_polls"], "events": counts["events"]}
        return out

    def loop_cpu(self) -> float:
        return next((t.user_time + t.system_time for t in self.server.threads() if t.id == self.server.pid), 0.0)

    # -- 4. sweeps --------------------------------------------------------------------------------
    async def started_at(self, run_id: str) -> float:
        while True:
            run = await self.ok("GET", f"runs/{run_id}")
            if run["started_at"] is not None:
                return run["started_at"]
            await asyncio.sleep(0.002)

    async def sweep(self, n: int) -> dict[str, Any]:
        body = {"base_graph": FLOAT, "name": f"sweep{n}",
                "sweep_spec": {"params": [{"node_id": "f", "param": "value", "values": [float(i) for i in range(n)]}]},
                "objective": {"metric": "value", "direction": "minimize"}}
        wall0, t0 = time.time(), time.perf_counter()
        doc = await self.ok("POST", "sweeps", body)
        post_ms = (time.perf_counter() - t0) * 1000
        queued = sum(v["status"] == "queued" or v["status"] in ("running", "succeeded") for v in doc["variants"])
        first = await self.started_at(doc["variants"][0]["run_id"])
        await wait_until(self.idle, self.args.timeout, f"the {n}-variant sweep to finish")
        return {"variants": n, "post_ms": round(post_ms, 1), "queued_by_answer": queued,
                "first_start_ms": round((first - wall0) * 1000, 1)}

    async def plain_start(self) -> float:
        wall0 = time.time()
        run = await self.ok("POST", "runs", {"graph": FLOAT})
        start = await self.started_at(run["id"])
        await wait_until(self.idle, self.args.timeout, "a plain run to finish")
        return (start - wall0) * 1000


async def bench(args: argparse.Namespace, state: dict[str, Any]) -> dict[str, Any]:
    b = Bench(state, args)
    try:
        # Warm-up: imports, the store's statements, the first study's code paths.
        warm = await b.ok("POST", "runs", {"graph": mean_graph(0)})
        await wait_until(b.idle, args.timeout, "the warm-up run")
        small = argparse.Namespace(**{**vars(args), "variants": 2, "repetitions": 2})
        await Bench(state, small).study("warm-up", readers=None)
        floor = await b.request_floor(warm["id"])
        rounds: list[dict[str, Any]] = []
        for _ in range(args.repeat if args.only != "sweeps" else 0):
            unseeded = await b.plain(args.variants * args.repetitions, seeded=False)
            plain = await b.plain(args.variants * args.repetitions)
            alone = await b.study("alone", readers=None)
            read = await b.study("read", readers="follow")
            polled = await b.study("polled", readers="poll")
            net = alone["cpu_ms_per_attempt"] - plain["cpu_ms_per_run"]
            rounds.append({"plain": plain, "plain_unseeded": unseeded, "study": alone, "study_with_readers": read,
                           "study_with_pollers": polled, "net_cpu_ms_per_attempt": round(net, 3),
                           "readers_slowdown_pct": round((read["wall_s"] / alone["wall_s"] - 1) * 100, 1),
                           "pollers_slowdown_pct": round((polled["wall_s"] / alone["wall_s"] - 1) * 100, 1)})
        sweeps: list[dict[str, Any]] = []
        plain_starts: list[float] = []
        for _ in range(args.repeat if args.only != "studies" else 0):
            for n in (32, 1000):
                plain_starts.append(await b.plain_start())
                sweeps.append(await b.sweep(n))
        return {"request_floor_cpu_ms": round(floor, 3), "rounds": rounds, "sweeps": sweeps,
                "plain_first_start_ms": [round(x, 1) for x in plain_starts]}
    finally:
        b.control.close()


def summarize(r: dict[str, Any]) -> dict[str, Any]:
    rounds = r["rounds"]

    def span(values: list[float]) -> dict[str, float] | None:
        if not values:
            return None  # a phase --only left out
        return {"median": round(statistics.median(values), 3), "min": round(min(values), 3),
                "max": round(max(values), 3)}

    out = {
        "study_raw_cpu_ms_per_attempt": span([x["study"]["cpu_ms_per_attempt"] for x in rounds]),
        "plain_cpu_ms_per_run": span([x["plain"]["cpu_ms_per_run"] for x in rounds]),
        "plain_unseeded_cpu_ms_per_run": span([x["plain_unseeded"]["cpu_ms_per_run"] for x in rounds]),
        "study_net_cpu_ms_per_attempt": span([x["net_cpu_ms_per_attempt"] for x in rounds]),
        "study_wall_s": span([x["study"]["wall_s"] for x in rounds]),
        "plain_wall_s": span([x["plain"]["wall_s"] for x in rounds]),
        "study_with_readers_wall_s": span([x["study_with_readers"]["wall_s"] for x in rounds]),
        "readers_slowdown_pct": span([x["readers_slowdown_pct"] for x in rounds]),
        "study_with_pollers_wall_s": span([x["study_with_pollers"]["wall_s"] for x in rounds]),
        "pollers_slowdown_pct": span([x["pollers_slowdown_pct"] for x in rounds]),
        "study_gets_following": span([x["study_with_readers"]["readers"]["study_gets"] for x in rounds]),
        "study_gets_polling": span([x["study_with_pollers"]["readers"]["study_gets"] for x in rounds]),
        "study_get_ms_polling": span([x["study_with_pollers"]["readers"]["study_get_ms"]["p50"] for x in rounds
                                      if x["study_with_pollers"]["readers"]["study_get_ms"]]),
        "plain_first_start_ms": span(r["plain_first_start_ms"]),
    }
    for n in (32, 1000):
        mine = [s for s in r["sweeps"] if s["variants"] == n]
        out[f"sweep_{n}_post_ms"] = span([s["post_ms"] for s in mine])
        out[f"sweep_{n}_first_start_ms"] = span([s["first_start_ms"] for s in mine])
    return out


def verdict(s: dict[str, Any], r: dict[str, Any]) -> dict[str, bool | None]:
    def met(key: str, target: float) -> bool | None:
        return None if s[key] is None else s[key]["median"] <= target

    plain = s["plain_first_start_ms"]
    return {
        "study_net_cpu_ms_per_attempt": met("study_net_cpu_ms_per_attempt", TARGETS["study_net_cpu_ms_per_attempt"]),
        "sweep_32_post_ms": met("sweep_32_post_ms", TARGETS["sweep_32_post_ms"]),
        "sweep_1000_post_ms": met("sweep_1000_post_ms", TARGETS["sweep_1000_post_ms"]),
        "sweep_first_start_vs_plain_ms": None if plain is None else all(
            s[f"sweep_{n}_first_start_ms"]["median"] - plain["median"] <= TARGETS["sweep_first_start_vs_plain_ms"]
            for n in (32, 1000)),
        "readers_slowdown_pct": met("readers_slowdown_pct", TARGETS["readers_slowdown_pct"]),
        "all_succeeded": all(x[k]["status"] == "succeeded" and x[k]["succeeded"] == x[k]["attempts"]
                             for x in r["rounds"] for k in ("study", "study_with_readers", "study_with_pollers"))
        and all(s_["queued_by_answer"] == s_["variants"] for s_ in r["sweeps"]),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--variants", type=int, default=32, help="the study's variants (default 32)")
    ap.add_argument("--repetitions", type=int, default=32, help="the study's repetitions (default 32, the cap)")
    ap.add_argument("--cpu-limit", type=int, default=8, help="the cpu queue's concurrent runs (default 8)")
    ap.add_argument("--concurrency", type=int, default=8, help="clients submitting the plain runs (default 8)")
    ap.add_argument("--repeat", type=int, default=3, help="rounds of every phase (default 3)")
    ap.add_argument("--only", choices=("studies", "sweeps"), help="run only the study phases (1-3) or the sweeps (4)")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for each phase (default 600)")
    ap.add_argument("--out", help="also write the JSON to this file")
    args = ap.parse_args(argv)
    if min(args.variants, args.repetitions, args.cpu_limit, args.concurrency, args.repeat) < 1 or args.variants > CAPS \
            or args.repetitions > 32:
        ap.error("every count must be >= 1, --variants <= 1000 and --repetitions <= 32")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="codefy-bench-") as tmp, codefy_server(Path(tmp), args.cpu_limit, CAP_ENV) as state:
        results = asyncio.run(bench(args, state))
    summary = summarize(results)
    publish(args.out, started,
            parameters={"variants": args.variants, "repetitions": args.repetitions,
                        "attempts": args.variants * args.repetitions, "max_parallel_runs": PARALLEL,
                        "cpu_limit": args.cpu_limit, "concurrency": args.concurrency, "repeat": args.repeat,
                        "only": args.only, "study_readers": ["follow (long-poll)", "poll (50 ms)"],
                        "study_graph": "List -> Mean (cpu)", "sweep_graph": "Float (cpu), one param, grid",
                        "caps": {"CODEFY_MAX_SWEEP_RUNS": CAPS, "CODEFY_MAX_SWEEP_DOMAIN": CAPS},
                        "cpu": "server process, all threads (psutil utime + stime)"},
            targets=TARGETS, met=verdict(summary, results), summary=summary, results=results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
