"""`RunsTable()`: the newest 50 runs of the server with filter chips, the "50 of 312" count and
Stop / Watch / CSV / Delete per row, refreshed every `refresh_s` seconds and on demand.

Every action goes through Python: the ESM sends {"action", "run_id"} and this side calls the
REST API through the client, so the table works wherever the kernel can reach the server.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import anywidget
import traitlets as t

from ...client.client import Client
from ...client.errors import CodefyError
from ._base import CSS, Refresher, client_or_default, error_doc, esm
from ._watching import Watching
from .run_view import RunView
from .runs_rows import (FILTER_LABELS, LIST_LIMIT, ActionError, check_action, count_label, csv_filename,
                        statuses_for, table_row)


class RunsTable(Watching, anywidget.AnyWidget):
    _esm = esm("runs_table.js")
    _css = CSS

    rows = t.List().tag(sync=True)
    total = t.Int(0).tag(sync=True)
    count = t.Unicode("").tag(sync=True)  # "50 of 312"
    filter = t.Unicode("all").tag(sync=True)
    filters = t.List(default_value=FILTER_LABELS).tag(sync=True)
    refresh_s = t.Float(5.0).tag(sync=True)  # 0: only on demand
    updated_at = t.Float(None, allow_none=True).tag(sync=True)
    error = t.Dict(default_value=None, allow_none=True).tag(sync=True)  # the last refusal: {message, field, ...}
    message = t.Unicode("").tag(sync=True)  # what the last action did
    watch_state = t.Dict().tag(sync=True)  # digest of the watched run (see _watching.py)

    def __init__(self, client: Client | None = None, *, refresh_s: float = 5.0) -> None:
        super().__init__(refresh_s=refresh_s)
        self._client, self._owns_client = client_or_default(client)
        self._lock = threading.RLock()
        self._statuses: dict[str, str] = {}
        self.on_msg(self._on_message)
        self.observe(lambda _c: self._safely(self.refresh), names=["filter"])
        self._refresher = Refresher(lambda: self._safely(self.refresh), lambda: self.refresh_s, "codefy-runs-table")
        self.observe(lambda _c: self._refresher.poke(), names=["refresh_s"])
        self._safely(self.refresh)
        self._refresher.start()

    @t.validate("filter")
    def _check_filter(self, proposal: Any) -> str:
        try:
            statuses_for(proposal["value"])
        except ActionError as err:
            raise t.TraitError(str(err)) from None
        return proposal["value"]

    # -- public -------------------------------------------------------------------------------
    def refresh(self) -> None:
        """Read the newest runs of the current filter again."""
        with self._lock:
            statuses = statuses_for(self.filter)
            page = self._client.list(status=statuses, limit=LIST_LIMIT)
            now = time.time()
            rows = [table_row(run, now=now) for run in page["runs"]]
            self._statuses = {r["id"]: r["status"] for r in rows}
            with self.hold_sync():
                self.rows = rows
                self.total = page["total"]
                self.count = count_label(len(rows), page["total"])
                self.updated_at = now
                self.error = None

    def stop(self, run_id: str) -> dict[str, Any]:
        """Ask a queued or running run to stop (cooperatively); its row."""
        row = self._client.cancel(run_id)
        self.message = f"asked run {run_id} to stop"
        self.refresh()
        return row

    def csv(self, run_id: str) -> str:
        """The run's metrics as CSV; also sent to the browser, which downloads it."""
        text = self._client.metrics(run_id, csv=True)
        self.send({"type": "csv", "run_id": run_id, "filename": csv_filename(run_id), "text": text})
        self.message = f"metrics of run {run_id} downloaded"
        return text

    def delete(self, run_id: str) -> None:
        """Delete a finished run with its events, metrics and artifact records."""
        self._client.delete(run_id)
        if self.watched is not None and self.watched.run_id == run_id:
            self.unwatch()
        self.message = f"deleted run {run_id}"
        self.refresh()

    def watch(self, run_id: str) -> RunView:
        view = super().watch(run_id)
        self.message = f"watching run {run_id}"
        return view

    def close(self) -> None:
        if hasattr(self, "_refresher"):  # else __init__ failed before it was built
            self._refresher.stop()
        close_client = self._close_watching(getattr(self, "_owns_client", False))
        super().close()
        if close_client:
            self._client.close()

    # -- internals ------------------------------------------------------------------------------
    def _safely(self, fn: Any, *args: Any) -> Any:
        """Run an action for the browser or the refresher: a refusal is shown, never raised."""
        try:
            return fn(*args)
        except (CodefyError, ActionError) as err:
            self.error = error_doc(err)
        return None

    def _on_message(self, _widget: Any, content: Any, _buffers: Any) -> None:
        try:
            action, arg = check_action(content, self._statuses)
        except ActionError as err:
            self.error = error_doc(err)
            return
        if action == "refresh":
            self._safely(self.refresh)
        elif action == "filter":
            self.filter = arg  # the observer refreshes
        else:
            self._safely(getattr(self, action), arg)
