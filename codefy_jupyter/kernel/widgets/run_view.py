"""`RunView(run_id)`: a live view of one run — status, place in line and its reason, per-node
status, progress bars for batches and epochs, a metrics chart drawn as SVG in the browser, and for
a run queued with provenance its "Data and models" (the dataset and weights files it read).

While the run can still change, the kernel ticks a `heartbeat` trait every `heartbeat_s` seconds
(_heartbeat.py); the browser shows the view "disconnected", with the `%codefy show ID` that gives a
live view again, when the beats stop (the kernel restarted or went away).

A background thread follows the run's event log from a cursor (`GET …/events?cursor=&wait=`
long polls) and folds each page into a `RunViewState` (run_state_view.py), then pushes it into
the synced traits in one message. Displaying the view again for a run id after a kernel restart
replays the log from the start, so the view is the same as if it had never stopped.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

import anywidget
import traitlets as t

from ...client.client import Client
from ...client.errors import CodefyError
from ._base import CSS, client_or_default, esm, log
from ._heartbeat import PULSE
from .run_state_view import (FINISHED, QUEUED, RunViewState, apply_row, fold_all, needs_heartbeat, show_command,
                             to_traits)


class RunView(anywidget.AnyWidget):
    _esm = esm("run_view_draw.js", "run_view.js")
    _css = CSS

    run_id = t.Unicode("").tag(sync=True)
    name = t.Unicode("").tag(sync=True)
    status = t.Unicode(QUEUED).tag(sync=True)
    queue_position = t.Int(None, allow_none=True).tag(sync=True)
    queue_key = t.Unicode("").tag(sync=True)
    queue_reason = t.Unicode("").tag(sync=True)
    device = t.Unicode("").tag(sync=True)
    devices = t.List(t.Unicode()).tag(sync=True)
    seed = t.Int(None, allow_none=True).tag(sync=True)
    worker = t.Unicode("").tag(sync=True)
    started_at = t.Float(None, allow_none=True).tag(sync=True)
    finished_at = t.Float(None, allow_none=True).tag(sync=True)
    duration_s = t.Float(None, allow_none=True).tag(sync=True)
    nodes = t.Dict().tag(sync=True)  # node id -> pending|running|done|cached|failed|cancelled
    node_types = t.Dict().tag(sync=True)
    inner_nodes = t.Dict().tag(sync=True)
    progress = t.Dict().tag(sync=True)  # node id -> {value, total, label, epoch?, epochs?}
    metrics = t.Dict().tag(sync=True)  # metric name -> node id -> [[step, value], ...]
    warnings = t.List().tag(sync=True)
    artifacts = t.List().tag(sync=True)
    result = t.Dict().tag(sync=True)
    error = t.Dict(default_value=None, allow_none=True).tag(sync=True)
    stop_reason = t.Unicode("").tag(sync=True)
    inputs = t.List().tag(sync=True)  # "Data and models": the files the run read (options.provenance)
    cursor = t.Int(0).tag(sync=True)
    following = t.Bool(True).tag(sync=True)
    follow_error = t.Unicode("").tag(sync=True)  # why following stopped early (server lost, run deleted)
    heartbeat = t.Int(0).tag(sync=True)  # ticked by the kernel while the run can change
    heartbeat_s = t.Float(PULSE.interval_s).tag(sync=True)  # how often, so the browser knows a missed beat
    show_command = t.Unicode("").tag(sync=True)  # what gives a live view again from a new kernel

    # Long-poll lengths: a queued run re-reads its place in line every second; a running one waits
    # for events up to poll_s (a closing view stops within that).
    poll_s = 5.0
    queued_poll_s = 1.0
    # Pages closer together than this are batched: a run reporting every batch would otherwise
    # send the browser a message per event.
    min_push_s = 0.1
    # How long a server that stopped answering is retried from the cursor before giving up.
    reconnect_s = 30.0

    def __init__(self, run_id: str, client: Client | None = None) -> None:
        if not isinstance(run_id, str) or not run_id.strip():
            raise ValueError(f"run_id must be a run id (a non-empty string), got {run_id!r}")
        super().__init__(run_id=run_id.strip(), show_command=show_command(run_id.strip()))
        self._client, self._owns_client = client_or_default(client)
        # The follow thread and the heartbeat thread both set synced traits; one at a time, since
        # ipywidgets' held sync is not thread-safe and a beat set while a page's sync is being
        # sent could be dropped.
        self._sync_lock = threading.Lock()
        self._state = RunViewState(run_id=self.run_id)
        self._cond = threading.Condition()
        self._done = False
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._follow, name=f"codefy-run-view-{self.run_id[:8]}", daemon=True)
        self._thread.start()
        PULSE.add(self)

    # -- public -------------------------------------------------------------------------------
    @property
    def state(self) -> RunViewState:
        """The folded state as of the last push."""
        with self._cond:
            return self._state

    @property
    def done(self) -> bool:
        """Following has ended: the run is finished and every event applied, or it stopped early
        (`follow_error` says why), or the view was closed."""
        with self._cond:
            return self._done

    def wait(self, timeout: float | None = None) -> str:
        """Block until the run is finished and all its events are applied; its final status.
        TimeoutError after `timeout` seconds; CodefyError when following stopped early."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._done, timeout):
                raise TimeoutError(f"run {self.run_id} is still {self._state.status} after {timeout} s")
        if self.follow_error and self.status not in FINISHED:
            raise CodefyError(self.follow_error, code="not_followed")
        return self.status

    def wait_until(self, predicate: Callable[[RunView], bool], timeout: float | None = None) -> bool:
        """Block until `predicate(view)` holds (checked after every update) or following ends;
        whether it holds."""
        with self._cond:
            self._cond.wait_for(lambda: self._done or predicate(self), timeout)
        return predicate(self)

    def close(self) -> None:
        closing = getattr(self, "_closing", None)  # None: __init__ refused its arguments
        if closing is not None:
            closing.set()
        PULSE.discard(self)
        super().close()

    # -- following ------------------------------------------------------------------------------
    def _beat(self) -> bool:
        """One heartbeat (from _heartbeat.PULSE's thread); whether the view needs more."""
        if self._closing.is_set() or not needs_heartbeat(self.status, self.following):
            return False
        with self._sync_lock:
            self.heartbeat += 1
        return True

    def _push(self, state: RunViewState) -> None:
        values = to_traits(state)
        with self._sync_lock, self.hold_sync():
            for key, value in values.items():
                if getattr(self, key) != value:
                    setattr(self, key, value)
        with self._cond:
            self._state = state
            self._cond.notify_all()

    def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """`fn(*args)`, retried from the same arguments while the server does not answer."""
        lost_since: float | None = None
        while True:
            try:
                return fn(*args)
            except CodefyError as err:
                if err.code != "unreachable" or self._closing.is_set():
                    raise
                lost_since = lost_since or time.monotonic()
                if time.monotonic() - lost_since > self.reconnect_s:
                    raise CodefyError(f"lost the codefy server while following run {self.run_id} (no answer for "
                                      f"{self.reconnect_s:g} s): {err}", code="unreachable") from None
                self._closing.wait(0.5)

    def _follow(self) -> None:
        client, run_id = self._client, self.run_id
        try:
            state = apply_row(self._state, self._call(client.get, run_id))
            self._push(state)
            while not self._closing.is_set():
                waiting = state.status == QUEUED
                page = self._call(client.events, run_id, state.cursor, self.queued_poll_s if waiting else self.poll_s)
                before = state
                state = fold_all(state, page["events"])
                if state.status == QUEUED and not page["events"]:
                    state = apply_row(state, self._call(client.get, run_id))  # its place in line moves
                if state is not before:
                    self._push(state)
                if state.closed:
                    break
                if page["status"] in FINISHED and not page["more"] and not page["events"]:
                    break  # finished without a closing event in its log (an older or pruned log)
                if not page["more"]:
                    self._closing.wait(self.min_push_s)
            if not self._closing.is_set():
                self._push(apply_row(state, self._call(client.get, run_id)))  # final times
        except CodefyError as err:
            if not self._closing.is_set():
                self.follow_error = str(err)
        except Exception as err:  # noqa: BLE001 - the thread reports, never dies silently
            if not self._closing.is_set():
                log.exception("following run %s failed", run_id)
                self.follow_error = f"{type(err).__name__}: {err}"
        finally:
            self.following = False
            with self._cond:
                owns = self._owns_client
                self._done = True
                self._cond.notify_all()
            if owns:
                client.close()

    def _adopt_client(self) -> bool:
        """Take over closing the client when following ends (a host widget that owns the client
        is closing while this view may still be inside a request on it). False when following has
        already ended: the caller closes the client itself."""
        with self._cond:
            if self._done:
                return False
            self._owns_client = True
            return True
