"""Worker credentials: one-time enrollment tokens, long-lived worker tokens, and who a token is.

- A person with the server's token asks for a one-time token (`issue`): 24 hours, single use. A
  re-issue for an enrolled worker (`worker=name`) is bound to that worker, and replaces any earlier
  unused one for it.
- An agent exchanges it (`enroll`, no session token; rate-limited per client address) for a worker
  token bound to its name. Enrolling a name again takes a token re-issued for that worker, and
  revokes the worker's old token.
- `authenticate` tells who a socket's token is: a worker token (any peer), or the server's own
  token from a loopback peer (an agent on this machine reads the server's token file).

Only sha256 hashes of tokens are stored. Tokens are compared by hash lookup (worker tokens) or in
constant time (the server token).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable

from ..errors import BadRequest, Forbidden, NotFound, TooManyRequests, Unauthorized
from ..store.database import Store
from ..store.workers import EnrollmentRefused
from .handshake import Credential, name_problem

ENROLLMENT_TTL_S = 24 * 3600
ENROLLMENT_TTL_MAX_S = 7 * 24 * 3600
WORKER_TOKEN_PREFIX = "cfw_"
# Exchanges allowed per client address per window: enough for a fleet behind one NAT enrolling at
# once, few enough that guessing a one-time token is hopeless.
ENROLL_ATTEMPTS = 20
ENROLL_WINDOW_S = 60.0


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def new_enrollment_token() -> str:
    """`abcdef.0123...`: a short id (easy to tell apart when reading it out) and 128 secret bits."""
    return f"{secrets.token_hex(3)}.{secrets.token_hex(16)}"


def new_worker_token() -> str:
    return WORKER_TOKEN_PREFIX + secrets.token_urlsafe(32)


class RateLimiter:
    """At most `limit` attempts per key in any `window_s` (sliding window; pure, clock injected)."""

    def __init__(self, limit: int = ENROLL_ATTEMPTS, window_s: float = ENROLL_WINDOW_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = limit
        self.window_s = window_s
        self.clock = clock
        self._hits: dict[str, deque[float]] = {}

    def attempt(self, key: str) -> float | None:
        """Record an attempt; None when allowed, else the seconds until the next one would be."""
        now = self.clock()
        hits = self._hits.setdefault(key, deque())
        while hits and now - hits[0] >= self.window_s:
            hits.popleft()
        if len(hits) >= self.limit:
            return max(0.0, self.window_s - (now - hits[0]))
        hits.append(now)
        if len(self._hits) > 10_000:  # forget idle addresses rather than grow without bound
            for k in [k for k, v in self._hits.items() if not v or now - v[-1] >= self.window_s]:
                del self._hits[k]
        return None


@dataclass(frozen=True)
class Issued:
    token: str
    expires_at: float
    worker: str | None


class Enrollment:
    def __init__(self, store: Store, *, clock: Callable[[], float] = time.time,
                 limiter: RateLimiter | None = None) -> None:
        self.store = store
        self.clock = clock
        self.limiter = limiter or RateLimiter()

    async def issue(self, *, worker: str | None = None, expires_in_s: float | None = None,
                    created_by: str | None = None, enrolled: set[str] | None = None) -> Issued:
        """A new one-time token. `worker`: a re-issue for that enrolled worker. `enrolled`: the
        names enrolled now (to refuse a re-issue for a name that is not)."""
        ttl = ENROLLMENT_TTL_S if expires_in_s is None else expires_in_s
        if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not 1 <= ttl <= ENROLLMENT_TTL_MAX_S:
            raise BadRequest(f"expires_in_s must be from 1 to {ENROLLMENT_TTL_MAX_S} seconds",
                             code="invalid_expires_in_s", params={"field": "expires_in_s"})
        if worker is not None:
            if not isinstance(worker, str):
                raise BadRequest("worker must be a worker name", code="invalid_worker", params={"field": "worker"})
            if enrolled is not None and worker not in enrolled:
                raise NotFound(f"no enrolled worker {worker!r} to re-issue a token for", code="worker_not_found",
                               params={"field": "worker", "worker": worker})
        token = new_enrollment_token()
        expires_at = self.clock() + float(ttl)
        await self.store.add_enrollment(token_hash(token), expires_at=expires_at, worker_id=worker,
                                        created_by=created_by)
        return Issued(token, expires_at, worker)

    async def enroll(self, body: object, *, peer: str) -> tuple[dict, str, str | None]:
        """Exchange `{"token", "name"}` for a worker token: (worker row, worker token, the hash of
        the token it revoked or None). Rate-limited per `peer`."""
        wait = self.limiter.attempt(peer)
        if wait is not None:
            raise TooManyRequests(f"too many enrollment attempts from {peer}; try again in {wait:.0f} s",
                                  params={"retry_after_s": round(wait, 1)})
        if not isinstance(body, dict):
            raise BadRequest("expected {\"token\": ..., \"name\": ...}", code="invalid_request", params={"field": ""})
        token, name = body.get("token"), body.get("name")
        if not isinstance(token, str) or not token:
            raise BadRequest("token: the one-time enrollment token is required", code="invalid_request",
                             params={"field": "token"})
        problem = name_problem(name)
        if problem is not None:
            raise BadRequest(f"name: {problem}", code="invalid_worker_name", params={"field": "name", "name": name})
        worker_token = new_worker_token()
        try:
            row, replaced = await self.store.redeem_enrollment(token_hash(token), name, token_hash(worker_token))
        except EnrollmentRefused as err:
            cls = Forbidden if err.code in ("worker_name_taken", "enrollment_bound") else Unauthorized
            raise cls(str(err), code=err.code, params=err.params) from None
        return row, worker_token, replaced

    async def authenticate(self, token: str | None, *, loopback: bool, server_token: str | None) -> Credential | None:
        """Who presents `token`, or None (the socket closes with 4401)."""
        if not token:
            return None
        if token.startswith(WORKER_TOKEN_PREFIX):
            row = await self.store.worker_by_token(token_hash(token))
            if row is None:
                return None
            return Credential(kind="worker", identity=f"worker:{row['id']}:{row['token_hash'][:16]}",
                              bound_name=row["name"], enrolled_by=row.get("enrolled_by"))
        if loopback and server_token and hmac.compare_digest(token.encode(), server_token.encode()):
            return Credential(kind="server", identity="server")
        return None
