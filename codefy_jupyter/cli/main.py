"""The `codefy` command.

Exit codes, shared by every subcommand: 0 success, 1 the work failed (the error is printed),
2 bad arguments, 130 interrupted (Ctrl+C), 141 whoever read the output went away (`| head`): the
command stops quietly, as a tool that SIGPIPE ends.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from .._version import __version__

from .args import EXIT_CLOSED_PIPE, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, SEED_MAX, int_in, seconds


_seed = int_in("seed", 0, SEED_MAX)
_parallel = int_in("the number of nodes", 1)
_port = int_in("port", 1, 65535)
_seconds = seconds(allow_zero=True)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="codefy", description="Run ML node graphs, here or on the run queue.")
    parser.add_argument("--version", action="version", version=f"codefy-jupyter {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

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

    st = sub.add_parser("start", help="run a headless jupyter-server with only the run queue",
                        description="Run a headless jupyter-server with only the codefy extension (for machines "
                        "with no JupyterLab). It records where it runs in <data dir>/server.json, which clients "
                        "read to find it; `codefy stop` stops it.")
    st.add_argument("--port", type=_port, help="the port to listen on (default: Jupyter's, 8888, or the next free one)")
    st.add_argument("--ip", default="127.0.0.1", help="the address to listen on (default 127.0.0.1)")
    st.add_argument("--data-dir", help="the run database's folder (default: $CODEFY_DATA_DIR, else the Jupyter "
                    "data dir's codefy/)")
    st.add_argument("--token", help="the token clients send, for this start only (default: $JUPYTER_TOKEN, else "
                    "the one kept in <data dir>/token, generated on the first start)")
    st.add_argument("--foreground", action="store_true",
                    help="serve in this process and log to the terminal (Ctrl+C stops it)")

    sp = sub.add_parser("stop", help="stop the server `codefy start` started",
                        description="Stop the codefy server running on a data dir: SIGTERM (waiting runs end "
                        "interrupted, executing ones get 5 s to stop), then SIGKILL if it is still there.")
    sp.add_argument("--data-dir", help="the server's data dir (default: $CODEFY_DATA_DIR, else the Jupyter data "
                    "dir's codefy/)")
    sp.add_argument("--timeout", type=_seconds, default=8.0, metavar="S",
                    help="seconds to wait after SIGTERM before SIGKILL (default 8)")

    from .run import add_parsers

    add_parsers(sub)
    from .kernel_setup import add_parser as add_kernel_setup

    add_kernel_setup(sub)
    from .agent import add_parser as add_agent

    add_agent(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        return _dispatch(argv)
    except BrokenPipeError:
        # The reader closed the pipe: nothing more can be said to it. Point stdout and stderr at
        # /dev/null so the interpreter's final flush does not print a traceback of its own. (Not
        # SIG_DFL for SIGPIPE: that would also kill the process on a server socket closing.)
        devnull = os.open(os.devnull, os.O_WRONLY)
        for stream in (sys.stdout, sys.stderr):
            try:
                os.dup2(devnull, stream.fileno())
            except (OSError, ValueError):  # not a real file (captured, closed): nothing to redirect
                pass
        os.close(devnull)
        return EXIT_CLOSED_PIPE


def _dispatch(argv: list[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "exec":
        return _exec(args, parser)
    if args.command == "start":
        from ..server.headless import start_command

        return start_command(args)
    if args.command == "stop":
        from ..server.headless import stop_command

        return stop_command(args)
    if args.command == "run":
        from .run import run_command

        return run_command(args)
    if args.command == "runs":
        from .run import runs_command

        return runs_command(args)
    if args.command == "agent":
        from .agent import command as agent_command

        return agent_command(args, parser)
    if args.command == "kernel-setup":
        from .kernel_setup import command

        return command(args)
    parser.print_help(sys.stderr)
    return EXIT_USAGE


def _fail(message: str, as_json: bool, error: dict[str, Any] | None = None) -> int:
    if as_json:
        print(json.dumps({"status": "failed", "error": error or {"code": "error", "message": message}}, indent=2))
    else:
        print(f"error: {message}", file=sys.stderr)
    return EXIT_FAILED


def _exec(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from ..core.devices import torch_devices
    from ..wire.devices import DeviceError, resolve_device

    path = Path(args.graph)
    try:
        graph = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return _fail(f"graph file not found: {path}", args.json, {"code": "file_not_found", "message": str(path)})
    except (OSError, UnicodeDecodeError) as err:
        return _fail(f"cannot read {path}: {err}", args.json)
    except json.JSONDecodeError as err:
        return _fail(f"{path} is not valid JSON: {err.msg} at line {err.lineno} column {err.colno}", args.json,
                     {"code": "invalid_json", "message": err.msg, "params": {"line": err.lineno, "column": err.colno}})
    settings = graph.get("settings") if isinstance(graph, dict) and isinstance(graph.get("settings"), dict) else {}
    seed = None if args.no_seed else (args.seed if args.seed is not None else settings.get("seed"))
    try:
        device, note = resolve_device(args.device or settings.get("device") or "cpu", torch_devices)
    except DeviceError as err:
        if args.device:
            parser.error(str(err))
        return _fail(f"settings.device: {err}", args.json)

    from ..engine import CancelToken, GraphError, run_graph
    from .terminal import LiveView, format_seconds, format_value

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
        return _fail(str(err), args.json, err.to_dict())
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


