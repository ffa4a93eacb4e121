"""Cache keys: a node's signature is a hash of its type, params and its inputs' signatures.

Computed once per node in topological order (Kahn's algorithm), each from its inputs' memoised
keys, so the total cost is linear in nodes + edges and no recursion is involved: a
100,000-node chain costs 100,000 small hashes, not a RecursionError.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from typing import Any

from .graph import Graph, topological_order


def run_salt(*, seed: int | None, device: str, deterministic: bool) -> str:
    """What every signature of a run shares: outputs differ across devices and seeds."""
    return f"{device}|{seed}|{int(deterministic)}"


def params_text(params: dict[str, Any], memo: dict[Any, str] | None = None) -> str:
    """Canonical text of a node's params. Graphs repeat the same params a lot (every Scale with
    factor 1), so `memo` keeps the text per distinct set of hashable values."""
    if not params:
        return "{}"
    if memo is not None:
        try:
            key = tuple(sorted(params.items()))
            text = memo.get(key)
            if text is None:
                text = memo[key] = json.dumps(params, sort_keys=True, separators=(",", ":"), default=repr)
            return text
        except TypeError:  # unhashable values (lists, dicts): no memo
            pass
    return json.dumps(params, sort_keys=True, separators=(",", ":"), default=repr)


def compute_signatures(graph: Graph, salt: str, *, per_node_seed: bool) -> dict[str, str]:
    """Signature of every node of `graph`.

    Nodes that opt out of caching (`cacheable=False`) get a unique key, which also makes every
    key downstream of them unique: their consumers see fresh inputs each run.
    In a seeded run each node draws its own seed from its id, so the id is part of the key.
    """
    order = graph.order if graph.order is not None else topological_order(graph.nodes, graph.inputs,
                                                                            graph.consumers)
    sigs: dict[str, str] = {}
    nodes = graph.nodes
    inputs = graph.inputs
    memo: dict[Any, str] = {}
    blake2b = hashlib.blake2b
    for nid in order:
        spec = nodes[nid]
        if not spec.definition.cacheable:
            sigs[nid] = "nocache:" + uuid.uuid4().hex
            continue
        parts = [salt, spec.type, params_text(spec.params, memo)]
        if per_node_seed:
            parts.append(nid)
        if spec.definition.fingerprint_fn is not None:
            parts.append(_fingerprint(spec))
        ports = inputs[nid]
        for port in sorted(ports) if len(ports) > 1 else ports:
            src, src_port = ports[port]
            parts.append(f"{port}={sigs[src]}.{src_port}")
        sigs[nid] = blake2b("\x1f".join(parts).encode(), digest_size=16).hexdigest()
    # Nodes on a cycle never reach indegree 0. Validation rejects such graphs; a hand-built Graph
    # may still carry one, and the run must reach the scheduler's own cycle report, so they get
    # keys that never hit.
    if len(sigs) < len(nodes):
        for nid in nodes:
            if nid not in sigs:
                sigs[nid] = "nocache:" + uuid.uuid4().hex
    return sigs


def _fingerprint(spec: Any) -> str:
    try:
        return repr(spec.definition.fingerprint_fn(spec.params))
    except Exception:  # an unreadable source gets a fresh key; the node itself reports the error
        return "unreadable:" + uuid.uuid4().hex


def child_signature(parent_sig: str, local_id: str, cacheable: bool) -> str:
    """Nodes of an expansion are keyed by their parent's key: the parent's inputs decide them."""
    if not cacheable or parent_sig.startswith("nocache:"):
        return "nocache:" + uuid.uuid4().hex
    return hashlib.blake2b(f"{parent_sig}/{local_id}".encode(), digest_size=16).hexdigest()
