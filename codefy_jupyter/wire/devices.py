"""Device names: parse, canonicalise, resolve `auto`; the declared-inventory file's format.

Canonical keys are `cpu`, `cuda:N` and `mps:N` (`cuda` means `cuda:0`, `mps` means `mps:0`).
Which accelerators exist is asked of a probe (core/devices.py on the control plane, the agent's own
on a worker), so tests and servers can inject an inventory.
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


def resolve_device(name: str, available: Callable[[], list[str]]) -> tuple[str, str | None]:
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


# -- inventory -----------------------------------------------------------------------------------


class InventoryError(ValueError):
    pass


def inventory_from_file(path: str) -> list[dict]:
    """Devices declared in a JSON file: `{"devices": [{"key": "cuda:0", "name": ..., "uuid": ...,
    "memory_total_mib": ...}]}` (or just the list). The CPU is always present and need not be listed."""
    import json
    from pathlib import Path

    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InventoryError(f"device inventory {path!r} does not exist") from None
    except (OSError, ValueError) as err:
        raise InventoryError(f"device inventory {path!r} is not readable JSON: {err}") from None
    items = data.get("devices") if isinstance(data, dict) else data
    if not isinstance(items, list):
        raise InventoryError(f"device inventory {path!r}: expected a list under 'devices'")
    devices = []
    for i, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("key"), str):
            raise InventoryError(f"device inventory {path!r}: devices[{i}] needs a 'key' such as 'cuda:0'")
        try:
            key = canonical_device(item["key"])
        except DeviceError as err:
            raise InventoryError(f"device inventory {path!r}: devices[{i}].key: {err}") from None
        if key != "cpu":
            devices.append({**item, "key": key})
    return devices
