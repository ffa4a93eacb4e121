"""`run_graph` / `execute_graph`: drive the scheduler, run nodes, keep values where consumers find them.

Values flow through execution-local links: when a node finishes, each consumer that has not run yet
gets a link to its outputs (`links[consumer][producer]`), dropped when that consumer finishes. The
global cache may evict anything at any time; links keep the current run correct regardless.

Sync nodes run on the scheduler's own thread when nothing else could run beside them (no hand-off
cost for cheap chains), else in a thread pool up to `max_parallel_nodes`. Async nodes run as
coroutines held by an external block, so their waiting overlaps other work without polling.
A seeded run executes one node at a time, async ones included.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from .cache import NoCache, OutputCache
from .collector import PROCESS_HOLD
from .context import CancelToken, EngineCallbacks, EventFn, RunState
from .errors import GraphError, NodeFailure, NodeOutputError
from .expansion import Expand
from .graph import Graph, NodeSpec, parse_graph
from .invoke import Outcome, call_async, call_sync, check_outputs, enable_deterministic, free_memory, is_out_of_memory
from .presets import PresetLibrary
from .registry import NodeRegistry, default_registry
from .scheduler import ASYNC, BLOCKS_OUTPUT, OTHER, OUTPUT, TWO_HOPS, ExecutionList
from .signatures import child_signature, compute_signatures, run_salt

# A pick class looks this many consumers deep at most, so classifying a node stays O(1).
_CLASS_SCAN_LIMIT = 64


@dataclass
class RunResult:
    status: str  # "succeeded" | "failed" | "cancelled"
    run_id: str
    outputs: dict[str, dict[str, Any]]
    error: NodeFailure | None = None
    executed: list[str] = field(default_factory=list)
    cached: list[str] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)  # last value of each series
    warnings: list[dict[str, Any]] = field(default_factory=list)
    seed: int | None = None
    device: str = "cpu"
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == "succeeded"

    def summary(self) -> dict[str, Any]:
        """JSON-safe description (outputs omitted: they are Python objects)."""
        return {
            "status": self.status, "run_id": self.run_id, "seed": self.seed, "device": self.device,
            "duration_s": round(self.duration_s, 4), "executed": self.executed, "cached": self.cached,
            "metrics": self.metrics, "warnings": self.warnings,
            "error": self.error.to_dict() if self.error else None,
        }


class _Execution:
    def __init__(self, graph: Graph, *, registry: NodeRegistry, presets: PresetLibrary, run: RunState,
                 cache: OutputCache, max_parallel_nodes: int, inline: bool, keep_outputs: str) -> None:
        self.registry = registry
        self.presets = presets
        self.run = run
        self.cache = cache
        self.no_cache = isinstance(cache, NoCache)
        self.limit = 1 if run.seed is not None else max(1, max_parallel_nodes)
        self.inline = inline
        self.keep_all = keep_outputs == "all"
        # The runtime graph starts as the validated graph and grows with expansions. Its maps by id
        # are the Graph's (which may be reused by the caller, and makes them only when asked) until
        # the first expansion copies them: a plain run reaches its nodes by handle and never asks.
        self._graph = graph
        self._maps: tuple[dict[str, NodeSpec], dict[str, dict[str, tuple[str, str]]],
                          dict[str, list[str]]] | None = None
        self.output_order = graph.output_nodes()  # graph order: the first output node is added first
        self.outputs_set = set(self.output_order)
        # Cache keys are only worth their cost when there is a cache to ask.
        self.sigs = {} if self.no_cache else compute_signatures(
            graph, run_salt(seed=run.seed, device=run.device, deterministic=run.deterministic),
            per_node_seed=run.seed is not None)
        self.bound: dict[str, dict[str, Any]] = {}
        self.strong_lazy: dict[str, set[str]] = {}
        self.links: dict[str, dict[str, dict[str, Any]]] = {}
        self.kept: dict[str, dict[str, Any]] = {}
        self.expansions: dict[str, dict[str, Any]] = {}
        self.async_results: dict[str, Outcome] = {}
        self.tasks: dict[str, asyncio.Task[Outcome]] = {}
        self.done_order: list[str] = []
        self.executed: list[str] = []
        self.cached: list[str] = []
        self.failure: NodeFailure | None = None
        self.cancelled = False
        # The scheduler works on dense integer handles; ids[h] and index[id] translate, and specs[h]
        # is the node: the steps of a run reach a node by its handle, through lists read in about
        # the order they were built, instead of probing 100k-entry maps by id.
        # inputs_h and consumers_h hold the very objects of the maps by id. A parsed graph has all of
        # this already (its `index` is shared until an expansion copies it); one built by hand is
        # translated here.
        self.deps: list[Sequence[int]] = graph.deps if graph.index is not None else []  # never changed
        if graph.index is not None:
            self.index: dict[str, int] = graph.index
            self.ids: list[str] = list(graph.index)
            self.specs: list[NodeSpec] = list(graph.specs)
            self.inputs_h = list(graph.inputs_h)
            self.consumers_h = list(graph.consumers_h)
        else:
            self.ids = list(graph.nodes)
            self.specs = list(graph.nodes.values())
            self.index = {nid: h for h, nid in enumerate(self.ids)}
            self.inputs_h = [graph.inputs[n] for n in self.ids]
            self.consumers_h = [graph.consumers[n] for n in self.ids]
        ids = self.ids
        self.done_h = bytearray(len(ids))  # 1 once the node's outputs exist (ran or cached)
        # Whether a node may have finished before one of its producers (it was cached, or it has
        # lazy inputs it did not ask for): only then must a producer skip finished consumers.
        self.early_done = False
        self.classes = self._initial_classes()
        self.sched = ExecutionList(self._deps_of, self._is_available, self._pick_class, size=len(self.ids))
        self._pool: ThreadPoolExecutor | None = None

    # The runtime maps by id, for the paths that need them (lazy inputs, expansions, failures).
    @property
    def nodes(self) -> dict[str, NodeSpec]:
        return self._graph.nodes if self._maps is None else self._maps[0]

    @property
    def inputs(self) -> dict[str, dict[str, tuple[str, str]]]:
        return self._graph.inputs if self._maps is None else self._maps[1]

    @property
    def consumers(self) -> dict[str, list[str]]:
        return self._graph.consumers if self._maps is None else self._maps[2]

    # -- callbacks for the scheduler ------------------------------------------------------------
    def _deps_of(self, handle: int) -> Sequence[int]:
        spec = self.specs[handle]
        if not spec.has_lazy:  # the common case
            if handle < len(self.deps):
                return self.deps[handle]
            index = self.index
            return [index[src] for src, _ in self.inputs_h[handle].values()]
        nid = self.ids[handle]
        index = self.index
        strong = self.strong_lazy.get(nid, ())
        return [index[src] for port, (src, _) in self.inputs[nid].items()
                if not spec.inputs[port].lazy or port in strong]

    def _is_available(self, dep_handle: int, handle: int) -> bool:
        links = self.links
        if links:  # empty while a run's outputs are admitted (unless a cache answered)
            link = links.get(self.ids[handle])
            if link is not None and self.ids[dep_handle] in link:
                return True
        if self.no_cache:
            return False
        dep, nid = self.ids[dep_handle], self.ids[handle]
        hit = self.cache.get(self.sigs[dep])
        if hit is None:
            return False
        self.links.setdefault(nid, {})[dep] = hit
        self._note_cached(dep, hit)
        return True

    def _initial_classes(self) -> bytearray:
        """Pick classes of the validated graph's nodes but ASYNC, walking back from the outputs:
        their producers block an output, and those producers' producers are two hops away. Work
        in proportion to the edges near outputs, instead of a scan of each node's consumers and
        theirs when it is admitted."""
        index = self.index
        classes = bytearray([OTHER]) * len(self.ids)
        feeds = bytearray(len(self.ids))
        feeding: list[int] = []  # producers of outputs, outputs among them
        for nid in self.output_order:
            classes[index[nid]] = OUTPUT
        deps = self.deps

        def producers(handle: int) -> Sequence[int]:
            return deps[handle] if deps else [index[src] for src, _ in self.inputs_h[handle].values()]

        for nid in self.output_order:
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

    def _pick_class(self, handle: int) -> int:
        if handle < len(self.classes):
            cls = self.classes[handle]
            return ASYNC if cls != OUTPUT and self.specs[handle].definition.is_async else cls
        # A node an expansion added: its consumers are few, scan them.
        nid = self.ids[handle]
        outputs = self.outputs_set
        if nid in outputs:
            return OUTPUT
        if self.specs[handle].definition.is_async:
            return ASYNC
        consumers = self.consumers[nid]
        if len(consumers) > _CLASS_SCAN_LIMIT:
            consumers = consumers[:_CLASS_SCAN_LIMIT]
        for c in consumers:
            if c in outputs:
                return BLOCKS_OUTPUT
        for c in consumers:
            second = self.consumers[c]
            for cc in second if len(second) <= _CLASS_SCAN_LIMIT else second[:_CLASS_SCAN_LIMIT]:
                if cc in outputs:
                    return TWO_HOPS
        return OTHER

    # -- the loop -------------------------------------------------------------------------------
    async def execute(self, built: Callable[[], None] | None = None) -> None:
        """Admit the output nodes, then run; `built` is called in between (nothing ran yet)."""
        for nid in self.output_order:
            hit = None if self.no_cache else self.cache.get(self.sigs[nid])
            if hit is not None:
                self._note_cached(nid, hit)
            else:
                self.sched.add_node(self.index[nid])
        if built is not None:
            built()
        if self.cached and self.run.reports_status:
            self.run.emit_status({"event": "execution_cached", "nodes": list(self.cached)})
        try:
            await self._loop()
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=True)

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        sched = self.sched
        event = sched.unblocked
        running: dict[asyncio.Future[Outcome], str] = {}
        wake = lambda: loop.call_soon_threadsafe(event.set)  # noqa: E731
        remove_hook = self.run.cancel.on_cancel(wake) if isinstance(self.run.cancel, CancelToken) else None
        try:
            while self.failure is None and not sched.is_empty():
                if self.run.cancelled:
                    self.cancelled = True
                    break
                while len(running) < self.limit and self.failure is None and not self.run.cancelled:
                    handle = sched.pick()
                    if handle is None:
                        break
                    nid = self.ids[handle]
                    prepared = self._prepare(nid, handle)
                    if prepared is None:
                        continue
                    spec, kwargs = prepared
                    if spec.definition.is_async:
                        if self.run.seed is not None:  # a seeded run overlaps nothing
                            self._finish(nid, await call_async(self.run, spec, kwargs), handle)
                        else:
                            self._start_async(nid, spec, kwargs)
                    elif self.inline and not running and not self.tasks and (self.limit == 1 or not sched.has_ready()):
                        self._finish(nid, call_sync(self.run, spec, kwargs), handle)
                    else:
                        fut = loop.run_in_executor(self._executor(), call_sync, self.run, spec, kwargs)
                        fut.add_done_callback(lambda _f: event.set())
                        running[fut] = nid
                if self.failure is not None or self.cancelled or sched.is_empty():
                    break
                if not running and not sched.has_ready() and not sched.external_blocks:
                    self._fail_cycle()
                    break
                if sched.has_ready() and len(running) < self.limit:
                    continue
                event.clear()
                if not any(f.done() for f in running) and not self.run.cancelled:
                    if remove_hook is None and not isinstance(self.run.cancel, CancelToken):
                        try:  # a plain threading.Event cannot wake us; look at it now and then
                            await asyncio.wait_for(event.wait(), 0.2)
                        except asyncio.TimeoutError:
                            pass
                    else:
                        await event.wait()
                for fut in [f for f in running if f.done()]:
                    self._finish(running.pop(fut), fut.result())
        finally:
            if remove_hook is not None:
                remove_hook()
            if running or self.tasks:
                self.run.stop.set()  # nodes still going see it at their next check_cancelled
                for task in self.tasks.values():
                    task.cancel()
                await asyncio.gather(*running, *self.tasks.values(), return_exceptions=True)
                for fut, nid in running.items():
                    if not fut.cancelled() and fut.exception() is None:
                        self._late_outcome(nid, fut.result())

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self.limit, thread_name_prefix="codefy-node")
        return self._pool

    def _start_async(self, nid: str, spec: NodeSpec, kwargs: dict[str, Any]) -> None:
        handle = self.index[nid]
        unblock = self.sched.add_external_block(handle)
        self.sched.unstage(handle)
        task = asyncio.get_running_loop().create_task(call_async(self.run, spec, kwargs))

        def finished(t: asyncio.Task[Outcome]) -> None:
            self.tasks.pop(nid, None)
            if not t.cancelled():
                self.async_results[nid] = t.result()
            unblock()

        task.add_done_callback(finished)
        self.tasks[nid] = task

    # -- one node -------------------------------------------------------------------------------
    def _prepare(self, nid: str, handle: int) -> tuple[NodeSpec, dict[str, Any]] | None:
        """Resolve a staged node that needs no call, or return what to call it with."""
        outcome = self.async_results.pop(nid, None)
        if outcome is not None:
            self._finish(nid, outcome, handle)
            return None
        if nid in self.expansions:
            self._resolve_expansion(nid)
            return None
        if not self.no_cache:
            hit = self.cache.get(self.sigs[nid])  # defensive: an equal node may have just filled it
            if hit is not None:
                self._complete(nid, hit, cached=True, handle=handle)
                return None
        spec = self.specs[handle]
        kwargs = dict(spec.params)
        links = self.links.get(nid, {})
        sources = self.inputs_h[handle]
        if not spec.has_lazy and (not self.bound or nid not in self.bound):
            # The common case, without a look at each input's PortSpec: a node with 10k inputs
            # would otherwise read 10k objects allocated long before, for nothing.
            ports = spec.inputs
            if len(sources) == len(ports):
                # Every input connected, and edges usually list them in the ports' order: walk both
                # side by side while they agree, comparing names instead of probing a map that has
                # as many entries as the node has inputs.
                for port, (name, src) in zip(ports, sources.items()):
                    if port != name:
                        break
                    kwargs[port] = links[src[0]][src[1]]
                else:
                    return spec, kwargs
            for port in ports:  # kwargs keep the ports' order: a **kwargs node may rely on it
                src = sources.get(port)
                kwargs[port] = None if src is None else links[src[0]][src[1]]
            return spec, kwargs
        bound = self.bound.get(nid, {})
        strong = self.strong_lazy.get(nid, ())
        for port, pspec in spec.inputs.items():
            src = sources.get(port)
            if src is None:
                kwargs[port] = bound.get(port)
            elif pspec.lazy and port not in strong:
                kwargs[port] = None
            else:
                kwargs[port] = links[src[0]][src[1]]
        lazy_check = spec.definition.lazy_check
        if lazy_check is not None and not self._lazy_ready(spec, kwargs):
            return None
        return spec, kwargs

    def _lazy_ready(self, spec: NodeSpec, kwargs: dict[str, Any]) -> bool:
        """Ask the node which lazy inputs it needs; link them (PENDING) or fill them in."""
        from .context import ExecutionContext

        nid = spec.id
        try:
            needed = spec.definition.lazy_check(ExecutionContext(self.run, nid, spec.type), **kwargs)
        except Exception as err:
            self._fail(nid, err, code="lazy_check_failed")
            return False
        if not isinstance(needed, (list, tuple, set)) or not all(isinstance(n, str) for n in needed):
            self._fail(nid, NodeOutputError("check_lazy_status must return a list of input names",
                                            field="check_lazy_status"))
            return False
        unknown = [n for n in needed if n not in spec.inputs or not spec.inputs[n].lazy]
        if unknown:
            self._fail(nid, NodeOutputError(f"check_lazy_status asked for {unknown[0]!r}, which is not a lazy "
                                            "input", field=f"inputs.{unknown[0]}"))
            return False
        strong = self.strong_lazy.setdefault(nid, set())
        newly = [n for n in needed if n not in strong and n in self.inputs[nid]]
        if not newly:
            return True
        for port in newly:
            strong.add(port)
            self.sched.add_strong_link(self.index[self.inputs[nid][port][0]], self.index[nid])
        if self.sched.block_count[self.index[nid]] > 0:
            self.sched.unstage(self.index[nid])
            self._status(spec, "pending", reason="lazy_inputs", inputs=newly)
            return False
        links = self.links[nid]
        for port in newly:
            src, src_port = self.inputs[nid][port]
            kwargs[port] = links[src][src_port]
        return True

    def _finish(self, nid: str, outcome: Outcome, handle: int | None = None) -> None:
        spec = self.specs[self.index[nid] if handle is None else handle]
        if outcome.kind == "cancelled":
            if self.failure is None:
                self.cancelled = True
                self._status(spec, "cancelled")
            return
        if outcome.kind == "error":
            self._fail(nid, outcome.error, tb=outcome.traceback)
            return
        if self.run.cancel.is_set() and outcome.ctx is not None and not outcome.ctx.checked_cancel:
            self._warn(nid, "cancel_not_checked", f"node {nid!r} ({spec.type}) does not check for cancellation; "
                       "it ran to completion after the cancel request")
        try:
            value = check_outputs(spec, outcome.value)
        except NodeOutputError as err:
            self._fail(nid, err, code=err.code, field=err.field)
            return
        if isinstance(value, Expand):
            self._expand(nid, value)
        else:
            self._complete(nid, value, cached=False, elapsed_s=outcome.elapsed_s, handle=handle)

    def _late_outcome(self, nid: str, outcome: Outcome) -> None:
        """A node that finished after the run stopped: count it as executed, use nothing of it."""
        if outcome.kind == "ok" and not self.done_h[self.index[nid]]:
            self.executed.append(nid)

    def _complete(self, nid: str, outputs: dict[str, Any], *, cached: bool, elapsed_s: float = 0.0,
                  handle: int | None = None) -> None:
        h = self.index[nid] if handle is None else handle
        self.sched.complete(h)
        self.done_h[h] = 1
        self.done_order.append(nid)
        if cached or self.specs[h].has_lazy:
            self.early_done = True
        if cached:
            self.cached.append(nid)
        else:
            self.executed.append(nid)
            if not self.no_cache:
                sig = self.sigs[nid]
                if not sig.startswith("nocache:"):
                    self.cache.set(sig, outputs)
        links = self.links
        if self.early_done:
            index, done_h = self.index, self.done_h
            for consumer in self.consumers_h[h]:
                if not done_h[index[consumer]]:
                    links.setdefault(consumer, {})[nid] = outputs
        else:
            for consumer in self.consumers_h[h]:
                links.setdefault(consumer, {})[nid] = outputs
        links.pop(nid, None)
        if self.keep_all or nid in self.outputs_set:
            self.kept[nid] = outputs
        if self.run.reports_status:
            spec = self.specs[h]
            if cached:
                self._status(spec, "cached")
            else:
                self._status(spec, "done", elapsed_s=round(elapsed_s, 6))
        if not self.no_cache:
            self.cache.at_node_boundary()

    def _note_cached(self, nid: str, outputs: dict[str, Any]) -> None:
        h = self.index[nid]
        if not self.done_h[h]:
            self.done_h[h] = 1
            self.early_done = True
            self.done_order.append(nid)
            self.cached.append(nid)
            if self.keep_all or nid in self.outputs_set:
                self.kept[nid] = outputs

    # -- expansion ------------------------------------------------------------------------------
    def _expand(self, parent: str, exp: Expand) -> None:
        spec = self.nodes[parent]
        bound_local = {(inner, port) for inner, ports in exp.inputs.items() for port in ports}
        try:
            sub = parse_graph(exp.graph, self.registry, self.presets, prefix=f"{parent}/", bound=bound_local)
        except GraphError as err:
            self._fail(parent, err, code="invalid_expansion")
            return
        resolved: dict[str, Any] = {}
        problem = None
        for port in spec.outputs:
            if port not in exp.outputs:
                problem = (f"expansion gives no value for output {port!r}", f"outputs.{port}")
        for port, ref in exp.outputs.items():
            if port not in spec.outputs:
                problem = (f"expansion maps unknown output {port!r}", f"outputs.{port}")
                continue
            refs = ref if isinstance(ref, list) else [ref]
            full = []
            for item in refs:
                inner, inner_port = f"{parent}/{item[0]}", item[1]
                if inner not in sub.nodes or inner_port not in sub.nodes[inner].outputs:
                    problem = (f"expansion output {port!r} points at {item[0]}.{inner_port}, which does not exist",
                               f"outputs.{port}")
                full.append((inner, inner_port))
            resolved[port] = full if isinstance(ref, list) else full[0]
        for inner in exp.inputs:
            if f"{parent}/{inner}" not in sub.nodes:
                problem = (f"expansion binds inputs of {inner!r}, which is not in its graph", "inputs")
        if problem is not None:
            self._fail(parent, NodeOutputError(problem[0], field=problem[1]), code="invalid_expansion",
                       field=problem[1])
            return
        if self._maps is None:
            # Shallow copies: only an expansion's own nodes gain consumers, and they get new lists.
            self._maps = (dict(self._graph.nodes), dict(self._graph.inputs), dict(self._graph.consumers))
            self.index = dict(self.index)
        self.nodes.update(sub.nodes)
        self.inputs.update(sub.inputs)
        for nid, inner_spec in sub.nodes.items():
            self.index[nid] = len(self.ids)
            self.ids.append(nid)
            self.specs.append(inner_spec)
            self.inputs_h.append(sub.inputs[nid])
        self.sched.grow(len(self.ids))
        self.done_h.extend(bytes(len(sub.nodes)))
        for nid, consumers in sub.consumers.items():
            self.consumers[nid] = list(consumers)
            if not self.no_cache:
                self.sigs[nid] = child_signature(self.sigs[parent], nid[len(parent) + 1:],
                                                 sub.nodes[nid].definition.cacheable)
        self.consumers_h.extend(self.consumers[nid] for nid in sub.nodes)
        for inner, ports in exp.inputs.items():
            self.bound[f"{parent}/{inner}"] = dict(ports)
        targets = {ref[0] for refs in resolved.values() for ref in (refs if isinstance(refs, list) else [refs])}
        targets.update(sub.output_nodes())
        self.expansions[parent] = resolved
        position = {nid: i for i, nid in enumerate(sub.nodes)}
        for inner in sorted(targets, key=position.__getitem__):
            self.consumers[inner].append(parent)
            self.sched.add_strong_link(self.index[inner], self.index[parent])
        self.sched.unstage(self.index[parent])
        self._status(spec, "pending", reason="expanded", nodes=len(sub.nodes))

    def _resolve_expansion(self, parent: str) -> None:
        refs = self.expansions.pop(parent)
        links = self.links.get(parent, {})
        outputs = {}
        for port, ref in refs.items():
            if isinstance(ref, list):
                outputs[port] = [links[n][p] for n, p in ref]
            else:
                outputs[port] = links[ref[0]][ref[1]]
        self._complete(parent, outputs, cached=False)

    # -- failure and reports --------------------------------------------------------------------
    def _fail(self, nid: str, err: BaseException | None, *, tb: str = "", code: str = "node_failed",
              field: str | None = None) -> None:
        if self.failure is not None:
            return
        spec = self.nodes[nid]
        hint = None
        if err is not None and is_out_of_memory(err):
            self.links.clear()
            self.cache.clear()
            free_memory()
            code = "out_of_memory"
            hint = (f"out of memory on {self.run.device}; cached outputs were released. Try a smaller batch "
                    "size or model, or another device.")
        if field is None:
            field = getattr(err, "field", None)
        self.failure = NodeFailure(
            node_id=nid, node_type=spec.type, exception_type=type(err).__name__ if err else "Error",
            message=str(err) if err else "failed", traceback=tb, code=code, field=field, hint=hint,
            executed=list(self.executed), outputs_present=list(self.done_order),
            params=err.to_dict()["params"] if isinstance(err, GraphError) else {},
        )
        self._status(spec, "failed", error=self.failure.message)

    def _fail_cycle(self) -> None:
        cycles = self.sched.find_cycle()
        nodes = [self.ids[h] for h in (cycles[0] if cycles else self.sched.pending())]
        shown = nodes[0].split("/", 1)[0]  # attribute to a node the user can see
        spec = self.nodes[shown]
        message = "dependency cycle through " + ", ".join(repr(n) for n in nodes)
        self.failure = NodeFailure(
            node_id=shown, node_type=spec.type, exception_type="CycleError", message=message, code="cycle",
            executed=list(self.executed), outputs_present=list(self.done_order), params={"cycle": nodes})
        self._status(spec, "failed", error=message)

    def _status(self, spec: NodeSpec, status: str, **extra: Any) -> None:
        if self.run.reports_status:
            self.run.emit_status({"event": "node_status", "node_id": spec.id, "node_type": spec.type,
                                  "status": status, **extra})

    def _warn(self, nid: str, code: str, message: str) -> None:
        self.run.emit_signal({"event": "warning", "node_id": nid, "code": code, "message": message, "params": {}})


# ---------------------------------------------------------------------------------------------


async def execute_graph(
    graph: dict[str, Any] | Graph,
    *,
    seed: int | None = None,
    device: str = "cpu",
    max_parallel_nodes: int = 4,
    cache: OutputCache | None = None,
    on_event: EventFn | None = None,
    callbacks: EngineCallbacks | None = None,
    cancel: CancelToken | threading.Event | None = None,
    deterministic: bool = False,
    registry: NodeRegistry | None = None,
    presets: PresetLibrary | None = None,
    data_dir: str | Path | None = None,
    run_id: str | None = None,
    keep_outputs: str = "outputs",
    inline: bool = False,
    freeze_gc: bool = False,
    clock: Callable[[], float] = time.monotonic,
    cpu_threads: int | None = None,
) -> RunResult:
    """Run a graph on the current event loop. Raises GraphError before running an invalid graph.

    `cpu_threads`: the run's CPU thread budget, applied to torch on every thread that executes one
    of its nodes (see torch_threads.py); None leaves torch's own defaults.

    `inline=True` lets cheap sync nodes run on the loop's thread; only pass it when this loop
    serves nothing else (run_graph's own loop), since a node then blocks the loop while it runs.
    `freeze_gc=True` keeps the garbage collector off the run's own structures (see collector.py);
    it changes process-wide collector state, so only a caller that owns the process passes it.
    """
    if keep_outputs not in ("outputs", "all"):
        raise ValueError("keep_outputs must be 'outputs' or 'all'")
    if cpu_threads is not None and (type(cpu_threads) is not int or cpu_threads < 1):
        raise ValueError(f"cpu_threads must be a positive integer or None, got {cpu_threads!r}")
    if on_event is not None and callbacks is not None:
        raise ValueError("pass on_event or callbacks, not both")
    held = freeze_gc and PROCESS_HOLD.hold()
    building = held

    def built() -> None:  # the run's structures exist and no node ran yet
        nonlocal building
        if building:
            building = False
            PROCESS_HOLD.built()

    try:
        registry = registry or default_registry()
        presets = presets or PresetLibrary.default()
        parsed = graph if isinstance(graph, Graph) else parse_graph(graph, registry, presets)
        run_id = run_id or uuid.uuid4().hex[:12]
        metrics: dict[str, float] = {}
        warnings: list[dict[str, Any]] = []
        base = callbacks or EngineCallbacks.all_to(on_event)

        def signal(event: dict[str, Any]) -> None:
            if event["event"] == "metric":
                metrics[event["name"]] = event["value"]
            elif event["event"] == "warning":
                warnings.append(event)
            if base.signal is not None:
                base.signal(event)

        run = RunState(
            run_id=run_id, seed=seed, device=device, deterministic=deterministic,
            data_dir=Path(data_dir) if data_dir else Path.cwd() / ".codefy-data" / "runs" / run_id,
            callbacks=EngineCallbacks(base.status, base.inner_status, signal), cancel=cancel, clock=clock,
            cpu_threads=cpu_threads)
        run.presets = presets
        cache = cache if cache is not None else NoCache()
        started = clock()
        execution = _Execution(parsed, registry=registry, presets=presets, run=run, cache=cache,
                               max_parallel_nodes=max_parallel_nodes, inline=inline, keep_outputs=keep_outputs)
        restore = enable_deterministic() if deterministic else None
        cache.begin_run(run_id)
        try:
            await execution.execute(built)
        finally:
            cache.end_run(run_id)
            if restore is not None:
                restore()
    finally:
        built()
        if held:
            PROCESS_HOLD.release()
    if execution.failure is not None:
        status = "failed"
    elif execution.cancelled:
        status = "cancelled"
    else:
        status = "succeeded"
    return RunResult(status=status, run_id=run_id, outputs=execution.kept, error=execution.failure,
                     executed=execution.executed, cached=execution.cached, metrics=metrics, warnings=warnings,
                     seed=seed, device=device, duration_s=clock() - started)


def run_graph(graph: dict[str, Any] | Graph, **kwargs: Any) -> RunResult:
    """Run a graph to the end and return its RunResult. See `execute_graph` for the options.

    Works inside a running event loop too (a notebook): the run then gets a thread of its own.
    """
    kwargs.setdefault("inline", True)
    # run_graph is the whole of what its caller is doing (a script, a notebook cell, `codefy run`),
    # so it may keep the collector off the run's own structures until the run ends.
    kwargs.setdefault("freeze_gc", True)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(execute_graph(graph, **kwargs))
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="codefy-run") as pool:
        return pool.submit(asyncio.run, execute_graph(graph, **kwargs)).result()


