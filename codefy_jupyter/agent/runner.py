"""Starts and watches one run process per assign.

For each run: a folder `agent-runs/<run id>/` (output.log, data/), the environment `isolation.py`
decides, a process from the launcher (warm fork or cold spawn), the `assign` message down its
socket, and every message it sends back handed to `on_message` in order. When the process has ended
(and its socket is drained), `on_finished` gets the run_finished body: the run's own report, or,
for a process that died without one (a segfault, the OOM killer), `failed` with the exit code or
signal and the last 4 KB of output.log. Nothing a run does can end the agent or another run.

Files (transfer and S3 backends) go home after the process has exited and before `on_finished`;
the runner first says `released` (the control plane frees the run's cards for the next run), and
a cancel during the upload stops it between files and ends the run cancelled.

Cancel (seed: isolation, cancel): the `cancel` message first (cooperative, the engine's
CancelToken), SIGTERM to the run's process group after `grace_s`, SIGKILL `kill_after_s` later
(`KillPolicy`). A run stopped that way ends `cancelled`, as an in-process cancel does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from ..wire import run_events as ev
from ..wire.cpu_threads import thread_environment
from ..wire.run_options import ExecutionOptions
from . import pipe
from .transfer import InputCache, RunTransfer, TransferFailed, UploadStopped, point_inputs, upload_order
from .isolation import OfferedDevice, Visibility, child_environment, visibility
from .launch import LaunchError, Launched, ProcessExit
from .system_sampling import RunSampling, interval_from, run_cards

log = logging.getLogger("codefy.agent")

OUTPUT_LOG = "output.log"
OUTPUT_TAIL_BYTES = 4096
# After its `finished` report a run process exits at once (os._exit); one that does not is killed.
EXIT_AFTER_FINISHED_S = 10.0
# After its socket closed, how long to wait for the exit status before reporting without it.
EXIT_STATUS_WAIT_S = 10.0


@dataclass(frozen=True)
class KillPolicy:
    """SIGTERM after `grace_s`, then SIGKILL `kill_after_s` later, to the run's process group."""

    kill_after_s: float = 5.0

    def signal(self, pid: int, sig: signal.Signals, run_id: str) -> None:
        log.warning("run %s: sending %s to its process %d", run_id, sig.name, pid)
        try:
            os.killpg(pid, sig)  # the run's own session: its helper processes go too
        except ProcessLookupError:
            return
        except PermissionError:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)


@dataclass
class RunRequest:
    """What the runner needs from an assign."""

    run_id: str
    graph: dict[str, Any]
    device: str
    devices: list[str] = field(default_factory=list)
    # What the run executes with, as its assign carried it (wire/run_options.py); record_outputs
    # only where the control plane negotiated the capability, provenance reported as run_facts.
    options: ExecutionOptions = field(default_factory=ExecutionOptions)
    facts: bool = False
    grace_s: float | None = None  # the assign's cancel grace, for a cancel that names none
    cpu_threads: int | None = None  # the run's CPU thread budget; None: the libraries' defaults
    storage: dict[str, Any] | None = None  # the assign's storage (core/storage/plan.py); None: no files
    memory_budgets: dict[str, int] | None = None  # MiB per card shared by memory (agent/memory_cap.py)
    outputs_write_timeout_s: float = 300.0


# (run id, pid, view, the process's `capped` report: None for a run without budgets, which is
# reported started as soon as its process exists)
OnStarted = Callable[[str, int, Visibility, "dict[str, Any] | None"], None]
OnMessage = Callable[[str, str, dict[str, Any]], None]
OnFinished = Callable[[str, dict[str, Any]], None]


def json_copy(value: Any) -> Any:
    """A deep copy of a JSON value (the assign's graph is shared with its frame)."""
    if isinstance(value, dict):
        return {k: json_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_copy(v) for v in value]
    return value


def output_tail(path: Path, size: int = OUTPUT_TAIL_BYTES) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - size))
            return f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


class RunProcess:
    def __init__(self, runner: Runner, request: RunRequest) -> None:
        self.runner = runner
        self.request = request
        self.run_id = request.run_id
        self.directory = runner.runs_dir / request.run_id
        self.log_path = self.directory / OUTPUT_LOG
        self.launched: Launched | None = None
        self.sampling: RunSampling | None = None
        self.report: dict[str, Any] | None = None
        self.cancel_requested = False
        self.killed = False
        self.started_at = time.monotonic()
        self.task: asyncio.Task[None] | None = None
        self._timers: list[asyncio.TimerHandle] = []
        self._writer: asyncio.StreamWriter | None = None
        self._cancel_reason = "cancel requested"
        self.data_dir = self.directory / "data"
        self.transfer_dir: Path | None = None  # transfer and S3 backends: the folder whose files go back
        self.remote: InputCache | None = None  # the backend moving this run's files (RunTransfer, S3Transfer)
        self._reads: dict[int, asyncio.Future[tuple[int, dict[str, Any]]]] = {}
        self._read_ids = 0
        # A budgeted run's messages that came before its process's `capped` (the DDP fingerprint),
        # sent after run_started; None once the run is reported started (or has no budget).
        self._held: list[tuple[str, dict[str, Any]]] | None = None
        self._view: Visibility | None = None
        self._transfer_facts: dict[str, Any] | None = None
        self.released = False  # `released` sent: the control plane has given its cards to others
        self.upload_stop = False  # cancelled while its files upload: the rest stay on the worker
        self._ending: asyncio.Future[None] | None = None  # record_outputs + upload: ends from here

    @property
    def pid(self) -> int | None:
        return self.launched.pid if self.launched else None

    async def _storage(self) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """The graph and data folder the run gets from its assign's storage; for transfer, the
        inputs fetched first (TransferFailed: the run fails before it starts)."""
        storage = self.request.storage or {}
        backend = storage.get("backend")
        graph = self.request.graph
        if backend in ("local", "mount") and isinstance(storage.get("run_dir"), str) and storage["run_dir"]:
            self.data_dir = Path(storage["run_dir"])
            return graph, None
        if backend == "s3":
            from .s3 import S3Transfer

            self.remote = S3Transfer(storage.get("s3") if isinstance(storage.get("s3"), dict) else {},
                                     self.runner.cache_dir)
        elif backend == "transfer":
            self.remote = self.runner.transfer
        else:
            return graph, None
        self.transfer_dir = self.data_dir
        inputs = [i for i in storage.get("inputs") or () if isinstance(i, dict)]
        transfer = self.remote
        if not inputs:
            return graph, None
        if transfer is None:
            raise TransferFailed("this agent has no transfer client")
        fetched = await asyncio.to_thread(transfer.fetch_inputs, self.run_id, inputs)
        log.info("run %s: inputs (%s): %d bytes downloaded in %.3f s, %d from the cache", self.run_id, backend,
                 fetched.downloaded, fetched.seconds, fetched.cached)
        facts = {"backend": backend, "downloaded_bytes": fetched.downloaded, "cached_inputs": fetched.cached,
                 "seconds": round(fetched.seconds, 6)}
        return point_inputs(json_copy(graph), inputs, fetched.paths), facts

    async def _upload(self) -> bool:
        """Transfer and S3 backends: the run's files go home (to the control plane, or to the
        bucket) before its run_finished, from a thread. Its cards are released first (the process
        no longer uses them), so the next run on them starts while this one uploads. True when a
        cancel stopped the upload."""
        transfer, folder = self.remote, self.transfer_dir
        if transfer is None or folder is None:
            return False
        self._release(folder)
        where = "the S3 bucket" if transfer is not self.runner.transfer else "the control plane"
        try:
            started = time.perf_counter()
            sent = await asyncio.to_thread(transfer.upload_outputs, self.run_id, folder, self._upload_stopped)
            if sent:
                log.info("run %s: %d files (%d bytes) uploaded to %s in %.3f s", self.run_id, len(sent),
                         sum(n for _, n in sent), where, time.perf_counter() - started)
            if transfer is not self.runner.transfer:
                self.runner.on_message(self.run_id, "facts", {"kind": "s3", "facts": {
                    "uploaded": [[key, size] for key, size in sent],
                    "credential_updates": getattr(transfer, "updates", 0)}})
        except UploadStopped as err:
            log.info("run %s: %s", self.run_id, err)
            event = ev.run_warning(self.run_id, err.code, f"the run was cancelled while its files were uploaded to "
                                   f"{where}: the files not yet uploaded stay on the worker", {"reason": str(err)})
            self.runner.on_message(self.run_id, "event", {"type": event.type, "payload": event.payload})
            return True
        except TransferFailed as err:
            log.warning("run %s: %s", self.run_id, err)
            event = ev.run_warning(self.run_id, err.code, f"the run's files could not be uploaded to {where}: {err}",
                                   {"reason": str(err)})
            self.runner.on_message(self.run_id, "event", {"type": event.type, "payload": event.payload})
        return False

    def _upload_stopped(self) -> bool:
        # Read from the upload's thread; a bool set once on the loop's thread.
        return self.upload_stop

    def _release(self, folder: Path) -> None:
        if self.released or self.runner.runs.get(self.run_id) is not self:
            return
        self.released = True
        try:
            left = sum(p.stat().st_size for p in upload_order(folder))
        except OSError:
            left = None
        self.runner.on_message(self.run_id, "released", {"upload_bytes": left})

    async def _upload_then_finish(self, report: dict[str, Any]) -> None:
        """record_outputs with an upload: the files are complete at the report, so they go home
        while the process writes its outputs, and the run ends once they are home."""
        stopped = await self._upload()
        self.runner.finish(self, _stopped(report) if stopped else report)

    def _relative_artifact(self, kind: str, body: dict[str, Any]) -> dict[str, Any]:
        """Transfer backend: an artifact's path relative to the run's folder, which is where the
        control plane keeps the uploaded copy; S3: the object's key."""
        folder = self.transfer_dir
        if folder is None or kind != "event" or body.get("type") != "artifact":
            return body
        payload = body.get("payload")
        path = payload.get("path") if isinstance(payload, dict) else None
        if not isinstance(path, str):
            return body
        try:
            rel = Path(path).resolve().relative_to(folder.resolve()).as_posix()
        except ValueError:
            return body
        key_of = getattr(self.remote, "key_of", None)
        return {**body, "payload": {**payload, "path": key_of(rel) if key_of is not None else rel}}

    async def run(self, view: Visibility) -> None:
        r = self.request
        graph, transfer_facts = await self._storage()
        # In the environment at spawn, the thread variables size OpenMP/MKL/OpenBLAS when the run's
        # process first loads them; a process forked warm has them loaded already, so the child
        # also applies the budget to torch itself (`cpu_threads` below).
        threads = thread_environment(r.cpu_threads) if r.cpu_threads is not None else None
        env = child_environment(self.runner.base_env, view, extra=threads)
        launched = await self.runner.launcher.launch(self.run_id, env, self.log_path)
        self.launched = launched
        self._view, self._transfer_facts = view, transfer_facts
        if r.memory_budgets:
            self._held = []  # run_started waits for the cap (seed #788: capped before run_started)
        else:  # nothing to wait for: no extra hop for runs without budgets
            self._report_started(None)
        self.sampling = RunSampling(self.runner.system_metrics_interval_s, self.run_id, launched.pid,
                                    run_cards(view, self.runner.offered), self._system_message)
        spec = {
            **r.options.to_json(),  # the run process reads them back with ExecutionOptions.from_json
            "run_id": r.run_id, "graph": graph, "device": view.engine_device,
            "data_dir": str(self.data_dir), "facts": r.facts,
            "aliases": view.aliases,
            "env": {"CUDA_DEVICE_ORDER": env["CUDA_DEVICE_ORDER"], "CUDA_VISIBLE_DEVICES": env["CUDA_VISIBLE_DEVICES"],
                    **(threads or {})},
            "cpu_threads": r.cpu_threads, "memory_budgets": r.memory_budgets or {},
            "devices": list(view.aliases) or [view.engine_device],
        }
        if r.options.record_outputs:
            spec.update(outputs_dir=str(self.directory / "outputs"), outputs_write_timeout_s=r.outputs_write_timeout_s)
        reader, writer = await asyncio.open_connection(sock=launched.sock, limit=pipe.MAX_LINE_BYTES)
        self._writer = writer
        writer.write(pipe.encode("assign", spec))
        if self.cancel_requested:  # a cancel that came while the process was starting
            writer.write(pipe.encode("cancel", {"reason": self._cancel_reason}))
        with contextlib.suppress(ConnectionError):
            await writer.drain()
        try:
            await self._read(reader)
        finally:
            self.sampling.stop()  # the process is gone (or its socket broke): no more samples
        exit_ = await self._exit_status()
        writer.close()
        if self._ending is not None:
            await self._ending
        else:
            stopped = await self._upload()
            body = self._finished_body(exit_)
            self.runner.finish(self, _stopped(body) if stopped else body)
        if r.options.record_outputs and self.runner.on_outputs is not None:
            self.runner.on_outputs(self.run_id)

    def _report_started(self, capped: dict[str, Any] | None) -> None:
        assert self.launched is not None and self._view is not None
        held, self._held = self._held or [], None
        self.runner.on_started(self.run_id, self.launched.pid, self._view, capped)
        if self._transfer_facts is not None:
            self.runner.on_message(self.run_id, "facts", {"kind": "transfer", "facts": self._transfer_facts})
        for kind, body in held:
            self.runner.on_message(self.run_id, kind, body)

    def _system_message(self, kind: str, body: dict[str, Any]) -> None:
        """A system metric point or the sampling note (agent/system_sampling.py), sent as the run's
        process's own messages are: held until a budgeted run is reported started."""
        if self._held is not None:
            self._held.append((kind, body))
        elif self.report is None:
            self.runner.on_message(self.run_id, kind, body)

    def _never_capped(self, body: dict[str, Any]) -> dict[str, Any]:
        """A budgeted run whose process reported its end before its cap: it failed, and was never
        reported started. Its own error stands when it has a code (the cap's, a DDP rank's)."""
        error = body.get("error") if isinstance(body.get("error"), dict) else None
        if body.get("status") == "cancelled" or (error is not None and error.get("code")):
            return body
        return {**body, "status": "failed", "error": {
            "type": "MemoryCapFailed", "code": "memory_cap_failed",
            "message": "the run's process ended before it capped its memory to the budget"
                       + (f": {error.get('message')}" if error and error.get("message") else ""),
            "params": {"reason": "ended_before_cap"}}}

    async def _read(self, reader: asyncio.StreamReader) -> None:
        while True:
            try:
                line = await reader.readline()
            except (ConnectionError, asyncio.LimitOverrunError, ValueError) as err:
                log.warning("run %s: its socket failed: %s", self.run_id, err)
                self.runner.kill_policy.signal(self.pid or 0, signal.SIGKILL, self.run_id)
                return
            if not line:
                return
            try:
                kind, body = pipe.decode(line, kinds=pipe.CHILD_KINDS)
            except pipe.PipeError as err:
                log.warning("run %s: dropped a bad message from its process: %s", self.run_id, err)
                continue
            if kind == "answer":
                waiting = self._reads.pop(body.get("id"), None) if isinstance(body.get("id"), int) else None
                if waiting is not None and not waiting.done() and isinstance(body.get("body"), dict):
                    waiting.set_result((int(body.get("status") or 500), body["body"]))
                continue
            if kind == "capped":
                if self._held is not None:
                    self._report_started(body)
                continue
            if kind == "finished" and self._held is not None:
                body = self._never_capped(body)
            if kind == "finished":
                if self.sampling is not None:  # before the report: its note goes ahead of the end
                    self.sampling.stop()
                self.report = body
                if self.request.options.record_outputs:
                    # Its outputs are written after the report (seed: recorded outputs on a
                    # worker): the run ends now (or once its files are home), its process gets
                    # the write time to exit.
                    self._after(self.request.outputs_write_timeout_s + EXIT_AFTER_FINISHED_S, self._kill_lingering)
                    report = {**body, "duration_s": body.get("duration_s") or time.monotonic() - self.started_at}
                    if self.transfer_dir is None:
                        self.runner.finish(self, report)
                    else:
                        self._ending = asyncio.ensure_future(self._upload_then_finish(report))
                    continue
                self._after(EXIT_AFTER_FINISHED_S, self._kill_lingering)
                continue
            if self._held is not None:
                self._held.append((kind, self._relative_artifact(kind, body)))
                continue
            self.runner.on_message(self.run_id, kind, self._relative_artifact(kind, body))

    async def _exit_status(self) -> ProcessExit:
        assert self.launched is not None
        try:
            return await asyncio.wait_for(asyncio.shield(self.launched.exited), EXIT_STATUS_WAIT_S)
        except asyncio.TimeoutError:
            # The socket closed but the process lives on (it closed fd 0..n itself?): end it.
            self.runner.kill_policy.signal(self.launched.pid, signal.SIGKILL, self.run_id)
            try:
                return await asyncio.wait_for(asyncio.shield(self.launched.exited), EXIT_STATUS_WAIT_S)
            except asyncio.TimeoutError:
                return ProcessExit(None, None)

    def _finished_body(self, exit_: ProcessExit) -> dict[str, Any]:
        for timer in self._timers:
            timer.cancel()
        duration = time.monotonic() - self.started_at
        if self.report is not None:
            body = dict(self.report)
            body.setdefault("duration_s", duration)
            if exit_.exit_code not in (0, None) or exit_.signal is not None:
                body.update(exit_code=exit_.exit_code, signal=exit_.signal)
            return body
        tail = output_tail(self.log_path)
        if self.cancel_requested:
            return {"status": "cancelled", "error": None, "executed": 0, "cached": 0, "metrics": {},
                    "duration_s": duration, "exit_code": exit_.exit_code, "signal": exit_.signal,
                    "output_tail": tail}
        message = f"the run's process {exit_.describe()} before reporting a result"
        code, params = "run_process_died", {"exit_code": exit_.exit_code, "signal": exit_.signal}
        if self._held is not None:  # a budgeted run never reported started
            message = f"the run's process {exit_.describe()} before it capped its memory to the budget"
            code, params = "memory_cap_failed", {**params, "reason": "ended_before_cap"}
        if exit_.signal == signal.SIGKILL:
            message += " (killed from outside, for example by the out-of-memory killer)"
        elif exit_.signal == signal.SIGSEGV:
            message += " (a segmentation fault in native code)"
        return {"status": "failed",
                "error": {"type": "RunProcessDied", "code": code, "message": message, "params": params},
                "executed": 0, "cached": 0, "metrics": {}, "duration_s": duration,
                "exit_code": exit_.exit_code, "signal": exit_.signal, "output_tail": tail}

    async def read(self, kind: str, query: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
        """A read of its recorded outputs, answered by the process from its copy in memory while it
        writes them; None once it has gone (the files are then complete, or absent)."""
        writer = self.writer_open()
        if writer is None:
            return None
        self._read_ids += 1
        number = self._read_ids
        future = self._reads[number] = asyncio.get_running_loop().create_future()
        writer.write(pipe.encode("read", {"id": number, "run_id": self.run_id, "kind": kind, "query": query}))
        exited = self.launched.exited if self.launched is not None else None
        try:
            waits = [future] + ([asyncio.ensure_future(asyncio.shield(exited))] if exited is not None else [])
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            for w in waits[1:]:
                w.cancel()
            return future.result() if future.done() else None
        finally:
            self._reads.pop(number, None)

    def writer_open(self) -> asyncio.StreamWriter | None:
        writer = self._writer
        if writer is None or writer.is_closing() or self.launched is None or self.launched.exited.done():
            return None
        return writer

    # -- cancel -----------------------------------------------------------------------------------------
    def cancel(self, grace_s: float, reason: str, *, stop_upload: bool = True) -> None:
        # A cancel once the graph is done (the run is uploading, or about to) stops the upload; one
        # that stopped the graph leaves its files (interrupted checkpoints) to go home, and so does
        # an agent stop (`stop_upload` False).
        if stop_upload and (self.report is not None or (self.launched is not None and self.launched.exited.done())):
            self.upload_stop = True
        if self.cancel_requested:
            # A second cancel can only shorten the grace (a cancel with grace 0 after a normal one).
            if grace_s <= 0:
                self._terminate()
            return
        self.cancel_requested = True
        self._cancel_reason = reason
        writer = self._writer
        if writer is not None and not writer.is_closing():
            writer.write(pipe.encode("cancel", {"reason": reason}))
        if self.report is not None:
            return
        if grace_s <= 0:
            self._terminate()
        else:
            self._after(grace_s, self._terminate)

    def _terminate(self) -> None:
        if self.launched is None:  # still starting: try again once it has a process
            self._after(0.1, self._terminate)
            return
        if self.launched.exited.done() or self.report is not None:
            return
        self.killed = True
        self.runner.kill_policy.signal(self.launched.pid, signal.SIGTERM, self.run_id)
        self._after(self.runner.kill_policy.kill_after_s, self._kill)

    def _kill(self) -> None:
        if self.launched is not None and not self.launched.exited.done():
            self.runner.kill_policy.signal(self.launched.pid, signal.SIGKILL, self.run_id)

    def _kill_lingering(self) -> None:
        if self.launched is not None and not self.launched.exited.done():
            log.warning("run %s: its process reported but did not exit", self.run_id)
            self._kill()

    def _after(self, delay: float, fn: Callable[[], None]) -> None:
        self._timers.append(asyncio.get_running_loop().call_later(delay, fn))


def _stopped(body: dict[str, Any]) -> dict[str, Any]:
    """A succeeded run cancelled while its files uploaded ends cancelled (its result is not all
    home); a failed one stays failed."""
    return {**body, "status": "cancelled", "error": None} if body.get("status") == "succeeded" else body


class Runner:
    """The agent's run processes. `start` after the assign passed `isolation.assign_refusal`."""

    def __init__(self, runs_dir: Path, launcher: Any, offered: Mapping[str, OfferedDevice],
                 base_env: Mapping[str, str], *, on_started: OnStarted, on_message: OnMessage,
                 on_finished: OnFinished, kill_policy: KillPolicy | None = None,
                 transfer: RunTransfer | None = None) -> None:
        self.runs_dir = Path(runs_dir)
        self.launcher = launcher
        self.offered = dict(offered)
        self.base_env = dict(base_env)
        self.on_started = on_started
        self.on_message = on_message
        self.on_finished = on_finished
        self.kill_policy = kill_policy or KillPolicy()
        self.transfer = transfer
        self.system_metrics_interval_s = interval_from(os.environ)
        # Called with a record_outputs run's id once its process (which writes them) has exited.
        self.on_outputs: Callable[[str], None] | None = None
        # Processes still writing a finished run's outputs: `agent stop` waits for them too.
        self.writing: dict[str, RunProcess] = {}
        self.runs: dict[str, RunProcess] = {}
        self._idle = asyncio.Event()
        self._idle.set()

    @property
    def running(self) -> list[str]:
        return sorted(self.runs)

    @property
    def cache_dir(self) -> Path:
        """Inputs by SHA-256, shared by the transfer and S3 backends."""
        return self.transfer.cache_dir if self.transfer is not None else self.runs_dir.parent / "agent-cache"

    def credentials(self, run_id: str, credentials: dict[str, Any]) -> bool:
        """Fresh S3 credentials for a running S3 run; whether it is one."""
        proc = self.runs.get(run_id)
        update = getattr(proc.remote, "update", None) if proc is not None else None
        if update is None:
            return False
        update(credentials)
        return True

    def start(self, request: RunRequest) -> RunProcess:
        view = visibility(request.device, request.devices, self.offered)
        proc = RunProcess(self, request)
        self.runs[request.run_id] = proc
        self._idle.clear()
        proc.task = asyncio.ensure_future(self._run(proc, view))
        return proc

    async def _run(self, proc: RunProcess, view: Visibility) -> None:
        try:
            await proc.run(view)
        except TransferFailed as err:
            log.error("run %s: its inputs could not be fetched: %s", proc.run_id, err)
            self.finish(proc, {"status": "failed", "error": {"type": type(err).__name__, "code": err.code,
                                                             "message": f"the run's inputs could not be fetched: {err}"},
                               "executed": 0, "cached": 0, "metrics": {}, "duration_s": 0.0})
        except (LaunchError, OSError) as err:
            log.error("run %s could not start: %s", proc.run_id, err)
            self.finish(proc, {"status": "failed", "error": {"type": "LaunchError", "code": "run_process_start_failed",
                                                             "message": str(err)},
                               "executed": 0, "cached": 0, "metrics": {}, "duration_s": 0.0})
        except Exception as err:  # a bug of ours: the run fails, the agent and other runs go on
            log.exception("run %s: the runner failed", proc.run_id)
            proc._kill()
            self.finish(proc, {"status": "failed", "error": {"type": type(err).__name__, "code": "agent_error",
                                                             "message": f"the worker agent failed: {err}"},
                               "executed": 0, "cached": 0, "metrics": {}, "duration_s": 0.0})

    def finish(self, proc: RunProcess, body: dict[str, Any]) -> None:
        if self.runs.get(proc.run_id) is not proc:
            return
        del self.runs[proc.run_id]
        if proc.request.options.record_outputs and proc.task is not None and not proc.task.done():
            self.writing[proc.run_id] = proc
            proc.task.add_done_callback(lambda _t, run_id=proc.run_id: self.writing.pop(run_id, None))
        if not self.runs:
            self._idle.set()
        self.on_finished(proc.run_id, body)

    def cancel(self, run_id: str, grace_s: float, reason: str = "cancel requested") -> bool:
        proc = self.runs.get(run_id)
        if proc is None:
            return False
        proc.cancel(grace_s, reason)
        return True

    def cancel_all(self, grace_s: float, reason: str) -> None:
        for proc in list(self.runs.values()):
            proc.cancel(grace_s, reason, stop_upload=False)

    async def wait_idle(self) -> None:
        await self._idle.wait()
