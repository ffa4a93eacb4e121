"""`codefy agent start` and `codefy agent stop`: the command line of the worker agent (the agent
itself, the daemon, is the `agent/` package; this module reads the arguments, finds the control
plane and the token, holds the agent's pid file and runs it).

The agent's folder (`--data-dir`, else `$CODEFY_AGENT_DIR`, else `<jupyter data dir>/codefy-agent`)
holds `credentials/<name>.json` (the worker token, 0600), `agents/<name>.json` (the running agent's
pid, or a `codefy agent ssh` supervisor's, locked while it runs; agent_state.py) and `agent-runs/<run id>/` (spool.jsonl, output.log, data/; the folders of
finished runs beyond the newest `--keep-runs` are removed).

`codefy agent stop` sends SIGTERM to the running agents of that folder (or the one `--name` names):
each asks its runs to stop (10 s grace, then terminates them), sends their last frames and exits;
an SSH supervisor stops its remote agent the same way, then closes its tunnel (agent_ssh.py).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import re
import signal
import socket
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any, Callable

from ..agent import private
from ..agent.retention import DEFAULT_KEEP_RUNS
from ..client.flags import seconds
from ..wire.local_server import pid_alive
from .agent_state import AlreadyRunning, default_agent_dir, local_control, pid_file, read_state, read_token_file
from .args import EXIT_FAILED, EXIT_OK, EXIT_USAGE

log = logging.getLogger("codefy.agent")

STOP_TIMEOUT_S = 40.0  # the runs' 10 s grace, the 5 s kill, the last acks, and some slack


def default_name() -> str:
    """This machine's host name as a worker name (lowercase letters, digits and '-')."""
    name = re.sub(r"[^a-z0-9-]+", "-", socket.gethostname().split(".")[0].lower()).strip("-")[:63]
    return name if name and name not in ("local", "any", "pool") else "worker"


def add_parser(sub: Any) -> None:
    agent = sub.add_parser("agent", help="run a worker agent that takes runs from a control plane",
                           description="A worker agent dials out to a codefy control plane and runs each run "
                           "it is given in a process of its own, on this machine's devices.")
    cmds = agent.add_subparsers(dest="agent_command", metavar="COMMAND")
    st = cmds.add_parser("start", help="connect to a control plane and take runs (until stopped)",
                         description="Connect to the control plane at --control (default: the `codefy start` "
                         "server on this machine) and take runs until stopped (SIGTERM, Ctrl+C or `codefy agent "
                         "stop`). Reconnects by itself; runs go on meanwhile.")
    st.add_argument("--control", metavar="URL[,URL...]",
                    help="the control plane's base URL, e.g. https://lab.example.org/ or http://127.0.0.1:8888/; "
                    "several, comma-separated, for a leader and its standbys (the agent follows whichever leads) "
                    "(default: the `codefy start` server running on this machine, from its server.json)")
    st.add_argument("--token", help="a one-time enrollment token (exchanged once for a stored worker token), a "
                    "worker token, or the server's own token (same machine only). Default: the stored worker "
                    "token, else $CODEFY_TOKEN, else the local `codefy start` server's")
    st.add_argument("--token-file", metavar="FILE", help="read the token (as --token) from the first line of FILE, "
                    "'-' for standard input: it then appears on no command line")
    st.add_argument("--name", help="the worker's name (default: this host's name)")
    st.add_argument("--instance", help="register as <name>.<instance>, sharing <name>'s enrollment (one per "
                    "Slurm job or pod)")
    st.add_argument("--one-shot", action="store_true", help="take exactly one run, then exit")
    st.add_argument("--run-id", help="with --one-shot: take this run, out of turn")
    trust = st.add_mutually_exclusive_group()
    trust.add_argument("--ca-file", help="verify the control plane's certificate with this CA bundle instead of the "
                       "system's")
    trust.add_argument("--pin-sha256", metavar="PIN", help="trust only this public key: sha256//<base64> of the "
                       "certificate's SubjectPublicKeyInfo")
    st.add_argument("--data-dir", help="the agent's folder (default: $CODEFY_AGENT_DIR, else the Jupyter data dir's "
                    "codefy-agent/)")
    st.add_argument("--no-warm", action="store_true", help="start each run in a new interpreter instead of forking "
                    "it from the warm process (slower starts; for debugging)")
    st.add_argument("--mount", type=mount, action="append", default=[], metavar="LABEL=PATH",
                    help="a folder this machine shares with the control plane, under the label the control plane "
                    "gives its data folder (CODEFY_MOUNT_LABEL, default 'data'), e.g. --mount data=/nas/codefy: runs "
                    "that use files of the data folder may then run here (repeatable)")
    st.add_argument("--share-memory", action="append", default=[], metavar="DEVICE",
                    help="share this CUDA card among runs by memory budget instead of one run at a time, e.g. "
                    "--share-memory cuda:0: runs with options.target.memory_gib are admitted while their budgets fit "
                    "the card's free memory, and each run's allocator is capped to its budget (repeatable)")
    st.add_argument("--keep-runs", type=keep_runs, metavar="N",
                    help="how many finished runs keep their folder (agent-runs/<run>/: output.log, data/), the "
                    f"newest; older ones are removed (default: $CODEFY_AGENT_KEEP_RUNS, else {DEFAULT_KEEP_RUNS}; "
                    "-1 keeps all)")
    st.add_argument("--system-metrics-interval", type=seconds(allow_zero=True), metavar="S",
                    help="seconds between samples of each run's system metrics (CPU, resident memory, its cards' "
                    "utilization and memory through NVML), recorded as metrics of the run; 0: off (default: "
                    "$CODEFY_SYSTEM_METRICS_INTERVAL_S, else 5)")
    from .agent_ssh import add_parser as add_ssh

    add_ssh(cmds)
    sp = cmds.add_parser("stop", help="stop the agents running from an agent folder",
                         description="Ask each running agent of the folder (or the one --name names) to stop: its "
                         "runs get 10 s to stop cooperatively, then are terminated; their last frames are sent.")
    sp.add_argument("--name", help="only the agent registered under this name (<name> or <name>.<instance>)")
    sp.add_argument("--data-dir", help="the agent's folder (default as for start)")
    sp.add_argument("--timeout", type=seconds(allow_zero=False), default=STOP_TIMEOUT_S, metavar="S",
                    help=f"seconds to wait for each agent to exit before SIGKILL (default {STOP_TIMEOUT_S:g})")


def mount(text: str) -> tuple[str, str]:
    label, sep, path = text.partition("=")
    label = label.strip()
    if not sep or not label or not path.strip():
        raise argparse.ArgumentTypeError(f"expected LABEL=PATH, got {text!r}")
    folder = Path(path.strip()).expanduser()
    if not folder.is_dir():
        raise argparse.ArgumentTypeError(f"--mount {label}: {str(folder)!r} is not a folder")
    return label, str(folder.resolve())


def keep_runs(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -2
    if value < -1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= -1 (-1 keeps all), got {text!r}")
    return value


def command(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if args.agent_command == "start":
        return start(args, parser)
    if args.agent_command == "stop":
        return stop(args)
    if args.agent_command == "ssh":
        from .agent_ssh import command as ssh_command

        return ssh_command(args, parser)
    parser.parse_args(["agent", "--help"])
    return EXIT_USAGE


# -- start --------------------------------------------------------------------------------------------

def start(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from ..agent import tls
    from ..agent.credentials import (
        LOCAL_SERVER, CredentialError, CredentialStore, local_server_token, normalise_control, resolve_token,
    )
    from ..agent.identity import Inventory, InventoryError
    from ..wire.control_urls import ControlUrlError, parse_control_urls
    from ..wire.names import name_problem

    name = args.name or default_name()
    for value, what in ((name, "worker name"), (args.instance, "instance")):
        if value is not None and (problem := name_problem(value, what=what)):
            parser.error(problem)
    if args.token_file:
        if args.token:
            parser.error("--token-file: give the token once, with --token or --token-file")
        try:
            args.token = read_token_file(args.token_file)
        except OSError as err:
            parser.error(f"--token-file: cannot read {args.token_file!r}: {err.strerror or err}")
    if args.run_id and not args.one_shot:
        parser.error("--run-id takes the run of a one-shot agent: add --one-shot")
    if args.keep_runs is None:
        try:
            args.keep_runs = keep_runs(os.environ.get("CODEFY_AGENT_KEEP_RUNS", str(DEFAULT_KEEP_RUNS)))
        except argparse.ArgumentTypeError as err:
            parser.error(f"CODEFY_AGENT_KEEP_RUNS: {err}")
    if args.system_metrics_interval is not None:  # read by the runner (agent/system_sampling.py)
        os.environ["CODEFY_SYSTEM_METRICS_INTERVAL_S"] = str(args.system_metrics_interval)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s codefy-agent %(levelname)s %(message)s")
    agent_dir = Path(args.data_dir).expanduser() if args.data_dir else default_agent_dir()
    if args.control:
        try:
            controls = parse_control_urls(args.control)
        except ControlUrlError as err:
            parser.error(str(err))
        control = controls[0]
    else:
        local, state_file = local_control()
        if local is None:
            print(f"error: no --control given and no `codefy start` server is running on this machine (none "
                  f"recorded in {state_file}): start one, or pass --control URL", file=sys.stderr)
            return EXIT_USAGE
        control = normalise_control(local)
        controls = (control,)
        log.info("control plane %s: the `codefy start` server on this machine (%s), as no --control was given",
                 control, state_file)
    registered = f"{name}.{args.instance}" if args.instance else name
    try:
        pin = tls.parse_pin(args.pin_sha256) if args.pin_sha256 else None
        ssl_context = None
        if any(url.startswith("https://") for url in controls):
            ssl_context = tls.context(args.ca_file) if pin is None else None
        inventory = Inventory.probe(os.environ)
        inventory.share_by_memory(args.share_memory)
    except (tls.TLSSetupError, InventoryError) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_USAGE
    # From here on the agent writes its folder (state, credentials, agent-runs/, the input cache)
    # and starts its run processes: all of it is its user's alone (agent/private.py).
    private.restrict_umask()
    private.make_dir(agent_dir)
    try:
        with pid_file(agent_dir, registered, ",".join(controls)) as state:
            if args.token and _token_is_for_enrollment(args.token):
                tls.warn_if_plaintext(control, "the enrollment token")
            if pin is not None and args.token and _token_is_for_enrollment(args.token):
                ssl_context = asyncio.run(_pinned(control, pin))
            token, source = resolve_token(",".join(controls), name, args.token, CredentialStore(agent_dir), ssl_context)
            log.info("worker %s, folder %s, token from %s", registered, agent_dir, source)
            reread = (partial(local_server_token, control)
                      if source == LOCAL_SERVER or token == local_server_token(control) else None)
            code = asyncio.run(_serve(args, name, controls, token, pin, agent_dir, inventory, reread))
            state.unlink(missing_ok=True)
            return code
    except AlreadyRunning as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_FAILED
    except (CredentialError, tls.TLSSetupError, ConnectionError) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_FAILED


def _token_is_for_enrollment(token: str) -> bool:
    from ..agent.credentials import is_enrollment_token

    return is_enrollment_token(token)


async def _pinned(control: str, pin: bytes) -> Any:
    from urllib.parse import urlsplit

    from ..agent import tls

    parts = urlsplit(control)
    return await tls.pinned_context(parts.hostname or "", parts.port or 443, pin)


async def _serve(args: argparse.Namespace, name: str, controls: tuple[str, ...], token: str, pin: bytes | None,
                 agent_dir: Path, inventory: Any, reread_token: Callable[[], str | None] | None) -> int:
    from ..agent.connection import Agent
    from ..agent.dialing import AgentOptions
    from ..agent.identity import probe_catalog
    from ..agent.launch import AutoLauncher

    env = dict(os.environ)
    catalog = await probe_catalog(env)
    options = AgentOptions(control=controls[0], controls=controls, token=token, name=name, agent_dir=agent_dir, instance=args.instance,
                           one_shot=args.one_shot, run_id=args.run_id, ca_file=args.ca_file, pin=pin,
                           keep_runs=args.keep_runs, reread_token=reread_token, mounts=dict(args.mount))
    agent = Agent(options, inventory=inventory, catalog=catalog, launcher=AutoLauncher(env, prefer_warm=not args.no_warm),
                  env=env)
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, agent.request_stop)
    loop.add_signal_handler(signal.SIGINT, agent.request_stop)
    if hasattr(signal, "SIGUSR1"):
        loop.add_signal_handler(signal.SIGUSR1, agent.drop_connection)
    devices = ", ".join(d.device for d in inventory.devices)
    log.info("devices: %s%s; runs start %s", devices, " (declared)" if inventory.declared else "",
             "forked from a warm process" if agent.launcher.how == "warm" else "in a new interpreter")
    return await agent.run()


# -- stop ---------------------------------------------------------------------------------------------


def stop(args: argparse.Namespace) -> int:
    agent_dir = Path(args.data_dir).expanduser() if args.data_dir else default_agent_dir()
    folder = agent_dir / "agents"
    paths = sorted(folder.glob("*.json")) if folder.is_dir() else []
    if args.name:
        paths = [p for p in paths if p.stem == args.name]
    targets = []
    for path in paths:
        state = read_state(path)
        pid = state.get("pid")
        if isinstance(pid, int) and pid > 0 and pid_alive(pid):
            targets.append((path, state.get("name", path.stem), pid))
        else:
            path.unlink(missing_ok=True)  # a stale file of an agent that is gone
    if not targets:
        which = f"agent {args.name}" if args.name else "agent"
        print(f"no running {which} in {agent_dir}", file=sys.stderr)
        return EXIT_FAILED
    for _, name, pid in targets:
        print(f"stopping agent {name} (pid {pid}): its runs get 10 s to stop", file=sys.stderr)
        os.kill(pid, signal.SIGTERM)
    code = EXIT_OK
    deadline = time.monotonic() + args.timeout
    for path, name, pid in targets:
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if pid_alive(pid):
            print(f"agent {name} (pid {pid}) did not exit within {args.timeout:g} s: SIGKILL", file=sys.stderr)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            code = EXIT_FAILED
        path.unlink(missing_ok=True)
    return code
