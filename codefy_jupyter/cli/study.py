"""`codefy study SPEC.json`: start a study on the run queue, follow it live through its audit log
(`GET studies/{id}/events?cursor=&wait=`, a long-poll that answers when something happens, plus
one read of the study per page: never a read per run), and print its ranking at the end. Also
`codefy study show|cancel|resume ID` and `codefy study ls`.

The submit carries an Idempotency-Key made once per invocation, so a POST retried after its answer
was lost returns the same study instead of starting a second one. The study belongs to the
server: Ctrl+C, `--timeout` and `--detach` stop the watching, never the study.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import uuid
from contextlib import aclosing
from typing import Any

from ..client.flags import add_server_arguments, int_in, seconds, server_from_arguments
from . import interrupts
from .args import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE
from .output import announce, dump, error_doc, fail, out, timestamp

_positive_seconds = seconds(allow_zero=False)
ACTIONS = ("show", "cancel", "resume", "ls")
SUBMIT_TRIES = 5  # a POST whose answer was lost is sent again (same key) this many times in all
ALREADY = " (already submitted with this key: not started again)"


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    study = sub.add_parser(
        "study", help="start a study on a codefy server, follow it, print the ranking",
        description="`codefy study SPEC.json` starts a study (POST codefy/api/studies) from a spec file "
        "(base_graph and each variant's graph may be paths of graph files, relative to the spec), follows it "
        "live and prints the ranking. `codefy study show ID`, `cancel ID`, `resume ID [--budget JSON]` and `ls` "
        "act on studies already there. The study belongs to the server: Ctrl+C, --timeout and --detach stop "
        "watching, not the study. Exit codes: 0 succeeded (or submitted with --detach, or the action done), "
        "1 anything else, refused or timed out, 2 bad arguments, 130 Ctrl+C.")
    study.add_argument("spec", metavar="SPEC|show|cancel|resume|ls", help="study spec JSON file, or an action")
    study.add_argument("study_id", nargs="?", metavar="ID", help="the study an action is for: its id, or a unique prefix of 8 or more characters")
    study.add_argument("--name", help="the study's name (its runs are named '<name> / <label> / r<n>')")
    study.add_argument("--idempotency-key", metavar="KEY",
                       help="send this Idempotency-Key (default: one made for this invocation); submitting "
                       "again with the same key and spec returns the same study")
    study.add_argument("--budget", metavar="JSON", help="resume: the new budget, e.g. '{\"max_runs\": 12}'")
    study.add_argument("--expected-revision", type=int_in("expected revision", 0), metavar="N",
                       help="cancel/resume: refuse (409) if the study has moved past revision N")
    study.add_argument("--follow", action="store_true", help="resume/show: follow the study to its end")
    study.add_argument("--detach", action="store_true", help="print the submitted study and exit 0 at once")
    study.add_argument("--timeout", type=_positive_seconds, metavar="S",
                       help="stop watching after S seconds and exit 1 (the study keeps going on the server)")
    study.add_argument("--json", action="store_true",
                       help="no live view: print the final study (with --detach, the submitted one) as one JSON "
                       "document")
    add_server_arguments(study)


def command(args: argparse.Namespace) -> int:
    from ..client.client import load_study_spec
    from ..client.errors import CodefyError

    action = args.spec if args.spec in ACTIONS else "submit"
    if action in ("show", "cancel", "resume") and not args.study_id:
        out(f"error: codefy study {action} needs the study's ID", sys.stderr)
        return EXIT_USAGE
    budget = None
    if args.budget is not None:
        try:
            budget = json.loads(args.budget)
        except ValueError as err:
            out(f"error: --budget is not JSON: {err}", sys.stderr)
            return EXIT_USAGE
        if not isinstance(budget, dict):
            out("error: --budget is a JSON object, e.g. '{\"max_runs\": 12}'", sys.stderr)
            return EXIT_USAGE
    spec: dict[str, Any] = {}
    try:
        if action == "submit":
            spec = load_study_spec(args.spec)
        server = server_from_arguments(args)
    except CodefyError as err:
        return fail(str(err), args.json, error_doc(err))
    if args.name is not None:
        spec = {**spec, "name": args.name}
    if not args.json:
        announce(server)
    try:
        return interrupts.run(_main(server, action, spec, budget, args))
    except KeyboardInterrupt:
        if not args.json:
            out("stopped watching; the study keeps running on the server"
                + (f" (`codefy study show {args.study_id} --follow` follows it again)" if args.study_id else ""),
                sys.stderr)
        return EXIT_INTERRUPTED


async def submit(client: Any, spec: dict[str, Any], key: str, *, delay: float = 1.0) -> dict[str, Any]:
    """POST the study, sent again with the same key while no answer comes back: the server answers
    a retry of a request it already took with that study (`created: false`), never a second one."""
    from ..client.errors import CodefyError

    for attempt in range(SUBMIT_TRIES):
        try:
            return await client.study(spec, idempotency_key=key)
        except CodefyError as err:
            if err.code != "unreachable" or attempt == SUBMIT_TRIES - 1:
                raise
            await asyncio.sleep(delay)
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises


async def _main(server: Any, action: str, spec: dict[str, Any], budget: dict[str, Any] | None,
                args: argparse.Namespace) -> int:
    from ..client.client import AsyncClient
    from ..client.errors import CodefyError, describe

    client = AsyncClient(server=server)
    try:
        try:
            if action == "ls":
                return _list(await client.list_studies(limit=50), args, server)
            if action == "submit":
                doc = await submit(client, spec, args.idempotency_key or uuid.uuid4().hex)
                args.study_id = doc["id"]
                if not args.json:
                    out(f"study {doc['id']}{' ' + repr(doc['name']) if doc.get('name') else ''}: "
                        f"{len(doc['variants'])} variants x {doc['repetitions']} repetitions, seed {doc['seed']}"
                        f"{'' if doc.get('created', True) else ALREADY}")
            elif action == "cancel":
                doc = await client.cancel_study(args.study_id, expected_revision=args.expected_revision)
                if not args.json:
                    out(f"study {doc['id']} {doc['status']}: stopped {len(doc.get('cancelled_runs') or [])} runs")
            elif action == "resume":
                doc = await client.resume_study(args.study_id, budget=budget,
                                                expected_revision=args.expected_revision)
                if not args.json:
                    out(f"study {doc['id']} {doc['status']} (rev {doc['revision']})")
            else:
                doc = await client.get_study(args.study_id)
            follow = action == "submit" and not args.detach or action in ("show", "resume") and args.follow
            if follow:
                if not args.json:
                    out(f"following study {doc['id']}; Ctrl+C stops watching, not the study "
                        f"(`codefy study show {doc['id']} --follow` re-attaches)")
                doc = await asyncio.wait_for(_follow(client, doc["id"], args.json), args.timeout)
        except asyncio.TimeoutError:
            return fail(f"stopped watching after {args.timeout:g} s; the study keeps running on the server "
                        f"(`codefy study show {args.study_id} --follow` re-attaches)", args.json,
                        {"code": "timeout", "message": "timed out", "study_id": args.study_id}, server)
        except CodefyError as err:
            return fail(describe(err, server.url), args.json, error_doc(err), server)
        return _report(doc, action, follow, args, server)
    finally:
        await client.close()


def _report(doc: dict[str, Any], action: str, followed: bool, args: argparse.Namespace, server: Any) -> int:
    from ..client.study_report import progress_line, table_lines

    if args.json:
        dump(doc, server)
    elif action == "show" or followed:
        if not followed:
            out(progress_line(doc))
        for line in table_lines(doc):
            out(line)
    if not followed or action != "submit":
        return EXIT_OK
    return EXIT_OK if doc["status"] == "succeeded" else EXIT_FAILED


async def _follow(client: Any, study_id: str, quiet: bool) -> dict[str, Any]:
    """The study as it ended (the full form). Quiet, by its audit log's long-poll (a small page per
    batch of news); else by the study's own long-poll in the summary form, a progress line per
    change (twice a second at most), never a read per run."""
    from ..client.study_report import progress_line

    if quiet:
        return await client.wait_study(study_id)
    last, doc = None, None
    async with aclosing(client.watch_study(study_id)) as docs:
        async for doc in docs:
            line = progress_line(doc)
            if line != last:
                out(line)
                last = line
    assert doc is not None  # watch_study yields at least the stopped study
    return doc


def _list(page: dict[str, Any], args: argparse.Namespace, server: Any) -> int:
    if args.json:
        dump(page, server)
        return EXIT_OK
    studies = page.get("studies") or []
    if not studies:
        out("no studies")
    for s in studies:
        out(f"{s['id']}  {s['status']:<16} rev {s['revision']:<5} {timestamp(s.get('created_at'))}  "
            f"{s.get('name') or ''}")
    return EXIT_OK
