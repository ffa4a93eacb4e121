"""Small observable nodes for engine tests: they count calls and record when they ran."""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections import Counter
from typing import Any

from codefy_jupyter.engine import Expand, NodeRegistry, lazy, param, run_graph
from codefy_jupyter.engine.presets import PresetLibrary


class Probe:
    """What the nodes saw: calls per node id, and (start, end) times per node id."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.spans: dict[str, tuple[float, float]] = {}
        self.running = 0
        self.peak = 0
        self._lock = threading.Lock()

    def enter(self, node_id: str) -> float:
        with self._lock:
            self.calls[node_id] += 1
            self.running += 1
            self.peak = max(self.peak, self.running)
        return time.monotonic()

    def leave(self, node_id: str, started: float) -> None:
        with self._lock:
            self.running -= 1
            self.spans[node_id] = (started, time.monotonic())


def make_registry(probe: Probe) -> NodeRegistry:
    reg = NodeRegistry()

    @reg.node("Const", outputs={"value": "float"}, params={"value": param.float(1.0)})
    def const(ctx, value):
        t = probe.enter(ctx.node_id)
        probe.leave(ctx.node_id, t)
        return {"value": value}

    @reg.node("Scale", inputs={"x": "float"}, outputs={"y": "float"},
              params={"factor": param.float(1.0, min=0, max=100)})
    def scale(ctx, x, factor):
        t = probe.enter(ctx.node_id)
        probe.leave(ctx.node_id, t)
        return {"y": x * factor}

    @reg.node("Add", inputs={"a": "float", "b": "float"}, outputs={"y": "float"})
    def add(ctx, a, b):
        t = probe.enter(ctx.node_id)
        probe.leave(ctx.node_id, t)
        return {"y": a + b}

    @reg.node("Hold", inputs={"x": "float"}, outputs={"y": "float"}, params={"seconds": param.float(0.2)})
    def hold(ctx, x, seconds):
        """A sync node that occupies a thread for a while (checks cancel as it waits)."""
        t = probe.enter(ctx.node_id)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            ctx.check_cancelled()
            time.sleep(0.005)
        probe.leave(ctx.node_id, t)
        return {"y": x}

    @reg.node("Stubborn", inputs={"x": "float"}, outputs={"y": "float"}, params={"seconds": param.float(0.3)})
    def stubborn(ctx, x, seconds):
        """Never checks cancel."""
        t = probe.enter(ctx.node_id)
        time.sleep(seconds)
        probe.leave(ctx.node_id, t)
        return {"y": x}

    @reg.node("Wait", inputs={"x": "float"}, outputs={"y": "float"}, params={"seconds": param.float(1.0)},
              cacheable=False)
    async def wait(ctx, x, seconds):
        t = probe.enter(ctx.node_id)
        await asyncio.sleep(seconds)
        probe.leave(ctx.node_id, t)
        return {"y": x}

    @reg.node("Noise", inputs={"x": "float"}, outputs={"y": "float"})
    def noise(ctx, x):
        """Draws from python's and numpy's global generators: reproducible only when seeded."""
        import numpy as np

        t = probe.enter(ctx.node_id)
        probe.leave(ctx.node_id, t)
        return {"y": x + random.random() + float(np.random.rand())}

    @reg.node("Boom", inputs={"x": "float"}, outputs={"y": "float"})
    def boom(ctx, x):
        probe.enter(ctx.node_id)
        raise ValueError(f"boom at {x}")

    @reg.node("WrongOut", inputs={"x": "float"}, outputs={"y": "float"}, params={"mode": param.string("missing")})
    def wrong_out(ctx, x, mode):
        if mode == "missing":
            return {"z": x}
        if mode == "extra":
            return {"y": x, "z": x}
        return x

    @reg.node("Pick", inputs={"cond": "float", "a": lazy("float"), "b": lazy("float")}, outputs={"y": "float"})
    def pick(ctx, cond, a, b):
        return {"y": a if cond > 0 else b}

    @pick.check_lazy_status
    def _pick_needs(ctx, cond, a, b):
        return ["a"] if cond > 0 else ["b"]

    @reg.node("Twice", inputs={"x": "float"}, outputs={"y": "float"})
    def twice(ctx, x):
        """Expands into two Scale nodes in a row."""
        return Expand({"nodes": [{"id": "first", "type": "Scale", "params": {"factor": 2}},
                                 {"id": "second", "type": "Scale", "params": {"factor": 2}}],
                       "edges": [{"source": "first", "source_port": "y", "target": "second", "target_port": "x"}]},
                      outputs={"y": ("second", "y")}, inputs={"first": {"x": x}})

    @reg.node("BadExpand", inputs={"x": "float"}, outputs={"y": "float"})
    def bad_expand(ctx, x):
        return Expand({"nodes": [{"id": "k", "type": "Nope"}]}, outputs={"y": ("k", "y")})

    return reg


def edge(s: str, sp: str, t: str, tp: str) -> dict[str, str]:
    return {"source": s, "source_port": sp, "target": t, "target_port": tp}


def chain(n: int, factor: float = 1.0) -> dict[str, Any]:
    nodes = [{"id": "n0", "type": "Const", "params": {"value": 1.0}}]
    nodes += [{"id": f"n{i}", "type": "Scale", "params": {"factor": factor}} for i in range(1, n)]
    edges = [edge(f"n{i - 1}", "value" if i == 1 else "y", f"n{i}", "x") for i in range(1, n)]
    return {"nodes": nodes, "edges": edges}


def run(graph: dict[str, Any], reg: NodeRegistry, **kw: Any) -> Any:
    """`run_graph` on these nodes, with no presets from the environment (the tests' machine may set some)."""
    kw.setdefault("presets", PresetLibrary(include_env=False))
    return run_graph(graph, registry=reg, **kw)
