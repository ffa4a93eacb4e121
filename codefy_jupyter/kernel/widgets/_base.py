"""What the widgets share: their ESM/CSS assets, the client they talk through, a background
refresher, and how a refusal is shown."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any, Callable

from ...client.client import Client
from ...client.errors import CodefyError

ASSETS = Path(__file__).parent
CSS = ASSETS / "widgets.css"
# The DOM helper every widget module uses. anywidget loads `_esm` as one module text (relative
# imports do not resolve and there is no build step), so the shared text is put in front of each
# widget's own module instead of imported.
SHARED_JS = ASSETS / "dom.js"
log = logging.getLogger("codefy_jupyter.widgets")


def esm(*names: str) -> str:
    """The ES module a widget ships: the shared helpers, then the texts `names` (shared drawing
    code first, the widget's own module last). Called once per widget class, at import."""
    return "\n".join(path.read_text(encoding="utf-8") for path in (SHARED_JS, *(ASSETS / n for n in names)))


def client_or_default(client: Client | None) -> tuple[Client, bool]:
    """(the client to use, whether the widget owns it). Client() with no arguments finds the
    server: inside a kernel, the one the kernel belongs to."""
    if client is not None:
        return client, False
    return Client(), True


def error_doc(err: BaseException) -> dict[str, Any]:
    """A refusal as the browser shows it: the message verbatim, its field when there is one."""
    if isinstance(err, CodefyError):
        return {"message": str(err), "field": err.field or "", "code": err.code, "status": err.status}
    field = getattr(err, "field", "") or ""
    return {"message": str(err), "field": field, "code": type(err).__name__, "status": None}


class Refresher:
    """Calls `fn` every `interval()` seconds on a daemon thread until stopped; an interval of 0
    or less pauses it until `poke()`. `fn` must not raise (it reports into the widget)."""

    def __init__(self, fn: Callable[[], None], interval: Callable[[], float], name: str) -> None:
        self._fn, self._interval = fn, interval
        self._wake, self._stop = threading.Event(), threading.Event()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def poke(self) -> None:
        """Recompute the wait (after the interval changed)."""
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            interval = self._interval()
            woke = self._wake.wait(interval if interval > 0 else None)
            self._wake.clear()
            if self._stop.is_set():
                return
            if not woke:
                try:
                    self._fn()
                except Exception:  # noqa: BLE001 - a background refresh must never kill its thread
                    log.exception("widget refresh failed")
