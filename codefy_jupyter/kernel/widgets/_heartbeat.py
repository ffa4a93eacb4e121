"""The heartbeat a kernel ticks into its live run views, so a view whose kernel went away
(restarted, shut down, a page reopened from saved widget state) can say so in the browser instead
of staying frozen on "running".

Why beats and not the frontend's comm events: anywidget hands the ES module a model without its
comm; ipywidgets in JupyterLab marks a model's comm dead on a restart through an event that says
neither which model state it moved to nor why, a page reopened from saved state has no comm and no
event at all, and other frontends signal differently or not at all. "No beat for a few beats" reads
the same in every frontend, covers all of these, and heals itself when beats come back. The ES
module (run_view_draw.js) judges; this side only ticks.

One daemon thread ticks every view that still needs beats; it ends when none does and starts
again with the next view, so a kernel without live views runs no thread for them.
"""

from __future__ import annotations

import threading
from typing import Protocol

from ._base import log

HEARTBEAT_S = 2.0  # the browser shows "disconnected" after 3 beats in a row did not arrive


class Beating(Protocol):
    def _beat(self) -> bool:
        """Tick once; whether the view still needs beats (False: drop it)."""
        ...


class Pulse:
    def __init__(self, interval_s: float = HEARTBEAT_S, name: str = "codefy-view-heartbeat") -> None:
        self.interval_s = interval_s
        self._name = name
        self._lock = threading.Lock()
        self._views: dict[int, Beating] = {}
        self._thread: threading.Thread | None = None
        self._tick = threading.Event()  # never set: a wait that the interval ends

    def add(self, view: Beating) -> None:
        with self._lock:
            self._views[id(view)] = view
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
                self._thread.start()

    def discard(self, view: Beating) -> None:
        with self._lock:
            self._views.pop(id(view), None)

    @property
    def running(self) -> bool:
        with self._lock:
            return self._thread is not None

    def __contains__(self, view: object) -> bool:
        with self._lock:
            return self._views.get(id(view)) is view

    def __len__(self) -> int:
        with self._lock:
            return len(self._views)

    def _loop(self) -> None:
        while not self._tick.wait(self.interval_s):
            with self._lock:
                views = list(self._views.values())
            for view in views:
                try:
                    keep = view._beat()
                except Exception:  # noqa: BLE001 - one broken view must not stop the others' beats
                    log.exception("a run view's heartbeat failed; it gets no more beats")
                    keep = False
                if not keep:
                    self.discard(view)
            with self._lock:
                if not self._views:
                    # Decided under the lock: an add() racing this sees no thread and starts one.
                    self._thread = None
                    return


PULSE = Pulse()
