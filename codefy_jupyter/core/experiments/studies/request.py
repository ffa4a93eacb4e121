"""A study request: its shape (422 with the failing field path) and its meaning (400 naming the
entry), before anything is written. Pure apart from the node registry it checks ops against.

What the study stores and compares for idempotency is `StudyRequest.digest`: the request with the
idempotency key left out and every SECRET value blanked, so that a retry that differs only in a
secret value counts as the same request.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from ....wire.run_options import SEED_MAX
from ...errors import BadRequest, SchemaError
from ...runs.requests import strip_secrets
from ..children import check_child_options
from ..params import checked_value, settable_param, with_params
from ..statistics import DIRECTIONS

MAX_REPETITIONS = 32
MAX_PARALLEL_RUNS = 32
NAME_MAX = 200
LABEL_MAX = 100
KEY_MAX = 200
RESUME_POLICIES = ("explicit", "auto")
BUDGET_KEYS = ("max_parallel_runs", "max_runs", "max_run_seconds", "max_active_seconds")
TOP_KEYS = {"name", "objective", "base_graph", "variants", "repetitions", "seed", "options", "budget",
            "resume_policy", "idempotency_key"}


@dataclass(frozen=True)
class Budget:
    max_parallel_runs: int = 1
    max_runs: int | None = None
    max_run_seconds: float | None = None
    max_active_seconds: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {key: getattr(self, key) for key in BUDGET_KEYS}


@dataclass(frozen=True)
class Variant:
    label: str
    graph: dict[str, Any]  # the graph its children run, SECRET values included (memory only)
    ops: list[dict[str, Any]] | None  # as given, for the record; None for a whole-graph variant


@dataclass(frozen=True)
class StudyRequest:
    name: str | None
    objective: dict[str, str]
    variants: list[Variant]
    repetitions: int
    seed: int | None
    options: dict[str, Any]
    budget: Budget
    resume_policy: str
    idempotency_key: str | None
    base_graph: dict[str, Any] | None = None
    digest: str = field(default="")


def _type(value: Any, kinds: tuple[type, ...], path: str, what: str) -> None:
    if isinstance(value, bool) and bool not in kinds:
        raise SchemaError(path, f"expected {what}, got a boolean")
    if not isinstance(value, kinds):
        raise SchemaError(path, f"expected {what}, got {type(value).__name__ if value is not None else 'null'}")


def _keys(obj: dict[str, Any], allowed: set[str] | tuple[str, ...], where: str) -> None:
    for key in obj:
        if key not in allowed:
            raise SchemaError(f"{where}.{key}" if where else key,
                              f"unknown key (allowed: {', '.join(sorted(allowed))})")


def _integer(value: Any, path: str, low: int, high: int) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    _type(value, (int,), path, "an integer")
    if not low <= value <= high:
        raise SchemaError(path, f"must be from {low} to {high}, got {value}")
    return value


def _seconds(value: Any, path: str) -> float:
    _type(value, (int, float), path, "a number of seconds")
    if not value > 0 or value != value or value == float("inf"):
        raise SchemaError(path, f"must be a positive number of seconds, got {value}")
    return float(value)


def _text(value: Any, path: str, limit: int, *, empty: bool = True) -> str:
    _type(value, (str,), path, "a string")
    if not empty and not value:
        raise SchemaError(path, "must not be empty")
    if len(value) > limit:
        raise SchemaError(path, f"at most {limit} characters")
    return value


def parse_budget(raw: Any, where: str = "budget") -> Budget:
    """The budget object alone (a resume may replace it)."""
    if raw is None:
        return Budget()
    _type(raw, (dict,), where, "an object")
    _keys(raw, BUDGET_KEYS, where)
    parallel = raw.get("max_parallel_runs")
    return Budget(
        max_parallel_runs=1 if parallel is None else _integer(parallel, f"{where}.max_parallel_runs", 1,
                                                             MAX_PARALLEL_RUNS),
        max_runs=None if raw.get("max_runs") is None else _integer(raw["max_runs"], f"{where}.max_runs", 1,
                                                                 2**31),
        max_run_seconds=None if raw.get("max_run_seconds") is None else _seconds(
            raw["max_run_seconds"], f"{where}.max_run_seconds"),
        max_active_seconds=None if raw.get("max_active_seconds") is None else _seconds(
            raw["max_active_seconds"], f"{where}.max_active_seconds"))


def check_budget_covers(budget: Budget, runs_needed: int, where: str = "budget") -> None:
    """max_runs counts retries too, so it can never be below one attempt per repetition."""
    if budget.max_runs is not None and budget.max_runs < runs_needed:
        raise BadRequest(f"{where}.max_runs is {budget.max_runs}, below variants x repetitions ({runs_needed})",
                         code="max_runs_too_low",
                         params={"field": f"{where}.max_runs", "max_runs": budget.max_runs,
                                 "needed": runs_needed})


def _objective(raw: Any) -> dict[str, str]:
    if raw is None:
        raise SchemaError("objective", "required")
    _type(raw, (dict,), "objective", "an object")
    _keys(raw, ("node_id", "metric", "direction"), "objective")
    for key in ("node_id", "metric", "direction"):
        if raw.get(key) is None:
            raise SchemaError(f"objective.{key}", "required")
        _text(raw[key], f"objective.{key}", 200, empty=False)
    if raw["direction"] not in DIRECTIONS:
        raise SchemaError("objective.direction", f"must be one of {', '.join(DIRECTIONS)}")
    return {"node_id": raw["node_id"], "metric": raw["metric"], "direction": raw["direction"]}


def _variant_shapes(raw: Any, has_base: bool) -> list[dict[str, Any]]:
    if raw is None:
        raise SchemaError("variants", "required")
    _type(raw, (list,), "variants", "a list")
    if not raw:
        raise SchemaError("variants", "at least one variant")
    for i, entry in enumerate(raw):
        where = f"variants[{i}]"
        _type(entry, (dict,), where, "an object")
        _keys(entry, ("label", "ops", "graph"), where)
        if entry.get("label") is None:
            raise SchemaError(f"{where}.label", "required")
        _text(entry["label"], f"{where}.label", LABEL_MAX, empty=False)
        if ("ops" in entry) == ("graph" in entry):
            raise SchemaError(where, "give exactly one of ops and graph")
        if "graph" in entry:
            _type(entry["graph"], (dict,), f"{where}.graph", "a graph object")
            continue
        _type(entry["ops"], (list,), f"{where}.ops", "a list")
        if not has_base:
            raise BadRequest(f"base_graph is required: {where} applies ops to it", code="base_graph_required",
                             params={"field": "base_graph", "variant": i})
        for j, op in enumerate(entry["ops"]):
            _type(op, (dict,), f"{where}.ops[{j}]", "an object")
            _keys(op, ("node_id", "param", "value"), f"{where}.ops[{j}]")
            for key in ("node_id", "param", "value"):
                if key not in op:
                    raise SchemaError(f"{where}.ops[{j}].{key}", "required")
            _type(op["node_id"], (str,), f"{where}.ops[{j}].node_id", "a string")
            _type(op["param"], (str,), f"{where}.ops[{j}].param", "a string")
    return raw


def parse_study(body: Any, *, registry: Any, max_variants: int, header_key: str | None = None) -> StudyRequest:
    """The request, or SchemaError (422) / BadRequest (400). Graphs themselves are validated by the
    run service's preflight, which the caller runs after its idempotency lookup."""
    _type(body, (dict,), "", "a JSON object")
    _keys(body, TOP_KEYS, "")
    name = None if body.get("name") is None else _text(body["name"], "name", NAME_MAX)
    objective = _objective(body.get("objective"))
    base = body.get("base_graph")
    if base is not None:
        _type(base, (dict,), "base_graph", "a graph object")
    raw_variants = _variant_shapes(body.get("variants"), base is not None)
    repetitions = _integer(body.get("repetitions", 1), "repetitions", 1, MAX_REPETITIONS)
    seed = None if body.get("seed") is None else _integer(body["seed"], "seed", 0, SEED_MAX)
    budget = parse_budget(body.get("budget"))
    policy = body.get("resume_policy", "explicit")
    _type(policy, (str,), "resume_policy", "a string")
    if policy not in RESUME_POLICIES:
        raise SchemaError("resume_policy", f"must be one of {', '.join(RESUME_POLICIES)}")
    key = _idempotency_key(body.get("idempotency_key"), header_key)
    options = check_child_options(body.get("options"), "study")
    if len(raw_variants) > max_variants:
        raise BadRequest(f"a study may have at most {max_variants} variants (CODEFY_MAX_SWEEP_RUNS); "
                         f"this one has {len(raw_variants)}", code="too_many_variants",
                         params={"field": "variants", "limit": max_variants, "count": len(raw_variants),
                                 "setting": "CODEFY_MAX_SWEEP_RUNS"})
    variants: list[Variant] = []
    seen: dict[str, int] = {}
    for i, entry in enumerate(raw_variants):
        label = entry["label"]
        if label in seen:
            raise BadRequest(f"variants[{i}].label {label!r} is already the label of variants[{seen[label]}]",
                             code="duplicate_label", params={"field": f"variants[{i}].label", "label": label})
        seen[label] = i
        if "graph" in entry:
            variants.append(Variant(label, entry["graph"], None))
            continue
        values: dict[tuple[str, str], Any] = {}
        for j, op in enumerate(entry["ops"]):
            where = f"variants[{i}].ops[{j}]"
            spec = settable_param(base, registry, op["node_id"], op["param"], where)
            _check_params_object(base, op["node_id"], where)
            values[(op["node_id"], op["param"])] = checked_value(spec, op["value"], where, node_id=op["node_id"],
                                                                 param=op["param"])
        variants.append(Variant(label, with_params(base, values) if values else base, list(entry["ops"])))
    check_budget_covers(budget, len(variants) * repetitions)
    request = StudyRequest(name, objective, variants, repetitions, seed, options, budget, policy, key, base)
    blanked = {k: v for k, v in body.items() if k != "idempotency_key"}
    if base is not None:
        blanked["base_graph"] = blank_secrets(base, registry)
    blanked["variants"] = [{**v, "graph": blank_secrets(v["graph"], registry)} if "graph" in v else v
                           for v in raw_variants]
    return StudyRequest(**{**request.__dict__, "digest": request_digest(blanked)})


def blank_secrets(graph: dict[str, Any], registry: Any) -> dict[str, Any]:
    """`strip_secrets` for a graph not validated yet (the digest is taken before the graphs are
    checked): nodes or params of the wrong shape are left as they are, for the check to refuse."""
    nodes = graph.get("nodes")
    if not isinstance(nodes, list) or not all(isinstance(n, dict) and isinstance(n.get("params") or {}, dict)
                                              and isinstance(n.get("type"), (str, type(None))) for n in nodes):
        return graph
    return strip_secrets(graph, registry)


def _check_params_object(graph: dict[str, Any], node_id: str, where: str) -> None:
    node = next(n for n in graph["nodes"] if isinstance(n, dict) and n.get("id") == node_id)
    if not isinstance(node.get("params") or {}, dict):
        raise BadRequest(f"{where}: node {node_id!r} of base_graph has params that are not an object",
                         code="invalid_graph", params={"field": "base_graph", "node_id": node_id})


def _idempotency_key(body_key: Any, header_key: str | None) -> str | None:
    if body_key is not None:
        _text(body_key, "idempotency_key", KEY_MAX, empty=False)
    if header_key is not None and (not header_key or len(header_key) > KEY_MAX):
        raise SchemaError("Idempotency-Key", f"must be 1 to {KEY_MAX} characters")
    if body_key is not None and header_key is not None and body_key != header_key:
        raise BadRequest("the Idempotency-Key header and the body's idempotency_key differ",
                         code="idempotency_key_mismatch", params={"field": "idempotency_key"})
    return body_key if body_key is not None else header_key


def request_digest(blanked: dict[str, Any]) -> str:
    text = json.dumps(blanked, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def seed_of(seed: int, repetition: int) -> int:
    """Repetition r of every variant runs with (seed + r) mod 2^32: a comparison within one
    repetition is paired, and a retried repetition reuses its seed."""
    return (seed + repetition) % (SEED_MAX + 1)
