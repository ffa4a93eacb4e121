"""DDP inside one worker run (seed #792): one process per device of the run's set, in the run process.

A run whose graph has a top-level `TrainingLoop` with `strategy: ddp` and whose device set has two
or more CUDA cards is not executed by the run process itself. It starts one *rank* per card in the
multiprocessing spawn context; the ranks meet through a torch.distributed `FileStore` in the run's
folder (no listening socket for the rendezvous) with GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME set to
the loopback interface, so what the ranks open is reachable from this machine only.

- Rank 0 runs the whole graph with the run's normal sink: its events go to the agent unchanged, so
  the agent and the protocol still see one run. Other ranks run only the loop and its upstream
  nodes; of their events only warnings are forwarded; they write no checkpoints (the loop's lead is
  rank 0) and keep their output in `<data>/ddp/rank-N.log`.
- Backend: NCCL with each rank on its own card (`cuda:<rank>`) when this process sees enough CUDA
  cards; otherwise gloo with every rank on the CPU, with a `ddp_cpu_ranks` warning (a machine
  whose cards are declared, as in tests, or CUDA missing from this environment).
- Cancel reaches every rank (a shared event), and the loops agree on the stop flag every batch.
- A rank that fails or ends without a result fails the run with its error; the others are asked to
  stop and terminated after `STOP_GRACE_S`. The run process returns only once every rank has ended,
  so the agent frees the cards after that. A rank whose parent (the run process) is gone exits
  within `ORPHAN_CHECK_S` of noticing, well inside the seed's 5 s.
- Memory budgets per rank: each rank caps its own card to the run's budget there and the run's other
  budgeted cards to zero; the run reports one `capped` once every rank has (the agent reports the
  run started only then) and one `memory_limit` (per card, the owner's cap).
- Peak memory: per device, the largest any rank reported.
- Input provenance (`spec.provenance`): only rank 0 records, since it alone runs the whole graph and
  the other ranks read the same files again; the run process sends rank 0's records as `facts`
  once every rank has ended, as a single-process run does before its report.

`plan` and `rank_graph` are pure; `run_ranks` and `rank_main` run processes.
"""

from __future__ import annotations

import os
import queue
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

from ..wire.run_options import ExecutionOptions
from . import private
from . import memory_cap

STOP_GRACE_S = 5.0
KILL_AFTER_S = 2.0
LOST_AFTER_EXIT_S = 1.0  # a rank that exited without a result (its last message may still be in flight)
ORPHAN_CHECK_S = 0.2
EXIT_ORPHANED = 4
INIT_TIMEOUT_S = 120.0


# -- pure decisions --------------------------------------------------------------------------------


def plan(graph: dict[str, Any]) -> str | None:
    """The id of the graph's top-level TrainingLoop with `strategy: ddp` (the first one), or None."""
    for node in graph.get("nodes") or ():
        if node.get("type") == "TrainingLoop" and (node.get("params") or {}).get("strategy") == "ddp":
            return str(node.get("id"))
    return None


def world_size(devices: list[str]) -> int:
    """Ranks for a run's device set: one per CUDA card."""
    return sum(1 for d in devices if str(d).startswith("cuda:"))


def rank_graph(graph: dict[str, Any], node_id: str) -> dict[str, Any]:
    """The loop and its upstream nodes only (what a rank other than 0 runs)."""
    into: dict[str, list[str]] = {}
    for e in graph.get("edges") or ():
        into.setdefault(e["target"], []).append(e["source"])
    keep, todo = {node_id}, [node_id]
    while todo:
        for src in into.get(todo.pop(), ()):
            if src not in keep:
                keep.add(src)
                todo.append(src)
    return {**graph, "nodes": [n for n in graph.get("nodes") or () if n.get("id") in keep],
            "edges": [e for e in graph.get("edges") or () if e["source"] in keep and e["target"] in keep]}


def rank_threads(budget: Any, world: int, backend: str, cores: int) -> int | None:
    """CPU threads per rank: CPU ranks (gloo) split the run's budget (or the machine's cores) among
    themselves so that they do not oversubscribe it; a rank on its own card keeps the run's budget."""
    given = budget if type(budget) is int and budget >= 1 else None
    if backend != "gloo":
        return given
    return max(1, (given or cores) // world)


def loopback_interface() -> str:
    return "lo0" if sys.platform == "darwin" else "lo"


def merge_peaks(peaks: list[dict[str, Any] | None]) -> dict[str, Any] | None:
    """Per device, the largest peak any rank reported."""
    out: dict[str, Any] = {}
    for peak in peaks:
        for device, entry in (peak or {}).items():
            if device not in out or entry.get("bytes", 0) > out[device].get("bytes", 0):
                out[device] = entry
    return out or None


def pick_failure(failures: list[tuple[int, bool, dict[str, Any]]]) -> tuple[int, dict[str, Any]] | None:
    """The error a failed DDP run reports: a rank that was lost (killed, crashed) before one whose
    collective failed because of it; then the earliest."""
    if not failures:
        return None
    lost = [f for f in failures if f[1]]
    rank, _, error = (lost or failures)[0]
    return rank, error


# -- the run process's side ------------------------------------------------------------------------


def run_ranks(send: Callable[[str, dict[str, Any]], None], spec: dict[str, Any], token: Any, node_id: str,
              world: int, warn: Callable[[str, str, dict[str, Any]], None]) -> dict[str, Any]:
    """Run the graph as `world` ranks; the run's finished body."""
    import multiprocessing

    backend, device_of = _backend(world)
    if backend == "gloo":
        warn("ddp_cpu_ranks", f"DDP on {world} CPU ranks with gloo: this process sees fewer than {world} CUDA "
             "cards (a declared inventory, or CUDA missing here)", {"world": world})
    folder = Path(spec.get("data_dir") or ".") / "ddp"
    private.make_dir(folder)
    store = folder / "store"
    if store.exists():
        store.unlink()
    os.environ["GLOO_SOCKET_IFNAME"] = os.environ["NCCL_SOCKET_IFNAME"] = loopback_interface()
    ctx = multiprocessing.get_context("spawn")
    messages: Any = ctx.Queue()
    stop = ctx.Event()
    procs = [ctx.Process(target=rank_main, name=f"codefy-rank-{r}",
                         args=(r, world, backend, device_of(r), str(store), spec, node_id, messages, stop, os.getpid()))
             for r in range(world)]
    for p in procs:
        p.start()
    remove = token.on_cancel(stop.set)
    started = time.monotonic()
    results: dict[int, dict[str, Any]] = {}
    caps: dict[int, dict[str, Any]] = {}
    failures: list[tuple[int, bool, dict[str, Any]]] = []
    exited_at: dict[int, float] = {}
    stop_at: float | None = None
    killed = False

    def fail(rank: int, lost: bool, error: dict[str, Any]) -> None:
        nonlocal stop_at
        failures.append((rank, lost, error))
        stop.set()
        if stop_at is None:
            stop_at = time.monotonic() + STOP_GRACE_S

    def take(timeout: float) -> bool:
        try:
            kind, rank, body = messages.get(timeout=timeout)
        except queue.Empty:
            return False
        if kind == "capped":
            caps[rank] = body
            if len(caps) == world:  # every rank holds its cap: the run may be reported started
                send("capped", memory_cap.merge_reports([caps[r] for r in sorted(caps)]))
        elif kind == "event":
            send("event", body)
        elif kind == "done":
            results[rank] = body
            if body.get("status") == "failed":
                fail(rank, False, _rank_error(rank, body.get("error")))
            elif body.get("status") == "cancelled" and rank != 0:
                stop.set()
        return True

    try:
        while True:
            if take(0.1):
                continue  # drain the queue before judging processes
            now = time.monotonic()
            for r, p in enumerate(procs):
                if p.exitcode is None or r in results:
                    continue
                exited_at.setdefault(r, now)
                if now - exited_at[r] >= LOST_AFTER_EXIT_S and all(f[0] != r for f in failures):
                    fail(r, True, _lost_error(r, p.exitcode))
            if all(p.exitcode is not None for p in procs):
                while take(0.05):  # what the last ranks sent before they exited
                    pass
                for r, p in enumerate(procs):
                    if r not in results and all(f[0] != r for f in failures):
                        fail(r, True, _lost_error(r, p.exitcode))
                break
            if stop_at is not None and now >= stop_at:
                for p in procs:
                    if p.exitcode is None:
                        (p.kill if killed else p.terminate)()
                killed = True
                stop_at = now + KILL_AFTER_S
    finally:
        remove()
        for p in procs:
            p.join(timeout=KILL_AFTER_S)
            if p.exitcode is None:
                p.kill()
                p.join()
        messages.close()
    base = dict(results.get(0) or {"executed": 0, "cached": 0, "metrics": {}})
    inputs = base.pop("inputs", None) or []
    for record in inputs if spec.get("facts") else ():  # before the report: the ending files them all
        send("facts", {"kind": "provenance", "facts": record})
    body = {**base, "duration_s": time.monotonic() - started,
            "peak_memory": merge_peaks([r.get("peak_memory") for r in results.values()]),
            "memory_limit": memory_cap.merge_limits([r.get("memory_limit") for r in results.values()])}
    failed = pick_failure(failures)
    if failed is not None:
        body.update(status="failed", error=failed[1])
    else:
        body.update(status=base.get("status", "failed"), error=base.get("error"))
    return body


def _backend(world: int) -> tuple[str, Callable[[int], str]]:
    import torch

    if torch.cuda.is_available() and torch.cuda.device_count() >= world:
        return "nccl", lambda r: f"cuda:{r}"
    return "gloo", lambda r: "cpu"


def _rank_error(rank: int, error: dict[str, Any] | None) -> dict[str, Any]:
    error = dict(error or {"type": "RuntimeError", "message": "failed"})
    error["message"] = f"DDP rank {rank}: {error.get('message', '')}"
    params = dict(error.get("params") or {})
    params["rank"] = rank
    error["params"] = params
    return error


def _lost_error(rank: int, exitcode: int | None) -> dict[str, Any]:
    how = f"signal {-exitcode}" if exitcode is not None and exitcode < 0 else f"exit code {exitcode}"
    return {"type": "RankLost", "code": "ddp_rank_lost",
            "message": f"DDP rank {rank} ended without a result ({how}); the run's other ranks were stopped",
            "params": {"rank": rank, "exit_code": exitcode}}


# -- a rank ------------------------------------------------------------------------------------------


def rank_main(rank: int, world: int, backend: str, device: str, store: str, spec: dict[str, Any], node_id: str,
              messages: Any, stop: Any, parent: int) -> None:
    """One rank: join the group, run its graph, report ("done", rank, body)."""
    import asyncio
    from datetime import timedelta

    folder = Path(store).parent
    private.write_text(folder / f"rank-{rank}.pid", str(os.getpid()))
    if rank:
        log = private.os_open(folder / f"rank-{rank}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        os.dup2(log, 1)
        os.dup2(log, 2)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(143))
    from ..engine import CancelToken, EngineCallbacks, GraphError, execute_graph
    from ..engine import distributed
    from ..wire import run_events as ev

    token = CancelToken()
    threading.Thread(target=_watch, args=(parent, stop, token), name="codefy-rank-watch", daemon=True).start()
    run_id = str(spec["run_id"])
    options = ExecutionOptions.from_json(spec)
    cap = options.payload_cap_bytes

    def sink(raw: dict[str, Any]) -> None:
        if rank and raw.get("event") != "warning":
            return  # other ranks forward warnings only
        event = ev.from_engine(run_id, raw)
        if event is not None:
            messages.put(("event", rank, {"type": event.type, "payload": ev.cap_payload(event.payload, cap)}))

    started = time.monotonic()
    limit: dict[str, Any] = {}
    try:
        import torch.distributed as dist

        budgets = spec.get("memory_budgets") or {}
        capped = {"memory_limit": None, "reason": memory_cap.CPU_RANKS if budgets else memory_cap.NO_BUDGET}
        if backend == "nccl":
            import torch

            torch.cuda.set_device(rank)
            # Its own card to its budget, the run's other budgeted cards to zero (seed #792).
            capped = memory_cap.report(budgets, spec.get("aliases") or {}, own=rank)
            limit = capped["memory_limit"] or {}
        messages.put(("capped", rank, capped))
        dist.init_process_group(backend, store=dist.FileStore(store, world), rank=rank, world_size=world,
                                timeout=timedelta(seconds=INIT_TIMEOUT_S))
        distributed.set_rank(distributed.Rank(rank, world, backend))
        graph = spec["graph"] if rank == 0 else rank_graph(spec["graph"], node_id)
        data_dir = spec.get("data_dir") if rank == 0 else str(folder / f"rank-{rank}")
        threads = rank_threads(spec.get("cpu_threads"), world, backend, os.cpu_count() or 1)
        result = asyncio.run(execute_graph(
            graph, seed=options.seed, device=device, deterministic=options.deterministic,
            max_parallel_nodes=options.max_parallel_nodes, cancel=token,
            callbacks=EngineCallbacks.all_to(sink), data_dir=data_dir, run_id=run_id, inline=True,
            cpu_threads=threads, provenance=rank == 0 and spec.get("provenance") is True))
        body = {"status": result.status, "error": result.error.to_dict() if result.error is not None else None,
                "executed": len(result.executed), "cached": len(result.cached),
                "metrics": ev.jsonable(result.metrics), "duration_s": time.monotonic() - started,
                "peak_memory": memory_cap.peak_memory(spec.get("aliases") or {}), "memory_limit": limit,
                "inputs": list(result.inputs)}
    except GraphError as err:
        body = {"status": "failed", "error": {**err.to_dict(), "type": "GraphError"}, "executed": 0, "cached": 0,
                "metrics": {}}
    except BaseException as err:
        import traceback

        body = {"status": "failed", "error": {"type": type(err).__name__, "code": "ddp_rank_error",
                                              "message": f"{type(err).__name__}: {err}",
                                              "traceback": traceback.format_exc()},
                "executed": 0, "cached": 0, "metrics": {}}
    messages.put(("done", rank, body))
    messages.close()
    messages.join_thread()
    # os._exit: a collective stuck on a lost peer, or a node's stray thread, must not keep this rank.
    os._exit(0)


def _watch(parent: int, stop: Any, token: Any) -> None:
    """Cancel when the run process asks; exit when it is gone (this rank's parent changed)."""
    while True:
        if os.getppid() != parent:
            os._exit(EXIT_ORPHANED)
        if stop.is_set():
            token.cancel("another rank of this run stopped, or the run was cancelled")
        time.sleep(ORPHAN_CHECK_S)
