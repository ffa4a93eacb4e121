"""Names no worker may have, in one place for the handshake, enrollment and the scheduler. Pure.

`local` is this server, `any` the first free worker and `pool` the one-shot pools' queue keys
(`pool:one-shot/<device>`): a worker of one of these names would make a target ambiguous.
`enroll` and `enrollments` are REST paths beside `/codefy/api/workers/{id}`: a worker of one of
these names could not be read, removed or drained through the API.
"""

from __future__ import annotations

RESERVED_WORKER_NAMES: frozenset[str] = frozenset({"local", "any", "pool", "enroll", "enrollments"})
