"""`codefy runs ls|show|watch|cancel|rm|events|metrics`: reading and managing runs from a terminal,
`--json` everywhere for scripts (`runs watch` is `codefy run`'s live view, in run.py)."""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from typing import Any, Callable

from ..client.flags import add_server_arguments, int_in, seconds, server_from_arguments
from ..wire import messages as words
from ..wire import provenance
from ..wire import system_metrics as sm
from . import interrupts
from .args import EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE
from .output import announce, dump, duration, error_doc, fail, out, row, timestamp, value_text
from .servers import reconnect_s

LIST_LIMIT = 50
SPARK = "▁▂▃▄▅▆▇█"
PLOT_WIDTH = 48

_positive_seconds = seconds(allow_zero=False)


ID_HELP = "the run's id, or a unique prefix of 8 or more characters (Lab shows 12)"


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Register `runs` and its actions on the `codefy` command's subparsers."""
    runs = sub.add_parser("runs", help="list, inspect, cancel and delete the runs of a codefy server",
                          description="The runs of a codefy server: ls, show, watch, cancel, rm, events, metrics.")
    runs.set_defaults(runs_parser=runs)
    rsub = runs.add_subparsers(dest="runs_command", metavar="ACTION")

    ls = rsub.add_parser("ls", help="list runs, newest first", description="List runs, newest first.")
    ls.add_argument("--status", help="only runs with this status (queued, running, disconnected, succeeded, failed, "
                    "cancelled, interrupted; several separated by commas)")
    ls.add_argument("--limit", type=int_in("limit", 1, LIST_LIMIT), default=LIST_LIMIT, metavar="N",
                    help=f"at most N runs (1 to {LIST_LIMIT}, default {LIST_LIMIT})")
    ls.add_argument("--offset", type=int_in("offset", 0), default=0, metavar="N", help="skip the newest N runs")
    ls.add_argument("--json", action="store_true", help="print the page of runs as one JSON document")
    add_server_arguments(ls)

    show = rsub.add_parser("show", help="one run in detail", description="One run in detail.")
    show.add_argument("run_id", metavar="ID", help=ID_HELP)
    show.add_argument("--json", action="store_true", help="print the run as one JSON document")
    add_server_arguments(show)

    watch = rsub.add_parser("watch", help="the live view of a run, as `codefy run` shows it",
                            description="The live view `codefy run` shows, for a run already submitted: replayed "
                            "from the run's log, then followed live until the run ends (a finished run is shown "
                            "whole). Ctrl+C stops watching, not the run. Exit codes as `codefy run`: 0 succeeded, "
                            "1 failed, cancelled, interrupted or timed out, 130 Ctrl+C.")
    watch.add_argument("run_id", metavar="ID", help=ID_HELP)
    watch.add_argument("--timeout", type=_positive_seconds, metavar="S",
                       help="stop watching after S seconds and exit 1 (the run keeps going on the server)")
    watch.add_argument("--json", action="store_true", help="no live view: print the final run as one JSON document")
    add_server_arguments(watch)

    cancel = rsub.add_parser("cancel", help="cancel a queued or running run",
                             description="Cancel a run: a queued one leaves the line at once, a running one "
                             "stops cooperatively.")
    cancel.add_argument("run_id", metavar="ID", help=ID_HELP)
    cancel.add_argument("--json", action="store_true", help="print the run as one JSON document")
    add_server_arguments(cancel)

    rm = rsub.add_parser("rm", help="delete a finished run",
                         description="Delete a finished run with its events, metrics and artifact records.")
    rm.add_argument("run_id", metavar="ID", help=ID_HELP)
    rm.add_argument("--json", action="store_true", help='print {"deleted": ID} as one JSON document')
    add_server_arguments(rm)

    ev = rsub.add_parser("events", help="a run's event log", description="A run's event log, one line per event.")
    ev.add_argument("run_id", metavar="ID", help=ID_HELP)
    ev.add_argument("--cursor", type=int_in("cursor", 0), default=0, metavar="N",
                    help="only the events after sequence number N")
    ev.add_argument("--follow", action="store_true", help="keep printing events live until the run ends")
    ev.add_argument("--json", action="store_true",
                    help="one JSON document (with --follow: one JSON event per line)")
    add_server_arguments(ev)

    me = rsub.add_parser("metrics", help="a run's metric series", description="A run's metric series: last, min "
                         "and max of each, as CSV, or as a small terminal plot.")
    me.add_argument("run_id", metavar="ID", help=ID_HELP)
    fmt = me.add_mutually_exclusive_group()
    fmt.add_argument("--csv", action="store_true", help="every metric point as CSV (the server's export)")
    fmt.add_argument("--plot", action="store_true", help="a sparkline per series")
    fmt.add_argument("--json", action="store_true", help="every metric point as one JSON document")
    add_server_arguments(me)


# -- codefy runs ------------------------------------------------------------------------------


def runs_command(args: argparse.Namespace) -> int:
    action = args.runs_command
    if action is None:
        args.runs_parser.print_help(sys.stderr)
        return EXIT_USAGE
    if action == "watch":
        from .run import watch_command

        return watch_command(args)
    handlers = {"ls": _ls, "show": _show, "cancel": _cancel, "rm": _rm, "events": _events, "metrics": _metrics}
    as_json = bool(getattr(args, "json", False))
    return _run_client(args, as_json, lambda client: handlers[action](client, args))


def _run_client(args: argparse.Namespace, as_json: bool, body: Callable[[Any], Any]) -> int:
    """Find the server, run `body(client)` on an event loop; CodefyError → a message and exit 1,
    Ctrl+C → exit 130."""
    from ..client.client import AsyncClient
    from ..client.errors import CodefyError, describe

    try:
        server = server_from_arguments(args)
    except CodefyError as err:
        return fail(str(err), as_json, error_doc(err))
    if not as_json:
        announce(server)

    async def main() -> int:
        client = AsyncClient(server=server)
        try:
            return await body(client)
        finally:
            await client.close()

    try:
        return interrupts.run(main())
    except CodefyError as err:
        return fail(describe(err, server.url), as_json, error_doc(err), server)
    except KeyboardInterrupt:
        out("\n■ interrupted", sys.stderr)
        return EXIT_INTERRUPTED


def loss_text(final: dict[str, Any] | None) -> str:
    """`0.05515 (val_loss)`: the series is named, since runs may differ in which one they logged."""
    return f"{value_text(final['value'])} ({final['name']})" if final else "-"


async def _ls(client: Any, args: argparse.Namespace) -> int:
    page = await client.list(status=args.status, offset=args.offset, limit=args.limit)
    if args.json:
        dump(page, client.server)
        return EXIT_OK

    header = ("ID", "NAME", "STATUS", "WHERE", "DEVICE", "QUEUE", "STARTED", "DURATION", "LOSS")
    rows = []
    for run in page["runs"]:
        final = run.get("final_loss")  # the server's one rule (wire/run_summary.py), as every view
        name = run.get("name") or "-"
        name = name if len(name) <= 32 else name[:31] + "…"
        queue = f"#{run['queue_position']}" if run.get("queue_position") else "-"
        device = ",".join(run.get("devices") or []) if len(run.get("devices") or []) > 1 else run.get("device")
        where = run.get("worker_id") or ((run.get("options") or {}).get("target") or {}).get("worker") or "local"
        rows.append((run["id"], name, run["status"], where, device or "-", queue, timestamp(run.get("started_at")),
                     duration(run), loss_text(final)))
    if rows:
        widths = [max(len(str(r[i])) for r in (header, *rows)) for i in range(len(header))]
        for r in (header, *rows):
            out("  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip())
    else:
        out("no runs" + (f" with status {args.status}" if args.status else ""))
    shown = len(page["runs"])
    first = f" (from offset {page['offset']})" if page.get("offset") else ""
    out(f"{shown} of {page['total']}{first}")
    return EXIT_OK


async def _show(client: Any, args: argparse.Namespace) -> int:
    from ..client.errors import CodefyError

    run = await client.get(args.run_id)
    if args.json:
        dump(run, client.server)
        return EXIT_OK
    out(row("Run ID", run["id"]))
    out(row("Name", run.get("name") or "-"))
    out(row("Status", run["status"]))
    out(row("Target", run.get("worker_id") or "local"))
    out(row("Device", run.get("device")))
    if len(run.get("devices") or []) > 1:
        out(row("Devices", ", ".join(run["devices"])))
    if run["status"] == "queued":
        pos = run.get("queue_position")
        out(row("Queue", f"position {pos} on {run.get('queue_key')}" if pos else run.get("queue_key")))
        if run.get("queue_reason"):  # in the catalog's words (wire/messages.json), as Lab and the widgets say it
            out(row("Waiting for", words.text_of(run["queue_reason"])))
    out(row("Lane", run.get("lane")))
    if run.get("seed") is not None:
        out(row("Seed", run["seed"]))
    if run.get("deterministic"):
        out(row("Deterministic", "yes"))
    budget = (run.get("execution_facts") or {}).get("cpu_threads")
    if budget:
        out(row("CPU threads", _cpu_threads(budget)))
    elif (run.get("options") or {}).get("cpu_threads"):
        out(row("CPU threads", f"{run['options']['cpu_threads']} (asked)"))
    out(row("Submitted", timestamp(run.get("submitted_at"))))
    out(row("Started", timestamp(run.get("started_at"))))
    out(row("Finished", timestamp(run.get("finished_at"))))
    out(row("Duration", duration(run)))
    if run.get("final_loss"):
        out(row("Final loss", loss_text(run["final_loss"])))
    for record in run.get("inputs") or ():  # options.provenance: what the run read, by content
        out(row("Dataset" if record["kind"] == "dataset" else "Model", _input_text(record)))
    error = run.get("error")
    if error:
        where = f"node {error['node_id']} ({error.get('node_type')}): " if error.get("node_id") else ""
        kind = f"{error['exception_type']}: " if error.get("exception_type") else ""
        out(row("Error", f"{where}{kind}{error.get('message', '')}"))
    try:
        points = await client.metrics(run["id"])
    except CodefyError:
        points = []
    series = {key: values for key, values in _series(points).items() if not sm.is_system(key[1])}
    if series:
        out("  Metrics")
        for (node, name), values in series.items():
            out(row(f"  {name}", f"{value_text(values[-1])}" + (f"  ({node})" if node else "")))
    for label, text in system_rows(sm.summary(points), (run.get("execution_facts") or {}).get("system_metrics")):
        out(row(label, text))
    return EXIT_OK


def _bytes(value: float) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if value >= size:
            return f"{value / size:.1f} {unit}"
    return f"{value:.0f} B"


def system_rows(peaks: dict[str, float], note: dict[str, Any] | None) -> list[tuple[str, str]]:
    """`runs show`'s system summary: the peaks of the run's system metrics, and why GPU values are
    missing where they are."""
    if not peaks and not note:
        return []
    rows = [("System", f"sampled every {note['interval_s']:g} s" if note and note.get("interval_s") else "sampled")]
    if sm.CPU_PERCENT in peaks:
        rows.append(("  peak CPU", f"{peaks[sm.CPU_PERCENT]:.0f} %"))
    if sm.RSS_BYTES in peaks:
        rows.append(("  peak RSS", _bytes(peaks[sm.RSS_BYTES])))
    for name in sorted(n for n in peaks if n.startswith(sm.GPU_UTIL)):
        rows.append((f"  peak GPU {name[len(sm.GPU_UTIL):]}", f"{peaks[name]:.0f} %"))
    for name in sorted(n for n in peaks if n.startswith(sm.GPU_MEMORY)):
        rows.append((f"  peak GPU memory {name[len(sm.GPU_MEMORY):]}", _bytes(peaks[name])))
    if note and not any(n.startswith(sm.GPU_UTIL) or n.startswith(sm.GPU_MEMORY) for n in peaks):
        rows.append(("  GPU", str(note.get("gpu") or "none")))
    if len(rows) == 1 and not note:
        return []
    return rows


def _cpu_threads(budget: dict[str, Any]) -> str:
    if budget.get("source") == "auto":
        return f"{budget.get('threads')} ({budget.get('cores')} cores / {budget.get('slots')} cpu slots)"
    why = {"option": "options.cpu_threads", "setting": "run_cpu_threads"}.get(budget.get("source"), budget.get("source"))
    return f"{budget.get('threads')} ({why})"


async def _cancel(client: Any, args: argparse.Namespace) -> int:
    run = await client.cancel(args.run_id)
    if args.json:
        dump(run, client.server)
        return EXIT_OK
    if run["status"] == "cancelled":
        out(f"■ run {run['id']} cancelled")
    else:
        out(f"■ cancel requested: run {run['id']} is {run['status']} and stops at its next cancel check")
    return EXIT_OK


async def _rm(client: Any, args: argparse.Namespace) -> int:
    await client.delete(args.run_id)
    if args.json:
        dump({"deleted": args.run_id}, client.server)
    else:
        out(f"deleted run {args.run_id}")
    return EXIT_OK


def _event_line(event: dict[str, Any]) -> str:
    payload = {k: v for k, v in (event.get("payload") or {}).items() if k != "run_id"}
    if event["type"] == "execution_error" and isinstance(payload.get("error"), dict):
        payload["error"] = {k: v for k, v in payload["error"].items() if k != "traceback"}
    text = json.dumps(payload, separators=(",", ":"), ensure_ascii=False, default=str)
    if len(text) > 200:
        text = text[:199] + "…"
    stamp = time.strftime("%H:%M:%S", time.localtime(event["created_at"])) if event.get("created_at") else "-"
    return f"{event['seq']:>5}  {stamp}  {event['type']:<19} {text}"


async def _events(client: Any, args: argparse.Namespace) -> int:
    if args.follow:
        if args.json:  # JSON lines have no document to say it in
            announce(client.server)
        run_id = (await client.get(args.run_id))["id"]  # an unknown id fails here, clearly; a prefix made whole
        async for event in client.follow(run_id, args.cursor, reconnect_s=reconnect_s()):
            out(json.dumps(event, default=str) if args.json else _event_line(event))
        return EXIT_OK
    events, cursor = [], args.cursor
    while True:
        page = await client.events(args.run_id, cursor)
        events += page["events"]
        cursor = page["cursor"]
        if not page["more"]:
            break
    if args.json:
        dump({"run_id": args.run_id, "status": page["status"], "cursor": cursor, "events": events}, client.server)
        return EXIT_OK
    for event in events:
        out(_event_line(event))
    out(f"{len(events)} events, run {page['status']}, cursor {cursor}")
    return EXIT_OK


def _series(points: list[dict[str, Any]]) -> dict[tuple[Any, str], list[float]]:
    series: dict[tuple[Any, str], list[float]] = {}
    for p in points:
        if isinstance(p.get("value"), (int, float)):
            series.setdefault((p.get("node_id"), p["name"]), []).append(float(p["value"]))
    return series


def sparkline(values: list[float], width: int = PLOT_WIDTH) -> str:
    """The values as a row of block characters, resampled to at most `width` columns."""
    if not values:
        return ""
    if len(values) > width:  # bucket means
        step = len(values) / width
        values = [sum(chunk) / len(chunk) for chunk in
                  (values[int(i * step):max(int((i + 1) * step), int(i * step) + 1)] for i in range(width))]
    low, high = min(values), max(values)
    if high - low <= 0 or not math.isfinite(high - low):
        return SPARK[len(SPARK) // 2] * len(values)
    return "".join(SPARK[min(len(SPARK) - 1, int((v - low) / (high - low) * (len(SPARK) - 1) + 0.5))]
                   for v in values)


async def _metrics(client: Any, args: argparse.Namespace) -> int:
    if args.csv:
        sys.stdout.write(await client.metrics(args.run_id, csv=True))
        sys.stdout.flush()
        return EXIT_OK
    points = await client.metrics(args.run_id)
    if args.json:
        dump({"run_id": args.run_id, "metrics": points}, client.server)
        return EXIT_OK
    series = _series(points)
    if not series:
        out(f"run {args.run_id} recorded no metrics")
        return EXIT_OK
    if args.plot:
        for (node, name), values in series.items():
            label = f"{node}/{name}" if node else name
            out(f"{label}  ({len(values)} points)")
            out(f"  {value_text(max(values)):>10} ┤{sparkline(values)}")
            out(f"  {value_text(min(values)):>10} ┘ last {value_text(values[-1])}")
        return EXIT_OK
    header = ("NODE", "METRIC", "POINTS", "LAST", "MIN", "MAX")
    rows = [(node or "-", name, str(len(v)), value_text(v[-1]), value_text(min(v)), value_text(max(v)))
            for (node, name), v in series.items()]
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]
    for r in (header, *rows):
        out("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    return EXIT_OK


def _input_text(record: dict[str, Any]) -> str:
    shown = provenance.describe(record)  # the notebook RunView's words too
    return f"{shown['path']} sha256:{shown['digest']} ({shown['detail']})"
