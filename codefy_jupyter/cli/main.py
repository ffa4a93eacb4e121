"""The `codefy` command: its parser (every subcommand adds its own arguments) and the dispatch to
the subcommand's module. `codefy start` and `codefy stop` are the server's (`server/headless.py`).

Exit codes, shared by every subcommand: 0 success, 1 the work failed (the error is printed),
2 bad arguments, 130 interrupted (Ctrl+C), 141 whoever read the output went away (`| head`): the
command stops quietly, as a tool that SIGPIPE ends.
"""

from __future__ import annotations

import argparse
import os
import sys

from .._version import __version__
from ..client.flags import int_in, seconds
from .args import EXIT_CLOSED_PIPE, EXIT_USAGE

_port = int_in("port", 1, 65535)
_seconds = seconds(allow_zero=True)


def build_parser() -> argparse.ArgumentParser:
    """The `codefy` command's parser, every subcommand's arguments included."""
    from .agent import add_parser as add_agent
    from .exec import add_parser as add_exec
    from .kernel_setup import add_parser as add_kernel_setup
    from .run import add_parser as add_run
    from .runs import add_parser as add_runs
    from .study import add_parser as add_study
    from .sweep import add_parser as add_sweep

    parser = argparse.ArgumentParser(prog="codefy", description="Run ML node graphs, here or on the run queue.")
    parser.add_argument("--version", action="version", version=f"codefy-jupyter {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    add_exec(sub)

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

    add_run(sub)
    add_runs(sub)
    add_sweep(sub)
    add_study(sub)
    add_kernel_setup(sub)
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
    from .agent_ssh import split_agent_args

    argv, agent_args = split_agent_args(sys.argv[1:] if argv is None else list(argv))
    args = parser.parse_args(argv)
    if agent_args is not None:
        args.agent_args = agent_args
    if args.command == "exec":
        from .exec import command as exec_command

        return exec_command(args, parser)
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
        from .runs import runs_command

        return runs_command(args)
    if args.command == "sweep":
        from .sweep import command as sweep_command

        return sweep_command(args)
    if args.command == "study":
        from .study import command as study_command

        return study_command(args)
    if args.command == "agent":
        from .agent import command as agent_command

        return agent_command(args, parser)
    if args.command == "kernel-setup":
        from .kernel_setup import command as kernel_setup_command

        return kernel_setup_command(args)
    parser.print_help(sys.stderr)
    return EXIT_USAGE
