"""A run's options as one typed value, from the submit to the run's process.

- `RunOptions`: what the submitter asked (`options` of `POST /codefy/api/runs`), parsed once by
  `parse_options` (every client checks the same ranges before submitting: the CLI's flags, the
  magics, the Queue on... form), its seed resolved against the graph's once at submit
  (`resolved`), written to the run row and read back by `to_row` / `from_row` and nothing else.
- `Target`: where the run asked to go (`options.target`), its memory budget per card in GiB and,
  converted once here, in MiB (`memory_mib`).
- `ExecutionOptions`: what the run's process executes with (the run's own seed, determinism,
  recording and provenance, the control plane's `max_parallel_nodes`), built once when the run
  starts; the assign frame's `options` carries it (`to_json` / `from_json`, the keys agents of
  this version read), the agent hands it to the run process as is.

Pure and standard-library only: the control plane, the agent and its run process all read it.
A refusal is an `OptionError` naming the field (`options.target.memory_gib`); the control plane
answers it as its schema error (422), the worker protocol as `bad_field`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Mapping

from .cpu_threads import MAX_CPU_THREADS

SEED_MAX = 2**32 - 1  # a run's seed is an integer from 0 to this
# A budget over this many GiB per card is a typo, not a card (options.target.memory_gib is refused).
MAX_MEMORY_GIB = 4096
GIB_MIB = 1024

LANES = ("queued", "interactive")
MEMORY_SOURCES = ("declared", "estimate")
ONE_SHOT_POOL = "one-shot"
DEFAULT_MAX_PARALLEL_NODES = 4
DEFAULT_PAYLOAD_CAP_BYTES = 131072
OPTION_KEYS = frozenset({"device", "seed", "deterministic", "record_outputs", "provenance", "lane", "session",
                         "target", "cpu_threads"})
TARGET_KEYS = frozenset({"worker", "devices", "pool", "memory_gib", "memory_source", "wait"})


class OptionError(ValueError):
    """An option that cannot be used. `field`: its dotted path (`options.seed`)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field
        self.reason = message


def budget_mib(memory_gib: float) -> int:
    """A run's budget in MiB, rounded up (a budget never shrinks in the conversion)."""
    mib = memory_gib * GIB_MIB
    whole = int(mib)
    return whole if whole == mib else whole + 1


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

    @property
    def memory_mib(self) -> int | None:
        """The budget per card in MiB (what the memory ledger admits and the child caps to)."""
        return None if self.memory_gib is None else budget_mib(self.memory_gib)


@dataclass(frozen=True)
class RunOptions:
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

    def resolved(self, graph_seed: int | None) -> RunOptions:
        """The options as the run keeps them: its seed decided (the option's, else the graph's)."""
        return self if self.seed_given else replace(self, seed=graph_seed, seed_given=True)

    @property
    def memory_mib(self) -> int | None:
        return None if self.target is None else self.target.memory_mib

    def to_row(self, requested_device: str | None) -> dict[str, Any]:
        """The run row's columns these options fill (`lane`, `session`, `seed`, `deterministic`)
        and its `options` document (what `GET /codefy/api/runs/{id}` answers as the run's options).
        `requested_device`: the device asked for before resolution (the option's or the graph's)."""
        doc: dict[str, Any] = {"lane": self.lane, "record_outputs": self.record_outputs,
                               "requested_device": requested_device}
        if self.provenance:  # only when on: rows of runs without it keep their options as before
            doc["provenance"] = True
        if self.cpu_threads is not None:
            doc["cpu_threads"] = self.cpu_threads
        t = self.target
        if t is not None:
            doc["target"] = target = {"worker": t.worker or "local", "devices": list(t.devices)}
            if t.pool is not None:
                target.update(worker=t.worker or "any", pool=t.pool)
            if t.memory_gib is not None:
                target["memory_gib"] = t.memory_gib
                if t.memory_source == "estimate":  # "declared", the default, is not stored
                    target["memory_source"] = "estimate"
                if t.raised_from_gib is not None:
                    target["estimate_raised_from"] = t.raised_from_gib
            if not t.wait:
                target["wait"] = False
        return {"lane": self.lane, "session": self.session, "seed": self.seed, "deterministic": self.deterministic,
                "options": doc}

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> RunOptions:
        """The options `to_row` wrote (the seed resolved; `device`: the one requested, before
        resolution). Rows written before a key existed read as its default."""
        doc = row.get("options") or {}
        target = None
        t = doc.get("target")
        if isinstance(t, dict):
            gib = t.get("memory_gib")
            worker = t.get("worker")
            target = Target(worker=None if worker == "local" else worker, devices=tuple(t.get("devices") or ()),
                            pool=t.get("pool"), memory_gib=_number(gib),
                            memory_source=t.get("memory_source") or "declared", wait=t.get("wait") is not False,
                            raised_from_gib=_number(t.get("estimate_raised_from")))
        seed, threads, device = row.get("seed"), doc.get("cpu_threads"), doc.get("requested_device")
        return cls(device=device if isinstance(device, str) else None,
                   seed=seed if _is_int(seed) else None, seed_given=True,
                   deterministic=bool(row.get("deterministic")), record_outputs=doc.get("record_outputs") is True,
                   provenance=doc.get("provenance") is True, lane=row.get("lane") or doc.get("lane") or "queued",
                   session=row.get("session"), target=target, cpu_threads=threads if _is_int(threads) else None)

    def to_submit(self) -> dict[str, Any]:
        """The submit's `options` object that `parse_options` reads back as these options: how a
        queued run is queued again after a restart or a takeover (core/runs/recovery.py). The
        seed goes as decided at the first submit (null: unseeded), never drawn again."""
        out: dict[str, Any] = {"lane": self.lane, "seed": self.seed, "deterministic": self.deterministic,
                               "record_outputs": self.record_outputs}
        if self.device is not None:
            out["device"] = self.device
        if self.session is not None:
            out["session"] = self.session
        if self.provenance:
            out["provenance"] = True
        if self.cpu_threads is not None:
            out["cpu_threads"] = self.cpu_threads
        t = self.target
        if t is not None:
            target: dict[str, Any] = {"devices": list(t.devices)}
            if t.worker is not None:  # None: this server (or, with a pool, any worker of it)
                target["worker"] = t.worker
            if t.pool is not None:
                target["pool"] = t.pool
            if t.memory_gib is not None:
                target.update(memory_gib=t.memory_gib, memory_source=t.memory_source)
            if not t.wait:
                target["wait"] = False
            out["target"] = target
        return out

    def execution(self, *, max_parallel_nodes: int) -> ExecutionOptions:
        """What the run's process executes with, once the run starts."""
        return ExecutionOptions(seed=self.seed, deterministic=self.deterministic,
                                record_outputs=self.record_outputs, provenance=self.provenance,
                                max_parallel_nodes=max_parallel_nodes)


@dataclass(frozen=True)
class ExecutionOptions:
    """What a run's process executes with. On the wire (the assign's `options`): `{"seed",
    "deterministic", "max_parallel_nodes", "record_outputs"?, "provenance"?, "payload_cap_bytes"?}`;
    the optional keys only when they differ from their defaults."""

    seed: int | None = None
    deterministic: bool = False
    record_outputs: bool = False
    provenance: bool = False
    max_parallel_nodes: int = DEFAULT_MAX_PARALLEL_NODES
    payload_cap_bytes: int = DEFAULT_PAYLOAD_CAP_BYTES  # a node event's payload cap in the run's process (0: none)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"seed": self.seed, "deterministic": self.deterministic,
                               "max_parallel_nodes": self.max_parallel_nodes}
        if self.record_outputs:
            out["record_outputs"] = True
        if self.provenance:
            out["provenance"] = True
        if self.payload_cap_bytes != DEFAULT_PAYLOAD_CAP_BYTES:
            out["payload_cap_bytes"] = self.payload_cap_bytes
        return out

    @classmethod
    def from_json(cls, raw: Any) -> ExecutionOptions:
        """Checked: a key of the wrong type is an OptionError naming it (`seed`); a missing key
        reads as its default, an unknown key is ignored (protocol evolution)."""
        if not isinstance(raw, dict):
            raise OptionError("", "expected an object")
        seed = raw.get("seed")
        if seed is not None:
            seed = _seed(seed, "seed")
        flags = {}
        for name in ("deterministic", "record_outputs", "provenance"):
            value = raw.get(name, False)
            if value is None:
                value = False
            _kind(value, (bool,), name, "true or false")
            flags[name] = value
        parallel = _at_least(raw.get("max_parallel_nodes"), 1, "max_parallel_nodes", DEFAULT_MAX_PARALLEL_NODES)
        cap = _at_least(raw.get("payload_cap_bytes"), 0, "payload_cap_bytes", DEFAULT_PAYLOAD_CAP_BYTES)
        return cls(seed=seed, max_parallel_nodes=parallel, payload_cap_bytes=cap, **flags)


# -- parsing a submit's options ----------------------------------------------------------------------

def parse_options(raw: Any, where: str = "options") -> RunOptions:
    """A submit's `options` object (None or absent: every default), or OptionError naming the field.
    Shape only (types, unknown keys, enums, ranges); whether the server can honour it is the run
    service's question."""
    if raw is None:
        return RunOptions()
    _kind(raw, (dict,), where, "an object")
    _known(raw, OPTION_KEYS, where)
    opts: dict[str, Any] = {}
    if raw.get("device") is not None:
        _kind(raw["device"], (str,), f"{where}.device", "a device name")
        opts["device"] = raw["device"]
    if "seed" in raw:
        opts["seed_given"] = True
        if raw["seed"] is not None:
            opts["seed"] = _seed(raw["seed"], f"{where}.seed")
    for flag in ("deterministic", "record_outputs", "provenance"):
        if flag in raw:
            _kind(raw[flag], (bool,), f"{where}.{flag}", "true or false")
            opts[flag] = raw[flag]
    if "lane" in raw:
        if raw["lane"] not in LANES:
            raise OptionError(f"{where}.lane", "must be 'queued' or 'interactive'")
        opts["lane"] = raw["lane"]
    if raw.get("session") is not None:
        _kind(raw["session"], (str,), f"{where}.session", "a string")
        opts["session"] = raw["session"]
    if raw.get("target") is not None:
        opts["target"] = parse_target(raw["target"], f"{where}.target")
    if raw.get("cpu_threads") is not None:
        threads = _integer(raw["cpu_threads"], f"{where}.cpu_threads", "an integer or null")
        if not 1 <= threads <= MAX_CPU_THREADS:
            raise OptionError(f"{where}.cpu_threads", f"must be from 1 to {MAX_CPU_THREADS} (null: the server's budget)")
        opts["cpu_threads"] = threads
    return RunOptions(**opts)


def parse_target(raw: Any, where: str = "options.target") -> Target:
    _kind(raw, (dict,), where, "an object")
    _known(raw, TARGET_KEYS, where)
    worker = raw.get("worker")
    if worker is not None:
        _kind(worker, (str,), f"{where}.worker", "a worker name")
    pool = raw.get("pool")
    if pool is not None and pool != ONE_SHOT_POOL:
        raise OptionError(f"{where}.pool", f"must be '{ONE_SHOT_POOL}'")
    devices = raw.get("devices")
    if devices is None:
        devices = []
    _kind(devices, (list,), f"{where}.devices", "a list of device names")
    for i, dev in enumerate(devices):
        _kind(dev, (str,), f"{where}.devices[{i}]", "a device name")
    memory: dict[str, Any] = {}
    gib = raw.get("memory_gib")
    if gib is not None:
        _kind(gib, (int, float), f"{where}.memory_gib", "a number of GiB")
        if not 0 < gib <= MAX_MEMORY_GIB:
            raise OptionError(f"{where}.memory_gib", f"must be above 0 and at most {MAX_MEMORY_GIB}")
        memory["memory_gib"] = float(gib)
    source = raw.get("memory_source")
    if source is not None:
        if source not in MEMORY_SOURCES:
            raise OptionError(f"{where}.memory_source", "must be 'declared' or 'estimate'")
        if gib is None:
            raise OptionError(f"{where}.memory_source", f"applies to {where}.memory_gib, which is missing")
        memory["memory_source"] = source
    if raw.get("wait") is not None:
        _kind(raw["wait"], (bool,), f"{where}.wait", "true or false")
        memory["wait"] = raw["wait"]
    return Target(worker=worker, devices=tuple(devices), pool=pool, **memory)


def _known(obj: dict[str, Any], allowed: frozenset[str], where: str) -> None:
    for key in obj:
        if key not in allowed:
            raise OptionError(f"{where}.{key}" if where else key, f"unknown key (allowed: {', '.join(sorted(allowed))})")


def _kind(value: Any, kinds: tuple[type, ...], path: str, what: str) -> None:
    if isinstance(value, bool) and bool not in kinds:
        raise OptionError(path, f"expected {what}, got a boolean")
    if not isinstance(value, kinds):
        raise OptionError(path, f"expected {what}, got {type(value).__name__ if value is not None else 'null'}")


def _integer(value: Any, path: str, what: str) -> int:
    """An integer as JSON means it: 7 or 7.0 (JSON Schema's `integer` admits both), never 7.5 or true."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    _kind(value, (int,), path, what)
    return value


def _seed(value: Any, path: str) -> int:
    seed = _integer(value, path, "an integer or null")
    if not 0 <= seed <= SEED_MAX:
        raise OptionError(path, f"must be from 0 to {SEED_MAX}")
    return seed


def _at_least(value: Any, minimum: int, path: str, default: int) -> int:
    if value is None:
        return default
    _kind(value, (int,), path, "an integer")
    if value < minimum:
        raise OptionError(path, f"must be at least {minimum}, got {value}")
    return value


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


__all__ = ["ExecutionOptions", "GIB_MIB", "MAX_MEMORY_GIB", "OptionError", "RunOptions", "SEED_MAX", "Target",
           "budget_mib", "parse_options", "parse_target"]
