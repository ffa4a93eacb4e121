"""What a live view of one run shows, folded from the run's row and its event log. Pure: no I/O,
no widgets, so every rule is tested on plain events (tests/unit/test_widget_state.py).

`fold(state, event)` applies one event of `GET …/runs/{id}/events` ({seq, type, payload}) and
returns a new state; an event at or below the state's cursor is skipped, so replaying a page
after a reconnect changes nothing. `apply_row(state, row)` takes what only the run's row knows
(queue position and reason while it waits, final times). `to_traits(state)` is the JSON the
widget syncs to the browser.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, fields, replace
from types import MappingProxyType
from typing import Any, Iterable, Mapping

from ...wire import messages as words
from ...wire import provenance

QUEUED, RUNNING, DISCONNECTED = "queued", "running", "disconnected"
FINISHED = frozenset({"succeeded", "failed", "cancelled", "interrupted"})
ACTIVE = frozenset({QUEUED, RUNNING, DISCONNECTED})
CLOSING = frozenset({"execution_complete", "execution_error", "execution_stopped"})
# Node statuses after which a node does nothing more in this run.
NODE_FINAL = frozenset({"done", "cached", "failed", "cancelled"})
MAX_WARNINGS = 50  # a run that warns every step must not grow the synced state without end
MAX_POINTS = 1000  # points per metric series sent to the browser (all are kept in Python)
_EPOCH = re.compile(r"\bepoch\s+(\d+)\s*/\s*(\d+)", re.IGNORECASE)
_EMPTY: Mapping[str, Any] = MappingProxyType({})


def _empty() -> Mapping[str, Any]:
    return _EMPTY


def _rank(status: str) -> int:
    """Statuses only move forward: a stale row read after the run's closing event must not turn a
    finished view back into a running one. running and disconnected share a rank (a worker run
    may move either way between them)."""
    if status in FINISHED:
        return 2
    if status in (RUNNING, DISCONNECTED):
        return 1
    return 0


@dataclass(frozen=True)
class RunViewState:
    run_id: str
    name: str | None = None
    status: str = QUEUED
    queue_position: int | None = None
    queue_key: str | None = None
    queue_reason: str | None = None
    device: str | None = None
    devices: tuple[str, ...] = ()
    seed: int | None = None
    worker: str | None = None
    submitted_at: float | None = None
    started_at: float | None = None
    finished_at: float | None = None
    duration_s: float | None = None
    # top-level node id -> pending|running|done|cached|failed|cancelled
    nodes: Mapping[str, str] = field(default_factory=_empty)
    node_types: Mapping[str, str] = field(default_factory=_empty)
    inner_nodes: Mapping[str, str] = field(default_factory=_empty)  # nodes inside blocks, ids "block/inner"
    # node id -> {value, total, label, epoch?, epochs?}
    progress: Mapping[str, Mapping[str, Any]] = field(default_factory=_empty)
    # metric name -> node id -> ((step, value), ...)
    metrics: Mapping[str, Mapping[str, tuple[tuple[float, float | None], ...]]] = field(default_factory=_empty)
    warnings: tuple[str, ...] = ()
    artifacts: tuple[Mapping[str, Any], ...] = ()
    result: Mapping[str, Any] = field(default_factory=_empty)  # final metrics of a succeeded run
    error: Mapping[str, Any] | None = None  # a failed run's error
    stop_reason: str | None = None  # why a cancelled or interrupted run stopped
    # What the run read, by content (options.provenance): the row's `inputs`, as describe() shows them
    inputs: tuple[Mapping[str, Any], ...] = ()
    cursor: int = 0  # seq of the last event applied
    closed: bool = False  # the closing event has been applied

    @property
    def terminal(self) -> bool:
        return self.status in FINISHED


class _Page:
    """The fields of a state while one page of events is applied: each mapping or sequence an
    event changes is copied once per page, not once per event, so a run that logs a metric every
    batch costs one copy of its series per page instead of one per point."""

    def __init__(self, state: RunViewState) -> None:
        self.f: dict[str, Any] = {f.name: getattr(state, f.name) for f in fields(state)}
        self._copied: set[str] = set()
        self._series: set[tuple[str, str]] = set()

    def __getitem__(self, key: str) -> Any:
        return self.f[key]

    def set(self, **changes: Any) -> None:
        self.f.update(changes)

    def map(self, key: str) -> dict[str, Any]:
        if key not in self._copied:
            self.f[key] = dict(self.f[key])
            self._copied.add(key)
        return self.f[key]

    def seq(self, key: str) -> list[Any]:
        if key not in self._copied:
            self.f[key] = list(self.f[key])
            self._copied.add(key)
        return self.f[key]

    def series(self, name: str, node_id: str) -> list[tuple[float, float | None]]:
        metrics = self.map("metrics")
        if (name, node_id) not in self._series:
            by_node = dict(metrics.get(name, _EMPTY))
            by_node[node_id] = list(by_node.get(node_id, ()))
            metrics[name] = by_node
            self._series.add((name, node_id))
        return metrics[name][node_id]

    def freeze(self) -> RunViewState:
        for key in self._copied:
            value = self.f[key]
            if key == "metrics":
                self.f[key] = MappingProxyType({name: MappingProxyType({n: tuple(p) for n, p in by_node.items()})
                                                for name, by_node in value.items()})
            elif isinstance(value, dict):
                self.f[key] = MappingProxyType(value)
            else:
                self.f[key] = tuple(value)
        return RunViewState(**self.f)


def _status(old: str, new: str | None) -> str:
    if not new or _rank(new) < _rank(old):
        return old
    return new


def _number(value: Any) -> float | None:
    """A metric value as a float; the log's "NaN"/"Infinity" strings (strict JSON) become None."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    return None


def apply_row(state: RunViewState, row: Mapping[str, Any]) -> RunViewState:
    """The run's row from `GET …/runs/{id}` (or one row of a list)."""
    status = _status(state.status, row.get("status"))
    waiting = status == QUEUED
    reason = row.get("queue_reason") if waiting else None
    options = row.get("options") if isinstance(row.get("options"), dict) else {}
    target = options.get("target") if isinstance(options.get("target"), dict) else {}
    changes: dict[str, Any] = {
        "status": status,
        "name": row.get("name", state.name),
        "queue_position": row.get("queue_position") if waiting else None,
        "queue_key": row.get("queue_key") or state.queue_key,
        "queue_reason": words.text_of(reason) or None,  # the catalog's words, as the CLI and Lab say it
        "device": row.get("device") or state.device,
        "devices": tuple(row.get("devices") or state.devices),
        "seed": row.get("seed", state.seed),
        "worker": row.get("worker_id") or target.get("worker") or state.worker,
        "submitted_at": row.get("submitted_at", state.submitted_at),
        "started_at": row.get("started_at") or state.started_at,
        "finished_at": row.get("finished_at") or state.finished_at,
    }
    if status == "failed" and state.error is None and isinstance(row.get("error"), dict):
        changes["error"] = MappingProxyType(dict(row["error"]))
    if isinstance(row.get("inputs"), list):  # the store has them once the run ended (a row of a list has none)
        changes["inputs"] = input_rows(row["inputs"])
    return replace(state, **changes)


def input_rows(records: Iterable[Mapping[str, Any]]) -> tuple[Mapping[str, Any], ...]:
    """The view's "Data and models" rows: kind, path, the whole sha256 and its first 12 digits, and
    a detail of size, rows and revision when known (the words `codefy runs show` and Lab use). A
    record the view cannot read (a newer server's) is left out rather than failing the view."""
    rows = []
    for record in records:
        try:
            rows.append(MappingProxyType(provenance.describe(record)))
        except (KeyError, TypeError):
            continue
    return tuple(rows)


def fold(state: RunViewState, event: Mapping[str, Any]) -> RunViewState:
    """One event of the run's log applied to the view."""
    return fold_all(state, (event,))


def fold_all(state: RunViewState, events: Iterable[Mapping[str, Any]]) -> RunViewState:
    """Events in log order applied to the view. An event at or below the cursor was applied
    before (a replayed page after a reconnect) and is skipped; unknown types (a newer server's)
    only move the cursor."""
    page: _Page | None = None
    for event in events:
        seq = event.get("seq")
        cursor = page["cursor"] if page is not None else state.cursor
        if isinstance(seq, int) and seq <= cursor:
            continue
        if page is None:
            page = _Page(state)
        if isinstance(seq, int):
            page.set(cursor=seq)
        handler = _HANDLERS.get(event.get("type", ""))
        if handler is not None:
            handler(page, event.get("payload") or {})
    return page.freeze() if page is not None else state


def _start(page: _Page, p: Mapping[str, Any]) -> None:
    page.set(status=_status(page["status"], RUNNING), queue_position=None, queue_reason=None,
             device=p.get("device") or page["device"], devices=tuple(p.get("devices") or page["devices"]),
             seed=p.get("seed", page["seed"]), queue_key=p.get("queue_key") or page["queue_key"],
             started_at=p.get("started_at") or page["started_at"], name=p.get("name") or page["name"])


def _node_status(page: _Page, p: Mapping[str, Any]) -> None:
    node_id, status = p.get("node_id"), p.get("status")
    if node_id and status:
        page.map("nodes")[node_id] = status
        if p.get("node_type"):
            page.map("node_types")[node_id] = p["node_type"]


def _inner_node_status(page: _Page, p: Mapping[str, Any]) -> None:
    node_id, status = p.get("node_id"), p.get("status")
    if node_id and status:
        page.map("inner_nodes")[node_id] = status


def progress_entry(p: Mapping[str, Any]) -> dict[str, Any]:
    """A progress report as the view keeps it; `epoch`/`epochs` when the label says "epoch N/M"
    (TrainingLoop's reports), so the view can draw an epoch bar beside the batch bar."""
    value, total = _number(p.get("value")) or 0.0, _number(p.get("total"))
    label = p.get("label") if isinstance(p.get("label"), str) else ""
    entry: dict[str, Any] = {"value": value, "total": total if total and total > 0 else None, "label": label}
    match = _EPOCH.search(label)
    if match:
        entry["epoch"], entry["epochs"] = int(match.group(1)), int(match.group(2))
    return entry


def _progress(page: _Page, p: Mapping[str, Any], *, inner: bool = False) -> None:
    node_id = p.get("node_id")
    if not node_id:
        return
    nodes = page.map("inner_nodes" if inner else "nodes")
    if nodes.get(node_id) not in NODE_FINAL:  # the engine reports no "running": progress says it
        nodes[node_id] = RUNNING
    if p.get("node_type") and not inner:
        page.map("node_types")[node_id] = p["node_type"]
    page.map("progress")[node_id] = MappingProxyType(progress_entry(p))


def _inner_progress(page: _Page, p: Mapping[str, Any]) -> None:
    _progress(page, p, inner=True)


def _cached(page: _Page, p: Mapping[str, Any]) -> None:
    nodes = page.map("nodes")
    for node_id in p.get("nodes") or ():
        nodes[node_id] = "cached"


def _metric(page: _Page, p: Mapping[str, Any]) -> None:
    name, node_id = p.get("name"), p.get("node_id") or ""
    if not name:
        return
    points = page.series(name, node_id)
    step = _number(p.get("step"))
    if step is None:  # an unstepped metric: its place in the series
        step = float(len(points) + 1)
    points.append((step, _number(p.get("value"))))


def _warning(page: _Page, p: Mapping[str, Any]) -> None:
    warnings = page.seq("warnings")
    warnings.append(f"{p.get('node_id') or 'run'}: {words.text_of(p)}")
    del warnings[:-MAX_WARNINGS]


def _artifact(page: _Page, p: Mapping[str, Any]) -> None:
    page.seq("artifacts").append(MappingProxyType({k: p.get(k) for k in ("node_id", "kind", "path")}))


def _closing(page: _Page, status: str, p: Mapping[str, Any]) -> None:
    page.set(status=status, closed=True, queue_position=None, queue_reason=None,
             duration_s=_number(p.get("duration_s")))


def _complete(page: _Page, p: Mapping[str, Any]) -> None:
    _closing(page, "succeeded", p)
    page.set(result=MappingProxyType(dict(p.get("metrics") or {})))


def _error(page: _Page, p: Mapping[str, Any]) -> None:
    _closing(page, "failed", p)
    error = p.get("error") if isinstance(p.get("error"), dict) else {"message": str(p.get("error") or "failed")}
    page.set(error=MappingProxyType(dict(error)))


def _stopped(page: _Page, p: Mapping[str, Any]) -> None:
    _closing(page, p.get("status") if p.get("status") in ("cancelled", "interrupted") else "cancelled", p)
    reason = p.get("reason") or {}
    message = reason.get("message") if isinstance(reason, dict) else str(reason)
    page.set(stop_reason=message or None)


_HANDLERS = {
    "execution_start": _start,
    "node_status": _node_status,
    "inner_node_status": _inner_node_status,
    "progress": _progress,
    "inner_progress": _inner_progress,
    "execution_cached": _cached,
    "metric": _metric,
    "run_warning": _warning,
    "artifact": _artifact,
    "execution_complete": _complete,
    "execution_error": _error,
    "execution_stopped": _stopped,
}


def decimate(points: tuple[tuple[float, float | None], ...], limit: int = MAX_POINTS) -> list[list[Any]]:
    """At most `limit` points, evenly spaced, always keeping the first and the last one (the
    chart's ends must stay where the series really starts and stops)."""
    if len(points) <= limit:
        return [list(p) for p in points]
    if limit < 2:
        return [list(points[-1])]
    stride = (len(points) - 1) / (limit - 1)
    return [list(points[round(i * stride)]) for i in range(limit)]


def to_traits(state: RunViewState, *, max_points: int = MAX_POINTS) -> dict[str, Any]:
    """The JSON-safe values of the widget's synced traits."""
    return {
        "run_id": state.run_id,
        "name": state.name or "",
        "status": state.status,
        "queue_position": state.queue_position,
        "queue_key": state.queue_key or "",
        "queue_reason": state.queue_reason or "",
        "device": state.device or "",
        "devices": list(state.devices),
        "seed": state.seed,
        "worker": state.worker or "",
        "started_at": state.started_at,
        "finished_at": state.finished_at,
        "duration_s": state.duration_s,
        "nodes": dict(state.nodes),
        "node_types": dict(state.node_types),
        "inner_nodes": dict(state.inner_nodes),
        "progress": {k: dict(v) for k, v in state.progress.items()},
        "metrics": {name: {node: decimate(points, max_points) for node, points in by_node.items()}
                    for name, by_node in state.metrics.items()},
        "warnings": list(state.warnings),
        "artifacts": [dict(a) for a in state.artifacts],
        "result": dict(state.result),
        "error": dict(state.error) if state.error is not None else None,
        "stop_reason": state.stop_reason or "",
        "inputs": [dict(r) for r in state.inputs],
        "cursor": state.cursor,
    }


def needs_heartbeat(status: str, following: bool) -> bool:
    """Whether a view gets heartbeats: while it follows a run that is not finished its view can go
    stale. A finished run's view shows all there is, and one that stopped following early says why
    (follow_error); neither needs a kernel to vouch for it."""
    return following and status not in FINISHED


def show_command(run_id: str) -> str:
    """What to run in a notebook for a live view of `run_id` again (a disconnected view says it)."""
    return f"%codefy show {run_id}"


def summary(state: RunViewState) -> dict[str, Any]:
    """A one-line digest of a run for views that show a watched run in a strip (the Runs table's
    Watch, the Queue on… dialog after a submit): status, place in line, nodes finished out of
    those seen, the newest progress report and the last value of each metric."""
    finished = sum(1 for s in state.nodes.values() if s in NODE_FINAL)
    running = [n for n, s in state.nodes.items() if s == RUNNING]
    current = state.progress.get(running[-1]) if running else None
    last: dict[str, float | None] = {}
    for name, by_node in state.metrics.items():
        for points in by_node.values():
            if points:
                last[name] = points[-1][1]
    message = ""
    if state.error is not None:
        message = words.text_of(state.error) if state.error.get("code") else str(state.error.get("message") or "")
    elif state.stop_reason:
        message = state.stop_reason
    return {
        "run_id": state.run_id,
        "name": state.name or "",
        "status": state.status,
        "queue_position": state.queue_position,
        "queue_reason": state.queue_reason or "",
        "nodes_done": finished,
        "nodes_seen": len(state.nodes),
        "node": running[-1] if running else "",
        "progress": dict(current) if current is not None else None,
        "last": last,
        "message": message,
    }
