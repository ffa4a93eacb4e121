"""How every view writes a number (final loss, objective, mean ± std, a p-value), pure. Lab's
`labextension/src/format.ts` (`formatLoss`, `formatP`) writes the same characters; the vectors in
tests/shared/run_row_vectors.json and study_row_vectors.json hold the two sides together, so the
Python rule follows JavaScript's number-to-text where the two languages differ (no zero-padded
exponent, no trailing `.0`)."""

from __future__ import annotations

import math
from typing import Any


def _js_text(value: float) -> str:
    """`String(x)` of JavaScript for a float that is already rounded."""
    if value == 0:
        return "0"
    if value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    text = repr(value)
    if "e" in text:
        mantissa, exponent = text.split("e")
        sign = "-" if exponent.startswith("-") else "+"
        text = f"{mantissa}e{sign}{int(exponent.lstrip('+-'))}"
    return text


def _js_exponential(value: float) -> str:
    """`x.toExponential()` of JavaScript: the shortest mantissa, an unpadded exponent."""
    mantissa, exponent = repr(value).split("e") if "e" in repr(value) else f"{value:e}".split("e")
    if "." in mantissa:
        mantissa = mantissa.rstrip("0").rstrip(".")
    power = int(exponent)
    return f"{mantissa}e{'-' if power < 0 else '+'}{abs(power)}"


def format_number(value: Any, digits: int = 4) -> str:
    """`digits` significant digits; scientific notation below 0.001 (two decimals) and from a
    million on (as Lab's formatNumber: "1.235e+8"); '-' for nothing, a bool or a value that is not
    finite; an integer under a million as it is."""
    if value is None or isinstance(value, bool):
        return "-"
    if isinstance(value, int) and abs(value) < 1e6:
        return str(value)
    if isinstance(value, int):
        value = float(value)
    if not isinstance(value, float) or not math.isfinite(value):
        return "-" if isinstance(value, float) else str(value)
    if value != 0 and abs(value) < 1e-3:
        mantissa, exponent = f"{value:.2e}".split("e")
        return f"{mantissa}e-{int(exponent[1:])}"
    rounded = float(f"{value:.{digits}g}")
    if abs(rounded) >= 1e6:
        return _js_exponential(rounded)
    return _js_text(rounded)


def format_loss(value: Any) -> str:
    """The final loss, an objective, a mean: four significant digits."""
    return format_number(value, 4)


def format_p(value: Any) -> str:
    """A p-value: three decimals, '<0.001' under that; '-' for none."""
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return "-"
    return "<0.001" if value < 0.001 else f"{value:.3f}"


def format_average_rank(value: Any) -> str:
    """A variant's average rank over the repetitions: two decimals; '-' for none."""
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return "-"
    return f"{value:.2f}"
