"""Which server a command talks to: the --url/--token/--host/--port arguments, and the server they
name (through the client's own lookup, `kernel.discovery.find_server`). The magics take the same
arguments from here."""

from __future__ import annotations

import argparse
import os
from typing import Any

from .args import int_in

RECONNECT_ENV = "CODEFY_RECONNECT_S"  # how long a watcher keeps retrying a server that stopped answering
DEFAULT_RECONNECT_S = 30.0


def add_server_arguments(p: argparse.ArgumentParser) -> None:
    """--url, --token, --host and --port, in a group of their own."""
    g = p.add_argument_group("server (default: $CODEFY_URL, else the last `codefy start`, else a running "
                             "Jupyter server with codefy-jupyter)")
    g.add_argument("--url", help="the server's base URL, e.g. http://127.0.0.1:8888/")
    g.add_argument("--token", help="the server's token (default: $CODEFY_TOKEN, or the token `codefy start` "
                   "recorded for that address)")
    g.add_argument("--host", help="server host, a shortcut for --url (default 127.0.0.1 when --port is given)")
    g.add_argument("--port", type=int_in("port", 1, 65535), help="server port, a shortcut for --url (default 8888 "
                   "when --host is given)")


def server_from_arguments(args: argparse.Namespace) -> Any:
    """The server (a `ServerInfo`) the arguments of `add_server_arguments` name, else the one
    discovery finds; raises CodefyError when there is none."""
    from ..kernel.discovery import find_server

    return find_server(url=args.url, token=args.token, host=args.host, port=args.port)


def reconnect_s() -> float:
    """How long a watcher keeps retrying a server that stopped answering, in seconds."""
    try:
        return max(0.0, float(os.environ.get(RECONNECT_ENV, DEFAULT_RECONNECT_S)))
    except ValueError:
        return DEFAULT_RECONNECT_S
