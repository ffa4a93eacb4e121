"""What SweepView and StudyView share: a thread that follows the sweep or study by long-poll until
it settles, sorting on a header click, the CSV download, and Open run (the variant's RunView,
synced as `watched`, drawn in full inside the view)."""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

import anywidget
import traitlets as t
from ipywidgets import widget_serialization

from ...client.client import Client
from ...client.errors import CodefyError
from ._base import CSS, client_or_default, error_doc, log
from .experiment_rows import check_action, sort_rows
from .run_view import RunView
from .runs_rows import ActionError


class ExperimentView(anywidget.AnyWidget):
    _css = CSS
    kind = ""  # "sweep" | "study"
    actions: tuple[str, ...] = ("refresh", "csv")
    sorts: tuple[str, ...] = ("rank",)

    rows = t.List().tag(sync=True)
    sort_key = t.Unicode("rank").tag(sync=True)
    descending = t.Bool(False).tag(sync=True)
    following = t.Bool(True).tag(sync=True)
    follow_error = t.Unicode("").tag(sync=True)
    error = t.Dict(default_value=None, allow_none=True).tag(sync=True)
    message = t.Unicode("").tag(sync=True)
    watched = t.Instance(RunView, allow_none=True).tag(sync=True, **widget_serialization)

    poll_s = 10.0  # long-poll length; a closing view stops within it
    reconnect_s = 30.0

    def __init__(self, client: Client | None = None, **traits: Any) -> None:
        super().__init__(**traits)
        self._client, self._owns_client = client_or_default(client)
        self._lock = threading.RLock()
        self._unsorted: list[dict[str, Any]] = []
        self._cond = threading.Condition()
        self._done = False
        self._closing = threading.Event()
        self.on_msg(self._on_message)
        self.observe(lambda _c: self._resort(), names=["sort_key", "descending"])
        self._thread = threading.Thread(target=self._follow_loop, name=f"codefy-{self.kind}-view", daemon=True)
        self._thread.start()

    # -- public -------------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        with self._cond:
            return self._done

    def wait(self, timeout: float | None = None) -> None:
        """Block until following has ended (settled, or stopped early: `follow_error` says why)."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._done, timeout):
                raise TimeoutError(f"{self.kind} still moving after {timeout} s")

    def sort(self, key: str, descending: bool | None = None) -> None:
        """Sort the table on `key`; the same key again flips the direction. Empty values stay last."""
        if key not in self.sorts:
            raise ActionError(f"unknown sort key {key!r}; one of {', '.join(self.sorts)}", "key")
        with self.hold_sync():
            if descending is None:
                descending = not self.descending if key == self.sort_key else False
            self.descending = descending
            self.sort_key = key

    def open_run(self, run_id: str) -> RunView:
        """Show the variant's run in full inside this view; the RunView."""
        previous = self.watched
        view = RunView(run_id, client=self._client)
        self.watched = view
        if previous is not None:
            previous.close()
        self.message = f"showing run {run_id}"
        return view

    def csv_text(self) -> str:
        raise NotImplementedError

    def csv(self) -> str:
        """The CSV export; also sent to the browser, which downloads it."""
        text = self.csv_text()
        self.send({"type": "csv", "filename": f"{self.kind}-{self._ident()[:12]}.csv", "text": text})
        self.message = f"{self.kind} CSV downloaded"
        return text

    def close(self) -> None:
        closing = getattr(self, "_closing", None)
        if closing is not None:
            closing.set()
        watched, self.watched = self.watched, None
        if watched is not None:
            watched.close()
        super().close()
        if getattr(self, "_owns_client", False) and self.done:
            self._client.close()

    # -- for the subclasses ---------------------------------------------------------------------
    def _ident(self) -> str:
        raise NotImplementedError

    def _follow(self) -> None:
        """Follow until settled; call `self._set_rows` and set traits as news comes."""
        raise NotImplementedError

    def _set_rows(self, rows: list[dict[str, Any]]) -> None:
        with self._lock:
            self._unsorted = rows
            self.rows = sort_rows(rows, self.sort_key, self.descending)

    def _resort(self) -> None:
        with self._lock:
            self.rows = sort_rows(self._unsorted, self.sort_key, self.descending)

    def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """`fn(...)`, retried while the server does not answer (up to reconnect_s)."""
        lost_since: float | None = None
        while True:
            try:
                return fn(*args, **kwargs)
            except CodefyError as err:
                if err.code != "unreachable" or self._closing.is_set():
                    raise
                lost_since = lost_since or time.monotonic()
                if time.monotonic() - lost_since > self.reconnect_s:
                    raise
                self._closing.wait(0.5)

    def _notify(self) -> None:
        with self._cond:
            self._cond.notify_all()

    # -- internals ------------------------------------------------------------------------------
    def _follow_loop(self) -> None:
        try:
            self._follow()
        except CodefyError as err:
            if not self._closing.is_set():
                self.follow_error = str(err)
        except Exception as err:  # noqa: BLE001 - the thread reports, never dies silently
            if not self._closing.is_set():
                log.exception("following %s %s failed", self.kind, self._ident())
                self.follow_error = f"{type(err).__name__}: {err}"
        finally:
            self.following = False
            with self._cond:
                self._done = True
                self._cond.notify_all()
            if self._owns_client and self._closing.is_set():
                self._client.close()  # closed while following: close() left the client to this thread

    def _safely(self, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            result = fn(*args)
            self.error = None
            return result
        except (CodefyError, ActionError) as err:
            self.error = error_doc(err)
        return None

    def _on_message(self, _widget: Any, content: Any, _buffers: Any) -> None:
        runs = [r.get("run_id") for r in self._unsorted if r.get("run_id")]
        try:
            action, arg = check_action(content, self.actions, self.sorts, runs)
        except ActionError as err:
            self.error = error_doc(err)
            return
        if action == "sort":
            self._safely(self.sort, arg)
        elif action == "open":
            self._safely(self.open_run, arg)
        else:
            self._safely(getattr(self, action))
