"""`Execution`: one run of a validated graph: drive the scheduler, run nodes, keep values where
consumers find them (the entry points that set a run up are executor.py's).

Values flow through execution-local links: when a node finishes, each consumer that has not run yet
gets a link to its outputs (`links[consumer][producer]`), dropped when that consumer finishes. The
global cache may evict anything at any time; links keep the current run correct regardless.

Sync nodes run on the scheduler's own thread when nothing else could run beside them (no hand-off
cost for cheap chains), else in a thread pool up to `max_parallel_nodes`. Async nodes run as
coroutines held by an external block, so their waiting overlaps other work without polling.
A seeded run executes one node at a time, async ones included.

A node may return `Expand` (expansion.py): its subgraph joins the runtime graph, and the node
completes with the values of the inner nodes its outputs point at.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Sequence

from .cache import NoCache, OutputCache
from .context import CancelToken, RunState
from .errors import GraphError, NodeFailure, NodeOutputError
from .expansion import Expand, resolve_outputs
from .graph import Graph, NodeSpec, parse_graph
from .invoke import Outcome, call_async, call_sync, check_outputs, free_memory, is_out_of_memory
from .pick_classes import initial_classes, scan_class
from .presets import PresetLibrary
from .registry import NodeRegistry
from .scheduler import ASYNC, OUTPUT, ExecutionList
from .signatures import child_signature, compute_signatures, run_salt


class Execution:
    """One run of a validated graph: its state, the scheduler's callbacks, and the loop."""

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
        self.classes = initial_classes(self.output_order, self.index, self.deps, self.inputs_h, len(ids))
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

    def _pick_class(self, handle: int) -> int:
        if handle < len(self.classes):
            cls = self.classes[handle]
            return ASYNC if cls != OUTPUT and self.specs[handle].definition.is_async else cls
        # A node an expansion added: its consumers are few, scan them.
        nid = self.ids[handle]
        if nid not in self.outputs_set and self.specs[handle].definition.is_async:
            return ASYNC
        return scan_class(nid, self.outputs_set, self.consumers)

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
        if links and not self.no_cache and self.cache.evicted_count():
            self._write_back(links)
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

    def _write_back(self, links: dict[str, dict[str, Any]]) -> None:
        """The seed's link write-back: a value this consumer reads through its link that the cache
        dropped goes back into the cache, so that later consumers and later runs find it there."""
        sigs = self.sigs
        for producer, outputs in links.items():
            sig = sigs.get(producer)
            if sig is not None and not sig.startswith("nocache:"):
                self.cache.write_back(sig, outputs)

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
            if not self.no_cache:  # a node boundary too (seed: checked on complete and on pending)
                self.cache.at_node_boundary()
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
        resolved, problem = resolve_outputs(parent, spec.outputs, exp, sub.nodes)
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
        if not self.no_cache:
            self.cache.at_node_boundary()

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
