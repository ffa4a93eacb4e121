"""A single-user server whose runs live in the team's control plane (the `service_url` setting):
its `codefy/api/*` and `codefy/ws/*` are passed on to that service, each request carrying the
credential of the Hub user who made it, so the service sees that user (their Hub API token, or the
OAuth token their browser's session cookie holds on this server). Nothing is decided here: the
service authorizes, and its answer (status, body, error shape) comes back unchanged.

Only a request this server has authenticated is passed on; the credential it carries is the one
the Hub issued for that request, never this server's own, so no one acts here as anyone else.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any
from urllib.parse import quote

from jupyter_server.auth.decorator import ws_authenticated
from jupyter_server.base.handlers import APIHandler, JupyterHandler
from jupyter_server.extension.handler import ExtensionHandlerMixin
from tornado import httpclient, httputil, web, websocket

from ..core.errors import ServiceError, Unavailable
from .handlers import AUTH_RESOURCE, error_body
from .request_body import write_error_shape

# Longer than the longest long-poll a client may ask for (`wait` up to 60 s on events pages).
FORWARD_TIMEOUT_S = 90.0
# Request headers the service needs to answer as it would directly; cookies, Origin and the
# caller's own Authorization never go (the credential is set explicitly).
REQUEST_HEADERS = ("Content-Type", "Accept", "If-None-Match", "Range")
# An answer up to this size is passed on whole; a larger one streams.
STREAM_AFTER_BYTES = 1 << 20
# Messages either way are relayed whatever their size: the service applies its own cap and
# answers an over-cap message itself, as it would directly.
UNCAPPED_BYTES = 1 << 30
RESPONSE_HEADERS = ("Content-Type", "Etag", "Content-Disposition", "Retry-After", "Cache-Control",
                    "Content-Range", "Accept-Ranges", "Last-Modified", "Location")


def upstream_url(service_url: str, kind: str, path: str, query: str, *, websocket_: bool = False) -> str:
    """The service's URL for `codefy/{kind}/{path}?{query}` (pure; `kind` is api or ws)."""
    base = service_url if service_url.endswith("/") else service_url + "/"
    if websocket_:
        base = "ws" + base[len("http"):] if base.startswith("http") else base
    url = f"{base}codefy/{kind}/{quote(path, safe='/')}"
    return f"{url}?{query}" if query else url


def credential(handler: JupyterHandler) -> str | None:
    """The Hub credential of the request's own user: what JupyterHub's identity provider found in
    the URL, the Authorization header or the OAuth session cookie. Off a Hub, the request's own
    Authorization token (the service must then accept the same tokens)."""
    hub_auth = getattr(handler.identity_provider, "hub_auth", None)
    if hub_auth is not None:
        return hub_auth.get_token(handler) or None
    scheme, _, value = handler.request.headers.get("Authorization", "").partition(" ")
    return value.strip() if scheme.lower() in ("token", "bearer") and value.strip() else None


def unreachable(url: str, err: BaseException) -> Unavailable:
    return Unavailable(f"the team control plane at {url} did not answer: {err}", code="service_unreachable",
                       params={"service_url": url})


class ForwardHandler(ExtensionHandlerMixin, APIHandler):
    """`codefy/api/*`, passed on as is (method, path, query, body)."""

    auth_resource = AUTH_RESOURCE

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        write_error_shape(self, status_code, **kwargs)

    def fail(self, err: ServiceError) -> None:
        status, payload = error_body(err)
        self.set_status(status)
        self.finish(json.dumps(payload))

    @web.authenticated
    async def forward(self, path: str) -> None:
        service_url = self.extensionapp.codefy_settings.service_url
        token = credential(self)
        if token is None:
            return self.fail(ServiceError("this request carries no Hub credential to act with at the team "
                                          "control plane", code="no_forwardable_credential", status=403))
        headers = {name: self.request.headers[name] for name in REQUEST_HEADERS if name in self.request.headers}
        headers["Authorization"] = f"token {token}"
        # The address the caller used (the Hub's, through its proxy): the service names it in what
        # it hands out (enrollment commands), and serves its own prefix on that host too.
        headers["Host"] = self.request.host
        headers["X-Forwarded-Proto"] = self.request.protocol
        method = self.request.method or "GET"
        body = self.request.body if method in ("POST", "PUT", "PATCH") else None
        url = upstream_url(service_url, "api", path, self.request.query)
        started = False

        def on_header(line: str) -> None:
            line = line.rstrip("\r\n")
            if line.startswith("HTTP/"):
                self.set_status(httputil.parse_response_start_line(line).code)
                self.clear_header("Content-Type")
            elif line and ":" in line:
                name, _, value = line.partition(":")
                if name.strip().title() in RESPONSE_HEADERS or name.strip() == "ETag":
                    self.set_header(name.strip(), value.strip())

        held: list[bytes] = []
        held_bytes = 0

        def on_chunk(chunk: bytes) -> None:
            # A usual answer leaves in one write with its Content-Length, as the service sent it;
            # a large one streams on (chunked) once it passes STREAM_AFTER_BYTES, so this server
            # never holds it whole.
            nonlocal started, held_bytes
            held.append(chunk)
            held_bytes += len(chunk)
            if started or held_bytes > STREAM_AFTER_BYTES:
                started = True
                self.write(b"".join(held))
                held.clear()
                self.flush()

        request = httpclient.HTTPRequest(url, method=method, headers=headers, body=body,
                                         allow_nonstandard_methods=True, follow_redirects=False,
                                         request_timeout=FORWARD_TIMEOUT_S, decompress_response=False,
                                         header_callback=on_header, streaming_callback=on_chunk)
        try:
            await httpclient.AsyncHTTPClient().fetch(request, raise_error=False)
        except (OSError, httpclient.HTTPClientError, asyncio.TimeoutError) as err:
            if started:  # the answer broke off halfway: nothing truthful can be added to it
                raise web.Finish() from None
            self.clear()
            return self.fail(unreachable(service_url, err))
        self.finish(b"".join(held))

    get = post = put = patch = delete = forward


class ForwardSocket(ExtensionHandlerMixin, JupyterHandler, websocket.WebSocketHandler):
    """`codefy/ws/*` (the execution socket): one upstream connection per client connection,
    frames relayed both ways in order, either side's close passed to the other."""

    auth_resource = AUTH_RESOURCE
    upstream: websocket.WebSocketClientConnection | None = None

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        write_error_shape(self, status_code, **kwargs)

    @ws_authenticated
    async def get(self, path: str) -> None:
        if not self.authorizer.is_authorized(self, self.current_user, "read", AUTH_RESOURCE):
            raise web.HTTPError(403)
        service_url = self.extensionapp.codefy_settings.service_url
        token = credential(self)
        if token is None:
            raise web.HTTPError(403, "no Hub credential to act with at the team control plane")
        url = upstream_url(service_url, "ws", path, self.request.query, websocket_=True)
        request = httpclient.HTTPRequest(url, headers={"Authorization": f"token {token}"},
                                         request_timeout=FORWARD_TIMEOUT_S)
        try:
            self.upstream = await websocket.websocket_connect(request, max_message_size=UNCAPPED_BYTES)
        except httpclient.HTTPClientError as err:
            # The service refused before the upgrade (403, 503 recovering): its answer, unchanged.
            response = err.response
            self.set_status(err.code)
            if response is not None:
                for name in ("Content-Type", "Retry-After"):
                    if name in response.headers:
                        self.set_header(name, response.headers[name])
                self.finish(response.body or b"")
            else:
                self.finish()
            return
        except OSError as err:
            status, payload = error_body(unreachable(service_url, err))
            self.set_status(status)
            self.finish(json.dumps(payload))
            return
        await websocket.WebSocketHandler.get(self, path)

    @property
    def max_message_size(self) -> int:  # type: ignore[override]
        return UNCAPPED_BYTES

    def open(self, *args: Any, **kwargs: Any) -> None:
        self._relay = asyncio.ensure_future(self._from_service())

    async def _from_service(self) -> None:
        upstream = self.upstream
        assert upstream is not None
        while True:
            message = await upstream.read_message()
            if message is None:
                code = upstream.close_code
                # 1005/1006 mean "no code was sent": they may not be sent on either
                self.close(code if code not in (None, 1005, 1006) else None, upstream.close_reason)
                return
            try:
                await self.write_message(message, binary=isinstance(message, bytes))
            except websocket.WebSocketClosedError:
                return

    async def on_message(self, message: str | bytes) -> None:
        if self.upstream is not None:
            try:
                await self.upstream.write_message(message, binary=isinstance(message, bytes))
            except websocket.WebSocketClosedError:
                self.close(1011, "the team control plane closed the connection")

    def on_close(self) -> None:
        if self.upstream is not None:
            code = self.close_code
            self.upstream.close(code if code not in (None, 1005, 1006) else None, self.close_reason)


def forward_routes(base: str) -> list[tuple[str, type, dict[str, Any]]]:
    return [
        (f"{base}codefy/api/(?P<path>.*)", ForwardHandler, {}),
        (f"{base}codefy/ws/(?P<path>.*)", ForwardSocket, {}),
    ]
