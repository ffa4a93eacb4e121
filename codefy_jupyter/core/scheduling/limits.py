"""Run-queue limits: how many queued-lane runs a slot admits, and the override setting. Pure."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from codefy_jupyter.core.scheduling.device_sets import Notice, device_kind
from codefy_jupyter.wire.devices import DeviceError, canonical_device
from codefy_jupyter.wire.names import RESERVED_WORKER_NAMES, WORKER_NAME

_RESERVED_WORKERS = RESERVED_WORKER_NAMES


def slot_device(slot: str) -> str:
    """`gpu-box-1/cuda:0` → `cuda:0`; a bare device is its own device."""
    return slot.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class Limits:
    """Queued-lane runs a slot admits at once: `overrides[slot]`, else `cpu` for a CPU slot and
    `gpu` for an accelerator."""

    gpu: int = 1
    cpu: int = 2
    overrides: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, value in (("gpu", self.gpu), ("cpu", self.cpu), *self.overrides.items()):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"limit for {name} must be an integer of at least 1, got {value!r}")

    def limit(self, slot: str) -> int:
        if slot in self.overrides:
            return self.overrides[slot]
        return self.cpu if device_kind(slot_device(slot)) == "cpu" else self.gpu


def _override_key(key: str) -> str | None:
    """Canonical slot for an override key, or None when malformed."""
    worker, sep, device = key.rpartition("/")
    try:
        dev = canonical_device(device)
    except DeviceError:
        return None
    if not sep or worker == "local":
        return dev
    if worker in _RESERVED_WORKERS or not WORKER_NAME.match(worker):
        return None
    return f"{worker}/{dev}"


def parse_concurrency_overrides(text: str | None) -> tuple[dict[str, int], tuple[Notice, ...]]:
    """`"cuda:0=2,cpu=8,local/cuda:1=3,gpu-box-1/cuda:0=3"` → per-slot limits and warnings.

    A bare device (or `local/<device>`) is this server's slot, canonicalised (`cuda` → `cuda:0`);
    `<worker>/<device>` is kept under that key and never applies to this server. A malformed entry
    is ignored with a warning naming it, a limit below 1 becomes 1 with a warning (a queue that
    cannot drain is a hang, not a policy), and a repeated slot keeps its last value with a warning.
    """
    limits: dict[str, int] = {}
    warnings: list[Notice] = []
    for raw in (text or "").split(","):
        entry = raw.strip()
        if not entry:
            continue  # "cpu=2," or an empty setting: nothing asked, nothing to warn about
        key, sep, value = entry.partition("=")
        slot = _override_key(key.strip()) if sep else None
        number = value.strip()
        if slot is None or not re.fullmatch(r"[+-]?\d+", number):
            warnings.append(Notice(
                "concurrency_override_malformed",
                f"ignoring run queue limit override {entry!r}: expected <device>=<count> or "
                f"<worker>/<device>=<count>, e.g. cuda:0=2", {"entry": entry}))
            continue
        count = int(number)
        if count < 1:
            warnings.append(Notice(
                "concurrency_override_below_one",
                f"run queue limit override {entry!r} is below 1; using 1",
                {"entry": entry, "slot": slot, "value": count}))
            count = 1
        if slot in limits:
            warnings.append(Notice(
                "concurrency_override_repeated",
                f"run queue limit override {entry!r} repeats {slot}; the last value wins",
                {"entry": entry, "slot": slot}))
        limits[slot] = count
    return limits, tuple(warnings)


def build_limits(gpu: int = 1, cpu: int = 2, overrides: str | None = "") -> tuple[Limits, tuple[Notice, ...]]:
    """Limits from the three settings; any limit below 1 becomes 1 with a warning."""
    warnings: list[Notice] = []
    defaults = {}
    for setting, value in (("run_queue_max_concurrent_gpu", gpu), ("run_queue_max_concurrent_cpu", cpu)):
        if value < 1:
            warnings.append(Notice("concurrency_limit_below_one", f"{setting}={value} is below 1; using 1",
                                   {"setting": setting, "value": value}))
            value = 1
        defaults[setting] = value
    parsed, override_warnings = parse_concurrency_overrides(overrides)
    limits = Limits(gpu=defaults["run_queue_max_concurrent_gpu"], cpu=defaults["run_queue_max_concurrent_cpu"],
                    overrides=parsed)
    return limits, (*warnings, *override_warnings)
