"""`Expand`: what a node returns to grow the graph at run time.

The ephemeral nodes of an expansion get ids `parent/inner`; the parent stays pending until the
inner nodes its outputs point at have finished, then completes with their values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

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
