"""Suggested memory budgets (seed #794) for the API and for submit: the pure estimate
(core/scheduling/memory_estimate.py) over this server's node definitions."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

from ...engine import GraphError, NodeRegistry, validate_graph
from ..errors import BadRequest, SchemaError
from ..scheduling import memory_estimate
from .requests import SubmitRequest


class MemoryEstimates:
    def __init__(self, registry: NodeRegistry) -> None:
        self.registry = registry
        self._defs: tuple[str, dict[str, Any]] | None = None

    def of(self, graph: dict[str, Any], devices: list[str]) -> memory_estimate.Estimate:
        """One card's estimate for `graph` on a device set: a DDP loop on a set of CUDA cards holds
        its share of each batch per card."""
        world = sum(1 for d in devices if str(d).startswith("cuda:"))
        return memory_estimate.estimate(graph, self._definitions(), world=world if world >= 2 else 1)

    def check(self, req: SubmitRequest) -> SubmitRequest:
        """The request as it will run: an accepted estimate (`memory_source: "estimate"`) below the
        server's own estimate of the graph is raised to it (queue reason budget_raised)."""
        target = req.options.target
        if target is None or target.memory_gib is None or target.memory_source != "estimate":
            return req
        raised = memory_estimate.raise_estimate(target.memory_gib, self.of(req.graph, list(target.devices)).memory_gib)
        if raised is None:
            return req
        target = replace(target, memory_gib=raised, raised_from_gib=target.memory_gib)
        return replace(req, options=replace(req.options, target=target))

    async def answer(self, body: Any) -> dict[str, Any]:
        """POST codefy/api/memory-estimate: `{graph, devices?}` -> the estimate (422 shape, 400 graph)."""
        if not isinstance(body, dict):
            raise SchemaError("", "expected a JSON object with graph")
        for key in body:
            if key not in ("graph", "devices"):
                raise SchemaError(key, "unknown key (allowed: devices, graph)")
        graph, devices = body.get("graph"), body.get("devices", [])
        if not isinstance(graph, dict):
            raise SchemaError("graph", "expected an object")
        if not isinstance(devices, list) or not all(isinstance(d, str) for d in devices):
            raise SchemaError("devices", "expected a list of device names")
        problems = await asyncio.to_thread(validate_graph, graph, self.registry)
        if problems:
            err = GraphError(problems)
            raise BadRequest(str(err), code="invalid_graph", params=err.to_dict()["params"])
        return self.of(graph, devices).to_dict()

    def _definitions(self) -> dict[str, Any]:
        # Node packs can change the registry while the server runs: keyed by the catalog's hash.
        key = self.registry.catalog()["hash"]
        if self._defs is None or self._defs[0] != key:
            self._defs = (key, {d["type"]: d for d in self.registry.definitions()})
        return self._defs[1]


__all__ = ["MemoryEstimates"]
