"""Per-run system metrics: what a run's process uses while it executes, sampled every few seconds
on a daemon thread and recorded as metric points of the run (the same `metric` events a node's
`ctx.log_metric` makes), under names of their own:

- `system/cpu_percent`: CPU use of the run's process since the previous sample, in percent of one
  core (a process busy on 4 cores reads 400);
- `system/rss_bytes`: its resident memory;
- `system/gpu_util_percent/<card>` and `system/gpu_memory_bytes/<card>`: for each of the run's CUDA
  cards (named as the run's `devices` name them), NVML's utilization and memory used on the card.

Each series counts its own `step` (0, 1, 2... one per sample) and has no node: a node's metrics,
their steps, the run's last values (`execution_complete.metrics`) and its peak memory are untouched.
`SystemSampler.remove` answers the run's note, what was sampled, for its
`execution_facts.system_metrics`, with `gpu` saying why there are no GPU values where there are none.

One sampler (one daemon thread) samples one process for any number of runs: the control plane
keeps one for all the runs executing in it (they share its process), the agent one per run
process. Adding a run to it and removing it are a dict update under a lock, so a short run pays
no thread start; NVML is started and the cards are looked up on the sampling thread, never on the
caller's event loop.

Stdlib only: psutil and pynvml (the modules, or None where one is missing) are handed in by the
side that runs it (core/runs/system_sampling.py, agent/system_sampling.py).
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Mapping

PREFIX = "system/"
CPU_PERCENT = "system/cpu_percent"
RSS_BYTES = "system/rss_bytes"
GPU_UTIL = "system/gpu_util_percent/"
GPU_MEMORY = "system/gpu_memory_bytes/"

NO_NVML = "unavailable (no NVML)"
NO_CARD = "none (the run has no CUDA card)"

Point = dict[str, Any]  # {"name", "value", "step"}


def is_system(name: Any) -> bool:
    return isinstance(name, str) and name.startswith(PREFIX)


NOT_YET = "not sampled (the run ended before its first sample)"


def open_cards(nvml: Any, cards: Mapping[str, str]) -> tuple[dict[str, Any], str]:
    """NVML handles of a run's cards (`{run's card name: NVML index or UUID}`) and what its note's
    `gpu` says. NVML must have been initialised (nvml None: not installed or not started)."""
    if nvml is None:
        return {}, NO_NVML
    if not cards:
        return {}, NO_CARD
    handles: dict[str, Any] = {}
    for name, ident in cards.items():
        try:
            handles[name] = (nvml.nvmlDeviceGetHandleByIndex(int(ident)) if str(ident).isdigit()
                             else nvml.nvmlDeviceGetHandleByUUID(str(ident)))
        except Exception:  # a card NVML does not know by that id: no values for it
            continue
    if not handles:
        return {}, "unavailable (NVML does not know the run's cards)"
    return handles, "sampled: " + ", ".join(handles)


class _Run:
    def __init__(self, cards: Mapping[str, str], emit: Callable[[list[Point]], None]) -> None:
        self.cards = dict(cards)
        self.emit = emit
        self.handles: dict[str, Any] | None = None  # looked up on the sampling thread
        self.gpu = NOT_YET
        self.step = 0


class SystemSampler:
    """Samples process `pid` (None: this one) every `interval_s` on a daemon thread, for the runs
    added to it; idle (waiting, reading nothing) while none is.

    Each run's points reach its `emit(points)`, called on the sampling thread under the sampler's
    lock, so once `remove` returns none follows. The thread wakes when the first run of a busy
    spell is added (psutil's CPU count starts then) and goes idle at the first tick that finds no
    run; the first sample comes one interval after the wake-up, so a run shorter than the interval
    may record none (its note says so)."""

    def __init__(self, *, interval_s: float, psutil: Any, nvml: Any, pid: int | None = None,
                 process_text: str = "the run's own process") -> None:
        self.interval_s = interval_s
        self._psutil = psutil
        self._nvml = nvml
        self._pid = pid
        self.process_text = process_text
        self.process: Any = None
        self.nvml: Any = None  # the module once NVML started on the sampling thread
        self._runs: dict[str, _Run] = {}
        self._lock = threading.Lock()
        self._busy = threading.Event()  # set from the first add of a busy spell to its first empty tick
        self._stop = threading.Event()
        self._opened = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="codefy-system-metrics", daemon=True)

    def start(self) -> SystemSampler:
        self._thread.start()
        return self

    def add(self, key: str, cards: Mapping[str, str], emit: Callable[[list[Point]], None]) -> None:
        with self._lock:
            self._runs[key] = _Run(cards, emit)
            if not self._busy.is_set():  # set() takes the event's own lock even when it is set
                self._busy.set()

    def remove(self, key: str) -> dict[str, Any] | None:
        """Stop sampling for `key`; its note (`execution_facts.system_metrics`), or None if unknown."""
        with self._lock:
            run = self._runs.pop(key, None)
        if run is None:
            return None
        gpu = run.gpu
        if run.handles is None and self._opened.is_set() and (self.nvml is None or not run.cards):
            gpu = open_cards(self.nvml, run.cards)[1]  # known without a lookup: no NVML, or no card
        return {"interval_s": self.interval_s, "process": self.process_text, "gpu": gpu, "samples": run.step}

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        self._busy.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)

    def _open(self) -> None:
        if self._psutil is not None:
            try:
                self.process = self._psutil.Process(self._pid)
            except Exception:  # it already ended
                self.process = None
        if self._nvml is not None:
            try:
                self._nvml.nvmlInit()
                self.nvml = self._nvml
            except Exception:  # no driver, no GPU: NVML cannot start
                self.nvml = None
        self._opened.set()

    def _loop(self) -> None:
        self._open()
        try:
            while not self._stop.is_set():
                self._busy.wait()
                if self._stop.is_set():
                    break
                self._read_cpu()  # the count starts now, not at the end of the last busy spell
                while not self._stop.wait(self.interval_s):
                    with self._lock:
                        if not self._runs:  # idle from the first tick with no run: runs that come and
                            self._busy.clear()  # go between two ticks never wake the thread
                            break
                    self.sample()
        finally:
            if self.nvml is not None:
                try:
                    self.nvml.nvmlShutdown()
                except Exception:
                    pass

    def _read_cpu(self) -> float | None:
        if self.process is None:
            return None
        try:
            return float(self.process.cpu_percent())
        except Exception:  # the process is gone (it just ended)
            self.process = None
            return None

    def _read_card(self, handle: Any) -> list[tuple[str, float]]:
        out = []
        try:
            out.append((GPU_UTIL, float(self.nvml.nvmlDeviceGetUtilizationRates(handle).gpu)))
        except Exception:  # MIG slices and some boards report no utilization
            pass
        try:
            out.append((GPU_MEMORY, float(self.nvml.nvmlDeviceGetMemoryInfo(handle).used)))
        except Exception:
            pass
        return out

    def sample(self) -> None:
        """One sample for every run added (each run's step moves on)."""
        with self._lock:
            runs = list(self._runs.items())
        for _key, run in runs:
            if run.handles is None:
                run.handles, run.gpu = open_cards(self.nvml, run.cards)
        common: list[tuple[str, float]] = []
        cpu = self._read_cpu()
        if cpu is not None:
            common.append((CPU_PERCENT, cpu))
            try:
                common.append((RSS_BYTES, float(self.process.memory_info().rss)))
            except Exception:
                self.process = None
        cards: dict[int, list[tuple[str, float]]] = {}
        with self._lock:
            for key, run in runs:
                if self._runs.get(key) is not run:
                    continue  # removed meanwhile
                values = list(common)
                for card, handle in (run.handles or {}).items():
                    read = cards.get(id(handle))
                    if read is None:
                        read = cards[id(handle)] = self._read_card(handle)
                    values += [(prefix + card, value) for prefix, value in read]
                if values:
                    step, run.step = run.step, run.step + 1
                    try:
                        run.emit([{"name": name, "value": value, "step": step} for name, value in values])
                    except Exception:  # the receiver is gone: it stops at its remove
                        pass


def summary(points: list[Mapping[str, Any]]) -> dict[str, float]:
    """The peak of each system series among a run's metric points (`{name: max value}`)."""
    peaks: dict[str, float] = {}
    for p in points:
        name, value = p.get("name"), p.get("value")
        if is_system(name) and isinstance(value, (int, float)) and not isinstance(value, bool):
            peaks[name] = max(peaks.get(name, float(value)), float(value))
    return peaks
