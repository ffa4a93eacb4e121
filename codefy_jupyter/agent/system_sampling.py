"""System metrics of a worker run, sampled by the agent from outside the run's process (names and
sampler: wire/system_metrics.py). From outside, so the run's own process runs no extra thread and
takes no GIL turn for it; the agent reads the process through psutil (/proc) and the run's cards
through NVML, as it does for its inventory, never through torch.

The interval is the agent's own `CODEFY_SYSTEM_METRICS_INTERVAL_S` (the control plane's setting of
the same name; `codefy agent start --system-metrics-interval` sets it); 0 turns it off.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any, Callable, Mapping

from ..wire import run_events as ev
from ..wire import system_metrics as sm
from .isolation import OfferedDevice, Visibility

log = logging.getLogger("codefy.agent")

ENV = "CODEFY_SYSTEM_METRICS_INTERVAL_S"
DEFAULT_INTERVAL_S = 5.0


def interval_from(env: Mapping[str, str] = os.environ) -> float:
    raw = env.get(ENV, "").strip()
    if not raw:
        return DEFAULT_INTERVAL_S
    try:
        value = float(raw)
    except ValueError:
        log.warning("%s=%r is not a number: sampling every %s s", ENV, raw, DEFAULT_INTERVAL_S)
        return DEFAULT_INTERVAL_S
    return value if value == value and value != float("inf") else DEFAULT_INTERVAL_S


def run_cards(view: Visibility, offered: Mapping[str, OfferedDevice]) -> dict[str, str]:
    """`{agent's card name: NVML UUID or index}` for the run's CUDA cards."""
    cards = {}
    for card in view.visible_devices:
        device = offered.get(card)
        if card.startswith("cuda:") and device is not None:
            cards[card] = device.uuid or device.visible_id or card.split(":", 1)[1]
    return cards


class RunSampling:
    """Samples one run's process on a sampler of its own; `send(kind, body)` takes the run
    process's own message kinds (`event`, `facts`), called on the agent's loop. `stop` ends it and
    sends the note (as `facts` of kind `system_metrics`); nothing is sent after."""

    def __init__(self, interval_s: float, run_id: str, pid: int, cards: Mapping[str, str],
                 send: Callable[[str, dict[str, Any]], None]) -> None:
        self.run_id = run_id
        self.send = send
        self.stopped = False
        self._loop = asyncio.get_running_loop()
        self.sampler: sm.SystemSampler | None = None
        if interval_s <= 0:
            return
        import psutil

        try:
            import pynvml
        except ImportError:
            pynvml = None
        self.sampler = sm.SystemSampler(interval_s=interval_s, psutil=psutil, nvml=pynvml, pid=pid).start()
        self.sampler.add(run_id, cards, self._emit)

    def _emit(self, points: list[sm.Point]) -> None:  # on the sampling thread
        try:
            self._loop.call_soon_threadsafe(self._on_loop, points)
        except RuntimeError:  # the agent's loop closed
            pass

    def _on_loop(self, points: list[sm.Point]) -> None:
        if self.stopped:
            return
        for p in points:
            event = ev.metric(self.run_id, node_id=None, name=p["name"], value=p["value"], step=p["step"])
            self.send("event", {"type": event.type, "payload": event.payload})

    def stop(self) -> None:
        if self.stopped:
            return
        self.stopped = True
        if self.sampler is None:
            return
        note = self.sampler.remove(self.run_id)
        self.sampler.stop(timeout_s=0)  # the thread ends by itself; the agent's loop does not wait
        if note is not None:
            self.send("facts", {"kind": "system_metrics", "facts": note})
