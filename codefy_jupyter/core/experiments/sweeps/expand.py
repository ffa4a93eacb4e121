"""From a parsed sweep request to its variants: each parameter's domain, the combinations a grid
enumerates or a seeded random draw picks, and the variants' seeds. Pure; every refusal is a 400
naming the entry or the setting, raised before anything is written, and nothing is ever truncated.
"""

from __future__ import annotations

import itertools
import math
import random
import sys
from dataclasses import dataclass
from typing import Any, Sequence

from ....engine import NodeRegistry
from ...errors import BadRequest
from ..params import checked_value, settable_param
from .spec import ParamEntry, Range, SweepRequest

SEED_SPACE = 2**32
# Runs whose captured outputs the output store keeps: a sweep recording outputs for more variants
# would see its earliest captures evicted before it finished.
OUTPUT_STORE_RUNS = 20


@dataclass(frozen=True)
class Caps:
    runs: int = 32
    params: int = 4
    domain: int = 32


@dataclass(frozen=True)
class SweptParam:
    node_id: str
    param: str
    domain: tuple[Any, ...]

    def to_json(self) -> dict[str, Any]:
        return {"node_id": self.node_id, "param": self.param, "domain": list(self.domain)}


@dataclass(frozen=True)
class Plan:
    params: tuple[SweptParam, ...]
    combinations: tuple[tuple[Any, ...], ...]  # one per variant, values in params order
    seeds: tuple[int | None, ...]  # the seed each variant is given (None: the graph's own)
    total_combinations: int


def _cap_refusal(setting: str, what: str, asked: int, limit: int, field: str) -> BadRequest:
    env = f"CODEFY_{setting.upper()}"
    return BadRequest(f"{field}: {what} {asked} is more than {setting} allows ({limit}); raise {env} "
                      f"(c.CodefyApp.{setting}) to run it, or ask for less — a sweep is never cut short",
                      code="sweep_too_large",
                      params={"field": field, "setting": setting, "env": env, "limit": limit, "requested": asked})


def range_points(r: Range, kind: str, where: str, cap: int) -> list[float | int]:
    """`count` points from min to max (linear or base-10 log), rounded and de-duplicated for int.
    More distinct points than `cap` is refused (naming max_sweep_domain) as soon as it is seen."""
    if r.min > r.max:
        raise BadRequest(f"{where}: min ({r.min}) is greater than max ({r.max})", code="range_invalid",
                         params={"field": where})
    if r.scale == "log" and r.min <= 0:
        raise BadRequest(f"{where}: a log scale needs a positive min, got {r.min}", code="range_log_min",
                         params={"field": f"{where}.min"})
    lo, hi = (math.log10(r.min), math.log10(r.max)) if r.scale == "log" else (float(r.min), float(r.max))
    points: list[float | int] = []
    seen: set[float | int] = set()
    for k in range(r.count):
        if k == 0 or r.count == 1:
            value: float | int = r.min
        elif k == r.count - 1:
            value = r.max
        else:
            t = k / (r.count - 1)
            x = lo * (1 - t) + hi * t  # never hi - lo, which can overflow
            value = min(10 ** x, r.max) if r.scale == "log" else x
        value = int(round(value)) if kind == "int" else float(value)
        if value in seen:
            continue
        seen.add(value)
        points.append(value)
        if len(points) > cap:
            raise _cap_refusal("max_sweep_domain", "distinct values", r.count if kind == "float" else len(points),
                               cap, where)
    return points


def _checked(spec: Any, value: Any, where: str, *, node_id: str, param: str) -> Any:
    try:
        return checked_value(spec, value, where, node_id=node_id, param=param)
    except OverflowError:  # an integer past a float's range, for a float parameter
        raise BadRequest(f"{where}: {node_id}.{param}: {value} is past the range of a float",
                         code="param_value_invalid", params={"field": where, "node_id": node_id, "param": param}
                         ) from None


def _key(value: Any) -> tuple[str, Any]:
    # 1 and True (and 1.0) are different choices for a select or string parameter.
    return (type(value).__name__ if isinstance(value, bool) else "n" if isinstance(value, (int, float)) else "s",
            value)


def _domain(entry: ParamEntry, index: int, graph: dict[str, Any], registry: NodeRegistry, caps: Caps) -> SweptParam:
    where = f"sweep_spec.params[{index}]"
    spec = settable_param(graph, registry, entry.node_id, entry.param, where)
    if entry.values is not None:
        values: list[Any] = []
        seen: dict[tuple[str, Any], int] = {}
        for j, raw in enumerate(entry.values):
            value = _checked(spec, raw, f"{where}.values[{j}]", node_id=entry.node_id, param=entry.param)
            key = _key(value)
            if key in seen:
                raise BadRequest(f"{where}.values: {raw!r} is listed twice (values[{seen[key]}] and values[{j}])",
                                 code="values_repeated", params={"field": f"{where}.values", "value": raw})
            seen[key] = j
            values.append(value)
        if len(values) > caps.domain:
            raise _cap_refusal("max_sweep_domain", "distinct values", len(values), caps.domain, f"{where}.values")
        return SweptParam(entry.node_id, entry.param, tuple(values))
    assert entry.range is not None
    if spec.type not in ("int", "float"):
        raise BadRequest(f"{where}.range: {entry.node_id}.{entry.param} is a {spec.type} parameter; a range needs "
                         "an int or float one (list its values instead)", code="range_not_numeric",
                         params={"field": f"{where}.range", "node_id": entry.node_id, "param": entry.param})
    kind = entry.range.type or ("int" if spec.type == "int" else "float")
    points = range_points(entry.range, kind, f"{where}.range", caps.domain)
    checked = [_checked(spec, v, f"{where}.range", node_id=entry.node_id, param=entry.param) for v in points]
    return SweptParam(entry.node_id, entry.param, tuple(checked))


def combination(domains: Sequence[Sequence[Any]], number: int) -> tuple[Any, ...]:
    """The `number`-th grid combination, the last domain varying fastest."""
    values = []
    for domain in reversed(domains):
        number, digit = divmod(number, len(domain))
        values.append(domain[digit])
    return tuple(reversed(values))


def draw(space: int, samples: int, seed: int) -> list[int]:
    """`samples` distinct combination numbers out of `space`; the same seed draws the same ones."""
    rng = random.Random(seed)
    if space <= sys.maxsize:
        return rng.sample(range(space), samples)
    picked: dict[int, None] = {}
    while len(picked) < samples:  # samples is at most max_sweep_runs, a sliver of such a space
        picked.setdefault(rng.randrange(space))
    return list(picked)


def plan_sweep(req: SweepRequest, registry: NodeRegistry, caps: Caps, options: dict[str, Any]) -> Plan:
    """The sweep's variants, or BadRequest. `options` are the children's checked options."""
    if len(req.params) > caps.params:
        raise _cap_refusal("max_sweep_params", "params entries", len(req.params), caps.params, "sweep_spec.params")
    addressed: dict[tuple[str, str], int] = {}
    for i, entry in enumerate(req.params):
        key = (entry.node_id, entry.param)
        if key in addressed:
            raise BadRequest(f"sweep_spec.params[{i}]: {entry.node_id}.{entry.param} is already swept by "
                             f"sweep_spec.params[{addressed[key]}]", code="param_repeated",
                             params={"field": f"sweep_spec.params[{i}]", "node_id": entry.node_id,
                                     "param": entry.param})
        addressed[key] = i
    params = tuple(_domain(e, i, req.base_graph, registry, caps) for i, e in enumerate(req.params))
    domains = [p.domain for p in params]
    space = math.prod(len(d) for d in domains)
    if req.method == "grid":
        if req.samples is not None:
            raise BadRequest("sweep_spec.samples: a grid runs every combination; samples is for method random",
                             code="samples_not_allowed", params={"field": "sweep_spec.samples"})
        if space > caps.runs:
            raise _cap_refusal("max_sweep_runs", "the grid's combinations", space, caps.runs, "sweep_spec")
        combos = tuple(itertools.product(*domains))
    else:
        if req.samples is None:
            raise BadRequest("sweep_spec.samples: method random needs samples", code="samples_required",
                             params={"field": "sweep_spec.samples"})
        if req.seed is None:
            raise BadRequest("sweep_spec.seed: method random needs a seed (0 to 4294967295), so that the same "
                             "sweep draws the same combinations", code="seed_required",
                             params={"field": "sweep_spec.seed"})
        if req.samples > space:
            raise BadRequest(f"sweep_spec.samples: {req.samples} distinct samples asked of a space of {space} "
                             "combinations", code="samples_exceed_space",
                             params={"field": "sweep_spec.samples", "samples": req.samples, "space": space})
        if req.samples > caps.runs:
            raise _cap_refusal("max_sweep_runs", "samples", req.samples, caps.runs, "sweep_spec.samples")
        combos = tuple(combination(domains, n) for n in draw(space, req.samples, req.seed))
    if req.seed_variants:
        if req.seed is None:
            raise BadRequest("seed_variants needs sweep_spec.seed (variant i runs with seed + i)",
                             code="seed_required", params={"field": "sweep_spec.seed"})
        seeds: tuple[int | None, ...] = tuple((req.seed + i) % SEED_SPACE for i in range(len(combos)))
    else:
        seeds = (None,) * len(combos)
    if options.get("record_outputs") and len(combos) > OUTPUT_STORE_RUNS:
        raise BadRequest(f"options.record_outputs: the output store keeps the outputs of {OUTPUT_STORE_RUNS} runs; "
                         f"this sweep has {len(combos)} variants, so the earliest captures would be evicted "
                         "before it finished", code="record_outputs_too_many",
                         params={"field": "options.record_outputs", "limit": OUTPUT_STORE_RUNS,
                                 "variants": len(combos)})
    return Plan(params, combos, seeds, space)
