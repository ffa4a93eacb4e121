"""`codefy run GRAPH.json` and `codefy runs watch ID`: submit a graph to the run queue and follow
its run live, on top of the Python client (`client/client.py`) and its server discovery.

A run belongs to the server: `codefy run` submits it and then only watches. Ctrl+C, `--timeout`
and a lost server stop the watching, never the run.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any, Callable

from ..client.flags import add_run_arguments, server_from_arguments, submit_options
from ..wire import messages as words
from . import interrupts
from .args import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK
from .output import announce, dump, error_doc, fail, out, row, value_text
from .servers import reconnect_s
from .terminal import LiveView, format_seconds

QUEUED_POLL_S = 1.0  # a waiting run's place in line is re-read this often


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Register `run` on the `codefy` command's subparsers (its flags are the client's, which
    `%codefy run` takes too)."""
    run = sub.add_parser("run", help="submit a graph to a codefy server and follow the run",
                         description="Submit a graph file to a running codefy server and stream its progress. "
                         "The run belongs to the server: Ctrl+C or --timeout stop watching, not the run. "
                         "Exit codes: 0 succeeded (or submitted with --detach), 1 failed, cancelled, interrupted, "
                         "timed out or not submitted, 2 bad arguments, 130 Ctrl+C.")
    add_run_arguments(run)


# -- codefy run -------------------------------------------------------------------------------


def run_command(args: argparse.Namespace) -> int:
    from ..client.client import load_graph
    from ..client.errors import CodefyError

    try:
        graph = load_graph(args.graph)
    except CodefyError as err:
        return fail(str(err), args.json, error_doc(err))
    try:
        server = server_from_arguments(args)
    except CodefyError as err:
        return fail(str(err), args.json, error_doc(err))
    if not args.json:
        announce(server)

    watcher = RunWatcher(server, graph=graph, graph_name=Path(args.graph).name, options=submit_options(args),
                         detach=args.detach, timeout=args.timeout, as_json=args.json)
    try:
        return interrupts.run(watcher.main())
    except KeyboardInterrupt:
        return watcher.interrupted()


def watch_command(args: argparse.Namespace) -> int:
    """`codefy runs watch ID`: `codefy run`'s live view of a run already submitted, replayed from its
    log (so a finished run shows whole) and followed live to its end."""
    from ..client.errors import CodefyError

    try:
        server = server_from_arguments(args)
    except CodefyError as err:
        return fail(str(err), args.json, error_doc(err))
    if not args.json:
        announce(server)
    watcher = RunWatcher(server, graph=None, graph_name=None, options={}, detach=False, timeout=args.timeout,
                         as_json=args.json)
    try:
        return interrupts.run(watcher.main(args.run_id))
    except KeyboardInterrupt:
        return watcher.interrupted()


class RunWatcher:
    def __init__(self, server: Any, *, graph: dict[str, Any] | None, graph_name: str | None, options: dict[str, Any],
                 detach: bool, timeout: float | None, as_json: bool) -> None:
        self.server, self.graph, self.graph_name, self.options = server, graph, graph_name, options
        self.detach, self.timeout, self.as_json = detach, timeout, as_json
        self.run: dict[str, Any] | None = None
        self.view = None if as_json else LiveView(sys.stdout)
        self.client: Any = None

    async def main(self, run_id: str | None = None) -> int:
        """Submit the graph and watch its run; with `run_id`, watch that run instead, from the start
        of its log (`codefy runs watch`)."""
        from ..client.client import AsyncClient
        from ..client.errors import CodefyError, describe

        self.client = AsyncClient(server=self.server)
        try:
            if run_id is not None:
                try:
                    self.run = await self.client.get(run_id)
                except CodefyError as err:
                    return fail(describe(err, self.server.url), self.as_json, error_doc(err), self.server)
                if not self.as_json:
                    self._header("=== Run ===")
            else:
                try:
                    self.run = await self.client.submit(self.graph, **self.options)
                except CodefyError as err:
                    if err.status is None or err.status == 403:
                        return fail(describe(err, self.server.url), self.as_json, error_doc(err), self.server)
                    return fail(f"the server refused the run: {describe(err)}", self.as_json, error_doc(err),
                                self.server)
                if self.detach:
                    if self.as_json:
                        dump(self.run, self.server)
                    else:
                        self._header("=== Run submitted ===")
                    return EXIT_OK
                if not self.as_json:
                    self._header("=== Run submitted ===")
            try:
                if self.timeout is not None:
                    return await asyncio.wait_for(self._watch(), self.timeout)
                return await self._watch()
            except asyncio.TimeoutError:
                return await self._timed_out()
            except CodefyError as err:
                if err.code == "unreachable":
                    self._close_view()
                    return fail(f"lost the codefy server at {self.server.url} while watching run {self.run['id']} "
                                f"(no answer for {reconnect_s():g} s): {err}\n  The run may still be going on "
                                f"the server; check it with `codefy runs show {self.run['id']}` once it is back.",
                                self.as_json, error_doc(err), self.server)
                self._close_view()
                return fail(describe(err, self.server.url), self.as_json, error_doc(err), self.server)
        finally:
            await self.client.close()

    # -- output -------------------------------------------------------------------------------
    def _header(self, title: str) -> None:
        run = self.run or {}
        target = (run.get("options") or {}).get("target") or {}
        out(title)
        out(row("Run ID", run.get("id")))
        if run.get("name"):
            out(row("Name", run["name"]))
        if self.graph_name:
            out(row("Graph", self.graph_name))
        out(row("Target", run.get("worker_id") or target.get("worker") or "local"))
        out(row("Device", run.get("device")))
        if len(run.get("devices") or []) > 1:
            out(row("Devices", ", ".join(run["devices"])))
        if run.get("queue_key") and run.get("queue_key") != run.get("device"):
            out(row("Queue", run["queue_key"]))
        if run.get("seed") is not None:
            out(row("Seed", run["seed"]))
        out(row("Status", run.get("status")))
        if self.graph_name:  # submitted here: how to come back to it
            out(row("Watch", f"codefy runs watch {run.get('id')}"))
        out()

    def _close_view(self) -> None:
        if self.view is not None:
            self.view.close()

    def interrupted(self) -> int:
        self._close_view()
        if self.run is None:
            out("\n■ interrupted before the server answered; the run may have been submitted "
                "(`codefy runs ls` shows it)", sys.stderr)
        else:
            out(f"\n■ stopped watching (Ctrl+C): run {self.run['id']} keeps going on the server. "
                f"Watch it again with `codefy runs watch {self.run['id']}`, "
                f"stop it with `codefy runs cancel {self.run['id']}`.", sys.stderr)
        return EXIT_INTERRUPTED

    async def _timed_out(self) -> int:
        from ..client.errors import CodefyError

        self._close_view()
        run_id = self.run["id"] if self.run else "?"
        status = "still active"
        try:
            current = await asyncio.wait_for(self.client.get(run_id), 5)
            status = f"still {current['status']}"
            self.run = current
        except (CodefyError, asyncio.TimeoutError):
            pass
        message = (f"stopped watching after {self.timeout:g} s: run {run_id} is {status} and keeps going on the "
                   f"server (`codefy runs watch {run_id}`)")
        if self.as_json:
            dump({"status": "timeout", "message": message, "run": self.run}, self.server)
        else:
            out(f"⧗ {message}", sys.stderr)
        return EXIT_FAILED

    # -- watching -----------------------------------------------------------------------------
    async def _retrying(self, call: Callable[[], Any]) -> Any:
        """`call()`, retried while the server does not answer, for up to the reconnect window."""
        from ..client.errors import CodefyError

        loop = asyncio.get_running_loop()
        lost_since: float | None = None
        while True:
            try:
                return await call()
            except CodefyError as err:
                if err.code != "unreachable":
                    raise
                lost_since = lost_since or loop.time()
                if loop.time() - lost_since > reconnect_s():
                    raise
                await asyncio.sleep(0.5)

    async def _wait_in_line(self) -> None:
        """While the run waits in its queue: its place in line, re-read until it starts or ends."""
        assert self.run is not None
        run_id = self.run["id"]
        shown = None
        run = self.run
        while run.get("status") == "queued":
            reason = words.text_of(run.get("queue_reason")) or None
            key = (run.get("queue_position"), run.get("queue_key"), reason)
            if key != shown and not self.as_json:
                pos = run.get("queue_position")
                where = f"position {pos} on {run.get('queue_key')}" if pos else f"on {run.get('queue_key')}"
                out(f"  ○ queued  {where}" + (f" — {reason}" if reason else ""))
                shown = key
            page = await self._retrying(lambda: self.client.events(run_id, 0, wait=QUEUED_POLL_S))
            if page["events"]:
                return
            run = await self._retrying(lambda: self.client.get(run_id))

    async def _watch(self) -> int:
        assert self.run is not None
        run_id = self.run["id"]
        await self._wait_in_line()
        closing: dict[str, Any] | None = None
        async for event in self.client.follow(run_id, 0, reconnect_s=reconnect_s()):
            if event["type"] in ("execution_complete", "execution_error", "execution_stopped"):
                closing = event
                break
            self._show(event)
        self._close_view()
        final = await self._retrying(lambda: self.client.get(run_id))
        if self.as_json:
            dump(final, self.server)
            return EXIT_OK if final["status"] == "succeeded" else EXIT_FAILED
        payload = (closing or {}).get("payload") or {}
        status = payload.get("status") or final["status"]
        if status == "succeeded":
            self._succeeded(payload)
            return EXIT_OK
        if status == "failed":
            self._failed(payload.get("error") or final.get("error") or {})
        else:
            reason = payload.get("reason") or {}
            mark = "■ cancelled" if status == "cancelled" else f"■ {status}"
            out(f"{mark}" + (f": {reason['message']}" if reason.get("message") else ""))
            out()
            out(row("Result", status))
        return EXIT_FAILED

    def _show(self, event: dict[str, Any]) -> None:
        kind, payload = event["type"], event.get("payload") or {}
        if self.as_json:
            return
        if kind == "execution_start":
            self._close_view()
            seeded = f", seed {payload['seed']}" if payload.get("seed") is not None else ""
            where = f" (worker {payload['worker']})" if payload.get("worker") else ""
            out(f"  ▸ started on {payload.get('device')}{where}{seeded}")
            return
        if self.view is None:
            return
        engine = {"event": "warning" if kind == "run_warning" else kind, **payload}
        try:
            # The log's own time paces a view fed from it: a replay throttles as the run did live.
            self.view(engine, at=event.get("created_at"))
        except (KeyError, TypeError, ValueError):  # an event of a shape this view does not know
            pass

    def _succeeded(self, payload: dict[str, Any]) -> None:
        duration = payload.get("duration_s")
        took = f" in {format_seconds(duration)}" if isinstance(duration, (int, float)) else ""
        counts = ""
        if "executed" in payload:
            counts = f" ({payload.get('executed', 0)} executed, {payload.get('cached', 0)} cached)"
        out(f"✓ run complete{took}{counts}")
        out()
        out(row("Result", "succeeded"))
        for name, value in (payload.get("metrics") or {}).items():
            out(row(name, value_text(value)))

    def _failed(self, error: dict[str, Any]) -> None:
        out("✗ run failed")
        if error.get("node_id"):
            out(row("Node", f"{error['node_id']} ({error.get('node_type')})"))
        if error.get("exception_type"):
            out(row("Exception", error["exception_type"]))
        elif error.get("code"):
            out(row("Code", error["code"]))
        if error.get("field"):
            out(row("Field", error["field"]))
        out(row("Message", words.text_of(error) if error.get("code") else error.get("message", "")))
        if error.get("hint"):
            out(row("Hint", error["hint"]))
        out()
        out(row("Result", "failed"))
