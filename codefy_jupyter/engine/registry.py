"""Node definitions, typed params and ports, and the registry node packs add to.

A node is a plain function decorated with `@node`. Its definition (ports, params, flags) is data:
it validates graphs before anything runs, and it is what the catalog hashes so that a worker and
the control plane can tell whether they run the same nodes.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib
import inspect
import json
import math
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

from .entry_points import entry_points
from .errors import Problem, RegistryError

ENTRY_POINT_GROUP = "codefy_jupyter.nodes"
PARAM_TYPES = ("int", "float", "bool", "string", "select", "secret", "json")
# What a param says about files (ParamSpec.file), so the control plane can tell from node
# definitions alone which runs need files on a worker (core/storage/run_needs.py):
#   input  the value names a file the node reads (absolute, or relative to the run's own folder)
#   output the value names a file the node writes (relative to the run's own folder)
#   writes a value that is set (non-zero, non-empty) makes the node write files into the run's folder
FILE_ROLES = ("input", "output", "writes")
_MISSING = object()


# ---------------------------------------------------------------------------------------------
# Params


@dataclass(frozen=True)
class ParamSpec:
    type: str
    default: Any = None
    min: float | None = None
    max: float | None = None
    options: tuple[Any, ...] | None = None
    description: str = ""
    file: str | None = None  # one of FILE_ROLES, or None: the value is no file

    def definition(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type, "default": self.default}
        if self.type == "secret":
            out["default"] = ""  # never publish a secret default
        if self.min is not None:
            out["min"] = self.min
        if self.max is not None:
            out["max"] = self.max
        if self.options is not None:
            out["options"] = list(self.options)
        if self.description:
            out["description"] = self.description
        if self.file is not None:
            out["file"] = self.file
        return out

    def check(self, value: Any) -> tuple[Any, str | None]:
        """Coerce `value` to this param's type; return (value, None) or (None, reason)."""
        kind = self.type
        if kind == "int":
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                return None, f"expected an integer, got {_describe(value)}"
            if isinstance(value, float):
                if not value.is_integer():
                    return None, f"expected an integer, got {value!r}"
                value = int(value)
        elif kind == "float":
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                return None, f"expected a number, got {_describe(value)}"
            value = float(value)
            if not math.isfinite(value):
                return None, f"expected a finite number, got {value!r}"
        elif kind == "bool":
            if not isinstance(value, bool):
                return None, f"expected true or false, got {_describe(value)}"
        elif kind in ("string", "secret"):
            if not isinstance(value, str):
                return None, f"expected a string, got {_describe(value)}"
        elif kind == "select":
            if value not in (self.options or ()):
                return None, f"expected one of {list(self.options or ())}, got {value!r}"
        elif kind == "json":
            try:
                json.dumps(value)
            except (TypeError, ValueError):
                return None, f"expected a JSON value, got {_describe(value)}"
        if kind in ("int", "float"):
            if self.min is not None and value < self.min:
                return None, f"must be at least {self.min}, got {value!r}"
            if self.max is not None and value > self.max:
                return None, f"must be at most {self.max}, got {value!r}"
        return value, None


def _describe(value: Any) -> str:
    return f"{type(value).__name__} {value!r}" if not isinstance(value, (dict, list)) else type(value).__name__


class param:
    """Constructors for typed params: `param.int(8, min=1)`, `param.select("adam", ["sgd", "adam"])`."""

    @staticmethod
    def int(default: int = 0, *, min: float | None = None, max: float | None = None, description: str = "",
            file: str | None = None) -> ParamSpec:
        return ParamSpec("int", default, min, max, None, description, file)

    @staticmethod
    def float(default: float = 0.0, *, min: float | None = None, max: float | None = None, description: str = "") -> ParamSpec:
        return ParamSpec("float", default, min, max, None, description)

    @staticmethod
    def bool(default: bool = False, *, description: str = "") -> ParamSpec:
        return ParamSpec("bool", default, description=description)

    @staticmethod
    def string(default: str = "", *, description: str = "", file: str | None = None) -> ParamSpec:
        return ParamSpec("string", default, description=description, file=file)

    @staticmethod
    def select(default: Any, options: list[Any] | tuple[Any, ...], *, description: str = "") -> ParamSpec:
        return ParamSpec("select", default, options=tuple(options), description=description)

    @staticmethod
    def secret(default: str = "", *, description: str = "") -> ParamSpec:
        return ParamSpec("secret", default, description=description)

    @staticmethod
    def json(default: Any = None, *, description: str = "") -> ParamSpec:
        return ParamSpec("json", default, description=description)


# ---------------------------------------------------------------------------------------------
# Ports


@dataclass(frozen=True)
class PortSpec:
    type: str
    lazy: bool = False
    optional: bool = False

    def definition(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type}
        if self.lazy:
            out["lazy"] = True
        if self.optional:
            out["optional"] = True
        return out


def lazy(type_: str) -> PortSpec:
    """An input evaluated only when the node's `check_lazy_status` asks for it."""
    return PortSpec(type_, lazy=True, optional=True)


def optional(type_: str) -> PortSpec:
    """An input that may be left unconnected; the node then receives None."""
    return PortSpec(type_, optional=True)


def types_compatible(source: str, target: str) -> bool:
    return source == target or "any" in (source, target) or (source, target) == ("int", "float")


def _port(spec: str | PortSpec) -> PortSpec:
    return spec if isinstance(spec, PortSpec) else PortSpec(spec)


# ---------------------------------------------------------------------------------------------
# Node definitions

# (params, resolver, node id) -> (inputs, outputs, problems); see graph.PortResolver.
PortsFn = Callable[[dict[str, Any], Any, str], "tuple[dict[str, PortSpec], dict[str, str], list[Problem]]"]


@dataclass
class NodeDef:
    type: str
    fn: Callable[..., Any]
    inputs: dict[str, PortSpec]
    outputs: dict[str, str]
    params: dict[str, ParamSpec]
    category: str = "general"
    description: str = ""
    output_node: bool = False
    cacheable: bool = True
    is_async: bool = False
    lazy_check: Callable[..., Any] | None = None
    # Extra cache-key material read from outside the graph (a file's size and mtime), so a
    # changed file is not served from the cache.
    fingerprint_fn: Callable[[dict[str, Any]], Any] | None = None
    # Nodes whose ports depend on their params (Subgraph, Preset) compute them here.
    dynamic_ports: PortsFn | None = field(default=None, repr=False)
    # Parsing asks these once per node of a graph, so they are decided once per type.
    has_lazy: bool = field(init=False, repr=False, compare=False)
    default_params: dict[str, Any] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.has_lazy = any(p.lazy for p in self.inputs.values())
        self.default_params = {name: spec.default for name, spec in self.params.items()}

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def check_lazy_status(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Decorator: `@my_node.check_lazy_status` names the lazy inputs the node needs."""
        if not any(p.lazy for p in self.inputs.values()):
            raise RegistryError(f"node {self.type!r} has no lazy inputs to check")
        self.lazy_check = fn
        return fn

    def fingerprint(self, fn: Callable[[dict[str, Any]], Any]) -> Callable[[dict[str, Any]], Any]:
        """Decorator: `@my_node.fingerprint` returns what, besides params and inputs, the output
        depends on (e.g. a file's size and modification time). Part of the cache key."""
        self.fingerprint_fn = fn
        return fn

    def definition(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "category": self.category,
            "description": self.description,
            "inputs": {k: v.definition() for k, v in self.inputs.items()},
            "outputs": dict(self.outputs),
            "params": {k: v.definition() for k, v in self.params.items()},
            "output_node": self.output_node,
            "async": self.is_async,
            "cacheable": self.cacheable,
            "dynamic_ports": self.dynamic_ports is not None,
        }

    def digest(self) -> str:
        return _sha256_json(self.definition())


def _sha256_json(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


class NodeRegistry:
    """Node types by name. `default_registry()` loads every installed pack through entry points."""

    def __init__(self) -> None:
        self._defs: dict[str, NodeDef] = {}
        self._lock = threading.Lock()
        self._packs: dict[str, frozenset[str]] = {}  # entry-point name -> the types loading it added
        self._gone: set[str] = set()  # packs removed while this process runs

    # -- registration -------------------------------------------------------------------------
    def node(
        self,
        type_: str,
        *,
        inputs: dict[str, str | PortSpec] | None = None,
        outputs: dict[str, str] | None = None,
        params: dict[str, ParamSpec] | None = None,
        category: str = "general",
        description: str = "",
        output_node: bool = False,
        cacheable: bool = True,
        dynamic_ports: PortsFn | None = None,
    ) -> Callable[[Callable[..., Any]], NodeDef]:
        def decorate(fn: Callable[..., Any]) -> NodeDef:
            nd = NodeDef(
                type=type_,
                fn=fn,
                inputs={k: _port(v) for k, v in (inputs or {}).items()},
                outputs=dict(outputs or {}),
                params=dict(params or {}),
                category=category,
                description=description or (inspect.getdoc(fn) or "").split("\n\n")[0],
                output_node=output_node,
                cacheable=cacheable,
                is_async=inspect.iscoroutinefunction(fn),
                dynamic_ports=dynamic_ports,
            )
            self.register(nd)
            return nd

        return decorate

    def register(self, nd: NodeDef) -> None:
        _check_definition(nd)
        with self._lock:
            old = self._defs.get(nd.type)
            if old is not None and old.fn is not nd.fn and _qualname(old.fn) != _qualname(nd.fn):
                raise RegistryError(f"node type {nd.type!r} is already registered by {_qualname(old.fn)}")
            self._defs[nd.type] = nd

    def load_entry_points(self, group: str = ENTRY_POINT_GROUP) -> list[str]:
        """Import every pack of `group`; a pack is a module of `@node`s or a `register(registry)`."""
        loaded = []
        for ep in sorted(entry_points(group=group), key=lambda e: e.name):
            self._load_pack(ep)
            loaded.append(ep.name)
        return loaded

    def _load_pack(self, ep: Any, again: bool = False) -> None:
        """Load one pack, remembering the types it added (so that its removal can take them away).
        `again`: a module pack imported before, removed since: import it anew so its `@node`s run."""
        before = set(self._defs)
        obj = ep.load()
        if again and inspect.ismodule(obj):
            obj = importlib.reload(obj)
        if callable(obj):
            obj(self)
        self._packs[ep.name] = frozenset(set(self._defs) - before)

    def pack_names(self) -> frozenset[str]:
        """The entry points loaded into this registry and still in it."""
        return frozenset(self._packs)

    def refresh_entry_points(self, group: str = ENTRY_POINT_GROUP) -> bool:
        """Follow the packs installed or removed since they were loaded: a new pack is loaded, a
        pack no longer installed takes its types away. Whether the set of types changed. A new pack
        that fails to load is left out (the error is raised after the rest is done, once per pack)."""
        found = {ep.name: ep for ep in entry_points(group=group)}
        changed = False
        with self._lock:
            for name in sorted(set(self._packs) - set(found)):
                for type_ in self._packs.pop(name):
                    changed = self._defs.pop(type_, None) is not None or changed
                self._gone.add(name)
        failed: list[str] = []
        for name in sorted(set(found) - set(self._packs)):
            before = len(self._defs)
            try:
                self._load_pack(found[name], again=name in self._gone)
            except Exception as err:  # one broken pack must not hide the others
                self._packs[name] = frozenset()
                failed.append(f"{name}: {type(err).__name__}: {err}")
            self._gone.discard(name)
            changed = changed or len(self._defs) != before
        if failed:
            raise RegistryError("node packs that failed to load: " + "; ".join(failed))
        return changed

    # -- lookup ---------------------------------------------------------------------------------
    def get(self, type_: str) -> NodeDef | None:
        return self._defs.get(type_)

    def __contains__(self, type_: str) -> bool:
        return type_ in self._defs

    def types(self) -> list[str]:
        return sorted(self._defs)

    def close_types(self, type_: str, n: int = 3) -> list[str]:
        """Registered types whose names are close to `type_` (what a typo likely meant), best first."""
        return difflib.get_close_matches(type_, list(self._defs), n=n)

    def definitions(self) -> list[dict[str, Any]]:
        return [self._defs[t].definition() for t in self.types()]

    def catalog(self) -> dict[str, Any]:
        """Each type with the sha256 of its definition, and one hash over all of them."""
        types = {t: self._defs[t].digest() for t in self.types()}
        joined = "\n".join(f"{t}:{d}" for t, d in types.items())
        return {"types": types, "hash": hashlib.sha256(joined.encode()).hexdigest()}

    def copy(self) -> NodeRegistry:
        other = NodeRegistry()
        other._defs = dict(self._defs)
        return other


def _qualname(fn: Callable[..., Any]) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def _check_definition(nd: NodeDef) -> None:
    if not nd.type or "/" in nd.type:
        raise RegistryError(f"node type {nd.type!r}: a type name must be non-empty and contain no '/'")
    clash = set(nd.inputs) & set(nd.params)
    if clash:
        raise RegistryError(f"node type {nd.type!r}: {sorted(clash)} are both inputs and params")
    for name, spec in nd.params.items():
        if spec.type not in PARAM_TYPES:
            raise RegistryError(f"node type {nd.type!r}: param {name!r} has unknown type {spec.type!r}")
        if spec.file is not None and spec.file not in FILE_ROLES:
            raise RegistryError(f"node type {nd.type!r}: param {name!r} has unknown file role {spec.file!r}")
        if spec.type == "select" and not spec.options:
            raise RegistryError(f"node type {nd.type!r}: select param {name!r} has no options")
        if spec.default is not None:
            _, reason = spec.check(spec.default)
            if reason:
                raise RegistryError(f"node type {nd.type!r}: default of param {name!r} {reason}")


# The process-wide registry: `@node` adds to it, and entry-point packs are loaded into it once.
REGISTRY = NodeRegistry()
_loaded = False
_load_lock = threading.Lock()


def node(type_: str, **kwargs: Any) -> Callable[[Callable[..., Any]], NodeDef]:
    """Register a node type in the process-wide registry. See `NodeRegistry.node`."""
    return REGISTRY.node(type_, **kwargs)


def default_registry() -> NodeRegistry:
    """The process-wide registry with every installed node pack loaded."""
    global _loaded
    if not _loaded:
        with _load_lock:
            if not _loaded:
                REGISTRY.load_entry_points()
                _loaded = True
    return REGISTRY
