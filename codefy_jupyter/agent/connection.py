"""The agent's connection to the control plane: dial `<control>/codefy/ws/worker`, say hello, take
assigns, cancels, drains and acks, send heartbeats, and dial again with backoff when it drops.

One `Agent` per `codefy agent start`. It owns the runner (run processes) and the deliveries (each
run's spool, replay and acks); this module only moves frames and decides about the connection.

A session: hello -> welcome (or reject) -> run_alive (every run with a spool, so the control plane
resumes them; an empty one says "none") -> the unacked frames of every run, replayed in order ->
live frames as they come, heartbeats every `welcome.heartbeat_s`. A dropped connection never stops a
run: frames pile up in the spools and go out after the next welcome.

Fatal, the agent exits 1: a reject that will not change by retrying (versions, names), the socket
closed for its credentials (4401) or Host/Origin (4003), the worker removed (4410) or replaced by
another agent of the same name (4409), a pinned key that does not match, a 404 for the socket's URL.
Anything else (the control plane restarting, the network) is retried with a capped, jittered backoff.
One exception to 4401: an agent using the token of a `codefy start` server on its own machine reads
that server's record again and, if the token there changed or is not written yet, dials again.

Test hook (and an operator's "reconnect now"): SIGUSR1 drops the socket without a close handshake,
as a network failure would; the agent dials again and replays.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import ssl
import uuid
from dataclasses import replace
from functools import partial
from typing import Any, Mapping
from urllib.parse import urlsplit

from tornado.httpclient import HTTPClientError, HTTPRequest
from tornado.iostream import StreamClosedError
from tornado.websocket import WebSocketClientConnection, WebSocketClosedError, websocket_connect

from .._version import __version__
from ..wire.control_urls import ControlUrls
from ..wire.cpu_threads import available_cores
from ..wire.codec import MAX_FRAME_BYTES, decode, encode
from ..wire.hello_limits import check_hello
from ..wire.frames import (
    AGENT_STOPPED, DEFAULT_GRACE_S, PROTOCOL_VERSION, SUPPORTED_CAPABILITIES, Ack, Assign, Cancel, CancelFetch,
    Credentials, Drain, DropOutputs, FetchOutput, Frame, Heartbeat, Hello, ProtocolError, Reject, RunAlive, Welcome,
)
from . import tls
from .delivery import Deliveries
from .dialing import AgentOptions, Fatal, Redial, socket_url, worth_another_dial
from .pipe_frames import finished_frame, message_frame, refused_frame, started_frame
from .identity import Catalog, Inventory, platform_string
from .isolation import Refusal, Visibility, assign_refusal
from .outputs import WorkerOutputs, outputs_settings
from .retention import prune_run_folders
from .runner import Runner, RunRequest

log = logging.getLogger("codefy.agent")

WELCOME_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_S = 20.0
STOP_GRACE_S = 10.0  # `codefy agent stop`: each run gets this long to stop cooperatively
STOP_ACK_WAIT_S = 10.0  # then the last frames get this long to be acknowledged
FATAL_CLOSE_CODES = {4003: "refused for its Host or Origin header", 4401: "refused: the token is not valid here",
                     4409: "replaced by another agent connecting with the same name",
                     4410: "this worker was removed from the control plane"}
CLOSE_CREDENTIALS = 4401
# too_many_instances: room comes back as other instances of the worker end (a Slurm array larger than the cap).
TRANSIENT_REJECTS = frozenset({"name_taken", "hello_timeout", "shutting_down", "too_many_instances"})
EXIT_OK, EXIT_FAILED = 0, 1


def _log_prune_failure(done: asyncio.Future[Any]) -> None:
    if not done.cancelled() and done.exception() is not None:
        log.warning("removing the folders of finished runs failed: %s", done.exception())


class Agent:
    def __init__(self, options: AgentOptions, *, inventory: Inventory, catalog: Catalog, launcher: Any,
                 env: Mapping[str, str]) -> None:
        self.options = options
        self.inventory = inventory
        self.catalog = catalog
        self.launcher = launcher
        self.controls = ControlUrls(options.controls or (options.control,))
        for url in self.controls.urls:
            socket_url(url)  # each must be an http(s) URL: refused now, not at its first dial
        self.instance_id = uuid.uuid4().hex if options.one_shot else None
        self.deliveries = Deliveries(options.runs_dir, options.registered_name)
        self.runner = Runner(options.runs_dir, launcher, inventory.by_name, env, on_started=self._started,
                             on_message=self._message, on_finished=self._finished, transfer=self._transfer_client())
        self.outputs_write_timeout_s, max_bytes = outputs_settings()
        self.outputs = WorkerOutputs(options.runs_dir, options.registered_name, send=self._send_frame,
                                     writing=self._writing, max_bytes=max_bytes)
        self.runner.on_outputs = self.outputs.written
        self.welcome: Welcome | None = None
        self.ws: WebSocketClientConnection | None = None
        self.draining = False
        self.stopping = False
        self.one_shot_used = False
        self.exit_code: int | None = None
        self._last_write: Any = None
        self._wake = asyncio.Event()
        self._stop_task: asyncio.Task[None] | None = None
        self._backoff = Redial(self.controls)
        self.sessions = 0
        self._pruning: asyncio.Future[Any] | None = None
        self._stopped_by_agent: set[str] = set()  # runs this agent stopped because it was stopped
        self.deliveries.on_done = self._prune_folders

    @property
    def url(self) -> str:
        """The worker socket of the control-plane URL in use now."""
        return socket_url(self.controls.current)

    def _prune_folders(self) -> None:
        """Remove the folders of finished runs beyond the newest `keep_runs`, off the loop (a
        run's data/ may be large); one pass at a time, the next done run starts another."""
        if self.options.keep_runs < 0 or (self._pruning is not None and not self._pruning.done()):
            return
        live = set(self.deliveries.runs) | set(self.runner.runs)
        self._pruning = asyncio.get_running_loop().run_in_executor(
            None, partial(prune_run_folders, self.options.runs_dir, self.options.keep_runs, live))
        self._pruning.add_done_callback(_log_prune_failure)

    # -- the whole life ---------------------------------------------------------------------------------
    async def run(self) -> int:
        reloaded = self.deliveries.reload()
        if reloaded:
            log.info("replaying the unacknowledged frames of %d run(s) from the spool: %s", len(reloaded),
                     ", ".join(reloaded))
        self._prune_folders()
        tls.warn_if_plaintext(self.options.control)
        warming = asyncio.ensure_future(self.launcher.start())
        watcher = asyncio.ensure_future(self._watch_done())
        try:
            while self.exit_code is None:
                try:
                    await self._session()
                except Fatal as err:
                    log.error("%s", err)
                    self.exit_code = EXIT_FAILED
                    break
                if self.exit_code is not None:
                    break
                if self.stopping and not self.runner.runs:
                    self.exit_code = EXIT_OK
                    break
                await self._pause(self._backoff.next())
        finally:
            watcher.cancel()
            if self.runner.runs:  # a fatal error with runs still going: stop them as `agent stop` would
                self.runner.cancel_all(STOP_GRACE_S, "the worker agent is exiting")
                await asyncio.wait_for(self.runner.wait_idle(), STOP_GRACE_S + 15)
            await asyncio.gather(warming, return_exceptions=True)
            await self.launcher.close()
            self.deliveries.close()
        return self.exit_code

    async def _pause(self, seconds: float) -> None:
        self._wake.clear()
        try:
            await asyncio.wait_for(self._wake.wait(), seconds)
        except asyncio.TimeoutError:
            pass

    def request_stop(self) -> None:
        """SIGTERM/SIGINT or `codefy agent stop`: no new runs, each run asked to stop (terminated
        after STOP_GRACE_S), their last frames sent, then exit."""
        self._stopped_by_agent.update(self.runner.runs)
        if self.stopping:  # asked twice (a second Ctrl+C): no more grace
            log.warning("stopping now: terminating %d run(s)", len(self.runner.runs))
            self.runner.cancel_all(0.0, "the worker agent is stopping now")
            return
        log.info("stopping: asking %d run(s) to stop (grace %g s)", len(self.runner.runs), STOP_GRACE_S)
        self.stopping = True
        self.runner.cancel_all(STOP_GRACE_S, "the worker agent is stopping")
        self._stop_task = asyncio.ensure_future(self._stop())

    def _writing(self, run_id: str) -> Any:
        return self.runner.writing.get(run_id)

    async def _stop(self) -> None:
        await self.runner.wait_idle()
        writing = [p.task for p in list(self.runner.writing.values()) if p.task is not None]
        if writing:  # finished runs still writing their outputs get their write time
            log.info("waiting for %d run(s) to finish writing their recorded outputs", len(writing))
            await asyncio.wait(writing, timeout=self.outputs_write_timeout_s + 15)
        if self.ws is not None:
            try:
                await asyncio.wait_for(self._all_acked(), STOP_ACK_WAIT_S)
            except asyncio.TimeoutError:
                log.warning("some frames were not acknowledged; they stay spooled for the next start")
        self._finish(EXIT_OK)

    async def _all_acked(self) -> None:
        while self.deliveries.runs:
            self.deliveries.changed.clear()
            await self.deliveries.changed.wait()

    async def _watch_done(self) -> None:
        """A one-shot agent exits once its run is finished and acknowledged."""
        while True:
            self.deliveries.changed.clear()
            if self.options.one_shot and self.one_shot_used and not self.runner.runs and not self.deliveries.runs:
                log.info("one-shot: the run is done, exiting")
                self._finish(EXIT_OK)
                return
            await self.deliveries.changed.wait()

    def _finish(self, code: int) -> None:
        self.exit_code = code
        self._wake.set()
        if self.ws is not None:
            self.ws.close(1000, "the agent is exiting")

    def drop_connection(self) -> None:
        """Drop the socket as a network failure would (no close handshake)."""
        ws = self.ws
        if ws is not None and ws.protocol is not None and ws.protocol.stream is not None:
            log.warning("dropping the connection (SIGUSR1)")
            ws.protocol.stream.close()
        self._wake.set()

    # -- one connection ---------------------------------------------------------------------------------
    async def _dial(self) -> WebSocketClientConnection:
        parts = urlsplit(self.url)
        ssl_options: ssl.SSLContext | None = None
        if parts.scheme == "wss":
            port = parts.port or 443
            if self.options.pin is not None:
                ssl_options = await tls.pinned_context(parts.hostname or "", port, self.options.pin)
            else:
                ssl_options = tls.context(self.options.ca_file)
        request = HTTPRequest(self.url, headers={"Authorization": f"token {self.options.token}"},
                              connect_timeout=CONNECT_TIMEOUT_S, request_timeout=CONNECT_TIMEOUT_S,
                              ssl_options=ssl_options)
        try:
            return await websocket_connect(request, max_message_size=MAX_FRAME_BYTES)
        except HTTPClientError as err:
            if err.code in (401, 403):
                self._token_refused(f"{self.url}: {err.code}: the token was refused")
                raise
            if err.code == 503:  # a standby (or one still recovering): the next URL, the leader if named
                self._standby_answered(err)
                raise
            if err.code == 404:
                raise Fatal(f"{self.url}: 404: no worker socket there (is --control the control plane's base URL, "
                            "with the codefy extension enabled?)") from None
            raise

    def _move_on(self) -> None:
        if self.controls.several:
            log.info("trying the next control-plane URL: %s", self.controls.failed())

    def _standby_answered(self, err: HTTPClientError) -> None:
        leader = None
        try:
            body = json.loads(err.response.body) if err.response is not None and err.response.body else {}
            leader = (body.get("error") or {}).get("params", {}).get("leader")
        except (ValueError, AttributeError, TypeError):
            pass
        if self.controls.leader_is(leader):
            log.info("%s is a standby; the leader is %s", self.url, self.controls.current)
        else:
            self._move_on()

    def _reread_token(self) -> None:
        reread = self.options.reread_token
        if reread is None:
            return
        token = reread()
        if token and token != self.options.token:
            log.info("the local codefy server's token changed (it restarted): using the new one")
            self.options.token = token

    def _token_refused(self, message: str) -> None:
        reread = self.options.reread_token
        recorded = reread() if reread is not None else None
        if not worth_another_dial(self.options.token, reread is not None, recorded):
            raise Fatal(message)
        log.warning("%s; the local codefy server's token is %s: dialling again", message,
                    "not recorded yet" if not recorded else "another one now")

    async def _session(self) -> None:
        self._reread_token()
        try:
            ws = await self._dial()
        except tls.TLSSetupError as err:
            raise Fatal(str(err)) from None
        except (OSError, HTTPClientError, StreamClosedError, asyncio.TimeoutError, ssl.SSLError) as err:
            log.warning("cannot reach %s: %s", self.url, err)
            if not (isinstance(err, HTTPClientError) and err.code == 503):
                self._move_on()
            return
        if self.exit_code is not None:  # the agent finished while dialling
            ws.close(1000, "the agent is exiting")
            return
        self.ws = ws
        heartbeat: asyncio.Task[None] | None = None
        replay: asyncio.Task[int] | None = None
        try:
            self._send_frame(self._hello())
            welcome = await self._await_welcome(ws)
            if welcome is None:
                return
            self.welcome = welcome
            self.sessions += 1
            self._backoff.reset()
            extra = f"; missing node types: {', '.join(welcome.missing_types)}" if welcome.missing_types else ""
            log.info("connected to %s as %s (%s)%s", self.controls.current, welcome.name or self.options.registered_name,
                     welcome.status, extra)
            self._send_frame(RunAlive(runs=self.deliveries.alive()))
            replay = asyncio.ensure_future(self.deliveries.connected(
                self._send_text, self._drain, batch="batch" in welcome.capabilities))
            heartbeat = asyncio.ensure_future(self._heartbeats(welcome.heartbeat_s))
            while True:
                message = await ws.read_message()
                if message is None:
                    break
                try:
                    self._handle(message)
                except Exception:  # a bug of ours on one frame must not take the connection down
                    log.exception("could not handle a frame from the control plane")
        finally:
            self.deliveries.disconnected()
            self.ws = None
            for task in (heartbeat, replay):
                if task is not None:
                    task.cancel()
            await asyncio.gather(*(t for t in (heartbeat, replay) if t is not None), return_exceptions=True)
        self._closed(ws)

    def _closed(self, ws: WebSocketClientConnection) -> None:
        code = ws.close_code
        if self.exit_code is not None:
            return
        if code in FATAL_CLOSE_CODES:
            message = (f"the control plane closed the connection ({code}): {FATAL_CLOSE_CODES[code]}"
                       + (f" ({ws.close_reason})" if ws.close_reason else ""))
            if code != CLOSE_CREDENTIALS:
                raise Fatal(message)
            self._token_refused(message)
            return
        log.warning("connection to %s closed (%s); dialling again", self.controls.current,
                    f"{code} {ws.close_reason or ''}".strip() if code else "dropped")

    async def _await_welcome(self, ws: WebSocketClientConnection) -> Welcome | None:
        try:
            message = await asyncio.wait_for(ws.read_message(), WELCOME_TIMEOUT_S)
        except asyncio.TimeoutError:
            log.warning("no welcome within %g s; dialling again", WELCOME_TIMEOUT_S)
            ws.close(1000, "no welcome")
            return None
        if message is None:
            # Closed before any frame: refused at the door (4401 credentials, 4003 Host/Origin), which
            # is fatal like the same code on a live connection, not a reason to dial again forever.
            self._closed(ws)
            return None
        try:
            frame = decode(message, sender="server")
        except ProtocolError as err:
            log.warning("the control plane sent an unreadable first frame: %s", err)
            ws.close(1002, "bad frame")
            return None
        if isinstance(frame, Reject):
            if frame.code in TRANSIENT_REJECTS:
                log.warning("hello refused (%s): %s; trying again", frame.code, frame.message)
                return None
            raise Fatal(f"the control plane refused this worker ({frame.code}): {frame.message}")
        if not isinstance(frame, Welcome):
            log.warning("expected welcome, got %s", frame.type)
            ws.close(1002, "expected welcome")
            return None
        return frame

    def _transfer_client(self) -> Any:
        from . import tls
        from .transfer import RunTransfer

        https = self.options.control.startswith(("https:", "wss:"))
        # A pinned key is checked on the socket only; downloads then trust the CA file or the system's.
        context = tls.context(self.options.ca_file) if https else None
        return RunTransfer(lambda: self.controls.current, lambda: self.options.token, self.options.cache_dir, ssl_context=context)

    def _hello(self) -> Hello:
        o = self.options
        hello = Hello(
            name=o.name, version=__version__, protocol_version=PROTOCOL_VERSION,
            fingerprint=self.catalog.fingerprint, catalog_hash=self.catalog.catalog_hash,
            node_types=self.catalog.node_types, capabilities=offered_capabilities(),
            machine_id=machine_id(), devices=self.inventory.hello(), platform=platform_string(), mounts=dict(o.mounts),
            one_shot=o.one_shot, one_shot_run_id=o.run_id if o.one_shot else None,
            instance_id=self.instance_id, instance=o.instance, cpu_count=available_cores())
        try:  # the control plane would refuse it (4413, fatal): say here which bound it is over
            check_hello(hello)
        except ProtocolError as err:
            raise Fatal(f"this worker's hello is over a bound of the protocol: {err}") from None
        return hello

    async def _heartbeats(self, every: float) -> None:
        while True:
            await asyncio.sleep(every)
            devices = await asyncio.to_thread(self.inventory.heartbeat)
            self._send_frame(Heartbeat(devices=devices, running=self.runner.running))

    # -- sending ----------------------------------------------------------------------------------------
    def _send_text(self, text: str) -> None:
        ws = self.ws
        if ws is None:
            return
        try:
            self._last_write = ws.write_message(text)
        except WebSocketClosedError:
            return  # the read loop sees the close; frames stay spooled

    def _send_frame(self, frame: Frame) -> None:
        self._send_text(encode(frame))

    async def _drain(self) -> None:
        write = self._last_write
        if write is not None:
            try:
                await write
            except (WebSocketClosedError, StreamClosedError):
                pass

    # -- frames from the control plane -----------------------------------------------------------------
    def _handle(self, message: str | bytes) -> None:
        try:
            frame = decode(message, sender="server")
        except ProtocolError as err:
            log.warning("dropped a malformed frame from the control plane: %s", err)
            return
        if isinstance(frame, Ack):
            self.deliveries.ack(frame.run_id, frame.seq)
        elif isinstance(frame, Assign):
            self._assign(frame)
        elif isinstance(frame, Cancel):
            grace = frame.grace_s
            if grace is None:
                proc = self.runner.runs.get(frame.run_id)
                grace = proc.request.grace_s if proc is not None and proc.request.grace_s is not None else None
            if grace is None:
                grace = self.welcome.grace_s if self.welcome else DEFAULT_GRACE_S
            if not self.runner.cancel(frame.run_id, grace, frame.reason or "cancel requested"):
                log.info("cancel for run %s, which is not running here", frame.run_id)
        elif isinstance(frame, FetchOutput):
            self.outputs.fetch(frame)
        elif isinstance(frame, CancelFetch):
            self.outputs.cancel(frame)
        elif isinstance(frame, DropOutputs):
            self.outputs.drop(frame)
        elif isinstance(frame, Credentials):
            if self.runner.credentials(frame.run_id, frame.credentials):
                log.info("run %s: fresh S3 credentials", frame.run_id)
            else:
                log.info("S3 credentials for run %s, which is not an S3 run here", frame.run_id)
        elif isinstance(frame, Drain):
            self.draining = frame.draining
            log.info("draining: no new runs" if frame.draining else "undrained: taking runs again")
        elif isinstance(frame, Reject):
            log.warning("the control plane refused something (%s): %s", frame.code, frame.message)

    def _assign(self, frame: Assign) -> None:
        run_id = frame.run_id
        running = run_id in self.runner.runs
        refusal = (Refusal("agent_stopping", f"the worker agent is stopping: run {run_id} was not started",
                           {"run_id": run_id})
                   if self.stopping and not running else
                   assign_refusal(run_id=run_id, device=frame.device, devices=frame.devices,
                                  offered=self.inventory.by_name, known_runs=self.deliveries.known() | set(self.runner.runs),
                                  draining=self.draining, one_shot_used=self.options.one_shot and self.one_shot_used))
        if refusal is not None:
            log.warning("refused run %s: %s", run_id, refusal.message)
            if refusal.code == "duplicate_assign" and not running:
                return  # its run_finished is already on its way; a second one would contradict it
            self.deliveries.add(run_id, refused_frame(run_id, refusal.error()))
            if running:  # the control plane now counts it as ended: free its cards
                self.runner.cancel(run_id, 0.0, refusal.message)
            return
        negotiated = self.welcome.capabilities if self.welcome else ()
        options = frame.options  # checked by the frame's decode (wire/run_options.py ExecutionOptions)
        if options.record_outputs and "record_outputs" not in negotiated:
            options = replace(options, record_outputs=False)
        request = RunRequest(
            run_id=run_id, graph=frame.graph, device=frame.device, devices=list(frame.devices), options=options,
            facts="run_facts" in negotiated, grace_s=frame.grace_s, cpu_threads=frame.cpu_threads,
            storage=frame.storage, memory_budgets=frame.memory_budgets,
            outputs_write_timeout_s=self.outputs_write_timeout_s)
        self.one_shot_used = True
        self.deliveries.open(run_id)
        log.info("run %s: starting on %s", run_id, ", ".join(frame.devices) or frame.device)
        self.runner.start(request)

    # -- the runner's callbacks -------------------------------------------------------------------------
    def _started(self, run_id: str, pid: int, view: Visibility, capped: dict[str, Any] | None) -> None:
        self.deliveries.add(run_id, started_frame(run_id, pid, view, capped))

    def _message(self, run_id: str, kind: str, body: dict[str, Any]) -> None:
        negotiated = self.welcome.capabilities if self.welcome else ()
        frame = message_frame(run_id, kind, body, facts="run_facts" in negotiated,
                              released="run_released" in negotiated)
        if frame is not None:
            self.deliveries.add(run_id, frame)

    def _finished(self, run_id: str, body: dict[str, Any]) -> None:
        frame = finished_frame(run_id, body)
        if frame.status == "cancelled" and run_id in self._stopped_by_agent:
            frame = replace(frame, error={"code": AGENT_STOPPED, "type": "AgentStopped",
                                          "message": f"the worker agent {self.options.registered_name} was stopped "
                                                     "while this run was executing"})
        log.info("run %s: %s", run_id, frame.status)
        self.deliveries.add(run_id, frame)
        self.deliveries.changed.set()


def offered_capabilities() -> list[str]:
    """What the hello offers: everything this version implements, `s3` only where boto3 imports."""
    from .s3 import available

    # Tests and benchmarks play an older agent by leaving capabilities out (comma-separated names).
    left_out = {c.strip() for c in os.environ.get("CODEFY_AGENT_TEST_WITHOUT_CAPABILITIES", "").split(",")}
    return sorted(c for c in SUPPORTED_CAPABILITIES if (c != "s3" or available()) and c not in left_out)


def machine_id() -> str | None:
    from ..wire.machine_identity import digest_of, machine_id_digest

    # Containers (and tests) that share /etc/machine-id with the control plane's machine but not
    # its folders declare their own: it only decides "same machine" (borrowed folders, shared cpu).
    declared = os.environ.get("CODEFY_AGENT_MACHINE_ID", "").strip()
    return digest_of(declared) if declared else machine_id_digest()
