"""`WorkersTable()`: the worker agents from `GET …/codefy/api/workers` — name, state, devices,
slots (taken/limit) and running runs — refreshed every `refresh_s` seconds and on demand.
A server without the route (404) or without agents shows "no workers connected"."""

from __future__ import annotations

import threading
import time
from typing import Any

import anywidget
import traitlets as t

from ...client.client import Client
from ...client.errors import CodefyError
from ._base import CSS, Refresher, client_or_default, error_doc, esm
from .workers_rows import NO_WORKERS, worker_rows


class WorkersTable(anywidget.AnyWidget):
    _esm = esm("workers_table.js")
    _css = CSS

    rows = t.List().tag(sync=True)
    local = t.Dict(default_value=None, allow_none=True).tag(sync=True)  # this server's devices {devices, slots}
    message = t.Unicode("").tag(sync=True)  # "no workers connected" when there are none
    refresh_s = t.Float(10.0).tag(sync=True)
    updated_at = t.Float(None, allow_none=True).tag(sync=True)
    error = t.Dict(default_value=None, allow_none=True).tag(sync=True)

    def __init__(self, client: Client | None = None, *, refresh_s: float = 10.0) -> None:
        super().__init__(refresh_s=refresh_s)
        self._client, self._owns_client = client_or_default(client)
        self._lock = threading.Lock()
        self.on_msg(self._on_message)
        self._refresher = Refresher(self._refresh_safely, lambda: self.refresh_s, "codefy-workers-table")
        self.observe(lambda _c: self._refresher.poke(), names=["refresh_s"])
        self._refresh_safely()
        self._refresher.start()

    def refresh(self) -> None:
        with self._lock:
            try:
                listing: Any = self._client.workers()
            except CodefyError as err:
                if err.status != 404:
                    raise
                listing = []  # a server without worker support has none
            rows, local = worker_rows(listing)
            with self.hold_sync():
                self.rows = rows
                self.local = local
                self.message = "" if rows else NO_WORKERS
                self.updated_at = time.time()
                self.error = None

    def close(self) -> None:
        if hasattr(self, "_refresher"):  # else __init__ failed before it was built
            self._refresher.stop()
        super().close()
        if getattr(self, "_owns_client", False):
            self._client.close()

    def _refresh_safely(self) -> None:
        try:
            self.refresh()
        except CodefyError as err:
            self.error = error_doc(err)

    def _on_message(self, _widget: Any, content: Any, _buffers: Any) -> None:
        if isinstance(content, dict) and content.get("action") == "refresh":
            self._refresh_safely()
        else:
            self.error = {"message": f"unknown message {content!r}; the workers table takes {{'action': 'refresh'}}",
                          "field": "action", "code": "unknown_action", "status": None}
