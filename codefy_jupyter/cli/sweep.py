"""`codefy sweep SPEC.json`: start a sweep on the run queue, follow it live (a long-poll that
answers when a child starts or ends, not a read per run), and print its ranked table at the end.

The sweep belongs to the server: Ctrl+C, `--timeout` and `--detach` stop the watching, never the
sweep (POST codefy/api/sweeps/{id}/cancel stops it).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from ..client.flags import add_server_arguments, seconds, server_from_arguments
from . import interrupts
from .args import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK
from .output import announce, dump, error_doc, fail, out, value_text

_positive_seconds = seconds(allow_zero=False)
COLUMN_MAX = 24  # a parameter value wider than this is cut in the table


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    sweep = sub.add_parser("sweep", help="start a sweep on a codefy server, follow it, print the ranked table",
                           description="Start a sweep (POST codefy/api/sweeps) from a spec file: base_graph (the "
                           "graph itself, or the path of a graph file relative to the spec), name, sweep_spec, "
                           "objective, options, seed_variants. Follows the variants live and prints them ranked "
                           "best first. The sweep belongs to the server: Ctrl+C, --timeout and --detach stop "
                           "watching, not the sweep. Exit codes: 0 finished (or submitted with --detach), 1 failed, "
                           "refused or timed out, 2 bad arguments, 130 Ctrl+C.")
    sweep.add_argument("spec", help="sweep spec JSON file")
    sweep.add_argument("--name", help="the sweep's name (its runs are named '<name> #<n>'); overrides the spec's")
    sweep.add_argument("--detach", action="store_true", help="print the submitted sweep and exit 0 at once")
    sweep.add_argument("--timeout", type=_positive_seconds, metavar="S",
                       help="stop watching after S seconds and exit 1 (the sweep keeps going on the server)")
    sweep.add_argument("--json", action="store_true",
                       help="no live view: print the final sweep (with --detach, the submitted one) as one JSON "
                       "document")
    add_server_arguments(sweep)


def command(args: argparse.Namespace) -> int:
    from ..client.client import load_sweep_spec
    from ..client.errors import CodefyError

    try:
        spec = load_sweep_spec(args.spec)
        server = server_from_arguments(args)
    except CodefyError as err:
        return fail(str(err), args.json, error_doc(err))
    if args.name is not None:
        spec = {**spec, "name": args.name}
    if not args.json:
        announce(server)
    try:
        return interrupts.run(_main(server, spec, args))
    except KeyboardInterrupt:
        if not args.json:
            out("stopped watching; the sweep keeps running on the server", sys.stderr)
        return EXIT_INTERRUPTED


async def _main(server: Any, spec: dict[str, Any], args: argparse.Namespace) -> int:
    from ..client.client import AsyncClient
    from ..client.errors import CodefyError, describe

    client = AsyncClient(server=server)
    try:
        try:
            created = await client.sweep(spec)
        except CodefyError as err:
            return fail(describe(err, server.url), args.json, error_doc(err), server)
        if args.detach:
            if args.json:
                dump(created, server)
            else:
                out(f"sweep {created['sweep_id']}: {len(created['variants'])} variants queued "
                    f"({created['total_combinations']} combinations)")
            return EXIT_OK
        if not args.json:
            out(f"sweep {created['sweep_id']}{' ' + repr(created['name']) if created.get('name') else ''}: "
                f"{len(created['variants'])} variants, objective {_objective(created['objective'])}")
        try:
            final = await asyncio.wait_for(_follow(client, created["sweep_id"], args.json), args.timeout)
        except asyncio.TimeoutError:
            return fail(f"stopped watching after {args.timeout:g} s; the sweep keeps running on the server",
                        args.json, {"code": "timeout", "message": "timed out", "sweep_id": created["sweep_id"]},
                        server)
        except CodefyError as err:
            return fail(describe(err, server.url), args.json, error_doc(err), server)
        if args.json:
            dump(final, server)
        else:
            for line in table_lines(final):
                out(line)
        return EXIT_OK if final["state"] == "finished" else EXIT_FAILED
    finally:
        await client.close()


async def _follow(client: Any, sweep_id: str, quiet: bool) -> dict[str, Any]:
    last = None
    doc: dict[str, Any] = {}
    async for doc in client.follow_sweep(sweep_id):
        line = progress_line(doc)
        if not quiet and line != last:
            out(line)
            last = line
    return doc


def _objective(objective: dict[str, Any]) -> str:
    where = f" of {objective['node_id']}" if objective.get("node_id") else ""
    return f"{objective['direction']} {objective['metric']}{where}"


def progress_line(doc: dict[str, Any]) -> str:
    counts = doc.get("counts") or {}
    total = sum(counts.values())
    done = total - sum(counts.get(s, 0) for s in ("queued", "running", "disconnected"))
    parts = " · ".join(f"{status} {n}" for status, n in sorted(counts.items()))
    return f"[{done}/{total}] {doc['state']}: {parts}"


def _cell(value: Any) -> str:
    text = "-" if value is None else value_text(value)
    return text if len(text) <= COLUMN_MAX else text[:COLUMN_MAX - 1] + "…"


def table_lines(doc: dict[str, Any]) -> list[str]:
    """The ranked table: rank, variant number (index + 1), status, objective, each swept value."""
    swept = [f"{p['node_id']}.{p['param']}" for p in doc["params"]]
    header = ["rank", "#", "status", doc["objective"]["metric"], *swept]
    rows = [[_cell(v["rank"]), str(v["index"] + 1), v["status"], _cell(v["objective"]),
             *[_cell(p["value"]) for p in v["params"]]] for v in doc["variants"]]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["", f"sweep {doc['sweep_id']} {doc['state']}, objective {_objective(doc['objective'])}"]
    lines += ["  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip() for r in [header, *rows]]
    if doc.get("best"):
        best = doc["best"]
        values = ", ".join(f"{p['node_id']}.{p['param']}={value_text(p['value'])}" for p in best["params"])
        lines.append(f"best: #{best['index'] + 1} ({values}) {doc['objective']['metric']} = "
                     f"{value_text(best['objective'])}")
    for key in ("objective_warning", "error", "failure"):
        if doc.get(key):
            lines.append(f"{key.replace('_', ' ')}: {doc[key]}")
    return lines
