"""`SweepView(sweep_id)`: a sweep in a notebook — state, objective, counts per status, the variants
(params, objective, rank, status, worker/devices, final metrics) sortable by Rank, Status and
Objective, each child's objective curve, Stop sweep, Download CSV and Open run.

It follows the sweep's long-poll (`GET sweeps/{id}?wait=&changes=`, answered when a child starts
or ends) until the sweep settles; a child's metrics are read only when its status changed or it
is still running, never once per poll for every run."""

from __future__ import annotations

from typing import Any

import traitlets as t

from ...client.client import Client, sweep_settled
from ._base import esm
from ._experiment import ExperimentView
from .experiment_rows import SWEEP_SORTS, curve, sweep_rows, sweep_state


class SweepView(ExperimentView):
    _esm = esm("run_view_draw.js", "experiment_draw.js", "sweep_view.js")
    kind = "sweep"
    actions = ("refresh", "csv", "stop")
    sorts = SWEEP_SORTS

    sweep_id = t.Unicode("").tag(sync=True)
    name = t.Unicode("").tag(sync=True)
    state = t.Unicode("").tag(sync=True)
    objective = t.Unicode("").tag(sync=True)
    counts = t.Dict().tag(sync=True)
    counts_text = t.Unicode("").tag(sync=True)
    warning = t.Unicode("").tag(sync=True)
    curves = t.Dict().tag(sync=True)  # "#<n>" -> [[step, value], ...] of the objective

    def __init__(self, sweep_id: str, client: Client | None = None) -> None:
        if not isinstance(sweep_id, str) or not sweep_id.strip():
            raise ValueError(f"sweep_id must be a sweep id (a non-empty string), got {sweep_id!r}")
        self._doc: dict[str, Any] = {}
        self._curve_status: dict[str, str] = {}  # run id -> the status its curve was read at
        super().__init__(client, sweep_id=sweep_id.strip())

    def _ident(self) -> str:
        return self.sweep_id

    def refresh(self) -> None:
        """Read the sweep again now."""
        self._apply(self._client.get_sweep(self.sweep_id))

    def stop(self) -> dict[str, Any]:
        """Cancel the sweep: its queued and running children stop."""
        doc = self._client.cancel_sweep(self.sweep_id)
        self.message = f"asked sweep {self.sweep_id} to stop"
        return doc

    def csv_text(self) -> str:
        return self._client.sweep_csv(self.sweep_id)

    def _apply(self, doc: dict[str, Any]) -> None:
        self._doc = doc
        objective = doc.get("objective") or {}
        curves = dict(self.curves)
        for v in doc.get("variants") or []:
            run_id, status = v.get("run_id"), v.get("status")
            if not run_id or not v.get("run_exists", True):
                continue
            if self._curve_status.get(run_id) == status and status not in ("running", "disconnected"):
                continue
            try:
                points = self._client.metrics(run_id)
            except Exception:  # noqa: BLE001 - a child deleted meanwhile keeps the curve it had
                continue
            curves[f"#{v['index'] + 1}"] = curve(points, objective.get("metric", ""), objective.get("node_id"))
            self._curve_status[run_id] = status
        # The follow thread and Refresh both apply documents: one at a time.
        with self._lock, self.hold_sync():
            for key, value in sweep_state(doc).items():
                setattr(self, key, value)
            self.curves = curves
            self._set_rows(sweep_rows(doc))
        self._notify()

    def _follow(self) -> None:
        changes = None
        while not self._closing.is_set():
            doc = self._call(self._client.get_sweep, self.sweep_id, wait=self.poll_s if changes is not None else 0.0,
                             changes=changes)
            if changes is None or doc["changes"] != changes or sweep_settled(doc):
                self._apply(doc)
            if sweep_settled(doc):
                return
            changes = doc["changes"]
