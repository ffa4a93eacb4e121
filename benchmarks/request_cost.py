"""Request-cost benchmark: what one huge bad request costs every other client.

Three measurements, each against the code Python imports:

1. Parsing (in process): the issue's 10 MB body `{"graph": {"nodes": [1, 1, ...]}}` parsed by the
   server's sliced parser (`server/json_body.py`) while a thread ticks every millisecond; reported:
   the longest gap the ticker saw (how long one C call held the GIL) against `json.loads` of the
   same document, which holds it for the whole parse.
2. Serving (a real `codefy start` on loopback): that body POSTed to `codefy/api/runs` while another
   connection keeps GETting `runs?limit=5`; reported: the POST's answer and time, and the GETs'
   latency without the POST (baseline) and while it is parsed (50th/90th percentile, worst).
3. Listing workers (the same server): two enrolled workers connected with the largest hello the
   server accepts (wire/hello_limits.py: every device, node type and string at its bound), and
   `GET workers` (what the Workers panel reads) asked back to back on one connection while
   another pings `GET runs?limit=1`; reported: the listing's size and time, the pings' latency.

    python benchmarks/request_cost.py [--values 5000000] [--repeat 3] [--listings 40] [--out FILE]

Targets (the hardening issue's): a GET beside the POST, and a ping beside the listings, answered
in under 100 ms at the 90th percentile; the POST refused (400 `invalid_graph`, the first 100
problems and a count) in seconds.
"""

from __future__ import annotations

import argparse
import asyncio
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

from tornado.httpclient import HTTPRequest
from tornado.websocket import websocket_connect

from codefy_jupyter._version import __version__
from codefy_jupyter.server.json_body import loads
from codefy_jupyter.wire import hello_limits as hl
from codefy_jupyter.wire import protocol as wp
from codefy_jupyter.wire.compact_json import dumps

TARGETS = {"get_p90_during_post_ms": 100.0, "ping_p90_during_listings_ms": 100.0}


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


def timed_get(conn: http.client.HTTPConnection, token: str, path: str = "runs?limit=5") -> float:
    started = time.perf_counter()
    conn.request("GET", f"/codefy/api/{path}", headers={"Authorization": f"token {token}"})
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


# -- 3. listing the largest workers ----------------------------------------------------------------
def request(state: dict[str, Any], method: str, path: str, body: Any = None, token: str | None = None) -> Any:
    conn = http.client.HTTPConnection("127.0.0.1", state["port"], timeout=120)
    headers = {"Content-Type": "application/json"}
    if token != "":
        headers["Authorization"] = f"token {token or state['token']}"
    conn.request(method, f"/codefy/api/{path}", body=json.dumps(body).encode() if body is not None else b"",
                 headers=headers)
    response = conn.getresponse()
    answer = json.loads(response.read() or b"null")
    conn.close()
    if response.status >= 300:
        raise SystemExit(f"{method} {path} answered {response.status}: {answer}")
    return answer


def device(box: int, i: int) -> dict[str, Any]:
    """A device entry of exactly the longest accepted JSON."""
    entry = {"device": f"cuda:{i}", "uuid": f"GPU-{box}-{i}", "total_memory": 80 << 30, "name": ""}
    entry["name"] = "N" * (hl.HELLO_MAX_DEVICE_CHARS - len(dumps(entry)))
    return entry


def largest_hello(name: str, box: int, catalog: dict[str, Any]) -> wp.Hello:
    types = {f"pack.T{i:05d}".ljust(hl.HELLO_MAX_NAME_CHARS, "t"): "h" * 64
             for i in range(hl.HELLO_MAX_NODE_TYPES - len(catalog["types"]))}
    return wp.Hello(name=name, version=__version__, protocol_version=wp.PROTOCOL_VERSION,
                    catalog_hash="x" * 64, node_types={**catalog["types"], **types}, capabilities=["ack"],
                    devices=[device(box, i) for i in range(hl.HELLO_MAX_DEVICES)],
                    platform="p" * hl.HELLO_MAX_TEXT_CHARS, machine_id="m" * 64,
                    fingerprint={"packages": [f"pkg{i}==1.0" for i in range(2000)]})


async def listing(state: dict[str, Any], listings: int) -> dict[str, Any]:
    catalog = (await asyncio.to_thread(request, state, "GET", "nodes"))["catalog"]
    sockets = []
    for box in range(2):
        name = f"bench-big-{box}"
        issued = await asyncio.to_thread(request, state, "POST", "workers/enrollments", {})
        got = await asyncio.to_thread(request, state, "POST", "workers/enroll",
                                      {"token": issued["token"], "name": name}, "")
        ws = await websocket_connect(HTTPRequest(f"ws://127.0.0.1:{state['port']}/codefy/ws/worker",
                                                 headers={"Authorization": f"token {got['worker_token']}"}))
        await ws.write_message(wp.encode(largest_hello(name, box, catalog)))
        welcome = wp.decode(await ws.read_message())
        if not isinstance(welcome, wp.Welcome):
            raise SystemExit(f"the largest hello was not welcomed: {welcome}")
        sockets.append(ws)
    done = False
    sizes: list[int] = []
    reads: list[float] = []
    pings: list[float] = []

    def read_workers() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", state["port"], timeout=120)
        for _ in range(listings):
            began = time.perf_counter()
            conn.request("GET", "/codefy/api/workers", headers={"Authorization": f"token {state['token']}"})
            response = conn.getresponse()
            sizes.append(len(response.read()))
            reads.append(time.perf_counter() - began)
        conn.close()

    def ping() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", state["port"], timeout=120)
        while not done:
            pings.append(timed_get(conn, state["token"], "runs?limit=1"))
            time.sleep(0.01)
        conn.close()

    pinger = asyncio.ensure_future(asyncio.to_thread(ping))
    await asyncio.to_thread(read_workers)
    done = True
    await pinger
    for ws in sockets:
        ws.close()
    return {"workers": 2, "devices_each": hl.HELLO_MAX_DEVICES, "listing_bytes": max(sizes),
            "listing_ms": {"p50": round(statistics.median(reads) * 1000, 1), "p90": round(pct(reads, 0.9) * 1000, 1)},
            "ping_during_listings_ms": {"count": len(pings), "p50": round(statistics.median(pings) * 1000, 1),
                                        "p90": round(pct(pings, 0.9) * 1000, 1), "worst": round(max(pings) * 1000, 1)}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--values", type=int, default=5_000_000, help="numbers in the bad body's node list (default 5,000,000: ~10 MB)")
    ap.add_argument("--repeat", type=int, default=3, help="parse and POST rounds; the parse reports the best (default 3)")
    ap.add_argument("--listings", type=int, default=40, help="GET workers asked back to back (default 40)")
    ap.add_argument("--out", help="also write the JSON to this file")
    args = ap.parse_args(argv)
    if args.values < 1 or args.repeat < 1 or args.listings < 1:
        ap.error("--values, --repeat and --listings must be >= 1")
    started = time.perf_counter()
    raw = body(args.values)
    parse = parsing(raw, args.repeat)
    with tempfile.TemporaryDirectory(prefix="codefy-bench-") as tmp, codefy_server(Path(tmp), 1) as state:
        rounds = [serving(state, raw) for _ in range(args.repeat)]
        workers = asyncio.run(listing(state, args.listings))
    worst_p90 = max(r["get_during_post_ms"]["p90"] for r in rounds)
    publish(args.out, started,
            parameters={"values": args.values, "body_bytes": len(raw), "repeat": args.repeat,
                        "listings": args.listings},
            targets=TARGETS,
            met={"get_p90_during_post_ms": worst_p90 < TARGETS["get_p90_during_post_ms"],
                 "ping_p90_during_listings_ms": workers["ping_during_listings_ms"]["p90"]
                 < TARGETS["ping_p90_during_listings_ms"]},
            results={"parsing": parse, "serving": rounds, "listing": workers})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
