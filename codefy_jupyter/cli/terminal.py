"""Live terminal view of a run: a line per finished node, a progress bar for batches, metrics.

Fed with engine events (the dicts of `engine.context`). On a terminal the progress bar redraws in
place and every step's metrics print. Into a pipe or file, progress (bars and metric lines) prints
at most every few seconds per node, plus every state change (a node done, cached, failed or
stopped, a warning, an artifact), and a node's last metrics just before its state changes: a
600-epoch run is a few dozen lines, not 600.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any, Callable, TextIO

from ..wire import messages as words
from ..wire.system_metrics import is_system

BAR_WIDTH = 24


def format_seconds(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    return f"{int(seconds // 60)} min {int(seconds % 60)} s"


def format_value(value: float) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


class LiveView:
    def __init__(self, stream: TextIO | None = None, *, clock: Callable[[], float] = time.monotonic,
                 plain_interval_s: float = 5.0) -> None:
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.clock = clock
        self.plain_interval_s = plain_interval_s
        self._bar_shown = False
        self._last_plain: dict[tuple[str, str], float] = {}
        # Metrics of one node and step arrive one by one; they print as one line.
        self._metrics_key: tuple[str, Any] | None = None
        self._metrics: list[str] = []
        self._metrics_at = 0.0
        self._held: dict[str, str] = {}  # off a terminal: each node's latest metrics line not printed yet
        self._lock = threading.Lock()

    def __call__(self, event: dict[str, Any], at: float | None = None) -> None:
        """One event; `at` is when it happened (a log's timestamp), else now by the view's clock."""
        with self._lock:
            now = self.clock() if at is None else at
            kind = event.get("event", "")
            if kind == "metric":
                if is_system(event.get("name")):
                    return  # the run's system metrics: `codefy runs show` sums them up
                key = (event["node_id"], event.get("step"))
                if key != self._metrics_key:
                    self._flush_metrics()
                    self._metrics_key, self._metrics_at = key, now
                self._metrics.append(f"{event['name']} {format_value(event['value'])}")
                return
            self._flush_metrics()
            if kind.endswith("node_status"):
                held = self._held.pop(event.get("node_id", ""), None)
                if held is not None:
                    self._line(held)
                self._node_status(event)
            elif kind.endswith("progress"):
                self._progress(event, now)
            elif kind == "execution_cached":
                self._line(f"  cached: {', '.join(event['nodes'])}")
            elif kind == "warning":
                self._line(f"  ! {event.get('node_id') or 'run'}: {words.text_of(event)}")  # a coded warning in the catalog's words
            elif kind == "artifact":
                self._line(f"  ↳ {event['kind']}: {event['path']}")

    def _flush_metrics(self) -> None:
        if self._metrics_key is None:
            return
        node_id, step = self._metrics_key
        at = f" step {step}" if step is not None else ""
        text = f"  · {node_id}{at}: {' · '.join(self._metrics)}"
        self._metrics_key, self._metrics = None, []
        if self.tty or self._due(("metrics", node_id), self._metrics_at):
            self._held.pop(node_id, None)
            self._line(text)
        else:
            self._held[node_id] = text

    def _due(self, key: tuple[str, str], now: float) -> bool:
        """Off a terminal: whether this kind of progress line of this node may print again."""
        if now - self._last_plain.get(key, -1e18) < self.plain_interval_s:
            return False
        self._last_plain[key] = now
        return True

    def _node_status(self, event: dict[str, Any]) -> None:
        status = event["status"]
        name = f"{event['node_id']} ({event['node_type']})"
        if status == "done":
            self._line(f"✓ {name} {format_seconds(event.get('elapsed_s') or 0.0)}")
        elif status == "cached":
            self._line(f"✓ {name} cached")
        elif status == "failed":
            self._line(f"✗ {name}: {event.get('error', 'failed')}")
        elif status == "cancelled":
            self._line(f"■ {name} stopped")

    def _progress(self, event: dict[str, Any], now: float) -> None:
        value, total = event.get("value") or 0, event.get("total")
        label = event.get("label") or ""
        node = event["node_id"]
        if total:
            frac = max(0.0, min(1.0, value / total))
            filled = int(frac * BAR_WIDTH)
            text = f"  {node} [{'█' * filled}{'·' * (BAR_WIDTH - filled)}] {value}/{total} {label}".rstrip()
        else:
            text = f"  {node} {value} {label}".rstrip()
        if self.tty:
            self.stream.write("\r\x1b[2K" + text)
            self.stream.flush()
            self._bar_shown = True
            return
        done = bool(total) and value >= total
        if self._due(("bar", node), now) or done:
            self.stream.write(text + "\n")
            self.stream.flush()

    def _line(self, text: str) -> None:
        if self._bar_shown:
            self.stream.write("\r\x1b[2K")
            self._bar_shown = False
        self.stream.write(text + "\n")
        self.stream.flush()

    def close(self) -> None:
        with self._lock:
            self._flush_metrics()
            for text in self._held.values():
                self._line(text)
            self._held.clear()
            if self._bar_shown:
                self.stream.write("\r\x1b[2K")
                self.stream.flush()
                self._bar_shown = False
