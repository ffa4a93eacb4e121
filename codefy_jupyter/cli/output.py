"""Printing, shared by the `codefy` subcommands: lines on stdout (stderr for errors and for which
server answered), one JSON document for `--json`, and the small formats of run tables and details."""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any, TextIO

from .args import EXIT_FAILED
from .terminal import format_seconds, format_value

FINISHED = ("succeeded", "failed", "cancelled", "interrupted")


def out(text: str = "", stream: TextIO | None = None) -> None:
    print(text, file=stream or sys.stdout, flush=True)


def dump(doc: Any, server: Any = None) -> None:
    """One JSON document on stdout; with `server`, a dict also says which server answered."""
    if server is not None and isinstance(doc, dict):
        doc = {**doc, "server": server.as_dict()}
    print(json.dumps(doc, indent=2, default=str), flush=True)


def fail(message: str, as_json: bool, error: dict[str, Any] | None = None, server: Any = None) -> int:
    """Say the command failed (on stderr, or as the JSON document), and return exit code 1."""
    if as_json:
        dump({"status": "failed", "error": error or {"code": "error", "message": message}}, server)
    else:
        out(f"error: {message}", sys.stderr)
    return EXIT_FAILED


def error_doc(err: Any) -> dict[str, Any]:
    """A CodefyError as the `error` of a JSON document."""
    return {"code": err.code, "message": str(err), "params": err.params, "status": err.status}


def announce(server: Any, stream: TextIO | None = None) -> None:
    """The server a command uses, and why, as dim lines on stderr (stdout stays the command's own)."""
    stream = stream or sys.stderr
    dim = bool(getattr(stream, "isatty", lambda: False)()) and not os.environ.get("NO_COLOR")
    for line in server.describe():
        print(f"\x1b[2m{line}\x1b[0m" if dim else line, file=stream, flush=True)


def timestamp(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts)) if ts else "-"


def duration(run: dict[str, Any]) -> str:
    """How long a run has been running, or ran."""
    started = run.get("started_at")
    if not started:
        return "-"
    end = run.get("finished_at") or (time.time() if run.get("status") not in FINISHED else None)
    return format_seconds(max(0.0, end - started)) if end else "-"


def value_text(value: Any) -> str:
    """A metric's value as shown: 4 significant digits for a float."""
    return format_value(value) if isinstance(value, (int, float)) else str(value)


def row(label: str, value: Any) -> str:
    """One `label  value` line of a run's details."""
    return f"  {label:<15} {value}"
