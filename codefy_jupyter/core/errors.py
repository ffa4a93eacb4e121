"""The control plane's errors. Each carries its HTTP status; the server renders every one of them
(and SchemaError, SubmitError) in one shape: `{"error": {"code", "message", "params"}}`."""

from __future__ import annotations

from typing import Any


class ServiceError(Exception):
    status = 400
    code = "bad_request"

    def __init__(self, message: str, *, code: str | None = None, params: dict[str, Any] | None = None,
                 retry_after_s: int | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.params = params or {}
        # Seconds after which the same request may succeed (503 while recovering, 429): sent as
        # the Retry-After header.
        self.retry_after_s = retry_after_s

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": str(self), "params": self.params}


class BadRequest(ServiceError):
    status = 400


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
