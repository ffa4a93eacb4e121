"""`QueueDialog(graph)`: the Queue on… dialog in a notebook. Target (This server, a worker the
server lists, Any available), device or device set, seed, name; Submit sends the run through the
API and shows its id, and Watch shows the run's full live view (a RunView, synced as `watched`
and drawn inside the dialog by the same code that draws a RunView) under the form. A field the dialog can check is refused before sending; anything else is the server's
own refusal, shown verbatim with its field."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import anywidget
import traitlets as t
from ipywidgets import widget_serialization

from ...client.client import Client, load_graph
from ...client.errors import CodefyError
from ._base import CSS, client_or_default, error_doc, esm
from ._watching import Watching
from .queue_form import FormError, device_choices, submit_args, target_options
from .run_view import RunView
from .workers_rows import worker_names

FORM_FIELDS = ("target", "device", "devices", "seed", "no_seed", "name")


class QueueDialog(Watching, anywidget.AnyWidget):
    _esm = esm("run_view_draw.js", "queue_dialog.js")
    _css = CSS

    graph_name = t.Unicode("").tag(sync=True)
    graph_nodes = t.Int(0).tag(sync=True)
    graph_seed = t.Int(None, allow_none=True).tag(sync=True)  # the seed a blank Seed field means
    graph_device = t.Unicode("").tag(sync=True)
    targets = t.List().tag(sync=True)  # [value, label]
    device_choices = t.List().tag(sync=True)
    target = t.Unicode("local").tag(sync=True)
    device = t.Unicode("").tag(sync=True)
    devices = t.Unicode("").tag(sync=True)  # comma-separated
    seed = t.Unicode("").tag(sync=True)  # blank: the graph's settings.seed
    no_seed = t.Bool(False).tag(sync=True)
    name = t.Unicode("").tag(sync=True)
    busy = t.Bool(False).tag(sync=True)
    run = t.Dict(default_value=None, allow_none=True).tag(sync=True)  # the submitted run: id, status, device, queue_key
    error = t.Dict(default_value=None, allow_none=True).tag(sync=True)  # {message, field, ...}
    watch_state = t.Dict().tag(sync=True)
    # The watched run's view: the browser gets its model id and draws that model's live view.
    watched = t.Instance(RunView, allow_none=True).tag(sync=True, **widget_serialization)

    def __init__(self, graph: dict[str, Any] | str | Path, client: Client | None = None) -> None:
        loaded = load_graph(graph)
        settings = loaded.get("settings") if isinstance(loaded.get("settings"), dict) else {}
        seed = settings.get("seed")
        super().__init__(
            graph_name=Path(graph).name if isinstance(graph, (str, Path)) else "graph",
            graph_nodes=len(loaded.get("nodes") or []),
            graph_seed=seed if isinstance(seed, int) and not isinstance(seed, bool) else None,
            graph_device=str(settings.get("device") or ""),
        )
        self._graph = loaded
        self._client, self._owns_client = client_or_default(client)
        self._lock = threading.Lock()
        self.on_msg(self._on_message)
        self.load_targets()

    def load_targets(self) -> None:
        """The target and device choices, from the server's workers listing (a server without
        workers offers This server and Any available)."""
        try:
            listing: Any = self._client.workers()
        except CodefyError as err:
            if err.status != 404:
                self.error = error_doc(err)
            listing = []
        with self.hold_sync():
            self.targets = target_options(worker_names(listing))
            self.device_choices = device_choices(listing)

    def submit(self, **form: Any) -> dict[str, Any]:
        """Submit with the dialog's fields (`form` sets fields first); the new run's row. A
        refusal raises (FormError or CodefyError) and is also shown in the dialog."""
        with self._lock:
            unknown = set(form) - set(FORM_FIELDS)
            if unknown:
                raise TypeError(f"unknown dialog field(s) {sorted(unknown)}; the fields are {', '.join(FORM_FIELDS)}")
            with self.hold_sync():
                for key, value in form.items():
                    setattr(self, key, value)
            self.busy, self.error = True, None
            try:
                args = submit_args({k: getattr(self, k) for k in FORM_FIELDS})
                row = self._client.submit(self._graph, **args)
            except (FormError, CodefyError) as err:
                self.error = error_doc(err)
                raise
            finally:
                self.busy = False
            self.run = {k: row.get(k) for k in ("id", "name", "status", "device", "devices", "queue_key", "seed",
                                                "queue_position")}
            return row

    def watch(self, run_id: str | None = None) -> RunView:
        """Follow the submitted run (or `run_id`); the RunView, to display in full."""
        run_id = run_id or (self.run or {}).get("id")
        if not run_id:
            raise ValueError("nothing submitted yet: submit first, or pass run_id")
        return super().watch(run_id)

    def close(self) -> None:
        # _owns_client is missing too when __init__ refused the graph.
        close_client = self._close_watching(getattr(self, "_owns_client", False))
        super().close()
        if close_client:
            self._client.close()

    def _on_message(self, _widget: Any, content: Any, _buffers: Any) -> None:
        action = content.get("action") if isinstance(content, dict) else None
        try:
            if action == "submit":
                form = content.get("form") or {}
                if not isinstance(form, dict):
                    raise FormError("form must be an object of the dialog's fields", "form")
                self.submit(**{k: v for k, v in form.items() if k in FORM_FIELDS})
            elif action == "watch":
                self.watch()
            elif action == "targets":
                self.load_targets()
            else:
                raise FormError(f"unknown action {action!r}; one of submit, watch, targets", "action")
        except (FormError, CodefyError, ValueError) as err:
            self.error = error_doc(err)
