"""Store benchmark: does polling readers slow the store's writer? In process, on a real SQLite file.

What a running study asks of the store, without the rest of the server (whose load on a shared
machine swamps a ±10 % effect in `experiments.py`): `--attempts` children, 8 at a time, each a
run row with its first event, three event appends and a final update, every write awaited as the
run service awaits it (WAL, synchronous=FULL). Measured alone, then with two readers on their own
connections, as the study's pollers are: one reads the runs written so far in one snapshot and
encodes them to JSON every 50 ms (a GET studies/{id}), the other pages through a run's events
every 100 ms (an events follower). Reported per round: wall time alone and with readers, the
slowdown, the writer's commits, checkpoints (when the store reports them) and the WAL file's
largest size. `--back-to-back`: the readers do not pause between reads (their snapshots then
overlap without a gap, which keeps a WAL checkpointed only PASSIVE-ly from ever restarting).

    python benchmarks/store_readers.py [--attempts 1024] [--repeat 5] [--back-to-back] [--out FILE]

It imports `codefy_jupyter` from wherever Python finds it: run it with PYTHONPATH on another
checkout to measure that code the same way.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from common import publish

import codefy_jupyter
from codefy_jupyter.core.store.database import Store

CONCURRENT = 8


async def attempt(store: Store, i: int) -> None:
    run_id = f"a{i}"
    await store.create_run({"id": run_id, "status": "running", "name": f"study / v{i % 32} / r{i // 32}"},
                           events=[(1, "run_started", {"n": i}, 1.0)])
    for seq in (2, 3, 4):
        await store.append_events(run_id, [(seq, "node_completed", {"node": "m", "seq": seq}, 1.0)])
    await store.update_run(run_id, status="succeeded", finished_at=2.0)


def poll(path: Path, stop: threading.Event, counts: dict[str, int], pause: float) -> None:
    conn = sqlite3.connect(path.as_uri() + "?mode=ro", uri=True, isolation_level=None)
    try:
        while not stop.is_set():
            conn.execute("BEGIN")
            rows = conn.execute("SELECT id, status, name, submitted_at, finished_at FROM runs").fetchall()
            conn.execute("COMMIT")
            json.dumps([dict(zip(("id", "status", "name", "submitted_at", "finished_at"), r)) for r in rows])
            counts["gets"] += 1
            stop.wait(pause)
    finally:
        conn.close()


def follow(path: Path, stop: threading.Event, counts: dict[str, int], pause: float) -> None:
    conn = sqlite3.connect(path.as_uri() + "?mode=ro", uri=True, isolation_level=None)
    try:
        while not stop.is_set():
            rows = conn.execute("SELECT run_id, seq, payload FROM run_events ORDER BY rowid DESC LIMIT 200").fetchall()
            counts["events"] += len(rows)
            stop.wait(pause)
    finally:
        conn.close()


async def study(path: Path, attempts: int, readers: bool, back_to_back: bool = False) -> dict[str, Any]:
    stop, counts = threading.Event(), {"gets": 0, "events": 0}
    async with await Store.open(path) as store:
        threads = [threading.Thread(target=poll, args=(path, stop, counts, 0 if back_to_back else 0.05)),
                   threading.Thread(target=follow, args=(path, stop, counts, 0 if back_to_back else 0.1))
                   ] if readers else []
        for t in threads:
            t.start()
        wal_max, left = 0, iter(range(attempts))

        async def child() -> None:
            nonlocal wal_max
            for i in left:
                await attempt(store, i)
                wal_max = max(wal_max, os.path.getsize(f"{path}-wal"))

        t0 = time.perf_counter()
        try:
            await asyncio.gather(*(child() for _ in range(CONCURRENT)))
            wall = time.perf_counter() - t0
        finally:
            stop.set()
            for t in threads:
                t.join()
        s = store.statistics()
        return {"wall_s": round(wall, 3), "commits": s.commits, "checkpoints": getattr(s, "checkpoints", None),
                "short_checkpoints": getattr(s, "short_checkpoints", None), "wal_max_kib": wal_max // 1024,
                **({"reader_gets": counts["gets"], "follower_rows": counts["events"]} if readers else {})}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--attempts", type=int, default=1024, help="children per study (default 1024)")
    ap.add_argument("--repeat", type=int, default=5, help="rounds of alone + with readers (default 5)")
    ap.add_argument("--back-to-back", action="store_true", help="readers read without a pause")
    ap.add_argument("--out", help="also write the JSON to this file")
    args = ap.parse_args(argv)
    started = time.perf_counter()
    rounds = []
    with tempfile.TemporaryDirectory(prefix="codefy-store-readers-") as tmp:
        for r in range(args.repeat):
            alone = asyncio.run(study(Path(tmp) / f"alone{r}.db", args.attempts, readers=False))
            read = asyncio.run(study(Path(tmp) / f"read{r}.db", args.attempts, readers=True,
                                     back_to_back=args.back_to_back))
            rounds.append({"alone": alone, "with_readers": read, "load_avg_1m": round(os.getloadavg()[0], 2),
                           "slowdown_pct": round((read["wall_s"] / alone["wall_s"] - 1) * 100, 1)})

    def span(values: list[float]) -> dict[str, float]:
        return {"median": round(statistics.median(values), 3), "min": min(values), "max": max(values)}

    publish(args.out, started,
            parameters={"attempts": args.attempts, "concurrent": CONCURRENT, "repeat": args.repeat,
                        "back_to_back": args.back_to_back,
                        "code": str(Path(codefy_jupyter.__file__).parent)},
            summary={"alone_wall_s": span([x["alone"]["wall_s"] for x in rounds]),
                     "with_readers_wall_s": span([x["with_readers"]["wall_s"] for x in rounds]),
                     "slowdown_pct": span([x["slowdown_pct"] for x in rounds]),
                     "wal_max_kib_with_readers": span([x["with_readers"]["wal_max_kib"] for x in rounds])},
            rounds=rounds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
