"""Request-cost benchmark: what one huge bad request costs every other client.

Two measurements, each against the code Python imports:

1. Parsing (in process): the issue's 10 MB body `{"graph": {"nodes": [1, 1, ...]}}` parsed by the
   server's sliced parser (`server/json_body.py`) while a thread ticks every millisecond; reported:
   the longest gap the ticker saw (how long one C call held the GIL) against `json.loads` of the
   same document, which holds it for the whole parse.
2. Serving (a real `codefy start` on loopback): that body POSTed to `codefy/api/runs` while another
   connection keeps GETting `runs?limit=5`; reported: the POST's answer and time, and the GETs'
   latency without the POST (baseline) and while it is parsed (50th/90th percentile, worst).

    python benchmarks/request_cost.py [--values 5000000] [--repeat 3] [--out FILE]

Targets (the hardening issue's): a GET beside the POST answered in under 100 ms at the 90th
percentile; the POST refused (400 `invalid_graph`, the first 100 problems and a count) in seconds.
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from common import publish
from run_queue import codefy_server

from codefy_jupyter.server.json_body import loads

TARGETS = {"get_p90_during_post_ms": 100.0}


def body(values: int) -> bytes:
    return ('{"graph": {"nodes": [' + ",".join(["1"] * values) + "]}}").encode()


def longest_pause(parse: Any, raw: bytes) -> float:
    """The longest a 1 ms ticker thread waited while `parse(raw)` ran (seconds)."""
    gaps: list[float] = []
    done = threading.Event()

    def tick() -> None:
        last = time.perf_counter()
        while not done.is_set():
            time.sleep(0.001)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    ticker = threading.Thread(target=tick)
    ticker.start()
    try:
        parse(raw)
    finally:
        done.set()
        ticker.join()
    return max(gaps)


def parsing(raw: bytes, repeat: int) -> dict[str, Any]:
    sliced, whole = [], []
    for _ in range(repeat):
        sliced.append(longest_pause(loads, raw))
        whole.append(longest_pause(json.loads, raw))
    return {"sliced_longest_pause_ms": round(min(sliced) * 1000, 1),
            "json_loads_longest_pause_ms": round(min(whole) * 1000, 1)}


def timed_get(conn: http.client.HTTPConnection, token: str) -> float:
    started = time.perf_counter()
    conn.request("GET", "/codefy/api/runs?limit=5", headers={"Authorization": f"token {token}"})
    response = conn.getresponse()
    response.read()
    if response.status != 200:
        raise SystemExit(f"GET runs answered {response.status}")
    return time.perf_counter() - started


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p))]


def serving(state: dict[str, Any], raw: bytes) -> dict[str, Any]:
    token = state["token"]
    reader = http.client.HTTPConnection("127.0.0.1", state["port"], timeout=60)
    timed_get(reader, token)  # connected and warm
    baseline = [timed_get(reader, token) for _ in range(50)]
    answer: dict[str, Any] = {}

    def post() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", state["port"], timeout=300)
        began = time.perf_counter()
        conn.request("POST", "/codefy/api/runs", body=raw,
                     headers={"Authorization": f"token {token}", "Content-Type": "application/json"})
        response = conn.getresponse()
        text = response.read()
        answer.update(status=response.status, bytes=len(text), seconds=time.perf_counter() - began,
                      code=json.loads(text).get("error", {}).get("code"))
        conn.close()

    poster = threading.Thread(target=post)
    during: list[float] = []
    poster.start()
    while poster.is_alive():
        during.append(timed_get(reader, token))
        time.sleep(0.01)
    poster.join()
    reader.close()
    return {"post": {"status": answer.get("status"), "code": answer.get("code"), "answer_bytes": answer.get("bytes"),
                     "seconds": round(answer.get("seconds", float("nan")), 2)},
            "get_baseline_ms": {"p50": round(statistics.median(baseline) * 1000, 1),
                                "p90": round(pct(baseline, 0.9) * 1000, 1)},
            "get_during_post_ms": {"count": len(during), "p50": round(statistics.median(during) * 1000, 1),
                                   "p90": round(pct(during, 0.9) * 1000, 1), "worst": round(max(during) * 1000, 1)}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--values", type=int, default=5_000_000, help="numbers in the bad body's node list (default 5,000,000: ~10 MB)")
    ap.add_argument("--repeat", type=int, default=3, help="parse and POST rounds; the parse reports the best (default 3)")
    ap.add_argument("--out", help="also write the JSON to this file")
    args = ap.parse_args(argv)
    if args.values < 1 or args.repeat < 1:
        ap.error("--values and --repeat must be >= 1")
    started = time.perf_counter()
    raw = body(args.values)
    parse = parsing(raw, args.repeat)
    with tempfile.TemporaryDirectory(prefix="codefy-bench-") as tmp, codefy_server(Path(tmp), 1) as state:
        rounds = [serving(state, raw) for _ in range(args.repeat)]
    worst_p90 = max(r["get_during_post_ms"]["p90"] for r in rounds)
    publish(args.out, started,
            parameters={"values": args.values, "body_bytes": len(raw), "repeat": args.repeat},
            targets=TARGETS, met={"get_p90_during_post_ms": worst_p90 < TARGETS["get_p90_during_post_ms"]},
            results={"parsing": parse, "serving": rounds})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
