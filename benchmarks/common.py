"""What every benchmark here shares: a description of the machine, the JSON report (printed,
and saved when asked), a free loopback port and the `codefy` command."""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil


def machine() -> dict[str, Any]:
    return {"python": sys.version.split()[0], "implementation": platform.python_implementation(),
            "platform": platform.platform(), "processor": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(), "memory_gb": round(psutil.virtual_memory().total / 1024**3, 1),
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}


def publish(out: str | None, started: float, **sections: Any) -> None:
    """The report, on stdout and in `out` when given: the machine first, then `sections` in the
    order given, then the wall time since `started` (a time.perf_counter() value)."""
    report = {"machine": machine(), **sections, "wall_s": round(time.perf_counter() - started, 2)}
    text = json.dumps(report, indent=2)
    print(text)
    if out:
        Path(out).write_text(text + "\n", encoding="utf-8")


def free_port() -> int:
    """A loopback port nothing listens on now (the server binds it a moment later)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def codefy(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """The `codefy` command of this interpreter, its output captured."""
    return subprocess.run([sys.executable, "-m", "codefy_jupyter.cli", *args], env=env, capture_output=True,
                          text=True, timeout=120)
