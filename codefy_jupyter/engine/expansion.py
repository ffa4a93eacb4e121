"""`Expand`: what a node returns to grow the graph at run time.

The ephemeral nodes of an expansion get ids `parent/inner`; the parent stays pending until the
inner nodes its outputs point at have finished, then completes with their values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:
    from .graph import NodeSpec

OutputRef = tuple[str, str]


@dataclass
class Expand:
    """A runtime subgraph.

    graph:   graph JSON (`nodes`, `edges`) whose ids are local to the expansion.
    outputs: parent output port -> `(inner_id, port)`, or a list of those for a list-valued output.
    inputs:  values bound to inner input ports, `{inner_id: {port: value}}` (the parent's inputs
             are already computed when it expands, so they are passed as values).
    """

    graph: dict[str, Any]
    outputs: dict[str, OutputRef | list[OutputRef]] = field(default_factory=dict)
    inputs: dict[str, dict[str, Any]] = field(default_factory=dict)


MappingProblem = tuple[str, str]  # (message, field)


def resolve_outputs(parent: str, outputs: Mapping[str, str], exp: Expand, sub_nodes: Mapping[str, NodeSpec],
                    ) -> tuple[dict[str, Any], MappingProblem | None]:
    """The parent's output ports (`outputs`, its NodeSpec's) resolved to the full ids
    (`parent/inner`, port) of the parsed expansion `sub_nodes`, and the last problem found with the
    mapping (None when it holds): an output of the parent it leaves out or one it does not have, a
    reference to no inner output, bound inputs of a node not in its graph."""
    resolved: dict[str, Any] = {}
    problem = None
    for port in outputs:
        if port not in exp.outputs:
            problem = (f"expansion gives no value for output {port!r}", f"outputs.{port}")
    for port, ref in exp.outputs.items():
        if port not in outputs:
            problem = (f"expansion maps unknown output {port!r}", f"outputs.{port}")
            continue
        refs = ref if isinstance(ref, list) else [ref]
        full = []
        for item in refs:
            inner, inner_port = f"{parent}/{item[0]}", item[1]
            if inner not in sub_nodes or inner_port not in sub_nodes[inner].outputs:
                problem = (f"expansion output {port!r} points at {item[0]}.{inner_port}, which does not exist",
                           f"outputs.{port}")
            full.append((inner, inner_port))
        resolved[port] = full if isinstance(ref, list) else full[0]
    for inner in exp.inputs:
        if f"{parent}/{inner}" not in sub_nodes:
            problem = (f"expansion binds inputs of {inner!r}, which is not in its graph", "inputs")
    return resolved, problem
