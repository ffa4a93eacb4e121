"""Basic nodes: constants, arithmetic, a lazy Switch and an async Sleep.

They need no torch and run in microseconds, which makes them the building blocks of engine tests
and of small control-flow graphs.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ..registry import lazy, node, optional, param

# ---------------------------------------------------------------------------------------------
# Constants


@node("Int", outputs={"value": "int"}, params={"value": param.int(0)}, category="basic",
      description="A constant integer.")
def int_constant(ctx: Any, value: int) -> dict[str, Any]:
    return {"value": value}


@node("Float", outputs={"value": "float"}, params={"value": param.float(0.0)}, category="basic",
      description="A constant number.")
def float_constant(ctx: Any, value: float) -> dict[str, Any]:
    return {"value": value}


@node("String", outputs={"value": "string"}, params={"value": param.string("")}, category="basic",
      description="A constant string.")
def string_constant(ctx: Any, value: str) -> dict[str, Any]:
    return {"value": value}


@node("Bool", outputs={"value": "bool"}, params={"value": param.bool(False)}, category="basic",
      description="A constant true/false.")
def bool_constant(ctx: Any, value: bool) -> dict[str, Any]:
    return {"value": value}


# ---------------------------------------------------------------------------------------------
# Arithmetic

_BINARY = {"inputs": {"a": "float", "b": "float"}, "outputs": {"result": "float"}, "category": "basic"}


@node("Add", description="result = a + b", **_BINARY)
def add(ctx: Any, a: float, b: float) -> dict[str, Any]:
    return {"result": float(a) + float(b)}


@node("Subtract", description="result = a - b", **_BINARY)
def subtract(ctx: Any, a: float, b: float) -> dict[str, Any]:
    return {"result": float(a) - float(b)}


@node("Multiply", description="result = a * b", **_BINARY)
def multiply(ctx: Any, a: float, b: float) -> dict[str, Any]:
    return {"result": float(a) * float(b)}


@node("Divide", description="result = a / b; fails when b is zero", **_BINARY)
def divide(ctx: Any, a: float, b: float) -> dict[str, Any]:
    if b == 0:
        raise ValueError(f"input 'b' is zero: cannot divide a ({a!r}) by zero")
    return {"result": float(a) / float(b)}


@node("Scale", inputs={"x": "float"}, outputs={"y": "float"},
      params={"factor": param.float(1.0, min=0, max=100)}, category="basic",
      description="y = x * factor")
def scale(ctx: Any, x: float, factor: float) -> dict[str, Any]:
    return {"y": x * factor}


# ---------------------------------------------------------------------------------------------
# Control flow


@node("Switch", inputs={"condition": "bool", "on_true": lazy("any"), "on_false": lazy("any")},
      outputs={"value": "any"}, category="basic",
      description="Passes on_true or on_false through; only the chosen branch is ever evaluated.")
def switch(ctx: Any, condition: bool, on_true: Any = None, on_false: Any = None) -> dict[str, Any]:
    chosen = "on_true" if condition else "on_false"
    value = on_true if condition else on_false
    if value is None:
        raise ValueError(f"input {chosen!r} is not connected (or produced no value), but condition is {condition}")
    return {"value": value}


@switch.check_lazy_status
def _switch_needs(ctx: Any, condition: bool, on_true: Any = None, on_false: Any = None, **_: Any) -> list[str]:
    # Ask only for the chosen branch, and only while it is still unevaluated (None).
    if condition:
        return ["on_true"] if on_true is None else []
    return ["on_false"] if on_false is None else []


# Sleeping in slices keeps a cancel responsive without polling faster than a human notices.
_SLEEP_SLICE_S = 0.05


@node("Sleep", inputs={"value": optional("any")}, outputs={"value": "any"},
      params={"seconds": param.float(1.0, min=0, max=3600)}, category="basic", cacheable=False,
      description="Waits `seconds` (without blocking other nodes), then passes `value` through.")
async def sleep(ctx: Any, seconds: float, value: Any = None) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while True:
        ctx.check_cancelled()
        left = deadline - loop.time()
        if left <= 0:
            break
        await asyncio.sleep(min(_SLEEP_SLICE_S, left))
    return {"value": value}


# ---------------------------------------------------------------------------------------------
# Lists


@node("List", outputs={"values": "list"}, params={"values": param.json([], description="a JSON list")},
      category="basic", description="A constant list (e.g. the items a Map runs over).")
def list_constant(ctx: Any, values: Any) -> dict[str, Any]:
    if not isinstance(values, list):
        raise ValueError(f"param 'values' must be a JSON list, got {type(values).__name__}")
    return {"values": list(values)}


@node("Mean", inputs={"values": "list"}, outputs={"mean": "float", "min": "float", "max": "float"},
      category="basic", description="Mean, min and max of a list of numbers; logs the mean as `mean`.")
def mean(ctx: Any, values: list[Any]) -> dict[str, Any]:
    if not values:
        raise ValueError("input 'values' is an empty list")
    try:
        numbers = [float(v) for v in values]
    except (TypeError, ValueError):
        raise ValueError(f"input 'values' must hold numbers, got {values[:3]!r}...") from None
    avg = sum(numbers) / len(numbers)
    ctx.log_metric("mean", avg)
    return {"mean": avg, "min": min(numbers), "max": max(numbers)}
