"""What every benchmark here shares: a description of the machine, and printing (and saving) the
JSON report."""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

import psutil


def machine() -> dict[str, Any]:
    return {"python": sys.version.split()[0], "implementation": platform.python_implementation(),
            "platform": platform.platform(), "processor": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(), "memory_gb": round(psutil.virtual_memory().total / 1024**3, 1),
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}


def publish(report: dict[str, Any], out: str | None) -> None:
    """The report on stdout, and in `out` when given."""
    text = json.dumps(report, indent=2)
    print(text)
    if out:
        Path(out).write_text(text + "\n", encoding="utf-8")
