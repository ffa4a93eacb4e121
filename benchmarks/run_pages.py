"""Run-list benchmark at scale: `GET runs` pages and filters with a million runs stored, on SQLite and
on PostgreSQL (issue 24: "with 1,000,000 runs stored, `GET runs` pages and filters and the Runs
panel's first page answer in <= 100 ms on either backend").

The database is filled directly (one transaction of generated rows: finished runs of a few
statuses, owners and names, as a team's year would leave them; their event logs are not needed for
a listing), then a real `codefy start` serves it (retention off) and one keep-alive client asks,
`--requests` times each, one at a time:

  first_page        GET runs?limit=50                      the Runs panel's "All" chip, and the API's default page
  chip_succeeded    GET runs?limit=50&status=succeeded     a chip of the panel (a common status)
  chip_running      GET runs?limit=50&status=running,disconnected   a chip whose runs are few
  deep_page         GET runs?limit=50&offset=500000        paging far back by offset (reads every run it skips)
  deep_keyset       GET runs?limit=50&after=<id>           the same page by keyset (`after`: an earlier page's `next`)
  one_run_prefix    GET runs/<12-char prefix>              a run by the id people copy

Reported per request: p50, p90 and max milliseconds (request written -> answer read, on loopback),
and the fill's time. `--store postgresql` starts a throwaway PostgreSQL server as the tests do
(tests/pg_server.py: Debian's binaries), or give `--store-url postgresql://...` (an empty database).

    python benchmarks/run_pages.py [--runs 1000000] [--store sqlite|postgresql] [--requests 30] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

from common import publish
from run_queue import Http, codefy_server

from codefy_jupyter.core.store.database import Store
from codefy_jupyter.core.store.queries import RUN_COLUMNS

TARGET_MS = 100.0
STATUSES = ("succeeded",) * 14 + ("failed",) * 3 + ("cancelled", "interrupted")
OWNERS = ("ana", "bo", "chen", "dara", "eli", "fumi", "gus", "hana")
GRAPH = json.dumps({"nodes": [{"id": "a", "type": "Float", "params": {"value": 1.0}}], "edges": []})
OPTIONS = json.dumps({"device": "cpu"})


def rows(n: int, seed: int = 7) -> Iterator[tuple[Any, ...]]:
    """`n` finished runs, oldest first, in RUN_COLUMNS order plus submit_order; a handful still
    `running` near the newest end would be recovered (ended) by the server at start, so there are
    none: the `running` chip lists what a server restarted on this database shows."""
    rnd = random.Random(seed)
    t0 = time.time() - n * 30.0
    for i in range(n):
        submitted = t0 + i * 30.0
        status = rnd.choice(STATUSES)
        values = {
            "id": f"{rnd.getrandbits(128):032x}", "name": f"sweep {i // 100} / v{i % 100}", "status": status,
            "owner": OWNERS[i % len(OWNERS)], "device": "cpu", "devices": '["cpu"]', "queue_key": "cpu",
            "lane": "queued", "session": None, "seed": i, "deterministic": 0, "options": OPTIONS, "graph": GRAPH,
            "submitted_at": submitted, "started_at": submitted + 1.0, "finished_at": submitted + 20.0,
            "error": None, "fingerprint_digest": None, "worker_id": None, "last_seq": 8,
            "execution_facts": "{}", "sweep_id": None, "sweep_variant": None, "study_id": None,
            "study_attempt_id": None,
        }
        yield (*(values[c] for c in RUN_COLUMNS), i + 1)


async def create_schema(target: str) -> None:
    store = await Store.open(target)
    await store.close()


def fill_sqlite(path: Path, n: int) -> None:
    conn = sqlite3.connect(path)
    columns = (*RUN_COLUMNS, "submit_order")
    conn.execute("BEGIN")
    conn.executemany(f"INSERT INTO runs ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})", rows(n))
    conn.execute("COMMIT")
    conn.execute("ANALYZE")
    conn.close()


def fill_postgresql(url: str, n: int) -> None:
    import psycopg

    columns = (*RUN_COLUMNS, "submit_order")
    with psycopg.connect(url) as conn:
        with conn.cursor() as cur:
            with cur.copy(f"COPY runs ({', '.join(columns)}) FROM STDIN") as copy:
                for row in rows(n):
                    copy.write_row(row)
        conn.commit()
        conn.autocommit = True
        # What autovacuum does to a table that old (it vacuums insert-only tables too, since
        # PostgreSQL 13): the visibility map set, so the index alone answers where a deep page starts.
        conn.execute("VACUUM (ANALYZE) runs")


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"p50_ms": round(statistics.median(ordered), 2),
            "p90_ms": round(ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))], 2),
            "max_ms": round(ordered[-1], 2)}


async def measure(state: dict[str, Any], n: int, requests: int) -> dict[str, Any]:
    http = Http(state)
    code, page = await http.request("GET", "runs?limit=1")
    assert code == 200 and page["total"] == n, (code, page.get("total") if isinstance(page, dict) else page)
    newest = page["runs"][0]["id"]
    code, middle = await http.request("GET", f"runs?limit=1&offset={n // 2 - 1}")
    assert code == 200, middle
    paths = {
        "first_page": "runs?limit=50",
        "chip_succeeded": "runs?limit=50&status=succeeded",
        "chip_running": "runs?limit=50&status=running,disconnected",
        "deep_page": f"runs?limit=50&offset={n // 2}",
        "deep_keyset": f"runs?limit=50&after={middle['runs'][0]['id']}",
        "one_run_prefix": f"runs/{newest[:12]}",
    }
    out: dict[str, Any] = {}
    for label, path in paths.items():
        samples = []
        for _ in range(requests):
            t = time.perf_counter()
            code, body = await http.request("GET", path)
            samples.append((time.perf_counter() - t) * 1000)
            assert code == 200, (label, code, body)
        out[label] = percentiles(samples)
    http.close()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=1_000_000, help="runs stored (default 1,000,000)")
    ap.add_argument("--store", choices=("sqlite", "postgresql"), default="sqlite",
                    help="the backend (postgresql: a throwaway server started as the tests start one)")
    ap.add_argument("--store-url", default="", help="an empty postgresql:// database to use instead")
    ap.add_argument("--requests", type=int, default=30, help="requests of each kind (default 30)")
    ap.add_argument("--out", help="also write the JSON to this file")
    args = ap.parse_args(argv)
    if args.runs < 1 or args.requests < 1:
        ap.error("--runs and --requests must be >= 1")
    started = time.perf_counter()
    pg = None
    try:
        with tempfile.TemporaryDirectory(prefix="codefy-pages-") as tmp:
            data_dir = Path(tmp)
            url = args.store_url
            if args.store == "postgresql" and not url:
                sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
                from pg_server import PgServer, find_bindir

                bindir = find_bindir()
                if bindir is None:
                    raise SystemExit("no PostgreSQL server binaries found (Debian's postgresql package)")
                pg = PgServer.start(bindir)
                url = pg.create_database()
            target = url or str(data_dir / "codefy.sqlite")
            asyncio.run(create_schema(target))
            t = time.perf_counter()
            if url:
                fill_postgresql(url, args.runs)
            else:
                fill_sqlite(data_dir / "codefy.sqlite", args.runs)
            fill_s = time.perf_counter() - t
            # One server on this machine: its run files are where any replica would reach them.
            env = {"CODEFY_STORE_URL": url, "CODEFY_RUN_FILES_SHARED": "1"} if url else {}
            with codefy_server(data_dir, 2, env) as state:
                results = asyncio.run(measure(state, args.runs, args.requests))
    finally:
        if pg is not None:
            pg.stop()
    met = {k: v["p50_ms"] <= TARGET_MS for k, v in results.items()}
    publish(args.out, started,
            parameters={"runs": args.runs, "store": "postgresql" if (args.store_url or pg) else "sqlite",
                        "requests": args.requests, "fill_s": round(fill_s, 1)},
            targets={"p50_ms": TARGET_MS}, met=met, results=results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
