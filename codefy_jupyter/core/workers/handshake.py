"""Deciding on a worker's `hello`, and whether a worker can run a graph's node types.

Pure: the caller (the /codefy/ws/worker handler with the WorkerRegistry) gathers what the server
knows into a `ServerSide`, says how the socket authenticated (`Credential`) and which names are
connected now, and sends what `check_hello` answers: an `Accepted` (its `welcome(worker_id)`) or a
`Refused` (its `frame()`, then close). Only `graph_node_types` reads files (preset JSON).

Rules (seed: security, node catalog and fingerprint):
- same protocol version and same package version, else a refusal naming both versions;
- a valid name (`[a-z0-9][a-z0-9-]{0,62}`, an instance likewise), not reserved (`RESERVED_NAMES`);
- a worker token is bound to its worker's name: the hello must use that name;
- a name held by a connected worker is taken, unless the same credential reconnects (then the new
  connection replaces the old one);
- one worker's instances (`<name>.<instance>`, e.g. Slurm one-shot agents sharing a token) held at
  once are capped (`ServerSide.max_instances`): a leaked token cannot grow the registry, and every
  listing of workers with it, without bound;
- a different node catalog does not refuse: the worker is `degraded`, with the types each side lacks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Protocol

from ...engine.graph import MAX_NESTING
from ...engine.presets import PresetError, PresetLibrary
from ...wire.frames import (
    DEFAULT_GRACE_S, DEFAULT_HEARTBEAT_S, PROTOCOL_VERSION, SUPPORTED_CAPABILITIES, Hello, Reject, Welcome,
    negotiate,
)
from ...wire.names import RESERVED_NAMES, WORKER_NAME_PATTERN, name_problem  # noqa: F401  (re-exported)

def registered_name(hello: Hello) -> str:
    """The name a hello registers under: `<name>.<instance>` for an instance, else `<name>`."""
    return f"{hello.name}.{hello.instance}" if hello.instance else hello.name


@dataclass(frozen=True)
class Credential:
    """How the socket authenticated. `kind`: `worker` (a worker token) or `server` (the server's own
    token from a loopback peer). `identity`: what tells two credentials apart (the worker id the token
    belongs to; `"server"` for the server token). `bound_name`: the worker name a worker token is
    bound to (None for the server token, which may connect under any name). `enrolled_by`: who
    enrolled that worker (core/workers/access.py); its instances (`<name>.<instance>`) are theirs too."""

    kind: str
    identity: str
    bound_name: str | None = None
    enrolled_by: str | None = None


@dataclass(frozen=True)
class ServerSide:
    """What the control plane offers and knows, for judging a hello."""

    version: str
    catalog_hash: str
    node_types: Mapping[str, str]
    protocol_version: int = PROTOCOL_VERSION
    capabilities: frozenset[str] = SUPPORTED_CAPABILITIES
    heartbeat_s: float = DEFAULT_HEARTBEAT_S
    grace_s: float = DEFAULT_GRACE_S
    resume_grace_s: float | None = None
    max_instances: int = 256


@dataclass(frozen=True)
class CatalogDiff:
    """How a worker's node catalog compares with the server's.

    reported: the worker sent a catalog at all (one that did not is treated as lacking every type).
    worker_lacks / server_lacks: type names only one side has, sorted.
    differing: types both have with different definitions (a different node pack version).
    """

    reported: bool
    matches: bool
    worker_lacks: tuple[str, ...] = ()
    server_lacks: tuple[str, ...] = ()
    differing: tuple[str, ...] = ()

    @property
    def status(self) -> str:
        return "online" if self.matches else "degraded"


def compare_catalogs(server_hash: str, server_types: Mapping[str, str], worker_hash: str | None,
                     worker_types: Mapping[str, str] | None) -> CatalogDiff:
    if worker_hash is None or worker_types is None:
        return CatalogDiff(reported=False, matches=False, worker_lacks=tuple(sorted(server_types)))
    if worker_hash == server_hash:
        return CatalogDiff(reported=True, matches=True)
    return CatalogDiff(
        reported=True, matches=False,
        worker_lacks=tuple(sorted(set(server_types) - set(worker_types))),
        server_lacks=tuple(sorted(set(worker_types) - set(server_types))),
        differing=tuple(sorted(t for t in set(server_types) & set(worker_types)
                               if server_types[t] != worker_types[t])))


@dataclass(frozen=True)
class Accepted:
    """The hello is accepted. `replaces`: the same credential reconnects while its old connection is
    still registered (close the old one). Send `welcome(worker_id)`."""

    name: str
    capabilities: tuple[str, ...]
    catalog: CatalogDiff
    heartbeat_s: float
    grace_s: float
    resume_grace_s: float | None = None
    replaces: bool = False

    @property
    def status(self) -> str:
        return self.catalog.status

    def welcome(self, worker_id: str) -> Welcome:
        return Welcome(worker_id=worker_id, name=self.name, heartbeat_s=self.heartbeat_s, grace_s=self.grace_s,
                       capabilities=list(self.capabilities), resume_grace_s=self.resume_grace_s,
                       status=self.status, missing_types=list(self.catalog.worker_lacks),
                       extra_types=list(self.catalog.server_lacks))


@dataclass(frozen=True)
class Refused:
    """The hello (or a placement) is refused: `code`, English `message`, `params` for other languages."""

    code: str
    message: str
    params: dict[str, Any] = field(default_factory=dict)

    def frame(self) -> Reject:
        return Reject(code=self.code, message=self.message, params=dict(self.params))


def check_hello(hello: Hello, server: ServerSide, *, credential: Credential,
                connected: Mapping[str, str], instances_held: int = 0) -> Accepted | Refused:
    """Judge a hello. `connected`: registered name -> credential identity of each worker connected now.
    `instances_held`: how many other instances of the hello's worker name the server holds now
    (connected, or disconnected with runs that wait for them)."""
    if hello.protocol_version != server.protocol_version:
        return Refused("protocol_mismatch",
                       f"protocol version mismatch: worker {hello.protocol_version}, "
                       f"control plane {server.protocol_version}",
                       {"worker": hello.protocol_version, "control_plane": server.protocol_version})
    if hello.version != server.version:
        return Refused("version_mismatch",
                       f"version mismatch: worker {hello.version}, control plane {server.version}",
                       {"worker": hello.version, "control_plane": server.version})
    problem = name_problem(hello.name)
    if problem is not None:
        code = "reserved_name" if hello.name in RESERVED_NAMES else "bad_name"
        return Refused(code, problem, {"name": hello.name})
    if hello.instance is not None:
        problem = name_problem(hello.instance, what="instance")
        if problem is not None:
            return Refused("bad_instance", problem, {"instance": hello.instance})
    if credential.bound_name is not None and credential.bound_name != hello.name:
        return Refused("name_mismatch",
                       f"this worker token belongs to worker {credential.bound_name!r}, not {hello.name!r}",
                       {"name": hello.name, "token_name": credential.bound_name})
    if hello.instance is not None and instances_held >= server.max_instances:
        return Refused("too_many_instances",
                       f"worker {hello.name!r} has {instances_held} instances connected or holding runs, "
                       f"the most this server takes (worker_max_instances = {server.max_instances})",
                       {"field": "instance", "name": hello.name, "limit": server.max_instances})
    name = registered_name(hello)
    holder = connected.get(name)
    if holder is not None and holder != credential.identity:
        return Refused("name_taken", f"worker name {name!r} is taken by another connected worker", {"name": name})
    return Accepted(
        name=name,
        capabilities=tuple(negotiate(hello.capabilities, server.capabilities)),
        catalog=compare_catalogs(server.catalog_hash, server.node_types, hello.catalog_hash, hello.node_types),
        heartbeat_s=server.heartbeat_s, grace_s=server.grace_s, resume_grace_s=server.resume_grace_s,
        replaces=holder is not None)


# -- a graph's node types against a worker's ----------------------------------------------------------

class PresetSource(Protocol):
    def get(self, name: str) -> dict[str, Any]: ...


def graph_node_types(graph: Mapping[str, Any], presets: PresetSource | None = None) -> frozenset[str]:
    """Every node type a run of `graph` can execute: its own nodes, those of `Subgraph` params, and
    those of every preset a `Preset` or `Map` runs (a `Map` expands into `Preset` nodes, so it needs
    that type too). `presets` defaults to the installed preset folders. An unknown or unreadable
    preset adds nothing (graph validation refuses it on its own)."""
    if presets is None:
        presets = PresetLibrary.default()
    found: set[str] = set()
    seen_presets: set[str] = set()
    stack: list[tuple[Any, int]] = [(graph, 0)]
    while stack:
        current, depth = stack.pop()
        if not isinstance(current, Mapping) or depth > MAX_NESTING:
            continue
        for raw in current.get("nodes") or ():
            if not isinstance(raw, Mapping) or not isinstance(raw.get("type"), str):
                continue
            type_ = raw["type"]
            found.add(type_)
            params = raw.get("params") if isinstance(raw.get("params"), Mapping) else {}
            if type_ == "Subgraph":
                stack.append((params.get("graph"), depth + 1))
            elif type_ in ("Preset", "Map"):
                if type_ == "Map":
                    found.add("Preset")
                name = params.get("preset")
                if isinstance(name, str) and name not in seen_presets:
                    seen_presets.add(name)
                    try:
                        stack.append((presets.get(name), depth + 1))
                    except (PresetError, OSError, ValueError):  # graph validation reports it, not us
                        continue
    return frozenset(found)


def missing_node_types(needed: Iterable[str], worker_types: Mapping[str, str] | Iterable[str] | None) -> list[str]:
    """The types of `needed` the worker does not have, sorted (all of them when it reported none)."""
    have = set(worker_types or ())
    return sorted(set(needed) - have)


def check_graph_types(worker_name: str, needed: Iterable[str],
                      worker_types: Mapping[str, str] | Iterable[str] | None) -> Refused | None:
    """Refuse a graph for a worker that lacks some of its node types (naming them), else None."""
    missing = missing_node_types(needed, worker_types)
    if not missing:
        return None
    return Refused("worker_missing_node_types",
                   f"worker {worker_name} lacks node types this graph uses: {', '.join(missing)}",
                   {"worker": worker_name, "missing_types": missing})
