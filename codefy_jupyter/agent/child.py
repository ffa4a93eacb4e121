"""The run subprocess: one fresh process per assigned run, the only place on a worker that imports
torch and initialises CUDA.

It is started either cold (`python -m codefy_jupyter.agent.child --fd N`, environment given at
spawn) or forked from the agent's warm process (`warm.py`, which applies the environment before
calling `serve`). Either way, before anything can initialise CUDA it (re)applies the device
variables the agent chose, then reads the `assign` message from its socket, caps its allocator to
the run's memory budgets and says so (`capped`, its first message: the agent reports a budgeted run
started only then), runs the engine with a sink that writes each event to the socket (`pipe.py`),
and ends with one `finished` message.

Every engine event the log keeps becomes its log event here, once, with the same pure builders as
the control plane's (`wire/run_events.py`): one `event` message `{"type", "payload"}`, exactly what
an in-process run would have logged. The agent puts that pair in an `event` frame unchanged and the
control plane writes it as is. `execution_start` and the closing event are the control plane's,
from run_started/run_finished.

Cancel is cooperative: a `cancel` message sets the run's CancelToken. If the agent goes away (the
socket closes) the run is cancelled too, and the process exits after `ORPHAN_EXIT_S` whatever the
nodes do: nobody is left to report to.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import sys
import threading
import time
import traceback
from typing import Any, NoReturn

from ..wire.run_options import ExecutionOptions
from . import ddp, memory_cap, pipe, private

ORPHAN_EXIT_S = 5.0
EXIT_OK = 0
EXIT_BAD_START = 3  # no usable assign came (the agent went away before sending one)
EXIT_ORPHANED = 4


class Link:
    """The run process's end of the socket: thread-safe writes, a reader thread for cancels."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._write_lock = threading.Lock()
        self._reader = sock.makefile("rb")
        self.broken = False

    def send(self, kind: str, body: dict[str, Any]) -> None:
        data = pipe.encode(kind, body)
        with self._write_lock:
            if self.broken:
                return
            try:
                self.sock.sendall(data)
            except OSError:  # the agent is gone; the reader thread sees EOF and ends the run
                self.broken = True

    def read(self) -> tuple[str, dict[str, Any]] | None:
        """The next message from the agent, or None at EOF."""
        line = self._reader.readline(pipe.MAX_LINE_BYTES)
        if not line:
            return None
        return pipe.decode(line, kinds=pipe.AGENT_KINDS)


def apply_environment(env: dict[str, str]) -> None:
    """Set the device variables (and any others the agent chose) in this process. Refuses to go on
    when CUDA is already initialised here: the variables would no longer change which cards it uses."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        raise RuntimeError("CUDA was initialised before the run's device variables were applied")
    os.environ.update(env)


class Sink:
    """Engine callbacks -> `event` messages. Called by the engine one event at a time (it holds a lock)."""

    def __init__(self, link: Link, run_id: str, payload_cap_bytes: int) -> None:
        from ..wire import run_events as ev

        self._ev = ev
        self.link = link
        self.run_id = run_id
        self.cap = payload_cap_bytes

    def __call__(self, raw: dict[str, Any]) -> None:
        event = self._ev.from_engine(self.run_id, raw)
        if event is None:
            return
        self.link.send("event", {"type": event.type, "payload": self._ev.cap_payload(event.payload, self.cap)})


def serve(sock: socket.socket) -> NoReturn:
    """Run the one assign that arrives on `sock`, report it, and exit the process."""
    private.restrict_umask()  # what the run's nodes write (data/, outputs/) is the agent user's alone
    link = Link(sock)
    try:
        first = link.read()
    except (OSError, pipe.PipeError):
        first = None
    if first is None or first[0] != "assign":
        print("codefy run process: no assign arrived from the agent", file=sys.stderr, flush=True)
        os._exit(EXIT_BAD_START)
    spec = first[1]
    try:
        apply_environment({str(k): str(v) for k, v in (spec.get("env") or {}).items()})
        body = _run(link, spec)
    except BaseException as err:  # anything at all: the run fails with the reason, the agent lives
        traceback.print_exc()
        body = {"status": "failed", "error": {"type": type(err).__name__, "code": "run_process_error",
                                              "message": f"{type(err).__name__}: {err}",
                                              "traceback": traceback.format_exc()},
                "executed": 0, "cached": 0, "metrics": {}, "duration_s": None}
    link.send("finished", body)
    if _RECORDED is not None:  # reported first: the slot is free while the files are written
        _write_recorded(spec, *_RECORDED)
    _exit(EXIT_OK)


WRITE_DELAY_ENV = "CODEFY_TEST_OUTPUTS_WRITE_DELAY_S"
# A record_outputs run's captures, copied to the CPU, until they are written after the report.
_RECORDED: tuple[Any, str] | None = None


def _keep_recorded(spec: dict[str, Any], outputs: dict[str, dict[str, Any]]) -> None:
    """Captures go through the same store as the control plane's, then to CPU memory of our own, and
    the store (and with it the device memory) is emptied before the run reports its end."""
    global _RECORDED
    from ..engine.recorded import RunOutputStore, to_cpu

    run_id = str(spec["run_id"])
    store = RunOutputStore(max_runs=1)
    store.put(run_id, outputs)
    copy = to_cpu(store.get(run_id) or {})
    store.drop(run_id)
    outputs.clear()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()
    _RECORDED = (copy, str(spec["outputs_dir"]))


def _answer_read(link: Link, body: dict[str, Any]) -> None:
    """Until its files are written, a run answers reads from its copy in memory, with the control
    plane's functions (seed: recorded outputs on a worker)."""
    from ..engine.recorded import index_of, summarize
    from ..wire.output_reads import answer, not_recorded

    run_id, kind, query = str(body.get("run_id") or ""), str(body.get("kind") or ""), body.get("query") or {}
    recorded = _RECORDED
    try:
        if recorded is None:
            status, out = not_recorded(run_id)
        else:
            captures = recorded[0]
            status, out = answer(run_id, kind, query, index_of(captures), lambda n, p: summarize(captures[n][p]))
    except Exception as err:  # answered, whatever happens: the agent waits for it
        status, out = 500, {"error": {"code": "worker_output_failed", "message": str(err), "params": {"error": str(err)}}}
    link.send("answer", {"id": body.get("id"), "status": status, "body": out})


def _write_recorded(spec: dict[str, Any], captures: Any, folder: str) -> None:
    from pathlib import Path

    from ..engine.recorded import write_outputs

    timeout = float(spec.get("outputs_write_timeout_s") or 300.0)
    deadline = time.monotonic() + timeout
    # Test hook: a slow disk, to show that the run's end is reported before its outputs are written.
    time.sleep(float(os.environ.get(WRITE_DELAY_ENV) or 0))
    try:
        write_outputs(Path(folder), captures, deadline=deadline)
    except BaseException:  # the run is reported; its outputs are simply not kept
        traceback.print_exc()


def _run(link: Link, spec: dict[str, Any]) -> dict[str, Any]:
    from ..engine import CancelToken, EngineCallbacks, GraphError, execute_graph

    run_id = str(spec["run_id"])
    token = CancelToken()
    threading.Thread(target=_read_cancels, args=(link, token), name="codefy-cancel", daemon=True).start()
    options = ExecutionOptions.from_json(spec)  # the assign's options, as the agent passed them on
    sink = Sink(link, run_id, options.payload_cap_bytes)
    started = time.monotonic()
    threads = spec.get("cpu_threads")
    ddp_node = ddp.plan(spec["graph"])
    world = ddp.world_size(list(spec.get("devices") or ()))
    if ddp_node is not None and world >= 2:
        # The ranks cap themselves; run_ranks reports `capped` once all have, and the agent holds
        # what comes before it (this fingerprint) until then.
        facts = _start_facts(link, spec) if spec.get("facts") else None

        def warn(code: str, message: str, params: dict[str, Any]) -> None:
            sink({"event": "warning", "node_id": ddp_node, "code": code, "message": message, "params": params})

        try:
            return ddp.run_ranks(link.send, spec, token, ddp_node, world, warn)
        finally:
            if facts is not None:
                facts.join(timeout=30)
    limit, failed = _cap(link, spec)  # before any node can allocate on a shared card
    if failed is not None:
        return failed
    facts = _start_facts(link, spec) if spec.get("facts") else None
    try:
        result = asyncio.run(execute_graph(
            spec["graph"], seed=options.seed, device=spec.get("device") or "cpu",
            deterministic=options.deterministic, max_parallel_nodes=options.max_parallel_nodes,
            cancel=token, callbacks=EngineCallbacks.all_to(sink), data_dir=spec.get("data_dir"), run_id=run_id,
            inline=True, cpu_threads=threads if type(threads) is int and threads >= 1 else None,
            keep_outputs="all" if spec.get("outputs_dir") else "outputs", provenance=options.provenance))
    except GraphError as err:
        info = err.to_dict()
        info["type"] = "GraphError"
        return {"status": "failed", "error": info, "executed": 0, "cached": 0, "metrics": {},
                "duration_s": time.monotonic() - started}
    finally:
        if facts is not None:
            facts.join(timeout=30)
    if spec.get("outputs_dir"):
        _keep_recorded(spec, result.outputs)
    for record in result.inputs if spec.get("facts") else ():  # before the report: the ending files them all
        link.send("facts", {"kind": "provenance", "facts": record})
    return {
        "status": result.status,
        "error": result.error.to_dict() if result.error is not None else None,
        "executed": len(result.executed), "cached": len(result.cached),
        "metrics": _jsonable(result.metrics), "duration_s": result.duration_s,
        "peak_memory": memory_cap.peak_memory(spec.get("aliases") or {}),
        "memory_limit": limit,
    }


CAP_FAIL_ENV = "CODEFY_TEST_MEMORY_CAP_FAIL"


def _cap(link: Link, spec: dict[str, Any]) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """Cap the allocator and send `capped`, the run's first message: (its memory_limit, None); or,
    when capping failed, (None, the failed run's report), and no `capped` is sent, so the agent
    never reports the run started."""
    budgets = spec.get("memory_budgets") or {}
    try:
        # Test hook: a cap that fails, which a machine without CUDA cannot otherwise produce.
        if budgets and os.environ.get(CAP_FAIL_ENV):
            raise RuntimeError(f"{CAP_FAIL_ENV} is set")
        done = memory_cap.report(budgets, spec.get("aliases") or {})
    except Exception as err:
        traceback.print_exc()
        return None, {"status": "failed", "executed": 0, "cached": 0, "metrics": {}, "duration_s": 0.0,
                      "error": {"type": type(err).__name__, "code": "memory_cap_failed",
                                "message": f"the run's process could not cap its memory to the budget: "
                                           f"{type(err).__name__}: {err}",
                                "params": {"reason": "cap_error", "budgets_mib": dict(budgets)},
                                "traceback": traceback.format_exc()}}
    link.send("capped", done)
    return done["memory_limit"], None


def _read_cancels(link: Link, token: Any) -> None:
    while True:
        try:
            message = link.read()
        except (OSError, pipe.PipeError):
            message = None
        if message is None:
            token.cancel("the worker agent went away")
            # Nobody reads our reports any more: give the nodes a moment to stop, then go.
            time.sleep(ORPHAN_EXIT_S)
            _exit(EXIT_ORPHANED)
        kind, body = message
        if kind == "cancel":
            token.cancel(str(body.get("reason") or "cancel requested"))
        elif kind == "read":
            _answer_read(link, body)


_FINGERPRINT: dict[str, Any] | None = None


def environment_facts() -> dict[str, Any]:
    """This process's environment fingerprint (document and digest). Computed once per interpreter:
    the warm process computes it while preloading, so forked runs inherit it instead of listing every
    installed package again."""
    global _FINGERPRINT
    if _FINGERPRINT is None:
        from ..wire.fingerprint import digest, environment_document
        from ..engine import default_registry

        document = environment_document(default_registry().catalog())
        _FINGERPRINT = {"document": document, "digest": digest(document)}
    return _FINGERPRINT


def _start_facts(link: Link, spec: dict[str, Any]) -> threading.Thread:
    """Send this process's own environment fingerprint beside the run (seed: run_facts)."""

    def gather() -> None:
        try:
            link.send("facts", {"kind": "fingerprint", "facts": environment_facts()})
        except Exception as err:  # a fingerprint is a record, never a reason to fail the run
            print(f"codefy run process: no fingerprint: {err}", file=sys.stderr, flush=True)

    thread = threading.Thread(target=gather, name="codefy-facts", daemon=True)
    thread.start()
    return thread


def _jsonable(value: Any) -> Any:
    from ..wire.run_events import jsonable

    return jsonable(value)


def _exit(code: int) -> NoReturn:
    # os._exit: a node's stray non-daemon thread must not keep the run's cards busy after the report.
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def main(argv: list[str] | None = None) -> NoReturn:
    parser = argparse.ArgumentParser(prog="python -m codefy_jupyter.agent.child")
    parser.add_argument("--fd", type=int, required=True, help="the socket inherited from the agent")
    args = parser.parse_args(argv)
    serve(socket.socket(fileno=args.fd))


if __name__ == "__main__":
    main()
