"""Peak memory of a run that executed in this process (the control plane's InProcessExecutor).

Runs here share one process and one CUDA context, so what can be read is the process's: the peak
allocated on the run's CUDA card since this process started (or its stats were reset), and the
process's peak resident set for the CPU. Both are upper bounds of the run's own use, hence
`exact: false`; a worker run's figures come from its own process and are exact (agent/memory_cap.py).
"""

from __future__ import annotations

import sys
from typing import Any


def in_process_peak(device: str) -> dict[str, Any] | None:
    out: dict[str, Any] = {}
    torch = sys.modules.get("torch")
    if device.startswith("cuda") and torch is not None and torch.cuda.is_initialized():
        index = int(device.split(":", 1)[1]) if ":" in device else torch.cuda.current_device()
        out[f"cuda:{index}"] = {"bytes": int(torch.cuda.max_memory_allocated(index)), "exact": False}
    try:
        import resource
    except ImportError:  # pragma: no cover - not POSIX
        return out or None
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out["cpu"] = {"bytes": int(rss if sys.platform == "darwin" else rss * 1024), "exact": False}
    return out
