"""REST handlers under `{base_url}codefy/` (the sockets: execution_socket.py, worker_handlers.py).
Thin: parse, call the run service, render.

Every error leaves in one shape, `{"error": {"code", "message", "params"}}`, with the status its
class carries (422 schema, 400 semantic, 403, 404, 409, 503).
"""

from __future__ import annotations

import csv
import functools
import io
import json
import logging
import math
from pathlib import Path
from typing import Any

from jupyter_server.auth.decorator import authorized
from jupyter_server.auth.identity import IdentityProvider, LegacyIdentityProvider, PasswordIdentityProvider
from jupyter_server.base.handlers import APIHandler
from jupyter_server.extension.handler import ExtensionHandlerMixin
from jupyter_server.log import log_request
from jupyter_server.prometheus.log_functions import prometheus_log_method
from tornado import web

from ..core.errors import ServiceError
from ..core.experiments.experiments_service import Experiments
from ..core.runs.run_service import RunService
from ..core.store.ids import resolve_id
from .request_body import CappedBody, CodefyHTTPError, write_error_shape

AUTH_RESOURCE = "codefy"


def owner_name(user: Any) -> str | None:
    """The identity a run records as its owner. A shared token identifies nobody: jupyter-server
    makes up an "Anonymous <moon>" user per request, so such runs record no owner."""
    if not user:
        return None
    name = getattr(user, "name", "") or ""
    username = getattr(user, "username", None)
    if name.startswith("Anonymous ") and isinstance(username, str) and len(username) == 32:
        return None
    return username


_JUPYTER_PROVIDERS = (IdentityProvider, PasswordIdentityProvider, LegacyIdentityProvider)


def _shows(logger: logging.Logger, level: int) -> bool:
    """Whether a record of `level` from `logger` would reach a handler that keeps it."""
    if not logger.isEnabledFor(level):
        return False
    current: logging.Logger | None = logger
    found = False
    while current is not None:
        if any(level >= h.level for h in current.handlers):
            return True
        found = found or bool(current.handlers)
        if not current.propagate:
            break
        current = current.parent
    return not found and logging.lastResort is not None and level >= logging.lastResort.level


def error_body(err: Exception) -> tuple[int, dict[str, Any]]:
    """Every refusal is a ServiceError (core/errors.py), or a tornado HTTPError carrying one; anything
    else is a bug, answered 500 without its text."""
    if isinstance(err, CodefyHTTPError):
        err = err.error
    if isinstance(err, ServiceError):
        return err.status, {"error": err.to_dict()}
    return 500, {"error": {"code": "internal_error", "message": "internal error", "params": {}}}


# The path arguments that name a run, sweep or study, and their kind of id (core/store/ids.py).
PATH_IDS = {"run_id": "run", "sweep_id": "sweep", "study_id": "study"}


class CodefyAPIHandler(CappedBody, ExtensionHandlerMixin, APIHandler):
    auth_resource = AUTH_RESOURCE
    service: RunService
    # Whether `api` resolves the ids in the path from a unique prefix (not for the agents' routes,
    # which name their runs whole).
    resolves_ids = True

    async def prepare(self) -> None:
        await super().prepare()
        try:
            self.service = await self.extensionapp.ready()
        except ServiceError as err:
            if self.current_user:  # strangers get the auth refusal, not details of the server
                self.fail(err)

    @property
    def experiments(self) -> Experiments:
        """Sweeps and studies (set up with the run service, so present once `prepare` got it)."""
        experiments = self.extensionapp.experiments
        assert experiments is not None
        return experiments

    @property
    def username(self) -> str | None:
        return owner_name(self.current_user)

    @property
    def is_admin(self) -> bool:
        # Under JupyterHub the user carries the Hub's model of them (admin flag, groups).
        hub_user = getattr(self.current_user, "hub_user", None)
        return self.extensionapp.sharing.is_admin(self.username, hub_user if isinstance(hub_user, dict) else None)

    def send(self, status: int, payload: Any) -> None:
        self.set_status(status)
        self.finish(json.dumps(payload, allow_nan=False, default=str))

    def send_encoded(self, status: int, body: bytes, etag: str) -> None:
        """A payload its service already encoded as `send` would, with its ETag (tornado would
        otherwise hash the body on the event loop). A GET whose If-None-Match names it is a 304
        with no body: a poller of a settled study does not download it again."""
        self.set_status(status)
        self.set_header("Etag", etag)
        if status == 200 and self.request.method in ("GET", "HEAD") and self.check_etag_header():
            self.set_status(304)
            return self.finish()
        self.finish(body)

    def fail(self, err: Exception) -> None:
        status, payload = error_body(err)
        if status == 500:
            self.log.exception("codefy: unexpected error", exc_info=err)
        retry_after = getattr(err, "retry_after_s", None)
        if retry_after is None and status == 429:
            retry_after = max(1, math.ceil(float(payload["error"]["params"].get("retry_after_s", 1))))
        if retry_after is not None:
            self.set_header("Retry-After", str(retry_after))
        self.send(status, payload)

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        """HTTP errors raised outside `api` (no login, 405, 413, a URL that is not UTF-8) in the
        one error shape, not jupyter-server's `{"message": ...}`."""
        write_error_shape(self, status_code, **kwargs)

    def decode_argument(self, value: bytes, name: str | None = None) -> str:
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            field = name or "url"
            raise CodefyHTTPError(400, f"{field} is not valid UTF-8", code="invalid_unicode",
                                  params={"field": field}) from None

    def set_signed_cookie(self, name: str, value: str | bytes, expires_days: float | None = 30,
                          version: int | None = None, **kwargs: Any) -> None:
        """jupyter-server answers every token-authenticated request with a freshly signed login
        cookie (a token names no one, so each request is a "new" user and the cookie is re-made
        each time): that was ~6% of a submit. A client that sent its token in the Authorization
        header sends it again and has no use for the cookie, so it gets none; a token in the URL
        (a browser following a link) still gets one, and so does any other identity provider."""
        if self._header_token_login_cookie(name):
            return
        super().set_signed_cookie(name, value, expires_days, version, **kwargs)

    set_secure_cookie = set_signed_cookie  # tornado's older name, which jupyter-server calls

    def _header_token_login_cookie(self, name: str) -> bool:
        provider = self.identity_provider
        return (type(provider) in _JUPYTER_PROVIDERS and name == provider.get_cookie_name(self)
                and not self.get_argument("token", "")
                and provider.auth_header_pat.match(self.request.headers.get("Authorization", "")) is not None)

    def _log(self) -> None:
        """jupyter-server logs every answered request at DEBUG, which its loggers accept (their
        handlers filter by level): building each record (findCaller, formatting) was a few percent
        of a submit. A success that no handler would show is counted in the request metrics
        only; everything else (errors, redirects, debug logging on) is logged as before."""
        function = self.settings.get("log_function")
        if (self.get_status() < 300 and isinstance(function, functools.partial) and function.func is log_request
                and not _shows(self.log, logging.DEBUG)):
            if function.keywords.get("record_prometheus_metrics", True):
                prometheus_log_method(self)
            return
        super()._log()

    async def resolve_path_ids(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        """The path's run, sweep and study ids made whole: a unique prefix of 8 or more characters
        stands for its id, an ambiguous one is refused with 409 ambiguous_id (core/store/ids.py)."""
        for name, kind in PATH_IDS.items():
            if isinstance(kwargs.get(name), str):
                kwargs[name] = self.path_kwargs[name] = await resolve_id(self.service.store, kind, kwargs[name],
                                                                         field=name)
        return kwargs

    def int_arg(self, name: str, default: int) -> int:
        raw = self.get_argument(name, None)
        if raw is None:
            return default
        try:
            return int(raw)
        except ValueError:
            raise ServiceError(f"{name} must be an integer, got {raw!r}", code=f"invalid_{name}",
                               params={"field": name}) from None

    def float_arg(self, name: str, default: float) -> float:
        raw = self.get_argument(name, None)
        if raw is None:
            return default
        try:
            return float(raw)
        except ValueError:
            raise ServiceError(f"{name} must be a number, got {raw!r}", code=f"invalid_{name}",
                               params={"field": name}) from None


def api(method: Any) -> Any:
    """Every refusal a handler method raises leaves through `fail`, in the one error shape. The
    ids in the path reach the method whole (`resolve_path_ids`)."""

    @functools.wraps(method)
    async def wrapper(self: CodefyAPIHandler, *args: Any, **kwargs: Any) -> None:
        if self._finished:  # refused while its body arrived (over the size cap)
            return
        try:
            if self.resolves_ids and kwargs:
                kwargs = await self.resolve_path_ids(kwargs)
            await method(self, *args, **kwargs)
        except Exception as err:
            self.fail(err)

    return wrapper


class RunsHandler(CodefyAPIHandler):
    @web.authenticated
    @authorized
    @api
    async def get(self) -> None:
        statuses = [s for s in self.get_arguments("status") for s in s.split(",") if s] or None
        self.send(200, await self.service.list(status=statuses, offset=self.int_arg("offset", 0),
                                               limit=self.int_arg("limit", 50),
                                               after=self.get_argument("after", None)))

    @web.authenticated
    @authorized
    @api
    async def post(self) -> None:
        self.send(201, await self.service.submit(await self.body(), owner=self.username))


class RunHandler(CodefyAPIHandler):
    @web.authenticated
    @authorized
    @api
    async def get(self, run_id: str) -> None:
        self.send(200, await self.service.get(run_id))

    @web.authenticated
    @authorized
    @api
    async def delete(self, run_id: str) -> None:
        await self.service.delete(run_id, user=self.username, admin=self.is_admin)
        self.set_status(204)
        self.finish()


class CancelHandler(CodefyAPIHandler):
    @web.authenticated
    @authorized
    @api
    async def post(self, run_id: str) -> None:
        self.send(200, await self.service.cancel(run_id, user=self.username, admin=self.is_admin))


class EventsHandler(CodefyAPIHandler):
    @web.authenticated
    @authorized
    @api
    async def get(self, run_id: str) -> None:
        cursor = self.int_arg("cursor", 0)
        if cursor < 0:
            raise ServiceError("cursor must not be negative", code="invalid_cursor", params={"field": "cursor"})
        wait = self.float_arg("wait", 0.0)
        if not 0 <= wait <= 60:
            raise ServiceError("wait must be from 0 to 60 seconds", code="invalid_wait", params={"field": "wait"})
        self.send(200, await self.service.events_page(run_id, cursor, wait))


class MetricsHandler(CodefyAPIHandler):
    @web.authenticated
    @authorized
    @api
    async def get(self, run_id: str) -> None:
        points = await self.service.metrics(run_id)
        fmt = self.get_argument("format", "json")
        if fmt not in ("json", "csv"):
            raise ServiceError("format must be json or csv", code="invalid_format", params={"field": "format"})
        if fmt == "json":
            return self.send(200, {"run_id": run_id, "metrics": points})
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow(["node_id", "name", "step", "value", "created_at"])
        for p in points:
            writer.writerow([p.get("node_id"), p.get("name"), p.get("step"), p.get("value"), p.get("created_at")])
        self.set_header("Content-Disposition", f'attachment; filename="run-{run_id}-metrics.csv"')
        self.finish(out.getvalue(), set_content_type="text/csv; charset=utf-8")


class ArtifactsHandler(CodefyAPIHandler):
    @web.authenticated
    @authorized
    @api
    async def get(self, run_id: str) -> None:
        self.send(200, {"run_id": run_id, "artifacts": await self.service.artifacts(run_id)})


class MemoryEstimateHandler(CodefyAPIHandler):
    @web.authenticated
    @authorized
    @api
    async def post(self) -> None:
        self.send(200, await self.service.estimates.answer(await self.body()))


class NodesHandler(CodefyAPIHandler):
    @web.authenticated
    @authorized
    async def get(self) -> None:
        registry = self.service.registry
        self.send(200, {"nodes": registry.definitions(), "catalog": registry.catalog()})


class OpenAPIHandler(CodefyAPIHandler):
    @web.authenticated
    @authorized
    async def get(self) -> None:
        spec = (Path(__file__).with_name("openapi.yaml")).read_text(encoding="utf-8")
        self.finish(spec, set_content_type="application/yaml; charset=utf-8")
