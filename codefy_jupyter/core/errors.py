"""The control plane's errors: one root, `ServiceError`, carrying the HTTP status, a stable code and
params. Every refusal (a schema mismatch, a semantic refusal, a missing run, a busy lane) is one of
them, and the server renders each in one shape: `{"error": {"code", "message", "params"}}`."""

from __future__ import annotations

import errno
import sqlite3
from typing import Any


class ServiceError(Exception):
    status = 400
    code = "bad_request"

    def __init__(self, message: str, *, code: str | None = None, params: dict[str, Any] | None = None,
                 retry_after_s: int | None = None, status: int | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        if status is not None:
            self.status = status
        self.params = params or {}
        # Seconds after which the same request may succeed (503 while recovering, 429): sent as
        # the Retry-After header.
        self.retry_after_s = retry_after_s

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": str(self), "params": self.params}


class BadRequest(ServiceError):
    status = 400


class SchemaError(ServiceError, ValueError):
    """A body that does not fit the schema (422). `field` is a dotted path such as `options.seed`.
    (Also a ValueError: a body is a value that was wrong.)"""

    status = 422
    code = "invalid_request"

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(f"{field}: {message}" if field else message, params={"field": field})


class SubmitError(ServiceError, ValueError):
    """A submit refused at once: 400 for a request that can never run as asked, 503 for the
    interactive lane's "busy" refusals."""

    def __init__(self, code: str, message: str, params: dict[str, Any] | None = None, status: int = 400) -> None:
        super().__init__(message, code=code, params=dict(params or {}), status=status)

    @property
    def message(self) -> str:
        return str(self)

    def __repr__(self) -> str:
        return f"SubmitError({self.code!r}, {str(self)!r}, {self.params!r})"


class Unauthorized(ServiceError):
    status = 401
    code = "unauthorized"


class Forbidden(ServiceError):
    status = 403
    code = "forbidden"


class NotFound(ServiceError):
    status = 404
    code = "not_found"


class Conflict(ServiceError):
    status = 409
    code = "conflict"


class TooLarge(ServiceError):
    status = 413
    code = "body_too_large"


class Unavailable(ServiceError):
    status = 503
    code = "unavailable"


class TooManyRequests(ServiceError):
    status = 429
    code = "rate_limited"


# Seconds a client is told to wait before submitting again while the disk is full (Retry-After).
STORAGE_FULL_RETRY_S = 5
_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


class StorageFull(ServiceError):
    """The file system under the data dir has no room for a write (SQLite's SQLITE_FULL, or ENOSPC
    or EDQUOT from a plain file). 507, with Retry-After: the same request can succeed once space
    returns, and nothing it asked for was written."""

    status = 507
    code = "storage_full"

    def __init__(self, message: str, *, params: dict[str, Any] | None = None) -> None:
        super().__init__(message, params=params, retry_after_s=STORAGE_FULL_RETRY_S)


def is_storage_full(exc: BaseException | None) -> bool:
    """Whether `exc` (or what it was raised `from`) says the disk is full. The one place that knows
    how SQLite and the OS spell it. (Not `__context__`: another error raised while handling a full
    disk is that other error.)"""
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, StorageFull):
            return True
        if isinstance(exc, sqlite3.Error):
            code = getattr(exc, "sqlite_errorcode", None)
            if (code is not None and code & 0xFF == sqlite3.SQLITE_FULL) or "database or disk is full" in str(exc):
                return True
        if isinstance(exc, OSError) and exc.errno in _FULL_ERRNOS:
            return True
        exc, seen = exc.__cause__, seen + 1
    return False
