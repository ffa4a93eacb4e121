"""Worker benchmark: how fast a run starts on an agent, and how fast its frames reach the control plane.

1. start latency (the agent's runner, real run processes, no network): for each way of starting a
   run's process, `--starts` runs of Float -> Scale, then `--torch-starts` runs of a graph whose node
   imports torch (an MLP): assign -> run_started (the process exists), assign -> first event (the
   engine runs), assign -> run_finished; `tiny_budgeted_ms`: the tiny graph with a memory budget,
   reported started only once its process has capped its allocator. `spawn` is a new interpreter
   per run; `warm` forks it from the warm process (engine, node packs and torch imported, CUDA not
   initialised); its own start-up is reported once as warm_ready_s.
2. frames/s: a real `codefy start` on loopback and one agent connection built from the agent's own
   delivery code (every frame numbered and appended to the run's spool.jsonl before it is sent, acks
   dropping them): `--frames` event frames of one run, first frame -> the control plane's ack of the
   run_finished after them. The run's log must then hold every one of them exactly once.
3. replay: a second run's connection is dropped, `--replay` frames are spooled while away, then the
   agent dials again (hello, run_alive) and replays: dial -> ack of the run_finished. Zero lost and
   zero duplicated is checked in the run's log (each frame carries its index).

    python benchmarks/workers.py [--starts 10] [--torch-starts 3] [--frames 50000] [--replay 100000] [--out FILE]
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

from tornado.httpclient import HTTPRequest
from tornado.websocket import websocket_connect

from codefy_jupyter._version import __version__
from codefy_jupyter.agent.delivery import Deliveries
from codefy_jupyter.agent.isolation import CPU
from codefy_jupyter.agent.launch import SpawnLauncher, WarmLauncher
from codefy_jupyter.agent.runner import Runner, RunRequest
from codefy_jupyter.wire import protocol as wp

from common import publish
from run_queue import Http, codefy_server

TARGETS = {"frames_per_s": 20_000.0, "replay_100k_s": 10.0}


def edge(s: str, sp: str, t: str, tp: str) -> dict[str, str]:
    return {"source": s, "source_port": sp, "target": t, "target_port": tp}


TINY = {"nodes": [{"id": "k", "type": "Float", "params": {"value": 2}},
                  {"id": "s", "type": "Scale", "params": {"factor": 3}}], "edges": [edge("k", "value", "s", "x")]}
TORCH = {"nodes": [{"id": "data", "type": "SyntheticClassification",
                    "params": {"n_samples": 64, "n_features": 4, "n_classes": 2, "seed": 0}},
                   {"id": "model", "type": "MLP", "params": {"hidden": 8, "layers": 1}}],
         "edges": [edge("data", "dataset", "model", "dataset")]}


# A memory budget (seed #788): run_started then waits for the run process's cap report (on a
# machine without CUDA the cap imports torch and finds none), the hop runs without one skip.
BUDGET = {"cuda:0": 1024}


def spread(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {"p50": round(statistics.median(ordered) * 1000, 1), "max": round(ordered[-1] * 1000, 1),
            "min": round(ordered[0] * 1000, 1)}


# -- 1. start latency -----------------------------------------------------------------------------

async def starts(tmp: Path, how: str, graph: dict[str, Any], count: int, launcher: Any,
                 budgets: dict[str, int] | None = None) -> dict[str, Any]:
    marks: dict[str, dict[str, float]] = {}
    done: dict[str, asyncio.Future[dict[str, Any]]] = {}

    def mark(run: str, what: str) -> None:
        marks[run].setdefault(what, time.perf_counter())

    runner = Runner(tmp / "agent-runs", launcher, {"cpu": CPU}, dict(os.environ),
                    on_started=lambda run, pid, view, capped: mark(run, "started"),
                    on_message=lambda run, kind, body: mark(run, "event"),
                    on_finished=lambda run, body: done[run].set_result(body))
    for i in range(count):
        run = f"{how}-{graph is TORCH}-{bool(budgets)}-{i}"
        marks[run] = {"assign": time.perf_counter()}
        done[run] = asyncio.get_running_loop().create_future()
        runner.start(RunRequest(run_id=run, graph=graph, device="cpu", memory_budgets=budgets))
        body = await done[run]
        marks[run]["finished"] = time.perf_counter()
        if body["status"] != "succeeded":
            raise SystemExit(f"run {run} {body['status']}: {body.get('error')}")
    return {what: spread([m[what] - m["assign"] for m in marks.values()]) for what in ("started", "event", "finished")}


async def start_latency(tmp: Path, args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    spawn = SpawnLauncher()
    out["spawn"] = {"tiny_ms": await starts(tmp, "spawn", TINY, args.starts, spawn),
                    "tiny_budgeted_ms": await starts(tmp, "spawn", TINY, args.starts, spawn, BUDGET),
                    "torch_ms": await starts(tmp, "spawn", TORCH, args.torch_starts, spawn)}
    warm = WarmLauncher(dict(os.environ))
    began = time.perf_counter()
    await warm.start()
    out["warm"] = {"warm_ready_s": round(time.perf_counter() - began, 2),
                   "tiny_ms": await starts(tmp, "warm", TINY, args.starts, warm),
                   "tiny_budgeted_ms": await starts(tmp, "warm", TINY, args.starts, warm, BUDGET),
                   "torch_ms": await starts(tmp, "warm", TORCH, args.torch_starts, warm)}
    await warm.close()
    return out


# -- 2./3. frames through a real control plane --------------------------------------------------------

class Wire:
    """One agent connection: hello, the frames the test adds through Deliveries, acks back into it."""

    def __init__(self, state: dict[str, Any], deliveries: Deliveries) -> None:
        self.state = state
        self.deliveries = deliveries
        self.assigns: asyncio.Queue[wp.Assign] = asyncio.Queue()
        self.conn: Any = None
        self.reader: asyncio.Task[None] | None = None
        self.last_write: Any = None
        self.batch = False

    async def connect(self, catalog: dict[str, Any]) -> None:
        url = f"ws://127.0.0.1:{self.state['port']}{self.state['base_url']}codefy/ws/worker"
        self.conn = await websocket_connect(HTTPRequest(url, headers={"Authorization": f"token {self.state['token']}"}),
                                            max_message_size=wp.MAX_FRAME_BYTES)
        self.conn.write_message(wp.encode(wp.Hello(
            name="bench", version=__version__, protocol_version=wp.PROTOCOL_VERSION, catalog_hash=catalog["hash"],
            node_types=catalog["types"], devices=[{"device": "cpu"}], capabilities=sorted(wp.SUPPORTED_CAPABILITIES))))
        welcome = wp.decode(await self.conn.read_message(), sender="server")
        assert isinstance(welcome, wp.Welcome), welcome
        # As the agent does: several frames per message when both sides list `batch`.
        self.batch = "batch" in welcome.capabilities
        self.conn.write_message(wp.encode(wp.RunAlive(runs=self.deliveries.alive())))
        self.reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        while True:
            message = await self.conn.read_message()
            if message is None:
                return
            frame = wp.decode(message, sender="server")
            if isinstance(frame, wp.Ack):
                self.deliveries.ack(frame.run_id, frame.seq)
            elif isinstance(frame, wp.Assign):
                self.assigns.put_nowait(frame)

    def send(self, text: str) -> None:
        self.last_write = self.conn.write_message(text)

    async def drain(self) -> None:
        if self.last_write is not None:
            await self.last_write

    async def drop(self) -> None:
        self.deliveries.disconnected()
        self.conn.protocol.stream.close()  # as a network failure would: no close handshake
        if self.reader is not None:
            await asyncio.gather(self.reader, return_exceptions=True)


def progress(run_id: str, i: int, total: int) -> wp.Event:
    return wp.Event(run_id=run_id, event={"type": "progress", "payload": {
        "node_id": "k", "node_type": "Float", "value": i, "total": total, "label": None}})


async def acked(deliveries: Deliveries, run_id: str, timeout: float) -> None:
    deadline = time.perf_counter() + timeout
    while run_id in deliveries.runs:
        if time.perf_counter() > deadline:
            raise SystemExit(f"run {run_id}: its run_finished was never acknowledged")
        deliveries.changed.clear()
        try:
            await asyncio.wait_for(deliveries.changed.wait(), 0.5)
        except asyncio.TimeoutError:
            pass


async def check_log(http: Http, run_id: str, expected: int) -> dict[str, Any]:
    values: list[int] = []
    seqs: list[int] = []
    cursor = 0
    while True:
        code, page = await http.request("GET", f"runs/{run_id}/events?cursor={cursor}")
        assert code == 200, page
        for e in page["events"]:
            seqs.append(e["seq"])
            if e["type"] == "progress":
                values.append(e["payload"]["value"])
        cursor = page["cursor"]
        if not page["more"]:
            break
    return {"frames_in_log": len(values), "lost": expected - len(set(values)), "duplicated": len(values) - len(set(values)),
            "log_gapless": seqs == list(range(1, len(seqs) + 1))}


async def frames(state: dict[str, Any], tmp: Path, args: argparse.Namespace) -> dict[str, Any]:
    http = Http(state)
    code, nodes = await http.request("GET", "nodes")
    assert code == 200, nodes
    deliveries = Deliveries(tmp / "bench-runs", "bench")
    wire = Wire(state, deliveries)
    await wire.connect(nodes["catalog"])
    await deliveries.connected(wire.send, wire.drain, batch=wire.batch)

    async def assigned() -> str:
        code, run = await http.request("POST", "runs", {"graph": TINY, "options": {"target": {"worker": "bench"}}})
        assert code == 201, run
        assign = await asyncio.wait_for(wire.assigns.get(), 60)
        assert assign.run_id == run["id"]
        return run["id"]

    import psutil

    server = psutil.Process(state["pid"])
    me = psutil.Process()

    def cpu() -> tuple[float, float]:
        return sum(server.cpu_times()[:2]), sum(me.cpu_times()[:2])

    out: dict[str, Any] = {}
    run_id = await assigned()
    cpu0 = cpu()
    began = time.perf_counter()
    deliveries.add(run_id, wp.RunStarted(run_id=run_id, pid=os.getpid()))
    for i in range(args.frames):
        deliveries.add(run_id, progress(run_id, i, args.frames))
        if i % 256 == 255:
            await wire.drain()
    deliveries.add(run_id, wp.RunFinished(run_id=run_id, status="succeeded"))
    await acked(deliveries, run_id, args.timeout)
    seconds = time.perf_counter() - began
    cpu1 = cpu()
    out["live"] = {"frames": args.frames, "seconds": round(seconds, 2), "frames_per_s": round(args.frames / seconds),
                   "server_cpu_s": round(cpu1[0] - cpu0[0], 2), "agent_cpu_s": round(cpu1[1] - cpu0[1], 2),
                   **await check_log(http, run_id, args.frames)}

    run_id = await assigned()
    deliveries.add(run_id, wp.RunStarted(run_id=run_id, pid=os.getpid()))
    await wire.drop()
    spooled = time.perf_counter()
    for i in range(args.replay):
        deliveries.add(run_id, progress(run_id, i, args.replay))
    deliveries.add(run_id, wp.RunFinished(run_id=run_id, status="succeeded"))
    spool_s = time.perf_counter() - spooled
    cpu0 = cpu()
    began = time.perf_counter()
    wire = Wire(state, deliveries)
    await wire.connect(nodes["catalog"])
    replayed = await deliveries.connected(wire.send, wire.drain, batch=wire.batch)
    await acked(deliveries, run_id, args.timeout)
    seconds = time.perf_counter() - began
    cpu1 = cpu()
    out["replay"] = {"frames": args.replay, "replayed": replayed, "spool_write_s": round(spool_s, 2),
                     "seconds": round(seconds, 2), "server_cpu_s": round(cpu1[0] - cpu0[0], 2),
                     "agent_cpu_s": round(cpu1[1] - cpu0[1], 2), **await check_log(http, run_id, args.replay)}
    wire.conn.close()
    deliveries.close()
    http.close()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--starts", type=int, default=10, help="runs of the tiny graph per way of starting (default 10)")
    ap.add_argument("--torch-starts", type=int, default=3, help="runs of the torch graph per way (default 3)")
    ap.add_argument("--frames", type=int, default=50_000, help="event frames of the live run (default 50000)")
    ap.add_argument("--replay", type=int, default=100_000, help="frames spooled while away, then replayed (default 100000)")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for each phase (default 600)")
    ap.add_argument("--out", help="also write the JSON to this file")
    args = ap.parse_args(argv)
    started = time.perf_counter()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="codefy-bench-workers-") as tmp:
        results["start"] = asyncio.run(start_latency(Path(tmp), args))
        with codefy_server(Path(tmp) / "server", 2) as state:
            results["frames"] = asyncio.run(frames(state, Path(tmp), args))
    live, replay = results["frames"]["live"], results["frames"]["replay"]
    publish(args.out, started,
            parameters={"starts": args.starts, "torch_starts": args.torch_starts, "frames": args.frames,
                        "replay": args.replay},
            targets=TARGETS,
            met={"frames_per_s": live["frames_per_s"] >= TARGETS["frames_per_s"],
                 "replay_100k_s": replay["seconds"] * 100_000 / max(1, args.replay) <= TARGETS["replay_100k_s"],
                 "nothing_lost_or_duplicated": all(r["lost"] == 0 and r["duplicated"] == 0 and r["log_gapless"]
                                                   for r in (live, replay))},
            results=results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
