"""Device names: parse, canonicalise, resolve `auto`.

Canonical keys are `cpu`, `cuda:N` and `mps:N` (`cuda` means `cuda:0`, `mps` means `mps:0`).
Which accelerators exist is asked of a probe, so tests and servers can inject an inventory.
"""

from __future__ import annotations

import re
from typing import Callable

_DEVICE = re.compile(r"^(cpu|cuda|mps)(?::(\d+))?$")


class DeviceError(ValueError):
    pass


def canonical_device(name: str) -> str:
    """`cuda` → `cuda:0`, `mps` → `mps:0`; DeviceError for anything that is not a device name."""
    if not isinstance(name, str):
        raise DeviceError(f"device must be a string such as 'cpu' or 'cuda:0', got {name!r}")
    text = name.strip().lower()
    match = _DEVICE.match(text)
    if not match:
        raise DeviceError(f"unknown device {name!r}: use cpu, cuda, cuda:N, mps or auto")
    kind, index = match.group(1), match.group(2)
    if kind == "cpu":
        if index not in (None, "0"):
            raise DeviceError(f"unknown device {name!r}: the CPU is just 'cpu'")
        return "cpu"
    return f"{kind}:{int(index or 0)}"


def torch_devices() -> list[str]:
    """Accelerators torch can see here (imports torch: for in-process runs only)."""
    try:
        import torch
    except ImportError:
        return []
    found = [f"cuda:{i}" for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        found.append("mps:0")
    return found


def resolve_device(name: str, available: Callable[[], list[str]] = torch_devices) -> tuple[str, str | None]:
    """The device a run gets, and a note when it differs from what was asked.

    `auto` takes the first CUDA card, else MPS, else the CPU (with a note saying so).
    An accelerator that is not here is a DeviceError.
    """
    if isinstance(name, str) and name.strip().lower() == "auto":
        devices = available()
        for kind in ("cuda", "mps"):
            for dev in devices:
                if dev.startswith(kind):
                    return dev, None
        return "cpu", "device auto: no CUDA or MPS device here, running on the CPU"
    device = canonical_device(name)
    if device != "cpu" and device not in available():
        raise DeviceError(f"device {device!r} is not available on this machine")
    return device, None
