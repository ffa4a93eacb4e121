"""What every REST handler does with a request before and around its method: the body is capped
(`request_max_body_bytes`) and refused with 413 before it is read; a large body is parsed off the
event loop in bounded slices (server/json_body.py); every HTTP error tornado or jupyter-server raises
(403 without a login, 405, 413, a URL that is not UTF-8) leaves in the one error shape."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from tornado import web
from tornado.httputil import responses

from ..core.errors import ServiceError
from . import json_body

# Bodies up to this size are parsed on the loop (well under a millisecond); larger ones in a thread.
INLINE_BODY_BYTES = 64 * 1024

_CODES = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
          405: "method_not_allowed", 413: "body_too_large", 429: "rate_limited", 503: "unavailable"}
_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")


class CodefyHTTPError(web.HTTPError):
    """A refusal raised where tornado expects an HTTPError (prepare, argument decoding), carrying
    the `ServiceError` its body is rendered from."""

    def __init__(self, status: int, message: str, *, code: str, params: dict[str, Any] | None = None) -> None:
        super().__init__(status, "%s", message)
        self.error = ServiceError(message, code=code, params=params, status=status)


def too_large(limit: int, size: int | None = None) -> CodefyHTTPError:
    size_text = f" ({size} bytes)" if size is not None else ""
    return CodefyHTTPError(413, f"the request body{size_text} is over the limit of {limit} bytes "
                                "(setting request_max_body_bytes)", code="body_too_large",
                           params={"limit_bytes": limit, **({"size_bytes": size} if size is not None else {})})


async def parse(raw: bytes | str, *, what: str = "the request body") -> Any:
    """The JSON value of a body or message; a large one is parsed in a thread, in slices, so the
    loop keeps serving other requests meanwhile."""
    if len(raw) <= INLINE_BODY_BYTES:
        return json_body.loads(raw, what=what)
    return await asyncio.to_thread(json_body.loads, raw, what=what)


def error_shape(handler: web.RequestHandler, status_code: int, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The one error shape for an HTTP error raised outside our own `api` refusals."""
    err = kwargs.get("exc_info", (None, None, None))[1]
    if isinstance(err, CodefyHTTPError):
        return err.error.to_dict()
    message = responses.get(status_code, "error")
    if isinstance(err, web.HTTPError) and err.log_message:
        try:
            message = err.log_message % err.args
        except (TypeError, ValueError):
            message = err.log_message
    params: dict[str, Any] = {}
    code = _CODES.get(status_code, "internal_error" if status_code >= 500 else "bad_request")
    if status_code == 403 and not getattr(handler, "_jupyter_current_user", None):
        code, message = "unauthenticated", _login_hint(handler)
    elif status_code == 405:
        params["allowed"] = allowed_methods(handler)
    elif status_code >= 500:
        message = "internal error"  # never the exception text of a bug
    return ServiceError(message, code=code, params=params, status=status_code).to_dict()


def _login_hint(handler: web.RequestHandler) -> str:
    provider = getattr(handler, "identity_provider", None)
    if type(provider).__module__.startswith("jupyterhub."):
        # JupyterHub turns away a Hub user without access to this server the same way as no login.
        return ("this route needs a JupyterHub login with access to this server: a Hub API token "
                "(Authorization: token <T>) or the Hub's session cookie; its owner can share it")
    return "this route needs a login: send the server's token (Authorization: token <T>) or a session cookie"


def allowed_methods(handler: web.RequestHandler) -> list[str]:
    cls = type(handler)
    return [m for m in _METHODS if getattr(cls, m.lower()) is not getattr(web.RequestHandler, m.lower())]


def write_error_shape(handler: web.RequestHandler, status_code: int, **kwargs: Any) -> None:
    error = error_shape(handler, status_code, kwargs)
    if status_code == 405:
        handler.set_header("Allow", ", ".join(error["params"]["allowed"]))
    if body_unread(handler):
        # Refused before its streamed body was read (no login, over the cap): tornado closes the
        # connection after this answer, as the rest of the body is still on it. Saying so lets a
        # keep-alive client (JupyterHub's proxy) open a new one for the next request instead of
        # sending it into a closed socket (the proxy answers that request 503 "server down").
        handler.set_header("Connection", "close")
    handler.set_header("Content-Type", "application/json; charset=UTF-8")
    handler.finish(json.dumps({"error": error}))


def body_unread(handler: web.RequestHandler) -> bool:
    """A streamed request body that has not been read to its end (tornado sets the future once it is)."""
    body = getattr(handler.request, "_body_future", None)
    return bool(getattr(handler, "_stream_request_body", False)) and body is not None and not body.done()


class CappedBody:
    """A mixin for RequestHandlers: the body streams in (tornado.web.stream_request_body) so that an
    oversized one is refused from its Content-Length before any of it is read, or as soon as a
    chunked one passes the cap; `await self.body()` is its JSON value."""

    _stream_request_body = True  # what @web.stream_request_body sets; inherited by every route
    _chunks: list[bytes]
    _received: int
    _refused: bool

    def max_body_bytes(self) -> int:
        return int(self.extensionapp.codefy_settings.request_max_body_bytes)  # type: ignore[attr-defined]

    async def prepare(self) -> None:
        self._chunks, self._received, self._refused = [], 0, False
        await super().prepare()  # type: ignore[misc]
        limit = self.max_body_bytes()
        length = self.request.headers.get("Content-Length")  # type: ignore[attr-defined]
        if length is not None and length.strip().isdigit() and int(length) > limit:
            raise too_large(limit, int(length))

    def data_received(self, chunk: bytes) -> None:
        if self._refused:
            return
        self._received += len(chunk)
        limit = self.max_body_bytes()
        if self._received > limit:  # a chunked body (no Content-Length) that outgrew the cap
            self._refused = True
            self._chunks.clear()
            self.send_error(413, exc_info=(CodefyHTTPError, too_large(limit), None))  # type: ignore[attr-defined]
            return
        self._chunks.append(chunk)

    async def body(self) -> Any:
        raw = self._chunks[0] if len(self._chunks) == 1 else b"".join(self._chunks)
        return await parse(raw or b"null")
