"""How long a `codefy` watcher keeps retrying a server that stopped answering. (Which server a
command talks to, and the --url/--token/--host/--port arguments that name it, are the client's:
`client/flags.py`.)"""

from __future__ import annotations

import os

RECONNECT_ENV = "CODEFY_RECONNECT_S"  # how long a watcher keeps retrying a server that stopped answering
DEFAULT_RECONNECT_S = 30.0


def reconnect_s() -> float:
    """How long a watcher keeps retrying a server that stopped answering, in seconds."""
    try:
        return max(0.0, float(os.environ.get(RECONNECT_ENV, DEFAULT_RECONNECT_S)))
    except ValueError:
        return DEFAULT_RECONNECT_S
