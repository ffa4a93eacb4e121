"""System metrics of runs that execute in this process (wire/system_metrics.py has the names and
the sampler). An in-process run shares the control plane's process with the server and with the
other runs executing here, so its CPU and resident memory are the process's (the note says so);
its CUDA card is sampled through NVML, never through torch."""

from __future__ import annotations

import asyncio
import os
import threading
from typing import Any, Callable, Mapping

from ...wire import system_metrics as sm


def local_cards(device: str, env: Mapping[str, str]) -> dict[str, str]:
    """`{device: NVML index or UUID}` for a run on `cuda:N` here (through this process's own
    CUDA_VISIBLE_DEVICES when it is set); empty for any other device."""
    if not device.startswith("cuda"):
        return {}
    index = int(device.split(":", 1)[1]) if ":" in device else 0
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return {device: str(index)}
    entries = [e.strip() for e in visible.split(",") if e.strip()]
    return {device: entries[index]} if index < len(entries) else {}


def _modules() -> tuple[Any, Any]:
    import psutil

    try:
        import pynvml
    except ImportError:  # nvidia-ml-py is a dependency, but a trimmed install may lack it
        pynvml = None
    return psutil, pynvml


# One sampler per interval for this process (a server has one; tests start servers with others).
_samplers: dict[float, sm.SystemSampler] = {}
_lock = threading.Lock()

PROCESS_TEXT = "the control plane's process (shared with the server and its other in-process runs)"


def _sampler(interval_s: float) -> sm.SystemSampler:
    with _lock:
        sampler = _samplers.get(interval_s)
        if sampler is None:
            psutil, pynvml = _modules()
            sampler = _samplers[interval_s] = sm.SystemSampler(
                interval_s=interval_s, psutil=psutil, nvml=pynvml, process_text=PROCESS_TEXT).start()
        return sampler


class Sampling:
    """One in-process run's part of the sampler. Points wait in `pending` for the loop (one
    wake-up for however many came meanwhile); `stop` delivers what is left there itself."""

    def __init__(self, loop: asyncio.AbstractEventLoop, deliver: Callable[[dict[str, Any]], None]) -> None:
        self.loop = loop
        self.deliver = deliver
        self.pending: list[sm.Point] = []
        self.lock = threading.Lock()
        self.sampler: sm.SystemSampler | None = None
        self.key = ""

    def emit(self, points: list[sm.Point]) -> None:  # on the sampling thread
        with self.lock:
            self.pending += points
            if len(self.pending) > len(points):
                return  # a drain is already asked for
        try:
            self.loop.call_soon_threadsafe(self.drain)
        except RuntimeError:  # the loop closed (the server stopped)
            pass

    def drain(self) -> None:  # on the loop
        with self.lock:
            points, self.pending = self.pending, []
        for p in points:
            self.deliver({"event": "metric", "node_id": None, **p})


def start(interval_s: float, run_id: str, device: str, deliver: Callable[[dict[str, Any]], None]
          ) -> Sampling | None:
    """Sample this process for run `run_id` (on `device`) every `interval_s`; each point reaches
    `deliver` as the engine's metric event, on the running loop. None when sampling is off."""
    if interval_s <= 0:
        return None
    sampling = Sampling(asyncio.get_running_loop(), deliver)
    sampling.sampler, sampling.key = _sampler(interval_s), f"{run_id}/{id(sampling)}"
    sampling.sampler.add(sampling.key, local_cards(device, os.environ), sampling.emit)
    return sampling


def stop(sampling: Sampling | None) -> dict[str, Any] | None:
    """Stop sampling the run and deliver its points still waiting (so they are written before its
    closing event); its note for `execution_facts.system_metrics`."""
    if sampling is None or sampling.sampler is None:
        return None
    note = sampling.sampler.remove(sampling.key)
    sampling.drain()
    return note
