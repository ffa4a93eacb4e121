"""`codefy exec GRAPH.json`: run a graph in this process, with no server, and show its progress in
the live terminal view (Ctrl+C cancels the run; a second Ctrl+C quits at once)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from ..client.flags import int_in
from ..wire.run_options import SEED_MAX
from .args import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK
from .output import fail
from .terminal import LiveView, format_seconds, format_value

_seed = int_in("seed", 0, SEED_MAX)
_parallel = int_in("the number of nodes", 1)


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Register `exec` on the `codefy` command's subparsers."""
    ex = sub.add_parser("exec", help="run a graph in this process, with no server",
                        description="Run a graph in this process (no server) and show its progress.")
    ex.add_argument("graph", help="graph JSON file")
    seed = ex.add_mutually_exclusive_group()
    seed.add_argument("--seed", type=_seed, help="seed every node from N (default: the graph's settings.seed)")
    seed.add_argument("--no-seed", action="store_true", help="run unseeded even when the graph sets a seed")
    ex.add_argument("--device", help="cpu, cuda, cuda:N, mps or auto (default: the graph's settings.device, else cpu)")
    ex.add_argument("--deterministic", action="store_true", help="ask PyTorch for deterministic kernels (warn_only)")
    ex.add_argument("--max-parallel-nodes", type=_parallel, default=4, metavar="N",
                    help="nodes executing at once inside the run (default 4; a seeded run uses 1)")
    ex.add_argument("--data-dir", help="where nodes write checkpoints and models (default ./.codefy-data/runs/<id>)")
    ex.add_argument("--json", action="store_true", help="print one JSON document with the result, no live view")


def command(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Run the graph file in this process; exit 0 succeeded, 1 failed, 130 interrupted."""
    from ..core.devices import torch_devices
    from ..wire.devices import DeviceError, resolve_device

    path = Path(args.graph)
    try:
        graph = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return fail(f"graph file not found: {path}", args.json, {"code": "file_not_found", "message": str(path)})
    except (OSError, UnicodeDecodeError) as err:
        return fail(f"cannot read {path}: {err}", args.json)
    except json.JSONDecodeError as err:
        return fail(f"{path} is not valid JSON: {err.msg} at line {err.lineno} column {err.colno}", args.json,
                    {"code": "invalid_json", "message": err.msg, "params": {"line": err.lineno, "column": err.colno}})
    settings = graph.get("settings") if isinstance(graph, dict) and isinstance(graph.get("settings"), dict) else {}
    seed = None if args.no_seed else (args.seed if args.seed is not None else settings.get("seed"))
    try:
        device, note = resolve_device(args.device or settings.get("device") or "cpu", torch_devices)
    except DeviceError as err:
        if args.device:
            parser.error(str(err))
        return fail(f"settings.device: {err}", args.json)

    from ..engine import CancelToken, GraphError, run_graph
    view = None if args.json else LiveView(sys.stderr)
    if note and view is not None:
        print(f"! {note}", file=sys.stderr)
    token = CancelToken()
    interrupts = 0

    def on_sigint(signum: int, frame: Any) -> None:
        nonlocal interrupts
        interrupts += 1
        if interrupts > 1:
            # A second Ctrl+C: stop waiting for a node that does not check for cancellation.
            print("\n■ interrupted", file=sys.stderr, flush=True)
            os._exit(EXIT_INTERRUPTED)
        token.cancel("interrupted")
        if view is not None:
            print("\n■ stopping: waiting for the running node to reach a cancel check (Ctrl+C again to quit)",
                  file=sys.stderr)

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        if view is not None:
            seeded = f", seed {seed}" if seed is not None else ""
            print(f"▸ {path.name} on {device}{seeded}", file=sys.stderr)
        result = run_graph(graph, seed=seed, device=device, deterministic=args.deterministic,
                           max_parallel_nodes=args.max_parallel_nodes, cancel=token, on_event=view,
                           data_dir=args.data_dir)
    except GraphError as err:
        if view is not None:
            view.close()
        return fail(str(err), args.json, err.to_dict())
    finally:
        signal.signal(signal.SIGINT, previous)
    if view is not None:
        view.close()
    if args.json:
        print(json.dumps(result.summary(), indent=2, default=str))
    else:
        if result.metrics:
            print("Metrics:")
            for name, value in result.metrics.items():
                print(f"  {name:<16} {format_value(value)}")
        if result.status == "succeeded":
            print(f"✓ run complete in {format_seconds(result.duration_s)} "
                  f"({len(result.executed)} executed, {len(result.cached)} cached)")
        elif result.status == "cancelled":
            print(f"■ run cancelled after {format_seconds(result.duration_s)}")
        else:
            err = result.error
            print(f"✗ run failed: {err}", file=sys.stderr)
            if err is not None and err.traceback:
                print(err.traceback.rstrip(), file=sys.stderr)
    if result.status == "cancelled" or token.cancelled:
        return EXIT_INTERRUPTED
    return EXIT_OK if result.status == "succeeded" else EXIT_FAILED
