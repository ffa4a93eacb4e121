"""`codefy run GRAPH.json` and `codefy runs ls|show|cancel|rm|events|metrics`: the terminal client
of the run queue, on top of the Python client (`kernel/client.py`) and its server discovery.

A run belongs to the server: `codefy run` submits it and then only watches. Ctrl+C, `--timeout`
and a lost server stop the watching, never the run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, TextIO

from .args import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, SEED_MAX, int_in, seconds
LIST_LIMIT = 50
FINISHED = ("succeeded", "failed", "cancelled", "interrupted")
# How long a watcher keeps retrying a server that stopped answering (seconds).
RECONNECT_ENV = "CODEFY_RECONNECT_S"
DEFAULT_RECONNECT_S = 30.0
QUEUED_POLL_S = 1.0  # a waiting run's place in line is re-read this often
SPARK = "▁▂▃▄▅▆▇█"
PLOT_WIDTH = 48


def _reconnect_s() -> float:
    try:
        return max(0.0, float(os.environ.get(RECONNECT_ENV, DEFAULT_RECONNECT_S)))
    except ValueError:
        return DEFAULT_RECONNECT_S


# -- argument types ---------------------------------------------------------------------------


_int_in = int_in
_positive_seconds = seconds(allow_zero=False)


def _device_list(text: str) -> list[str]:
    devices = [d.strip() for d in text.split(",")]
    if not text.strip() or any(not d for d in devices):
        raise argparse.ArgumentTypeError(f"must be a comma-separated list of devices, e.g. cuda:0,cuda:1, got {text!r}")
    return devices


def _server_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("server (default: $CODEFY_URL, else the last `codefy start`, else a running "
                             "Jupyter server with codefy-jupyter)")
    g.add_argument("--url", help="the server's base URL, e.g. http://127.0.0.1:8888/")
    g.add_argument("--token", help="the server's token (default: $CODEFY_TOKEN, or the token `codefy start` "
                   "recorded for that address)")
    g.add_argument("--host", help="server host, a shortcut for --url (default 127.0.0.1 when --port is given)")
    g.add_argument("--port", type=_int_in("port", 1, 65535), help="server port, a shortcut for --url (default 8888 "
                   "when --host is given)")


def add_parsers(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Register `run` and `runs` on the `codefy` command's subparsers."""
    run = sub.add_parser("run", help="submit a graph to a codefy server and follow the run",
                         description="Submit a graph file to a running codefy server and stream its progress. "
                         "The run belongs to the server: Ctrl+C or --timeout stop watching, not the run. "
                         "Exit codes: 0 succeeded (or submitted with --detach), 1 failed, cancelled, interrupted, "
                         "timed out or not submitted, 2 bad arguments, 130 Ctrl+C.")
    run.add_argument("graph", help="graph JSON file")
    run.add_argument("--name", help="label stored on the run and shown wherever runs are listed")
    run.add_argument("--device", help="cpu, auto, cuda, cuda:N, mps or mps:N (default: the graph's settings.device, "
                     "else cpu; with --devices, its first device)")
    run.add_argument("--target", help="where the run executes: local (this server, the default), a worker's name, "
                     "or any")
    run.add_argument("--devices", type=_device_list, metavar="LIST",
                     help="comma-separated device set of one kind, e.g. cuda:0,cuda:1")
    seed = run.add_mutually_exclusive_group()
    seed.add_argument("--seed", type=_int_in("seed", 0, SEED_MAX),
                      help="seed every node from N (default: the graph's settings.seed)")
    seed.add_argument("--no-seed", action="store_true", help="run unseeded even when the graph sets a seed")
    run.add_argument("--deterministic", action="store_true", help="ask PyTorch for deterministic kernels (warn_only)")
    run.add_argument("--record-outputs", action="store_true", help="capture node outputs for later inspection")
    mode = run.add_mutually_exclusive_group()
    mode.add_argument("--wait", action="store_true", help="stream progress until the run ends (the default)")
    mode.add_argument("--detach", action="store_true", help="print the submitted run and exit 0 at once")
    run.add_argument("--timeout", type=_positive_seconds, metavar="S",
                     help="stop watching after S seconds and exit 1 (the run keeps going on the server)")
    run.add_argument("--json", action="store_true",
                     help="no live view: print the final run (with --detach, the submitted run) as one JSON document")
    _server_args(run)

    runs = sub.add_parser("runs", help="list, inspect, cancel and delete the runs of a codefy server",
                          description="The runs of a codefy server: ls, show, watch, cancel, rm, events, metrics.")
    runs.set_defaults(runs_parser=runs)
    rsub = runs.add_subparsers(dest="runs_command", metavar="ACTION")

    ls = rsub.add_parser("ls", help="list runs, newest first", description="List runs, newest first.")
    ls.add_argument("--status", help="only runs with this status (queued, running, disconnected, succeeded, failed, "
                    "cancelled, interrupted; several separated by commas)")
    ls.add_argument("--limit", type=_int_in("limit", 1, LIST_LIMIT), default=LIST_LIMIT, metavar="N",
                    help=f"at most N runs (1 to {LIST_LIMIT}, default {LIST_LIMIT})")
    ls.add_argument("--offset", type=_int_in("offset", 0), default=0, metavar="N", help="skip the newest N runs")
    ls.add_argument("--json", action="store_true", help="print the page of runs as one JSON document")
    _server_args(ls)

    show = rsub.add_parser("show", help="one run in detail", description="One run in detail.")
    show.add_argument("run_id", metavar="ID")
    show.add_argument("--json", action="store_true", help="print the run as one JSON document")
    _server_args(show)

    watch = rsub.add_parser("watch", help="the live view of a run, as `codefy run` shows it",
                            description="The live view `codefy run` shows, for a run already submitted: replayed "
                            "from the run's log, then followed live until the run ends (a finished run is shown "
                            "whole). Ctrl+C stops watching, not the run. Exit codes as `codefy run`: 0 succeeded, "
                            "1 failed, cancelled, interrupted or timed out, 130 Ctrl+C.")
    watch.add_argument("run_id", metavar="ID")
    watch.add_argument("--timeout", type=_positive_seconds, metavar="S",
                       help="stop watching after S seconds and exit 1 (the run keeps going on the server)")
    watch.add_argument("--json", action="store_true", help="no live view: print the final run as one JSON document")
    _server_args(watch)

    cancel = rsub.add_parser("cancel", help="cancel a queued or running run",
                             description="Cancel a run: a queued one leaves the line at once, a running one "
                             "stops cooperatively.")
    cancel.add_argument("run_id", metavar="ID")
    cancel.add_argument("--json", action="store_true", help="print the run as one JSON document")
    _server_args(cancel)

    rm = rsub.add_parser("rm", help="delete a finished run",
                         description="Delete a finished run with its events, metrics and artifact records.")
    rm.add_argument("run_id", metavar="ID")
    rm.add_argument("--json", action="store_true", help='print {"deleted": ID} as one JSON document')
    _server_args(rm)

    ev = rsub.add_parser("events", help="a run's event log", description="A run's event log, one line per event.")
    ev.add_argument("run_id", metavar="ID")
    ev.add_argument("--cursor", type=_int_in("cursor", 0), default=0, metavar="N",
                    help="only the events after sequence number N")
    ev.add_argument("--follow", action="store_true", help="keep printing events live until the run ends")
    ev.add_argument("--json", action="store_true",
                    help="one JSON document (with --follow: one JSON event per line)")
    _server_args(ev)

    me = rsub.add_parser("metrics", help="a run's metric series", description="A run's metric series: last, min "
                         "and max of each, as CSV, or as a small terminal plot.")
    me.add_argument("run_id", metavar="ID")
    fmt = me.add_mutually_exclusive_group()
    fmt.add_argument("--csv", action="store_true", help="every metric point as CSV (the server's export)")
    fmt.add_argument("--plot", action="store_true", help="a sparkline per series")
    fmt.add_argument("--json", action="store_true", help="every metric point as one JSON document")
    _server_args(me)


# -- shared -----------------------------------------------------------------------------------


def _out(text: str = "", stream: TextIO | None = None) -> None:
    print(text, file=stream or sys.stdout, flush=True)


def _dump(doc: Any, server: Any = None) -> None:
    """One JSON document on stdout; with `server`, a dict also says which server answered."""
    if server is not None and isinstance(doc, dict):
        doc = {**doc, "server": server.as_dict()}
    print(json.dumps(doc, indent=2, default=str), flush=True)


def _fail(message: str, as_json: bool, error: dict[str, Any] | None = None, server: Any = None) -> int:
    if as_json:
        _dump({"status": "failed", "error": error or {"code": "error", "message": message}}, server)
    else:
        _out(f"error: {message}", sys.stderr)
    return EXIT_FAILED


def _describe(err: Any, url: str | None = None) -> str:
    """A CodefyError as the message a person reads: the server's message, its field, its status."""
    if err.status == 403 and err.code in ("http_error", "unauthenticated"):
        return (f"the codefy server at {url or 'its address'} refused the request (403 Forbidden): wrong or "
                "missing token; pass --token or set CODEFY_TOKEN")
    text = str(err)
    if err.status is not None:
        if err.field:
            text += f"\n  field: {err.field}"
        text += f"\n  (HTTP {err.status}, {err.code})"
    return text


def _error_doc(err: Any) -> dict[str, Any]:
    return {"code": err.code, "message": str(err), "params": err.params, "status": err.status}


def _server_info(args: argparse.Namespace) -> Any:
    from ..kernel.discovery import _codefy_start_state, discover

    url = args.url
    if not url and (args.host or args.port):
        url = f"http://{args.host or '127.0.0.1'}:{args.port or 8888}/"
    token = args.token
    if url and token is None and not os.environ.get("CODEFY_TOKEN"):
        state = _codefy_start_state(None)  # the token of the `codefy start` at that address
        if state is not None and state.url.rstrip("/") == url.rstrip("/"):
            token = state.token
    info = discover(url=url, token=token)
    if token is not None and info.token != token:  # a --token beats the one discovery found
        info = replace(info, token=token)
    return info


def announce(server: Any, stream: TextIO | None = None) -> None:
    """The server a command uses, and why, as dim lines on stderr (stdout stays the command's own)."""
    stream = stream or sys.stderr
    dim = bool(getattr(stream, "isatty", lambda: False)()) and not os.environ.get("NO_COLOR")
    for line in server.describe():
        print(f"\x1b[2m{line}\x1b[0m" if dim else line, file=stream, flush=True)


def _time(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts)) if ts else "-"


def _duration(run: dict[str, Any]) -> str:
    from .terminal import format_seconds

    started = run.get("started_at")
    if not started:
        return "-"
    end = run.get("finished_at") or (time.time() if run.get("status") not in FINISHED else None)
    return format_seconds(max(0.0, end - started)) if end else "-"


def _fmt(value: Any) -> str:
    from .terminal import format_value

    return format_value(value) if isinstance(value, (int, float)) else str(value)


def _row(label: str, value: Any) -> str:
    return f"  {label:<15} {value}"


def _run_client(args: argparse.Namespace, as_json: bool, body: Callable[[Any], Any]) -> int:
    """Find the server, run `body(client)` on an event loop; CodefyError → a message and exit 1,
    Ctrl+C → exit 130."""
    from ..kernel.client import AsyncClient
    from ..kernel.errors import CodefyError

    try:
        server = _server_info(args)
    except CodefyError as err:
        return _fail(str(err), as_json, _error_doc(err))
    if not as_json:
        announce(server)

    async def main() -> int:
        client = AsyncClient(server=server)
        try:
            return await body(client)
        finally:
            await client.close()

    try:
        return asyncio.run(main())
    except CodefyError as err:
        return _fail(_describe(err, server.url), as_json, _error_doc(err), server)
    except KeyboardInterrupt:
        _out("\n■ interrupted", sys.stderr)
        return EXIT_INTERRUPTED


# -- codefy run -------------------------------------------------------------------------------


def submit_options(args: argparse.Namespace) -> dict[str, Any]:
    """`codefy run`'s flags as keywords of `Client.submit` (shared with `%codefy run`)."""
    from ..kernel.client import _UNSET

    options: dict[str, Any] = {"name": args.name, "device": args.device, "deterministic": args.deterministic,
                               "record_outputs": args.record_outputs, "devices": args.devices}
    if args.no_seed:
        options["seed"] = None
    elif args.seed is not None:
        options["seed"] = args.seed
    else:
        options["seed"] = _UNSET
    if args.target:
        options["worker"] = args.target
    return options


def run_command(args: argparse.Namespace) -> int:
    from ..kernel.client import load_graph
    from ..kernel.errors import CodefyError

    try:
        graph = load_graph(args.graph)
    except CodefyError as err:
        return _fail(str(err), args.json, _error_doc(err))
    try:
        server = _server_info(args)
    except CodefyError as err:
        return _fail(str(err), args.json, _error_doc(err))
    if not args.json:
        announce(server)

    watcher = RunWatcher(server, graph=graph, graph_name=Path(args.graph).name, options=submit_options(args),
                         detach=args.detach, timeout=args.timeout, as_json=args.json)
    try:
        return asyncio.run(watcher.main())
    except KeyboardInterrupt:
        return watcher.interrupted()


def watch_command(args: argparse.Namespace) -> int:
    """`codefy runs watch ID`: `codefy run`'s live view of a run already submitted, replayed from its
    log (so a finished run shows whole) and followed live to its end."""
    from ..kernel.errors import CodefyError

    try:
        server = _server_info(args)
    except CodefyError as err:
        return _fail(str(err), args.json, _error_doc(err))
    if not args.json:
        announce(server)
    watcher = RunWatcher(server, graph=None, graph_name=None, options={}, detach=False, timeout=args.timeout,
                         as_json=args.json)
    try:
        return asyncio.run(watcher.main(args.run_id))
    except KeyboardInterrupt:
        return watcher.interrupted()


class RunWatcher:
    def __init__(self, server: Any, *, graph: dict[str, Any] | None, graph_name: str | None, options: dict[str, Any],
                 detach: bool, timeout: float | None, as_json: bool) -> None:
        from .terminal import LiveView

        self.server, self.graph, self.graph_name, self.options = server, graph, graph_name, options
        self.detach, self.timeout, self.as_json = detach, timeout, as_json
        self.run: dict[str, Any] | None = None
        self.view = None if as_json else LiveView(sys.stdout)
        self.client: Any = None

    async def main(self, run_id: str | None = None) -> int:
        """Submit the graph and watch its run; with `run_id`, watch that run instead, from the start
        of its log (`codefy runs watch`)."""
        from ..kernel.client import AsyncClient
        from ..kernel.errors import CodefyError

        self.client = AsyncClient(server=self.server)
        try:
            if run_id is not None:
                try:
                    self.run = await self.client.get(run_id)
                except CodefyError as err:
                    return _fail(_describe(err, self.server.url), self.as_json, _error_doc(err), self.server)
                if not self.as_json:
                    self._header("=== Run ===")
            else:
                try:
                    self.run = await self.client.submit(self.graph, **self.options)
                except CodefyError as err:
                    if err.status is None or err.status == 403:
                        return _fail(_describe(err, self.server.url), self.as_json, _error_doc(err), self.server)
                    return _fail(f"the server refused the run: {_describe(err)}", self.as_json, _error_doc(err),
                                 self.server)
                if self.detach:
                    if self.as_json:
                        _dump(self.run, self.server)
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
                    return _fail(f"lost the codefy server at {self.server.url} while watching run {self.run['id']} "
                                 f"(no answer for {_reconnect_s():g} s): {err}\n  The run may still be going on "
                                 f"the server; check it with `codefy runs show {self.run['id']}` once it is back.",
                                 self.as_json, _error_doc(err), self.server)
                self._close_view()
                return _fail(_describe(err, self.server.url), self.as_json, _error_doc(err), self.server)
        finally:
            await self.client.close()

    # -- output -------------------------------------------------------------------------------
    def _header(self, title: str) -> None:
        run = self.run or {}
        target = (run.get("options") or {}).get("target") or {}
        _out(title)
        _out(_row("Run ID", run.get("id")))
        if run.get("name"):
            _out(_row("Name", run["name"]))
        if self.graph_name:
            _out(_row("Graph", self.graph_name))
        _out(_row("Target", run.get("worker_id") or target.get("worker") or "local"))
        _out(_row("Device", run.get("device")))
        if len(run.get("devices") or []) > 1:
            _out(_row("Devices", ", ".join(run["devices"])))
        if run.get("queue_key") and run.get("queue_key") != run.get("device"):
            _out(_row("Queue", run["queue_key"]))
        if run.get("seed") is not None:
            _out(_row("Seed", run["seed"]))
        _out(_row("Status", run.get("status")))
        if self.graph_name:  # submitted here: how to come back to it
            _out(_row("Watch", f"codefy runs watch {run.get('id')}"))
        _out()

    def _close_view(self) -> None:
        if self.view is not None:
            self.view.close()

    def interrupted(self) -> int:
        self._close_view()
        if self.run is None:
            _out("\n■ interrupted before the server answered; the run may have been submitted "
                 "(`codefy runs ls` shows it)", sys.stderr)
        else:
            _out(f"\n■ stopped watching (Ctrl+C): run {self.run['id']} keeps going on the server. "
                 f"Watch it again with `codefy runs watch {self.run['id']}`, "
                 f"stop it with `codefy runs cancel {self.run['id']}`.", sys.stderr)
        return EXIT_INTERRUPTED

    async def _timed_out(self) -> int:
        from ..kernel.errors import CodefyError

        self._close_view()
        run_id = self.run["id"] if self.run else "?"
        status = "still active"
        try:
            row = await asyncio.wait_for(self.client.get(run_id), 5)
            status = f"still {row['status']}"
            self.run = row
        except (CodefyError, asyncio.TimeoutError):
            pass
        message = (f"stopped watching after {self.timeout:g} s: run {run_id} is {status} and keeps going on the "
                   f"server (`codefy runs watch {run_id}`)")
        if self.as_json:
            _dump({"status": "timeout", "message": message, "run": self.run}, self.server)
        else:
            _out(f"⧗ {message}", sys.stderr)
        return EXIT_FAILED

    # -- watching -----------------------------------------------------------------------------
    async def _retrying(self, call: Callable[[], Any]) -> Any:
        """`call()`, retried while the server does not answer, for up to the reconnect window."""
        from ..kernel.errors import CodefyError

        loop = asyncio.get_running_loop()
        lost_since: float | None = None
        while True:
            try:
                return await call()
            except CodefyError as err:
                if err.code != "unreachable":
                    raise
                lost_since = lost_since or loop.time()
                if loop.time() - lost_since > _reconnect_s():
                    raise
                await asyncio.sleep(0.5)

    async def _wait_in_line(self) -> None:
        """While the run waits in its queue: its place in line, re-read until it starts or ends."""
        assert self.run is not None
        run_id = self.run["id"]
        shown = None
        run = self.run
        while run.get("status") == "queued":
            reason = (run.get("queue_reason") or {}).get("message")
            key = (run.get("queue_position"), run.get("queue_key"), reason)
            if key != shown and not self.as_json:
                pos = run.get("queue_position")
                where = f"position {pos} on {run.get('queue_key')}" if pos else f"on {run.get('queue_key')}"
                _out(f"  ○ queued  {where}" + (f" — {reason}" if reason else ""))
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
        async for event in self.client.follow(run_id, 0, reconnect_s=_reconnect_s()):
            if event["type"] in ("execution_complete", "execution_error", "execution_stopped"):
                closing = event
                break
            self._show(event)
        self._close_view()
        final = await self._retrying(lambda: self.client.get(run_id))
        if self.as_json:
            _dump(final, self.server)
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
            _out(f"{mark}" + (f": {reason['message']}" if reason.get("message") else ""))
            _out()
            _out(_row("Result", status))
        return EXIT_FAILED

    def _show(self, event: dict[str, Any]) -> None:
        kind, payload = event["type"], event.get("payload") or {}
        if self.as_json:
            return
        if kind == "execution_start":
            self._close_view()
            seeded = f", seed {payload['seed']}" if payload.get("seed") is not None else ""
            where = f" (worker {payload['worker']})" if payload.get("worker") else ""
            _out(f"  ▸ started on {payload.get('device')}{where}{seeded}")
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
        from .terminal import format_seconds

        duration = payload.get("duration_s")
        took = f" in {format_seconds(duration)}" if isinstance(duration, (int, float)) else ""
        counts = ""
        if "executed" in payload:
            counts = f" ({payload.get('executed', 0)} executed, {payload.get('cached', 0)} cached)"
        _out(f"✓ run complete{took}{counts}")
        _out()
        _out(_row("Result", "succeeded"))
        for name, value in (payload.get("metrics") or {}).items():
            _out(_row(name, _fmt(value)))

    def _failed(self, error: dict[str, Any]) -> None:
        _out("✗ run failed")
        if error.get("node_id"):
            _out(_row("Node", f"{error['node_id']} ({error.get('node_type')})"))
        if error.get("exception_type"):
            _out(_row("Exception", error["exception_type"]))
        elif error.get("code"):
            _out(_row("Code", error["code"]))
        if error.get("field"):
            _out(_row("Field", error["field"]))
        _out(_row("Message", error.get("message", "")))
        if error.get("hint"):
            _out(_row("Hint", error["hint"]))
        _out()
        _out(_row("Result", "failed"))


def runs_command(args: argparse.Namespace) -> int:
    from .runs import runs_command as command

    return command(args)
