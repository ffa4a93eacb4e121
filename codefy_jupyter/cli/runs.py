"""`codefy runs ls|show|watch|cancel|rm|events|metrics`: reading and managing runs from a terminal,
`--json` everywhere for scripts. The arguments are declared with `codefy run`'s in run.py."""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import time
from typing import Any

from .args import EXIT_OK, EXIT_USAGE
from .run import (  # shared helpers of the terminal client
    PLOT_WIDTH,
    SPARK,
    _dump,
    _duration,
    _fmt,
    _out,
    _reconnect_s,
    _row,
    _run_client,
    _time,
    announce,
)


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


def _final_loss(points: list[dict[str, Any]]) -> Any:
    losses = [p for p in points if p.get("name") == "loss"] or \
             [p for p in points if str(p.get("name", "")).endswith("loss")]
    return losses[-1]["value"] if losses else None


async def _ls(client: Any, args: argparse.Namespace) -> int:
    from ..kernel.errors import CodefyError

    page = await client.list(status=args.status, offset=args.offset, limit=args.limit)
    if args.json:
        _dump(page, client.server)
        return EXIT_OK

    async def loss(run: dict[str, Any]) -> Any:
        if not run.get("started_at"):
            return None
        try:
            return _final_loss(await client.metrics(run["id"]))
        except CodefyError:
            return None

    losses = await asyncio.gather(*(loss(r) for r in page["runs"]))
    header = ("ID", "NAME", "STATUS", "WHERE", "DEVICE", "QUEUE", "STARTED", "DURATION", "LOSS")
    rows = []
    for run, final in zip(page["runs"], losses):
        name = run.get("name") or "-"
        name = name if len(name) <= 32 else name[:31] + "…"
        queue = f"#{run['queue_position']}" if run.get("queue_position") else "-"
        device = ",".join(run.get("devices") or []) if len(run.get("devices") or []) > 1 else run.get("device")
        where = run.get("worker_id") or ((run.get("options") or {}).get("target") or {}).get("worker") or "local"
        rows.append((run["id"], name, run["status"], where, device or "-", queue, _time(run.get("started_at")),
                     _duration(run), _fmt(final) if final is not None else "-"))
    if rows:
        widths = [max(len(str(r[i])) for r in (header, *rows)) for i in range(len(header))]
        for r in (header, *rows):
            _out("  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip())
    else:
        _out("no runs" + (f" with status {args.status}" if args.status else ""))
    shown = len(page["runs"])
    first = f" (from offset {page['offset']})" if page.get("offset") else ""
    _out(f"{shown} of {page['total']}{first}")
    return EXIT_OK


async def _show(client: Any, args: argparse.Namespace) -> int:
    from ..kernel.errors import CodefyError

    run = await client.get(args.run_id)
    if args.json:
        _dump(run, client.server)
        return EXIT_OK
    _out(_row("Run ID", run["id"]))
    _out(_row("Name", run.get("name") or "-"))
    _out(_row("Status", run["status"]))
    _out(_row("Target", run.get("worker_id") or "local"))
    _out(_row("Device", run.get("device")))
    if len(run.get("devices") or []) > 1:
        _out(_row("Devices", ", ".join(run["devices"])))
    if run["status"] == "queued":
        pos = run.get("queue_position")
        _out(_row("Queue", f"position {pos} on {run.get('queue_key')}" if pos else run.get("queue_key")))
        if (run.get("queue_reason") or {}).get("message"):
            _out(_row("Waiting for", run["queue_reason"]["message"]))
    _out(_row("Lane", run.get("lane")))
    if run.get("seed") is not None:
        _out(_row("Seed", run["seed"]))
    if run.get("deterministic"):
        _out(_row("Deterministic", "yes"))
    budget = (run.get("execution_facts") or {}).get("cpu_threads")
    if budget:
        _out(_row("CPU threads", _cpu_threads(budget)))
    elif (run.get("options") or {}).get("cpu_threads"):
        _out(_row("CPU threads", f"{run['options']['cpu_threads']} (asked)"))
    _out(_row("Submitted", _time(run.get("submitted_at"))))
    _out(_row("Started", _time(run.get("started_at"))))
    _out(_row("Finished", _time(run.get("finished_at"))))
    _out(_row("Duration", _duration(run)))
    error = run.get("error")
    if error:
        where = f"node {error['node_id']} ({error.get('node_type')}): " if error.get("node_id") else ""
        kind = f"{error['exception_type']}: " if error.get("exception_type") else ""
        _out(_row("Error", f"{where}{kind}{error.get('message', '')}"))
    try:
        points = await client.metrics(run["id"])
    except CodefyError:
        points = []
    series = _series(points)
    if series:
        _out("  Metrics")
        for (node, name), values in series.items():
            _out(_row(f"  {name}", f"{_fmt(values[-1])}" + (f"  ({node})" if node else "")))
    return EXIT_OK


def _cpu_threads(budget: dict[str, Any]) -> str:
    if budget.get("source") == "auto":
        return f"{budget.get('threads')} ({budget.get('cores')} cores / {budget.get('slots')} cpu slots)"
    why = {"option": "options.cpu_threads", "setting": "run_cpu_threads"}.get(budget.get("source"), budget.get("source"))
    return f"{budget.get('threads')} ({why})"


async def _cancel(client: Any, args: argparse.Namespace) -> int:
    run = await client.cancel(args.run_id)
    if args.json:
        _dump(run, client.server)
        return EXIT_OK
    if run["status"] == "cancelled":
        _out(f"■ run {run['id']} cancelled")
    else:
        _out(f"■ cancel requested: run {run['id']} is {run['status']} and stops at its next cancel check")
    return EXIT_OK


async def _rm(client: Any, args: argparse.Namespace) -> int:
    await client.delete(args.run_id)
    if args.json:
        _dump({"deleted": args.run_id}, client.server)
    else:
        _out(f"deleted run {args.run_id}")
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
        await client.get(args.run_id)  # an unknown id fails here, clearly
        async for event in client.follow(args.run_id, args.cursor, reconnect_s=_reconnect_s()):
            _out(json.dumps(event, default=str) if args.json else _event_line(event))
        return EXIT_OK
    events, cursor = [], args.cursor
    while True:
        page = await client.events(args.run_id, cursor)
        events += page["events"]
        cursor = page["cursor"]
        if not page["more"]:
            break
    if args.json:
        _dump({"run_id": args.run_id, "status": page["status"], "cursor": cursor, "events": events}, client.server)
        return EXIT_OK
    for event in events:
        _out(_event_line(event))
    _out(f"{len(events)} events, run {page['status']}, cursor {cursor}")
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
        _dump({"run_id": args.run_id, "metrics": points}, client.server)
        return EXIT_OK
    series = _series(points)
    if not series:
        _out(f"run {args.run_id} recorded no metrics")
        return EXIT_OK
    if args.plot:
        for (node, name), values in series.items():
            label = f"{node}/{name}" if node else name
            _out(f"{label}  ({len(values)} points)")
            _out(f"  {_fmt(max(values)):>10} ┤{sparkline(values)}")
            _out(f"  {_fmt(min(values)):>10} ┘ last {_fmt(values[-1])}")
        return EXIT_OK
    header = ("NODE", "METRIC", "POINTS", "LAST", "MIN", "MAX")
    rows = [(node or "-", name, str(len(v)), _fmt(v[-1]), _fmt(min(v)), _fmt(max(v)))
            for (node, name), v in series.items()]
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]
    for r in (header, *rows):
        _out("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    return EXIT_OK
