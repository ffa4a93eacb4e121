"""The event loop that `codefy start` serves on.

`CODEFY_SERVER_LOOP` picks it:
- `auto` (the default): uvloop when it is installed, else asyncio's own loop. uvloop is a
  dependency on Linux and macOS.
- `uvloop`: uvloop, or a clear refusal when it is missing.
- `asyncio`: asyncio's own loop.

Why uvloop: the headless server's one loop carries every request, WebSocket frame and run event,
and uvloop's own overhead per turn is smaller. Paired runs of the queue benchmark, here, on the
same code:
- the server loop's CPU per submit fell 7-9%;
- the one-client submit p50 fell by 0.1-2 ms in 7 of 9 pairs;
- the slowest submit fell in 6 of 9 pairs.

Only the server's loop changes. The global loop policy is untouched, so the engine threads' loops
stay asyncio's. Inside `jupyter lab` the host's loop is left as it is.
"""

from __future__ import annotations

import asyncio
from typing import Mapping

LOOP_ENV = "CODEFY_SERVER_LOOP"
CHOICES = ("auto", "uvloop", "asyncio")


class LoopChoiceError(ValueError):
    """`CODEFY_SERVER_LOOP` names no loop this machine can run; the message says why."""


def loop_choice(env: Mapping[str, str]) -> str:
    """The loop asked for in `env` (`auto` when unset), checked: a uvloop that is asked for must
    be importable."""
    raw = env.get(LOOP_ENV, "")
    choice = raw.strip().lower() or "auto"
    if choice not in CHOICES:
        raise LoopChoiceError(f"{LOOP_ENV}={raw!r}: expected one of {', '.join(CHOICES)}")
    if choice == "uvloop" and _uvloop() is None:
        raise LoopChoiceError(f"{LOOP_ENV}=uvloop, but uvloop is not installed here (pip install uvloop, "
                              f"or set {LOOP_ENV}=asyncio)")
    return choice


def new_server_loop(choice: str) -> tuple[asyncio.AbstractEventLoop, str]:
    """A new loop for `choice` (from `loop_choice`) and the name of what it is."""
    uvloop = _uvloop() if choice in ("auto", "uvloop") else None
    if uvloop is not None:
        return uvloop.new_event_loop(), "uvloop"
    return asyncio.new_event_loop(), "asyncio"


def _uvloop():  # type: ignore[no-untyped-def]
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop
