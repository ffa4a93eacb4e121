"""The worker agents' side of the server: `/codefy/ws/worker` and `/codefy/api/workers...`.

/codefy/ws/worker accepts a connection only when all hold (seed: security), else it closes it
before reading anything: 4003 for a Host outside the allowed list or any Origin header (agents send
none, and no web page has a reason to open this socket), 4401 for credentials. Credentials come as
`Authorization: token <T>`, `X-Codefy-Token: <T>` or `?token=<T>`: a worker token (from any peer)
or the server's own token from a loopback peer. Then `hello` within 10 s, judged by
core/workers/handshake.py; every later frame goes to the WorkerService. The handler is the
connection's `WorkerLink` (send a frame, close with a code).

REST: GET /workers (the agents, their devices and slots; this server's as `local`), GET/DELETE
/workers/{id}, POST /workers/{id}/drain and /undrain, POST /workers/enrollments (a one-time token),
all behind the server's auth like the run routes; POST /workers/enroll exchanges a one-time token for
a worker token without a session token, rate-limited per client address. On a shared server only
admins and the user who enrolled a worker may manage it (core/workers/access.py).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from typing import Any, Awaitable

from jupyter_server.auth.decorator import allow_unauthenticated, authorized
from jupyter_server.base.handlers import JupyterHandler
from jupyter_server.extension.handler import ExtensionHandlerMixin
from tornado import web, websocket

from ..core.errors import NotFound, ServiceError
from ..core.runs.service import RunService
from ..core.workers.handshake import Credential
from ..wire.protocol import (
    HELLO_TIMEOUT_S, MAX_FRAME_BYTES, Batch, Frame, Hello, ProtocolError, Reject, RunFrame, decode, encode, unpack,
)
from ..core.workers.service import (
    CLOSE_CREDENTIALS, CLOSE_HELLO_TIMEOUT, CLOSE_HOST_ORIGIN, CLOSE_REJECTED,
)
from .handlers import AUTH_RESOURCE, CodefyAPIHandler, api

log = logging.getLogger("codefy.workers")

CLOSE_TRY_AGAIN = 1013  # RFC 6455 "Try Again Later"

# A tornado setting (ServerApp.tornado_settings) that shortens the hello deadline, for tests.
HELLO_TIMEOUT_SETTING = "codefy_worker_hello_timeout_s"


def is_loopback(address: str | None) -> bool:
    try:
        return ipaddress.ip_address((address or "").split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def _warn_plaintext(handler: JupyterHandler, what: str) -> None:
    """A credential crossed the network unencrypted: say so (it still works)."""
    if handler.request.protocol in ("http", "ws") and not is_loopback(handler.request.remote_ip):
        log.warning("codefy: %s arrived over plain HTTP from %s; put the control plane behind TLS on "
                    "untrusted networks", what, handler.request.remote_ip)


class WorkerSocket(ExtensionHandlerMixin, JupyterHandler, websocket.WebSocketHandler):
    service: RunService

    async def prepare(self, *args: Any, **kwargs: Any) -> None:
        # Not jupyter's login: a worker authenticates with its own token, checked in get().
        self.current_user = self._jupyter_current_user = None

    def check_origin(self, origin: str) -> bool:
        return True  # refused in get() with 4003, after the upgrade, as the protocol says

    @property
    def max_message_size(self) -> int:  # type: ignore[override]
        return MAX_FRAME_BYTES

    def get_websocket_protocol(self) -> Any:
        protocol = super().get_websocket_protocol()
        if protocol is not None:
            # Tornado closes the connection itself on a frame over max_message_size (1009) and tells
            # the handler nothing: note the code it sends, so the worker's runs can say why.
            close = protocol.close

            def close_noting(code: int | None = None, reason: str | None = None) -> None:
                if self._protocol_close is None:
                    self._protocol_close = code
                close(code, reason)

            protocol.close = close_noting  # type: ignore[method-assign]
        return protocol

    def _token(self) -> str | None:
        auth = self.request.headers.get("Authorization", "")
        scheme, _, value = auth.partition(" ")
        if scheme.lower() in ("token", "bearer") and value.strip():
            return value.strip()
        return self.request.headers.get("X-Codefy-Token") or self.get_argument("token", None)

    async def get(self, *args: Any, **kwargs: Any) -> None:
        self._refusal: tuple[int, str] | None = None
        self._credential: Credential | None = None
        self._protocol_close: int | None = None
        self._worker: Any = None
        self.peer = self.request.remote_ip or ""
        self.loopback = is_loopback(self.peer)
        if not self.check_host():
            self._refusal = (CLOSE_HOST_ORIGIN, "host not allowed")
        elif "Origin" in self.request.headers:
            self._refusal = (CLOSE_HOST_ORIGIN, "a worker connection carries no Origin header")
        else:
            try:
                self.service = await self.extensionapp.ready()
            except ServiceError as err:
                # Recovering (or no database): "try again later". The agent keeps its spool and
                # dials again; nothing of its runs is judged before recovery has adopted them.
                self._refusal = (CLOSE_TRY_AGAIN if err.code == "recovering" else 1011, str(err)[:120])
            else:
                token = self._token()
                self._credential = await self.service.workers.authenticate(
                    token, loopback=self.loopback, server_token=self.token)
                if self._credential is None:
                    self._refusal = (CLOSE_CREDENTIALS, "a worker token, or the server token from this machine, "
                                                        "is required")
                elif self._credential.kind == "worker":
                    _warn_plaintext(self, "a worker token")
        await websocket.WebSocketHandler.get(self, *args, **kwargs)

    # -- WorkerLink ---------------------------------------------------------------------------------
    def send(self, frame: Frame) -> None:
        try:
            self.write_message(encode(frame))
        except websocket.WebSocketClosedError:
            pass  # on_close files the drop

    # -- the connection -----------------------------------------------------------------------------
    def open(self, *args: Any, **kwargs: Any) -> None:
        self._hello_timer: asyncio.TimerHandle | None = None
        if self._refusal is not None:
            code, reason = self._refusal
            self.close(code, reason)
            return
        timeout = float(self.settings.get(HELLO_TIMEOUT_SETTING, HELLO_TIMEOUT_S))
        self._hello_timer = asyncio.get_running_loop().call_later(timeout, self._no_hello, timeout)

    def _no_hello(self, timeout: float) -> None:
        if self._worker is None:
            self._reject("hello_timeout", f"no hello within {timeout:g} s of connecting", {"seconds": timeout},
                         CLOSE_HELLO_TIMEOUT)

    def _reject(self, code: str, message: str, params: dict[str, Any], close_code: int = CLOSE_REJECTED) -> None:
        self.send(Reject(code=code, message=message, params=params))
        self.close(close_code, message[:120])

    def on_message(self, message: str | bytes) -> Awaitable[None] | None:
        """Not a coroutine: tornado reads the next message at once when this returns None, and only
        awaits what it returns (the hello's judgement, or a full inbox draining: TCP then paces the
        agent). A task per message would cost more than most frames."""
        if self._refusal is not None:
            return None
        try:
            frame = decode(message, sender="agent")
        except ProtocolError as err:
            if self._worker is None:
                self._reject(err.code, str(err), {"path": err.path})
            else:
                self._bad_frame(err, message)
            return None
        if self._worker is None:
            return self._hello(frame)
        if type(frame) is Batch:
            return self._batch(frame)
        return self.service.workers.frame(self._worker, frame, self)

    def _batch(self, batch: Batch) -> Awaitable[None] | None:
        """A batch's frames, in order, as if they had come one by one; a malformed one is dropped alone."""
        frames: list[RunFrame] = []
        waits: list[Awaitable[None]] = []
        for item, raw in zip(unpack(batch), batch.frames):
            if isinstance(item, ProtocolError):
                if frames:  # what came before it is recorded before its warning
                    waits.append(self.service.workers.frames(self._worker, frames, self))
                    frames = []
                self._bad_frame(item, raw)
            else:
                frames.append(item)  # type: ignore[arg-type]
        if frames:
            waits.append(self.service.workers.frames(self._worker, frames, self))
        waits = [w for w in waits if w is not None]
        if not waits:
            return None
        return waits[0] if len(waits) == 1 else asyncio.gather(*waits)

    async def _hello(self, frame: Frame) -> None:
        if not isinstance(frame, Hello):
            self._reject("hello_required", f"the first frame must be hello, not {frame.type}", {"type": frame.type})
            return
        if self._hello_timer is not None:
            self._hello_timer.cancel()
        assert self._credential is not None
        reply, worker = await self.service.workers.hello(frame, self._credential, self, loopback=self.loopback)
        if worker is None:
            assert isinstance(reply, Reject)
            self.send(reply)
            self.close(CLOSE_REJECTED, reply.message[:120])
            return
        if self.ws_connection is None:  # it closed while we judged the hello
            return
        self._worker = worker
        self.send(reply)
        self.service.workers.connected(worker)

    def _bad_frame(self, err: ProtocolError, message: str | bytes | Any) -> None:
        """A malformed frame after the hello: dropped (the agent keeps it spooled), and said so in
        the server log and, when it names a run of this worker, in that run's log."""
        log.warning("codefy: worker %s sent a malformed frame (%s): %s", self._worker.name, err.code, err)
        run_id = _run_id_of(message)
        if run_id is not None:
            self.service.workers.warn(
                self._worker, run_id, "worker_bad_frame",
                f"worker {self._worker.name} sent a frame that could not be read: {err}",
                {"worker": self._worker.name, "code": err.code, "path": err.path})

    def on_close(self) -> None:
        timer = getattr(self, "_hello_timer", None)
        if timer is not None:
            timer.cancel()
        worker = getattr(self, "_worker", None)
        if worker is None:
            return
        if getattr(self, "_protocol_close", None) == 1009:
            log.warning("codefy: worker %s sent a frame over %d bytes; closed its connection", worker.name,
                        MAX_FRAME_BYTES)
            reason = {"code": "frame_too_large", "params": {"close_code": 1009, "limit_bytes": MAX_FRAME_BYTES},
                      "text": f"it sent a frame over the limit of {MAX_FRAME_BYTES} bytes"}
        else:
            reason = {"code": "connection_closed", "params": {"close_code": self.close_code},
                      "text": "connection closed" + (f" ({self.close_code})" if self.close_code else "")}
        self.service.workers.closed(worker.name, self, reason)


def _run_id_of(message: str | bytes | Any) -> str | None:
    """The run a malformed frame names, if any (`message`: its text, or a batch item as parsed)."""
    import json

    if isinstance(message, (str, bytes)):
        try:
            raw = json.loads(message)
        except (ValueError, UnicodeDecodeError, RecursionError):
            return None
    else:
        raw = message
    run_id = raw.get("run_id") if isinstance(raw, dict) else None
    return run_id if isinstance(run_id, str) else None


# -- REST ----------------------------------------------------------------------------------------------

class WorkersHandler(CodefyAPIHandler):
    @web.authenticated
    @authorized
    @api
    async def get(self) -> None:
        self.send(200, self.service.workers.list())


class WorkerHandler(CodefyAPIHandler):
    @web.authenticated
    @authorized
    @api
    async def get(self, worker_id: str) -> None:
        listing = self.service.workers.list()
        found = next((w for w in listing["workers"] if w["id"] == worker_id), None)
        if found is None:
            raise NotFound(f"no worker {worker_id}", code="worker_not_found", params={"worker": worker_id})
        self.send(200, found)

    @web.authenticated
    @authorized
    @api
    async def delete(self, worker_id: str) -> None:
        await self.service.workers.remove(worker_id, user=self.username, admin=self.is_admin)
        self.set_status(204)
        self.finish()


class DrainHandler(CodefyAPIHandler):
    draining = True

    @web.authenticated
    @authorized
    @api
    async def post(self, worker_id: str) -> None:
        self.send(200, self.service.workers.set_draining(worker_id, self.draining, user=self.username,
                                                         admin=self.is_admin))


class UndrainHandler(DrainHandler):
    draining = False


class EnrollmentsHandler(CodefyAPIHandler):
    @web.authenticated
    @authorized
    @api
    async def post(self) -> None:
        body = await self.body()
        control = f"{self.request.protocol}://{self.request.host}{self.base_url}"
        self.send(201, await self.service.workers.issue(body, created_by=self.username, control_url=control,
                                                        admin=self.is_admin))


class EnrollHandler(CodefyAPIHandler):
    """Exchanges a one-time token for a worker token: no session token (the agent has none), so no
    XSRF check either (nothing ambient is used: the token is in the body)."""

    def check_xsrf_cookie(self) -> None:
        return None

    @allow_unauthenticated
    @api
    async def post(self) -> None:
        service = await self.extensionapp.ready()
        _warn_plaintext(self, "an enrollment token")
        self.send(201, await service.workers.enroll(await self.body(), peer=self.request.remote_ip or ""))


def worker_routes(base: str) -> list[tuple[str, type, dict[str, Any]]]:
    worker = r"(?P<worker_id>[^/]+)"
    return [
        (f"{base}codefy/api/workers", WorkersHandler, {}),
        (f"{base}codefy/api/workers/enrollments", EnrollmentsHandler, {}),
        (f"{base}codefy/api/workers/enroll", EnrollHandler, {}),
        (f"{base}codefy/api/workers/{worker}", WorkerHandler, {}),
        (f"{base}codefy/api/workers/{worker}/drain", DrainHandler, {}),
        (f"{base}codefy/api/workers/{worker}/undrain", UndrainHandler, {}),
        (f"{base}codefy/ws/worker", WorkerSocket, {}),
    ]


__all__ = ["AUTH_RESOURCE", "worker_routes", "WorkerSocket"]
