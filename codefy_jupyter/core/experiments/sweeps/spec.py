"""The shape of a POST /codefy/api/sweeps body: 422 with the failing field's path, nothing else.

Shape only: keys, types, listed values. Whether the spec can be honoured (a node the graph lacks, a
value outside a parameter's bounds, a space larger than the caps) is the expansion's 400.

    {"base_graph": {...}, "name"?: str, "options"?: {...}, "seed_variants"?: bool,
     "sweep_spec": {"method"?: "grid"|"random", "samples"?: int, "seed"?: int,
                    "params": [{"node_id", "param", "values": [...]} |
                               {"node_id", "param", "range": {"min", "max", "count", "scale"?, "type"?}}]},
     "objective": {"metric": str, "direction": "minimize"|"maximize", "node_id"?: str}}
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ...errors import SchemaError
from ....wire.run_options import SEED_MAX

METHODS = ("grid", "random")
SCALES = ("linear", "log")
RANGE_TYPES = ("float", "int")
DIRECTIONS = ("minimize", "maximize")
NAME_MAX = 200  # as a run's name
# Points one range may ask for before int rounding collapses them (the domain cap applies after).
COUNT_MAX = 1_000_000
# What a JSON Schema pattern's \s matches (ECMAScript's white space and line terminators): "blank"
# means the same here as in openapi.yaml's `pattern: "\S"`.
_BLANK = " \t\n\v\f\r\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a" \
         "\u2028\u2029\u202f\u205f\u3000\ufeff"


@dataclass(frozen=True)
class Range:
    min: float
    max: float
    count: int
    scale: str = "linear"
    type: str | None = None  # None: the parameter's own (int for an int parameter, else float)


@dataclass(frozen=True)
class ParamEntry:
    node_id: str
    param: str
    values: tuple[Any, ...] | None = None
    range: Range | None = None


@dataclass(frozen=True)
class Objective:
    metric: str
    direction: str
    node_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"metric": self.metric, "direction": self.direction, "node_id": self.node_id}


@dataclass(frozen=True)
class SweepRequest:
    base_graph: dict[str, Any]
    objective: Objective
    params: tuple[ParamEntry, ...]
    method: str = "grid"
    samples: int | None = None
    seed: int | None = None
    name: str | None = None
    options: Any = None  # checked as a child's options (400), not here
    seed_variants: bool = False
    raw_spec: dict[str, Any] = field(default_factory=dict)


def _keys(obj: dict[str, Any], allowed: tuple[str, ...], where: str) -> None:
    for key in obj:
        if key not in allowed:
            raise SchemaError(f"{where}.{key}" if where else key, f"unknown key (allowed: {', '.join(allowed)})")


def _kind(value: Any) -> str:
    return "null" if value is None else "a boolean" if isinstance(value, bool) else type(value).__name__


def _object(value: Any, path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise SchemaError(path, f"expected an object, got {_kind(value)}")
    return value


def _string(value: Any, path: str, *, blank_ok: bool = True) -> str:
    if not isinstance(value, str):
        raise SchemaError(path, f"expected a string, got {_kind(value)}")
    if not blank_ok and not value.strip(_BLANK):
        raise SchemaError(path, "must not be blank")
    return value


def _integer(value: Any, path: str, lo: int, hi: int | None = None) -> int:
    """An integer as JSON means it (7 or 7.0), never 7.5 or true, within [lo, hi]."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise SchemaError(path, f"expected an integer, got {_kind(value)}")
    if value < lo or (hi is not None and value > hi):
        raise SchemaError(path, f"must be from {lo}" + (f" to {hi}" if hi is not None else " up"))
    return value


def _number(value: Any, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SchemaError(path, f"expected a finite number, got {_kind(value)}")
    try:
        number = float(value)
    except OverflowError:  # an integer past a float's range
        raise SchemaError(path, "a number past the range of a float") from None
    if not math.isfinite(number):
        raise SchemaError(path, "expected a finite number")
    return number


def _choice(value: Any, allowed: tuple[str, ...], path: str) -> str:
    if value not in allowed or not isinstance(value, str):
        raise SchemaError(path, f"must be one of: {', '.join(allowed)}")
    return value


def _range(raw: Any, path: str) -> Range:
    raw = _object(raw, path)
    _keys(raw, ("min", "max", "count", "scale", "type"), path)
    for key in ("min", "max", "count"):
        if key not in raw:
            raise SchemaError(f"{path}.{key}", "required")
    return Range(min=_number(raw["min"], f"{path}.min"), max=_number(raw["max"], f"{path}.max"),
                 count=_integer(raw["count"], f"{path}.count", 1, COUNT_MAX),
                 scale=_choice(raw.get("scale", "linear"), SCALES, f"{path}.scale"),
                 type=None if raw.get("type") is None else _choice(raw["type"], RANGE_TYPES, f"{path}.type"))


def _values(raw: Any, path: str) -> tuple[Any, ...]:
    if not isinstance(raw, list):
        raise SchemaError(path, f"expected a list, got {_kind(raw)}")
    if not raw:
        raise SchemaError(path, "must hold at least one value")
    for i, value in enumerate(raw):
        if value is None or isinstance(value, (list, dict)):
            raise SchemaError(f"{path}[{i}]", f"expected a string, number or boolean, got {_kind(value)}")
        if isinstance(value, float) and not math.isfinite(value):
            raise SchemaError(f"{path}[{i}]", "expected a finite number")
    return tuple(raw)


def _entry(raw: Any, path: str) -> ParamEntry:
    raw = _object(raw, path)
    _keys(raw, ("node_id", "param", "values", "range"), path)
    for key in ("node_id", "param"):
        if key not in raw:
            raise SchemaError(f"{path}.{key}", "required")
    node_id = _string(raw["node_id"], f"{path}.node_id", blank_ok=False)
    param = _string(raw["param"], f"{path}.param", blank_ok=False)
    if ("values" in raw) == ("range" in raw):
        raise SchemaError(path, "give exactly one of values or range")
    if "values" in raw:
        return ParamEntry(node_id, param, values=_values(raw["values"], f"{path}.values"))
    return ParamEntry(node_id, param, range=_range(raw["range"], f"{path}.range"))


def parse_sweep(body: Any) -> SweepRequest:
    """The request, or SchemaError (422) naming the first field that does not fit."""
    body = _object(body, "")
    _keys(body, ("base_graph", "name", "sweep_spec", "objective", "options", "seed_variants"), "")
    for key in ("base_graph", "sweep_spec", "objective"):
        if key not in body:
            raise SchemaError(key, "required")
    graph = _object(body["base_graph"], "base_graph")
    name = body.get("name")
    if name is not None:
        name = _string(name, "name")
        if len(name) > NAME_MAX:
            raise SchemaError("name", f"at most {NAME_MAX} characters")
    seed_variants = body.get("seed_variants", False)
    if not isinstance(seed_variants, bool):
        raise SchemaError("seed_variants", f"expected a boolean, got {_kind(seed_variants)}")
    spec = _object(body["sweep_spec"], "sweep_spec")
    _keys(spec, ("method", "params", "samples", "seed"), "sweep_spec")
    method = _choice(spec.get("method", "grid"), METHODS, "sweep_spec.method")
    samples = None if spec.get("samples") is None else _integer(spec["samples"], "sweep_spec.samples", 1)
    seed = None if spec.get("seed") is None else _integer(spec["seed"], "sweep_spec.seed", 0, SEED_MAX)
    if "params" not in spec:
        raise SchemaError("sweep_spec.params", "required")
    raw_params = spec["params"]
    if not isinstance(raw_params, list):
        raise SchemaError("sweep_spec.params", f"expected a list, got {_kind(raw_params)}")
    if not raw_params:
        raise SchemaError("sweep_spec.params", "must hold at least one entry")
    params = tuple(_entry(p, f"sweep_spec.params[{i}]") for i, p in enumerate(raw_params))
    objective = _object(body["objective"], "objective")
    _keys(objective, ("metric", "direction", "node_id"), "objective")
    for key in ("metric", "direction"):
        if key not in objective:
            raise SchemaError(f"objective.{key}", "required")
    node_id = objective.get("node_id")
    return SweepRequest(
        base_graph=graph,
        objective=Objective(_string(objective["metric"], "objective.metric", blank_ok=False),
                            _choice(objective["direction"], DIRECTIONS, "objective.direction"),
                            None if node_id is None else _string(node_id, "objective.node_id", blank_ok=False)),
        params=params, method=method, samples=samples, seed=seed, name=name, options=body.get("options"),
        seed_variants=seed_variants, raw_spec=spec)
