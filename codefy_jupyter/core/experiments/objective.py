"""Reading a run's result from its metric points: the objective value a sweep or a study ranks on,
and the run's final metrics. Pure; the points are `run_metrics` rows in write order
(`node_id`, `name`, `step`, `value`).

- With a node: the objective is the last point that node logged under the name, the highest step
  first, then the last write (another node logging the same name cannot change it).
- Name only (sweeps): while exactly one producer logs the name, its last point; when several do,
  no value, and `ambiguous_producers` lists them ("(run)" for a series logged without a node). No
  producer is picked for the user.
- Final metrics: the last value of every series the run logged, in write order, except that a
  name the objective's node logged shows that node's value. The run's system metrics
  (`system/...`, wire/system_metrics.py) are no result of it: they are left out there and of the
  series names (an objective may still name one).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from ...wire.system_metrics import is_system

RUN_LEVEL = "(run)"  # how a series logged without a node is named among producers


@dataclass(frozen=True)
class ObjectiveReading:
    value: float | None = None
    node_id: str | None = None  # the producer the value was read from
    ambiguous_producers: list[str] = field(default_factory=list)
    logged: bool = False  # some producer logged the metric (with a non-finite value, `value` stays None)


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _producer(point: Mapping[str, Any]) -> str:
    node = point.get("node_id")
    return node if isinstance(node, str) and node else RUN_LEVEL


def _last_point(points: list[tuple[int, Mapping[str, Any]]]) -> Mapping[str, Any]:
    """Highest step first, then the last write; a point without a step ranks below any step."""
    def key(item: tuple[int, Mapping[str, Any]]) -> tuple[int, float, int]:
        order, point = item
        step = point.get("step")
        has_step = isinstance(step, (int, float)) and not isinstance(step, bool)
        return (1 if has_step else 0, float(step) if has_step else 0.0, order)
    return max(points, key=key)[1]


def read_objective(points: Iterable[Mapping[str, Any]], metric: str, node_id: str | None = None) -> ObjectiveReading:
    by_producer: dict[str, list[tuple[int, Mapping[str, Any]]]] = {}
    for order, point in enumerate(points):
        if point.get("name") == metric:
            by_producer.setdefault(_producer(point), []).append((order, point))
    if node_id is not None:
        mine = by_producer.get(node_id)
        if not mine:
            return ObjectiveReading()
        return ObjectiveReading(_finite(_last_point(mine).get("value")), node_id, logged=True)
    if not by_producer:
        return ObjectiveReading()
    if len(by_producer) > 1:
        return ObjectiveReading(ambiguous_producers=sorted(by_producer), logged=True)
    (producer, mine), = by_producer.items()
    return ObjectiveReading(_finite(_last_point(mine).get("value")), producer, logged=True)


def final_metrics(points: Iterable[Mapping[str, Any]], objective_node: str | None = None) -> dict[str, float | None]:
    """name -> final value (None for a non-finite one), names in the order first logged."""
    last: dict[str, float | None] = {}
    preferred: dict[str, list[tuple[int, Mapping[str, Any]]]] = {}
    for order, point in enumerate(points):
        name = point.get("name")
        if not isinstance(name, str) or is_system(name):
            continue
        last[name] = _finite(point.get("value"))
        if objective_node is not None and _producer(point) == objective_node:
            preferred.setdefault(name, []).append((order, point))
    for name, mine in preferred.items():
        last[name] = _finite(_last_point(mine).get("value"))
    return last


def series_names(points: Iterable[Mapping[str, Any]]) -> list[str]:
    """The series a run recorded (an objective_warning lists them when nobody logged the objective)."""
    return sorted({p["name"] for p in points if isinstance(p.get("name"), str) and not is_system(p["name"])})
