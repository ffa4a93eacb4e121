"""The worker agents' side of the server: `/codefy/ws/worker` and `/codefy/api/workers...`.

/codefy/ws/worker accepts a connection only when all hold (seed: security), else it closes it
before reading anything: 4003 for a Host outside the allowed list or any Origin header (agents send
none, and no web page has a reason to open this socket), 4401 for credentials. Credentials come as
`Authorization: token <T>`, `X-Codefy-Token: <T>` or `?token=<T>`: a worker token (from any peer)
or the server's own token from a loopback peer. Then `hello` within 10 s, judged by
core/workers/handshake.py; every later frame goes to the WorkerService. What to do with each message
is decided by the sans-IO session (core/workers/session.py); the handler carries out its actions
and is the connection's `WorkerLink` (send a frame, close with a code).

REST: GET /workers (the agents, their devices and slots; this server's as `local`), GET/DELETE
/workers/{id}, POST /workers/{id}/drain and /undrain, POST /workers/enrollments (a one-time token),
all behind the server's auth like the run routes; POST /workers/enroll exchanges a one-time token for
a worker token without a session token, rate-limited per client address. On a shared server only
admins and the user who enrolled a worker may manage it (core/workers/access.py).
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
from functools import partial
from typing import Any, Awaitable

from jupyter_server.auth.decorator import allow_unauthenticated, authorized
from jupyter_server.base.handlers import JupyterHandler
from jupyter_server.extension.handler import ExtensionHandlerMixin
from tornado import web, websocket

from ..core.errors import ServiceError
from ..core.runs.run_service import RunService
from ..core.workers.handshake import Credential
from ..core.workers.session import (
    CLOSE_CREDENTIALS, CLOSE_HOST_ORIGIN, CLOSED, Action, BadFrame, Close, Connected, Deliver, Judge, Record, Send,
    WorkerSession,
)
from ..wire.protocol import HELLO_TIMEOUT_S, MAX_FRAME_BYTES, Frame, Hello, encode
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

    # -- the connection: a thin adapter of core/workers/session.py ---------------------------------------
    def open(self, *args: Any, **kwargs: Any) -> None:
        self._hello_timer: asyncio.TimerHandle | None = None
        timeout = float(self.settings.get(HELLO_TIMEOUT_SETTING, HELLO_TIMEOUT_S))
        self._session = WorkerSession(hello_timeout_s=timeout, refusal=self._refusal)
        self._apply(self._session.opened())
        if self._session.state != CLOSED:
            self._hello_timer = asyncio.get_running_loop().call_later(timeout, self._no_hello)

    def _no_hello(self) -> None:
        self._apply(self._session.hello_deadline())

    def on_message(self, message: str | bytes) -> Awaitable[None] | None:
        """Not a coroutine: tornado reads the next message at once when this returns None, and only
        awaits what it returns (the hello's judgement, or a full inbox draining: TCP then paces the
        agent). A task per message would cost more than most frames."""
        return self._apply(self._session.received(message))

    def _apply(self, actions: list[Action]) -> Awaitable[None] | None:
        """Carry out the session's actions in order; what to await before reading on, if anything."""
        waits: list[Awaitable[None]] = []
        for action in actions:
            kind = type(action)
            if kind is Deliver:
                waits.append(self.service.workers.frame(self._session.worker, action.frame, self))
            elif kind is Record:
                waits.append(self.service.workers.frames(self._session.worker, list(action.frames), self))
            elif kind is Send:
                self.send(action.frame)
            elif kind is Close:
                self.close(action.code, action.reason)
            elif kind is Judge:
                if self._hello_timer is not None:
                    self._hello_timer.cancel()
                waits.append(self._judge(action.hello))
            elif kind is Connected:
                self.service.workers.connected(action.worker)
            elif kind is BadFrame:
                worker = self._session.worker
                log.warning("codefy: worker %s sent a malformed frame (%s): %s", worker.name, action.code,
                            action.detail)
                if action.run_id is not None:
                    self.service.workers.warn(worker, action.run_id, "worker_bad_frame", action.message, action.params)
        waits = [w for w in waits if w is not None]
        if not waits:
            return None
        return waits[0] if len(waits) == 1 else asyncio.gather(*waits)

    async def _judge(self, hello: Hello) -> None:
        assert self._credential is not None
        reply, worker = await self.service.workers.hello(hello, self._credential, self, loopback=self.loopback)
        self._apply(self._session.judged(reply, worker, still_open=self.ws_connection is not None))

    def on_close(self) -> None:
        timer = getattr(self, "_hello_timer", None)
        if timer is not None:
            timer.cancel()
        session = getattr(self, "_session", None)
        if session is None:
            return
        worker = session.worker
        reason = session.closed(self.close_code, getattr(self, "_protocol_close", None))
        if worker is None or reason is None:
            return
        if reason["code"] == "frame_too_large":
            log.warning("codefy: worker %s sent a frame over %d bytes; closed its connection", worker.name,
                        MAX_FRAME_BYTES)
        self.service.workers.closed(worker.name, self, reason)


# -- REST ----------------------------------------------------------------------------------------------

class WorkersHandler(CodefyAPIHandler):
    @web.authenticated
    @authorized
    @api
    async def get(self) -> None:
        self.set_status(200)
        self.finish(await self.service.workers.list_text(partial(json.dumps, allow_nan=False, default=str)))


class WorkerHandler(CodefyAPIHandler):
    @web.authenticated
    @authorized
    @api
    async def get(self, worker_id: str) -> None:
        self.send(200, self.service.workers.one(worker_id))

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
