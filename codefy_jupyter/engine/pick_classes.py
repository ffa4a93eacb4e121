"""Pick classes of a run's nodes: how close each is to an output (scheduler.py picks the closest first).

An output node is OUTPUT; its producers BLOCKS_OUTPUT; their producers TWO_HOPS; everything else
OTHER (an async node that is no output is ASYNC, decided when it is picked: execution.py).
`initial_classes` classifies the validated graph once, walking back from the outputs;
`scan_class` classifies a node an expansion added, from its consumers (few, and scanned to a limit).
"""

from __future__ import annotations

from typing import Mapping, Sequence

from .scheduler import BLOCKS_OUTPUT, OTHER, OUTPUT, TWO_HOPS

# A pick class looks this many consumers deep at most, so classifying a node stays O(1).
CLASS_SCAN_LIMIT = 64


def initial_classes(output_order: Sequence[str], index: Mapping[str, int], deps: Sequence[Sequence[int]],
                    inputs_h: Sequence[Mapping[str, tuple[str, str]]], size: int) -> bytearray:
    """Pick classes of the validated graph's nodes but ASYNC, walking back from the outputs:
    their producers block an output, and those producers' producers are two hops away. Work
    in proportion to the edges near outputs, instead of a scan of each node's consumers and
    theirs when it is admitted. `deps` by handle when the graph has them, else empty (then the
    producers are read from `inputs_h`)."""
    classes = bytearray([OTHER]) * size
    feeds = bytearray(size)
    feeding: list[int] = []  # producers of outputs, outputs among them
    for nid in output_order:
        classes[index[nid]] = OUTPUT

    def producers(handle: int) -> Sequence[int]:
        return deps[handle] if deps else [index[src] for src, _ in inputs_h[handle].values()]

    for nid in output_order:
        for h in producers(index[nid]):
            if not feeds[h]:
                feeds[h] = 1
                feeding.append(h)
                if classes[h] > BLOCKS_OUTPUT:
                    classes[h] = BLOCKS_OUTPUT
    for handle in feeding:
        for h in producers(handle):
            if classes[h] > TWO_HOPS:
                classes[h] = TWO_HOPS
    return classes


def scan_class(nid: str, outputs: set[str] | frozenset[str], consumers: Mapping[str, list[str]]) -> int:
    """The class of a node that is not async, from its consumers and theirs."""
    if nid in outputs:
        return OUTPUT
    first = consumers[nid]
    if len(first) > CLASS_SCAN_LIMIT:
        first = first[:CLASS_SCAN_LIMIT]
    for c in first:
        if c in outputs:
            return BLOCKS_OUTPUT
    for c in first:
        second = consumers[c]
        for cc in second if len(second) <= CLASS_SCAN_LIMIT else second[:CLASS_SCAN_LIMIT]:
            if cc in outputs:
                return TWO_HOPS
    return OTHER
