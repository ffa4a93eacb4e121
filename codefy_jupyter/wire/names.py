"""Names no worker may have, in one place for the handshake, enrollment and the scheduler. Pure.

`local` is this server, `any` the first free worker and `pool` the one-shot pools' queue keys
(`pool:one-shot/<device>`): a worker of one of these names would make a target ambiguous.
`enroll` and `enrollments` are REST paths beside `/codefy/api/workers/{id}`: a worker of one of
these names could not be read, removed or drained through the API.
"""

from __future__ import annotations

import re
from typing import Any

RESERVED_WORKER_NAMES: frozenset[str] = frozenset({"local", "any", "pool", "enroll", "enrollments"})
RESERVED_NAMES = RESERVED_WORKER_NAMES

# One label of a worker name (`<name>` or the instance in `<name>.<instance>`).
WORKER_NAME_PATTERN = r"[a-z0-9][a-z0-9-]{0,62}"
_NAME = re.compile(WORKER_NAME_PATTERN)
# A worker as the registry and the scheduler name it: `<name>` or `<name>.<instance>`.
WORKER_NAME = re.compile(rf"^{WORKER_NAME_PATTERN}(?:\.{WORKER_NAME_PATTERN})?$")


def name_problem(name: Any, *, what: str = "worker name") -> str | None:
    """Why `name` cannot be a worker name (or instance), or None when it can. The agent asks before
    it dials; the handshake asks again."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        return (f"{what} {name!r} is not valid: use 1 to 63 lowercase letters, digits and '-', "
                "starting with a letter or digit")
    if name in RESERVED_NAMES:
        return f"{what} {name!r} is reserved ({', '.join(sorted(RESERVED_NAMES))})"
    return None
