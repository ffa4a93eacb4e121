"""Argument types and exit codes shared by every `codefy` subcommand."""

from __future__ import annotations

import argparse
import math
from typing import Callable

from ..wire.run_options import SEED_MAX

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
EXIT_CLOSED_PIPE = 141  # 128 + SIGPIPE: what a shell reports for a tool a closed pipe ended

__all__ = ["EXIT_CLOSED_PIPE", "EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_USAGE", "SEED_MAX", "device_list",
           "int_in", "seconds"]


def int_in(name: str, low: int, high: int | None = None) -> Callable[[str], int]:
    """An argparse type: an integer from `low` (to `high`), refused with a message naming `name`."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be an integer, got {text!r}") from None
        if value < low or (high is not None and value > high):
            bound = f"from {low} to {high}" if high is not None else f"at least {low}"
            raise argparse.ArgumentTypeError(f"{name} must be {bound}, got {value}")
        return value

    return parse


def seconds(*, allow_zero: bool) -> Callable[[str], float]:
    """An argparse type: a finite number of seconds (above 0, or from 0 with allow_zero)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number of seconds, got {text!r}") from None
        if math.isnan(value) or math.isinf(value) or value < 0 or (value == 0 and not allow_zero):
            bound = "0 or more" if allow_zero else "above 0"
            raise argparse.ArgumentTypeError(f"must be a number of seconds {bound}, got {text}")
        return value

    return parse


def device_list(text: str) -> list[str]:
    """An argparse type: a comma-separated device set, e.g. cuda:0,cuda:1."""
    devices = [d.strip() for d in text.split(",")]
    if not text.strip() or any(not d for d in devices):
        raise argparse.ArgumentTypeError(f"must be a comma-separated list of devices, e.g. cuda:0,cuda:1, got {text!r}")
    return devices
