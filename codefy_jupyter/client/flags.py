"""The flags a client takes on a command line, shared by the `codefy` command and the `%codefy`
magics so that both take exactly the same ones: argument types, the server arguments
(--url/--token/--host/--port) and the server they name, and `codefy run`'s flags with the
`Client.submit` keywords they give."""

from __future__ import annotations

import argparse
import math
from typing import Any, Callable

from ..wire.run_options import SEED_MAX


def int_in(name: str, low: int, high: int | None = None) -> Callable[[str], int]:
    """An argparse type: an integer from `low` (to `high`), refused with a message naming `name`."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be an integer, got {text!r}") from None
        if value < low or (high is not None and value > high):
            bound = f"from {low} to {high}" if high is not None else f"at least {low}"
            raise argparse.ArgumentTypeError(f"{name} must be {bound}, got {value}")
        return value

    return parse


def seconds(*, allow_zero: bool) -> Callable[[str], float]:
    """An argparse type: a finite number of seconds (above 0, or from 0 with allow_zero)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number of seconds, got {text!r}") from None
        if math.isnan(value) or math.isinf(value) or value < 0 or (value == 0 and not allow_zero):
            bound = "0 or more" if allow_zero else "above 0"
            raise argparse.ArgumentTypeError(f"must be a number of seconds {bound}, got {text}")
        return value

    return parse


def device_list(text: str) -> list[str]:
    """An argparse type: a comma-separated device set, e.g. cuda:0,cuda:1."""
    devices = [d.strip() for d in text.split(",")]
    if not text.strip() or any(not d for d in devices):
        raise argparse.ArgumentTypeError(f"must be a comma-separated list of devices, e.g. cuda:0,cuda:1, got {text!r}")
    return devices


def add_server_arguments(p: argparse.ArgumentParser) -> None:
    """--url, --token, --host and --port, in a group of their own."""
    g = p.add_argument_group("server (default: $CODEFY_URL, else the last `codefy start`, else a running "
                             "Jupyter server with codefy-jupyter)")
    g.add_argument("--url", help="the server's base URL, e.g. http://127.0.0.1:8888/; several, comma-separated, "
                   "for a leader and its standbys")
    g.add_argument("--token", help="the server's token (default: $CODEFY_TOKEN, or the token `codefy start` "
                   "recorded for that address)")
    g.add_argument("--host", help="server host, a shortcut for --url (default 127.0.0.1 when --port is given)")
    g.add_argument("--port", type=int_in("port", 1, 65535), help="server port, a shortcut for --url (default 8888 "
                   "when --host is given)")


def server_from_arguments(args: argparse.Namespace) -> Any:
    """The server (a `ServerInfo`) the arguments of `add_server_arguments` name, else the one
    discovery finds; raises CodefyError when there is none."""
    from .discovery import find_server

    return find_server(url=args.url, token=args.token, host=args.host, port=args.port)


def add_run_arguments(run: argparse.ArgumentParser) -> None:
    """`codefy run`'s arguments (GRAPH and its flags, the server arguments among them), which
    `%codefy run` takes too."""
    run.add_argument("graph", help="graph JSON file")
    run.add_argument("--name", help="label stored on the run and shown wherever runs are listed")
    run.add_argument("--device", help="cpu, auto, cuda, cuda:N, mps or mps:N (default: the graph's settings.device, "
                     "else cpu; with --devices, its first device)")
    run.add_argument("--target", help="where the run executes: local (this server, the default), a worker's name, "
                     "or any")
    run.add_argument("--devices", type=device_list, metavar="LIST",
                     help="comma-separated device set of one kind, e.g. cuda:0,cuda:1")
    seed = run.add_mutually_exclusive_group()
    seed.add_argument("--seed", type=int_in("seed", 0, SEED_MAX),
                      help="seed every node from N (default: the graph's settings.seed)")
    seed.add_argument("--no-seed", action="store_true", help="run unseeded even when the graph sets a seed")
    run.add_argument("--deterministic", action="store_true", help="ask PyTorch for deterministic kernels (warn_only)")
    run.add_argument("--record-outputs", action="store_true", help="capture node outputs for later inspection")
    run.add_argument("--provenance", action="store_true",
                     help="record the sha256 of every dataset and checkpoint file the run reads")
    mode = run.add_mutually_exclusive_group()
    mode.add_argument("--wait", action="store_true", help="stream progress until the run ends (the default)")
    mode.add_argument("--detach", action="store_true", help="print the submitted run and exit 0 at once")
    run.add_argument("--timeout", type=seconds(allow_zero=False), metavar="S",
                     help="stop watching after S seconds and exit 1 (the run keeps going on the server)")
    run.add_argument("--json", action="store_true",
                     help="no live view: print the final run (with --detach, the submitted run) as one JSON document")
    add_server_arguments(run)


def submit_options(args: argparse.Namespace) -> dict[str, Any]:
    """`codefy run`'s flags as keywords of `Client.submit` (shared with `%codefy run`)."""
    options: dict[str, Any] = {"name": args.name, "device": args.device, "deterministic": args.deterministic,
                               "record_outputs": args.record_outputs, "devices": args.devices}
    if args.provenance:
        options["provenance"] = True
    if args.no_seed:
        options["seed"] = None
    elif args.seed is not None:
        options["seed"] = args.seed
    # no seed key: the graph's settings.seed
    if args.target:
        options["worker"] = args.target
    return options
