"""`codefy agent ssh [USER@]HOST`: a worker agent on a machine that cannot reach the control plane
but that this machine reaches over SSH.

This command stays in the foreground as the supervisor of one `ssh` session at a time. Each session
opens a reverse tunnel (`-R REMOTE_PORT:SERVER_HOST:SERVER_PORT`: the remote 127.0.0.1:REMOTE_PORT
leads to the control plane) and starts `codefy agent start` on the remote side, dialling
http://127.0.0.1:REMOTE_PORT/<base path>. The token travels over the session's standard input and
appears on no command line on either side. The remote agent is detached from the session, so a
dropped tunnel does not stop its runs: when `ssh` exits the supervisor reconnects with backoff, and
the agent, which reconnects by itself, finds the control plane again through the new tunnel (the
same remote port). Starting it again in a new session is harmless: a second agent of the same name
and folder is refused while the first runs, and it comes back if the remote machine restarted.

The supervisor records its pid in the local agent folder like a local agent (`agents/<name>.json`),
so `codefy agent stop` finds it; on SIGTERM it stops the remote agent over a second SSH session
(`codefy agent stop` there, while the tunnel still carries the agent's last frames), then closes
the tunnel.

The same-machine rule still holds: through the tunnel the agent's connection comes from loopback,
but it reports its own machine id, so it never shares the server's devices or folders.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import re
import shlex
import shutil
import signal
import sys
import zlib
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ..client.flags import seconds
from .args import EXIT_FAILED, EXIT_OK, EXIT_USAGE

log = logging.getLogger("codefy.agent.ssh")

FIRST_DELAY_S = 1.0
MAX_DELAY_S = 30.0
STEADY_S = 60.0  # a session that stayed up this long resets the backoff
REMOTE_STOP_TIMEOUT_S = 25.0  # inside `codefy agent stop`'s 40 s wait for this supervisor
ALIVE_COUNT = 3


def add_parser(cmds: Any) -> None:
    sp = cmds.add_parser(
        "ssh", usage="codefy agent ssh [options] [USER@]HOST [-- AGENT_START_ARGS...]", help="run an agent on another machine over SSH, dialling back through a reverse tunnel",
        description="Open a reverse SSH tunnel to HOST, start `codefy agent start` there dialling back through it, "
        "and keep the tunnel up (reconnecting with backoff) until stopped (SIGTERM, Ctrl+C or `codefy agent stop`), "
        "which also stops the remote agent. For a machine that cannot reach the control plane but that this one "
        "reaches by SSH (key authentication: ssh runs with BatchMode). Arguments after `--` go to the remote "
        "`codefy agent start` as they are.")
    sp.add_argument("host", metavar="[USER@]HOST", help="the remote machine, as ssh takes it")
    sp.set_defaults(agent_args=[])  # what follows `--` (split_agent_args)
    sp.add_argument("--control", metavar="URL",
                    help="the control plane's URL as this machine reaches it (default: the `codefy start` server "
                    "running on this machine)")
    sp.add_argument("--token", help="the token the remote agent connects with: a one-time enrollment token or a "
                    "worker token (default: $CODEFY_TOKEN, else the worker token the remote agent stored when it "
                    "enrolled). Not the server's own token: loopback peers may use it, and the tunnel makes the "
                    "remote machine one")
    sp.add_argument("--token-file", metavar="FILE", help="read that token from the first line of FILE ('-': "
                    "standard input)")
    sp.add_argument("--name", help="the worker's name (default: HOST's name)")
    sp.add_argument("--port", type=_port, metavar="N", help="the SSH port of HOST (default: ssh's, usually 22)")
    sp.add_argument("--identity", metavar="FILE", help="the private key ssh authenticates with (ssh -i)")
    sp.add_argument("--ssh-option", action="append", default=[], metavar="OPTION",
                    help="an option for ssh, as -o takes it, e.g. --ssh-option ProxyJump=bastion (repeatable)")
    sp.add_argument("--remote-python", default="python3", metavar="PATH",
                    help="the Python on HOST that has codefy-jupyter installed (default: python3)")
    sp.add_argument("--remote-port", type=_port, metavar="N",
                    help="the port on HOST's loopback that leads to the control plane (default: one derived from "
                    "the worker's name, 20000-39999, the same on every reconnect)")
    sp.add_argument("--remote-data-dir", metavar="DIR",
                    help="the remote agent's folder (default: its own default there)")
    sp.add_argument("--remote-log", metavar="PATH",
                    help="the remote agent's log file on HOST (default: codefy-agent-<name>.log in the remote "
                    "home folder)")
    sp.add_argument("--alive-interval", type=seconds(allow_zero=False), default=15.0, metavar="S",
                    help=f"seconds between ssh's keep-alive probes; {ALIVE_COUNT} unanswered end the session and "
                    "the supervisor reconnects (default 15)")
    sp.add_argument("--data-dir", help="the local agent folder that records this supervisor for `codefy agent "
                    "stop` (default as for start)")


def remote_word(text: str) -> str:
    """`text` as one word of the remote shell's command, a leading `~/` meaning the remote home (a
    quoted `~` would not be expanded there, and this machine's home is not that one)."""
    if text.startswith("~/"):
        return '"$HOME"/' + shlex.quote(text[2:])
    return shlex.quote(text)


def split_agent_args(argv: list[str]) -> tuple[list[str], list[str] | None]:
    """`codefy agent ssh ... -- ARGS`: (the arguments before `--`, ARGS), or (argv, None) for any
    other command. ARGS are the remote agent's, so the local parser must not see them (argparse
    would take them for its own options, or refuse them once options follow HOST)."""
    if argv[:2] != ["agent", "ssh"] or "--" not in argv:
        return argv, None
    cut = argv.index("--")
    return argv[:cut], argv[cut + 1:]


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port number 1-65535, got {text!r}")
    return value


def default_remote_port(name: str) -> int:
    return 20000 + zlib.crc32(name.encode()) % 20000


def host_name(host: str) -> str:
    return host.rpartition("@")[2].strip("[]")


class Session:
    """What one ssh invocation needs, built once from the arguments."""

    def __init__(self, args: argparse.Namespace, name: str, control: str, remote_port: int) -> None:
        parts = urlsplit(control)
        self.server = (parts.hostname or "127.0.0.1", parts.port or (443 if parts.scheme == "https" else 80))
        self.remote_control = f"{parts.scheme}://127.0.0.1:{remote_port}{parts.path or '/'}"
        self.remote_port = remote_port
        self.host = args.host
        self.name = name
        self.base = ["ssh", "-T", "-o", "BatchMode=yes", "-o", f"ServerAliveInterval={args.alive_interval:g}",
                     "-o", f"ServerAliveCountMax={ALIVE_COUNT}"]
        if args.port:
            self.base += ["-p", str(args.port)]
        if args.identity:
            self.base += ["-i", str(Path(args.identity).expanduser())]
        for option in args.ssh_option:
            self.base += ["-o", option]
        data = ["--data-dir", args.remote_data_dir] if args.remote_data_dir else []
        agent = [args.remote_python, "-m", "codefy_jupyter.cli", "agent", "start", "--control", self.remote_control,
                 "--name", name, *data, *args.agent_args]
        self.agent = " ".join(remote_word(a) for a in agent)
        self.stop_cmd = " ".join(remote_word(a) for a in [
            args.remote_python, "-m", "codefy_jupyter.cli", "agent", "stop", "--name", name, *data,
            "--timeout", f"{REMOTE_STOP_TIMEOUT_S:g}"])
        self.remote_log = args.remote_log or f"codefy-agent-{name}.log"

    def tunnel_command(self) -> list[str]:
        # The first line of standard input is the token (maybe empty); printf is the shell's own, so
        # the token is on no process's command line. The agent leaves the session (its own input and
        # output), and `cat` holds the session, hence the tunnel, until the supervisor closes it.
        agent_log = f">>{remote_word(self.remote_log)} 2>&1"
        script = (f"IFS= read -r t; if [ -n \"$t\" ]; then printf '%s\\n' \"$t\" | {self.agent} --token-file - "
                  f"{agent_log} & else {self.agent} </dev/null {agent_log} & fi; t=; exec cat >/dev/null")
        forward = f"{self.remote_port}:{self.server[0]}:{self.server[1]}"
        return [*self.base, "-o", "ExitOnForwardFailure=yes", "-R", forward, self.host, "sh -c " + shlex.quote(script)]

    def stop_command(self) -> list[str]:
        return [*self.base, self.host, "sh -c " + shlex.quote(self.stop_cmd)]


def command(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from ..wire.names import name_problem
    from .agent_state import AlreadyRunning, default_agent_dir, local_control, pid_file, read_token_file

    if sys.platform == "win32":  # the supervisor stops on POSIX signals, and the remote side is `sh`
        print("error: `codefy agent ssh` runs on Linux and macOS; on Windows, open the tunnel with ssh -R and run "
              "`codefy agent start` on the remote machine", file=sys.stderr)
        return EXIT_USAGE
    if shutil.which("ssh") is None:
        print("error: no `ssh` on PATH: install the OpenSSH client", file=sys.stderr)
        return EXIT_USAGE
    name = args.name or _name_from_host(args.host)
    if problem := name_problem(name, what="worker name"):
        parser.error(f"--name: {problem}")
    if args.token and args.token_file:
        parser.error("--token-file: give the token once, with --token or --token-file")
    control = args.control
    if not control:
        control, state_file = local_control()
        if control is None:
            print(f"error: no --control given and no `codefy start` server is running on this machine (none "
                  f"recorded in {state_file}): start one, or pass --control URL", file=sys.stderr)
            return EXIT_USAGE
    if urlsplit(control).scheme not in ("http", "https") or not urlsplit(control).hostname:
        parser.error(f"--control: expected an http:// or https:// URL, got {control!r}")
    try:
        token = read_token_file(args.token_file) if args.token_file else args.token
    except OSError as err:
        parser.error(f"--token-file: cannot read {args.token_file!r}: {err.strerror or err}")
    token = (token or os.environ.get("CODEFY_TOKEN", "")).strip()
    if "\n" in token or "\r" in token:
        parser.error("--token: expected a single line")
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s codefy-agent-ssh %(levelname)s %(message)s")
    session = Session(args, name, control, args.remote_port or default_remote_port(name))
    agent_dir = Path(args.data_dir).expanduser() if args.data_dir else default_agent_dir()
    try:
        with pid_file(agent_dir, name, f"ssh://{args.host} {control}"):
            log.info("worker %s on %s: tunnel from %s:%d there to %s:%d here, agent log %s there", name, args.host,
                     "127.0.0.1", session.remote_port, *session.server, session.remote_log)
            return asyncio.run(supervise(session, token))
    except AlreadyRunning as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_FAILED


def _name_from_host(host: str) -> str:
    name = re.sub(r"[^a-z0-9-]+", "-", host_name(host).split(".")[0].lower()).strip("-")[:63]
    return name if name and name not in ("local", "any", "pool") else "worker"


async def supervise(session: Session, token: str) -> int:
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stopping.set)
    loop.add_signal_handler(signal.SIGINT, stopping.set)
    delay = FIRST_DELAY_S
    proc: asyncio.subprocess.Process | None = None
    while not stopping.is_set():
        proc = await asyncio.create_subprocess_exec(*session.tunnel_command(), stdin=asyncio.subprocess.PIPE,
                                                    stdout=asyncio.subprocess.DEVNULL)
        assert proc.stdin is not None
        proc.stdin.write(token.encode() + b"\n")
        log.info("ssh session started (pid %d)", proc.pid)
        started = loop.time()
        ended = asyncio.ensure_future(proc.wait())
        stop = asyncio.ensure_future(stopping.wait())
        await asyncio.wait({ended, stop}, return_when=asyncio.FIRST_COMPLETED)
        stop.cancel()
        if stopping.is_set():
            ended.cancel()
            break
        if loop.time() - started >= STEADY_S:
            delay = FIRST_DELAY_S
        log.warning("the ssh session ended (exit status %s); reconnecting in %g s", proc.returncode, delay)
        proc = None
        try:
            await asyncio.wait_for(stopping.wait(), delay)
        except asyncio.TimeoutError:
            pass
        delay = min(delay * 2, MAX_DELAY_S)
    code = await _stop_remote(session)
    if proc is not None:
        await _close(proc)
    return code


async def _stop_remote(session: Session) -> int:
    """`codefy agent stop` on the remote machine, while the tunnel (if up) still carries the agent's
    last frames."""
    log.info("stopping the agent on %s", session.host)
    stopper = await asyncio.create_subprocess_exec(*session.stop_command(), stdin=asyncio.subprocess.DEVNULL,
                                                   stdout=asyncio.subprocess.DEVNULL)
    try:
        code = await asyncio.wait_for(stopper.wait(), REMOTE_STOP_TIMEOUT_S + 10)
    except asyncio.TimeoutError:
        stopper.kill()
        await stopper.wait()
        log.error("`codefy agent stop` on %s did not finish; the remote agent may still run", session.host)
        return EXIT_FAILED
    if code != 0:
        log.error("`codefy agent stop` on %s ended with exit status %d (see its output above)", session.host, code)
        return EXIT_FAILED
    return EXIT_OK


async def _close(proc: asyncio.subprocess.Process) -> None:
    if proc.stdin is not None:
        proc.stdin.close()  # the remote `cat` ends, the session with it
    try:
        await asyncio.wait_for(proc.wait(), 10)
    except asyncio.TimeoutError:
        if proc.returncode is None:
            proc.terminate()
        await proc.wait()
