"""Request bodies: shape checks that answer 422 with the failing field path.

Shape only (types, required keys, unknown keys, enums). Whether a well-formed request can be
honoured (a device this server lacks, a busy session) is a semantic question, answered with 400
by the run service.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...wire.cpu_threads import MAX_CPU_THREADS
from ...wire.run_options import SEED_MAX
from ..scheduling.memory_ledger import MAX_MEMORY_GIB
from ..errors import SchemaError  # noqa: F401  (re-exported: the schema's refusal)


@dataclass(frozen=True)
class Target:
    worker: str | None = None
    devices: tuple[str, ...] = ()
    pool: str | None = None  # "one-shot": a one-shot worker, and nowhere else
    # A worker card shared by memory (core/scheduling/memory_ledger.py): the budget per card, where
    # it came from ("declared" or "estimate"), and whether to wait for it (False: refuse, 409).
    memory_gib: float | None = None
    memory_source: str = "declared"
    wait: bool = True
    # Set by the server, never parsed: the accepted estimate this budget was raised from
    # (core/scheduling/memory_estimate.py raise_estimate; queue reason budget_raised).
    raised_from_gib: float | None = None


@dataclass(frozen=True)
class SubmitOptions:
    device: str | None = None
    seed: int | None = None
    seed_given: bool = False  # "seed": null (run unseeded) differs from no seed key (use the graph's)
    deterministic: bool = False
    record_outputs: bool = False
    provenance: bool = False  # hash and keep the files nodes declare reading (engine/provenance.py)
    lane: str = "queued"
    session: str | None = None
    target: Target | None = None
    cpu_threads: int | None = None  # None: the server's budget (run_cpu_threads or automatic)


@dataclass(frozen=True)
class SubmitRequest:
    graph: dict[str, Any]
    name: str | None = None
    options: SubmitOptions = field(default_factory=SubmitOptions)


def _keys(obj: dict[str, Any], allowed: set[str], where: str) -> None:
    for key in obj:
        if key not in allowed:
            path = f"{where}.{key}" if where else key
            raise SchemaError(path, f"unknown key (allowed: {', '.join(sorted(allowed))})")


def _type(value: Any, kinds: tuple[type, ...], path: str, what: str) -> None:
    if isinstance(value, bool) and bool not in kinds:
        raise SchemaError(path, f"expected {what}, got a boolean")
    if not isinstance(value, kinds):
        raise SchemaError(path, f"expected {what}, got {type(value).__name__ if value is not None else 'null'}")


def _integer(value: Any, path: str, what: str) -> int:
    """An integer as JSON means it: 7 or 7.0 (JSON Schema's `integer` admits both), never 7.5 or true."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    _type(value, (int,), path, what)
    return value


def parse_submit(body: Any) -> SubmitRequest:
    """`{"graph": {...}, "name"?: str, "options"?: {...}}` or SchemaError."""
    _type(body, (dict,), "", "a JSON object")
    _keys(body, {"graph", "name", "options"}, "")
    if "graph" not in body:
        raise SchemaError("graph", "required")
    _type(body["graph"], (dict,), "graph", "a graph object")
    name = body.get("name")
    if name is not None:
        _type(name, (str,), "name", "a string")
        if len(name) > 200:
            raise SchemaError("name", "at most 200 characters")
    raw = body.get("options", {})
    if raw is None:
        raw = {}
    _type(raw, (dict,), "options", "an object")
    _keys(raw, {"device", "seed", "deterministic", "record_outputs", "provenance", "lane", "session", "target",
                "cpu_threads"}, "options")
    opts: dict[str, Any] = {}
    if "device" in raw and raw["device"] is not None:
        _type(raw["device"], (str,), "options.device", "a device name")
        opts["device"] = raw["device"]
    if "seed" in raw:
        opts["seed_given"] = True
        if raw["seed"] is not None:
            seed = _integer(raw["seed"], "options.seed", "an integer or null")
            if not 0 <= seed <= SEED_MAX:
                raise SchemaError("options.seed", f"must be from 0 to {SEED_MAX}")
            opts["seed"] = seed
    for flag in ("deterministic", "record_outputs", "provenance"):
        if flag in raw:
            _type(raw[flag], (bool,), f"options.{flag}", "true or false")
            opts[flag] = raw[flag]
    if "lane" in raw:
        if raw["lane"] not in ("queued", "interactive"):
            raise SchemaError("options.lane", "must be 'queued' or 'interactive'")
        opts["lane"] = raw["lane"]
    if "session" in raw and raw["session"] is not None:
        _type(raw["session"], (str,), "options.session", "a string")
        opts["session"] = raw["session"]
    if "target" in raw and raw["target"] is not None:
        opts["target"] = _parse_target(raw["target"])
    if "cpu_threads" in raw and raw["cpu_threads"] is not None:
        threads = _integer(raw["cpu_threads"], "options.cpu_threads", "an integer or null")
        if not 1 <= threads <= MAX_CPU_THREADS:
            raise SchemaError("options.cpu_threads", f"must be from 1 to {MAX_CPU_THREADS} (null: the server's budget)")
        opts["cpu_threads"] = threads
    return SubmitRequest(graph=body["graph"], name=name, options=SubmitOptions(**opts))


def _parse_target(raw: Any) -> Target:
    _type(raw, (dict,), "options.target", "an object")
    _keys(raw, {"worker", "devices", "pool", "memory_gib", "memory_source", "wait"}, "options.target")
    worker = raw.get("worker")
    if worker is not None:
        _type(worker, (str,), "options.target.worker", "a worker name")
    pool = raw.get("pool")
    if pool is not None and pool != "one-shot":
        raise SchemaError("options.target.pool", "must be 'one-shot'")
    devices = raw.get("devices", [])
    if devices is None:
        devices = []
    _type(devices, (list,), "options.target.devices", "a list of device names")
    for i, dev in enumerate(devices):
        _type(dev, (str,), f"options.target.devices[{i}]", "a device name")
    memory: dict[str, Any] = {}
    gib = raw.get("memory_gib")
    if gib is not None:
        _type(gib, (int, float), "options.target.memory_gib", "a number of GiB")
        if not 0 < gib <= MAX_MEMORY_GIB:
            raise SchemaError("options.target.memory_gib", f"must be above 0 and at most {MAX_MEMORY_GIB}")
        memory["memory_gib"] = float(gib)
    source = raw.get("memory_source")
    if source is not None:
        if source not in ("declared", "estimate"):
            raise SchemaError("options.target.memory_source", "must be 'declared' or 'estimate'")
        if gib is None:
            raise SchemaError("options.target.memory_source", "applies to options.target.memory_gib, which is missing")
        memory["memory_source"] = source
    if "wait" in raw and raw["wait"] is not None:
        _type(raw["wait"], (bool,), "options.target.wait", "true or false")
        memory["wait"] = raw["wait"]
    return Target(worker=worker, devices=tuple(devices), pool=pool, **memory)


def options_doc(req: SubmitRequest, resolved: Any) -> dict[str, Any]:
    o = req.options
    doc: dict[str, Any] = {"lane": o.lane, "record_outputs": o.record_outputs, "requested_device": resolved.requested}
    if o.provenance:  # only when on: rows of runs without it keep their options as before
        doc["provenance"] = True
    if o.cpu_threads is not None:
        doc["cpu_threads"] = o.cpu_threads
    if o.target is not None:
        doc["target"] = {"worker": o.target.worker or "local", "devices": list(o.target.devices)}
        if o.target.pool is not None:
            doc["target"].update(worker=o.target.worker or "any", pool=o.target.pool)
        if o.target.memory_gib is not None:
            doc["target"]["memory_gib"] = o.target.memory_gib
            if o.target.memory_source == "estimate":  # "declared", the default, is not stored
                doc["target"]["memory_source"] = "estimate"
            if o.target.raised_from_gib is not None:
                doc["target"]["estimate_raised_from"] = o.target.raised_from_gib
        if not o.target.wait:
            doc["target"]["wait"] = False
    return doc


def strip_secrets(graph: dict[str, Any], registry: Any) -> dict[str, Any]:
    """A copy of the graph with SECRET values blanked, for the database (the run keeps the graph as
    submitted in memory until it starts)."""
    nodes = []
    for node in graph.get("nodes", []):
        nd = registry.get(node.get("type"))
        params = node.get("params") or {}
        hidden = {k: v for k, v in params.items() if nd and k in nd.params and nd.params[k].type == "secret"}
        if hidden:
            node = {**node, "params": {**params, **{k: "" for k in hidden}}}
        nodes.append(node)
    return {**graph, "nodes": nodes}


def secret_fields(graph: dict[str, Any], registry: Any) -> list[str]:
    """`node.param` of every SECRET value the graph sets: what `strip_secrets` blanks in its row."""
    found = []
    for node in graph.get("nodes") or []:
        nd = registry.get(node.get("type")) if isinstance(node, dict) else None
        for key in (node.get("params") or {}) if nd else ():
            if key in nd.params and nd.params[key].type == "secret":
                found.append(f"{node.get('id')}.{key}")
    return found
