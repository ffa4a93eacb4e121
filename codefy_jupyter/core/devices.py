"""This machine's accelerators, as NVML, MPS and torch report them (I/O; device names and the
declared-inventory file are wire/devices.py)."""

from __future__ import annotations

from ..wire.devices import inventory_from_file


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


def nvml_inventory() -> list[dict]:
    """CUDA cards as NVML reports them, without importing torch (or initialising CUDA)."""
    try:
        import pynvml
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except Exception:  # no driver, no GPU: not an error on a CPU machine
        return []
    try:
        devices = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(handle)
            uuid = pynvml.nvmlDeviceGetUUID(handle)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
            devices.append({"key": f"cuda:{i}", "name": name.decode() if isinstance(name, bytes) else name,
                            "uuid": uuid.decode() if isinstance(uuid, bytes) else uuid,
                            "memory_total_mib": int(memory.total) // (1024 * 1024)})
        return devices
    finally:
        pynvml.nvmlShutdown()


def mps_inventory() -> list[dict]:
    """The Apple GPU. Only asked on macOS, where it is the one probe that needs torch."""
    import platform

    if platform.system() != "Darwin":
        return []
    try:
        import torch
    except ImportError:
        return []
    mps = getattr(torch.backends, "mps", None)
    return [{"key": "mps:0", "name": "Apple GPU"}] if mps is not None and mps.is_available() else []


def probe_inventory(declared_file: str = "") -> list[dict]:
    """This machine's accelerators: the declared file when given, else NVML and MPS."""
    if declared_file:
        return inventory_from_file(declared_file)
    return nvml_inventory() + mps_inventory()
