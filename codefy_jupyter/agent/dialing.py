"""Where and how an agent dials: its options, the control plane's worker socket URL, and the pause
before the next dial.

A deployment may list several control-plane URLs (a leader and its standbys, wire/control_urls.py):
after a failed dial the agent tries the next URL almost at once, because a standby taking over
is the usual reason; the capped, jittered backoff grows only when a whole turn of the list failed,
so a control plane that is down for long is not hammered.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable
from urllib.parse import urlsplit, urlunsplit

from ..wire.control_urls import ControlUrls
from .retention import DEFAULT_KEEP_RUNS

BACKOFF_FIRST_S = 0.5
BACKOFF_MAX_S = 30.0


def worth_another_dial(sent: str, rereads: bool, recorded: str | None) -> bool:
    """After the token was refused: fatal, unless the token comes from the local server's record
    and that record has no token now (the server is restarting) or another one than was sent (it
    restarted with a new token): then the next dial, which reads it again, may well be let in."""
    return rereads and recorded != sent


class Fatal(Exception):
    """The agent cannot go on (the message says why)."""


class Backoff:
    def __init__(self, first: float = BACKOFF_FIRST_S, cap: float = BACKOFF_MAX_S) -> None:
        self.first, self.cap = first, cap
        self.current = first

    def next(self) -> float:
        delay = self.current
        self.current = min(self.cap, self.current * 2)
        return delay * random.uniform(0.75, 1.25)

    def reset(self) -> None:
        self.current = self.first


def socket_url(control: str) -> str:
    """`http://host:8888/base/` -> `ws://host:8888/base/codefy/ws/worker` (https -> wss)."""
    parts = urlsplit(control)
    scheme = {"http": "ws", "https": "wss", "ws": "ws", "wss": "wss"}.get(parts.scheme)
    if scheme is None or not parts.hostname:
        raise Fatal(f"--control {control!r} is not an http(s):// URL")
    path = parts.path if parts.path.endswith("/") else parts.path + "/"
    return urlunsplit((scheme, parts.netloc, path + "codefy/ws/worker", "", ""))


@dataclass
class AgentOptions:
    control: str  # the first of `controls`
    token: str
    name: str
    agent_dir: Path
    instance: str | None = None
    one_shot: bool = False
    run_id: str | None = None
    ca_file: str | None = None
    pin: bytes | None = None
    keep_runs: int = DEFAULT_KEEP_RUNS  # finished runs' folders kept (retention.py); negative: all
    mounts: dict[str, str] = field(default_factory=dict)  # --mount label=path: shared folders (hello.mounts)
    # Every control-plane URL of the deployment (a leader and its standbys), in the order tried;
    # empty: `control` alone.
    controls: tuple[str, ...] = ()
    # Where the token came from, read again before each dial: the local `codefy start` server's
    # server.json, whose token may change when that server restarts. None: the token is fixed.
    reread_token: Callable[[], str | None] | None = None

    @property
    def registered_name(self) -> str:
        return f"{self.name}.{self.instance}" if self.instance else self.name

    @property
    def runs_dir(self) -> Path:
        return self.agent_dir / "agent-runs"

    @property
    def cache_dir(self) -> Path:
        """The transfer backend's inputs, by SHA-256 (agent/transfer.py)."""
        return self.agent_dir / "agent-cache"


class Redial:
    """The pause before the next dial over a list of URLs: BACKOFF_FIRST_S while untried URLs are
    left in this turn, the Backoff's next delay after a whole turn failed."""

    def __init__(self, controls: ControlUrls, backoff: Backoff | None = None) -> None:
        self.controls = controls
        self.backoff = backoff or Backoff()
        self.tries = 0

    def next(self) -> float:
        self.tries += 1
        if self.controls.several and self.tries < len(self.controls.urls):
            return BACKOFF_FIRST_S
        self.tries = 0
        return self.backoff.next()

    def reset(self) -> None:
        self.tries = 0
        self.backoff.reset()
