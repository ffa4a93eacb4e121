"""`codefy start` / `codefy stop`: a headless jupyter-server with only the codefy extension.

For GPU boxes with no JupyterLab. The server process is a plain `ServerApp` with
`jpserver_extensions={"codefy_jupyter": True}` and nothing else, whatever the Jupyter config
enables. It records where it runs in `<data_dir>/server.json` (pid, url, port, token, base_url,
started_at; mode 0600, since it holds the token), which clients read to find it and `codefy stop`
reads to stop it. It holds an exclusive lock on `<data_dir>/server.lock` for its whole life, so a
state file whose process is gone is recognised as stale even when its pid was reused. The database
itself is locked by the extension (`core/store/lock.py`), as in any other server; `codefy start`
refuses up front when some server (a Lab, say) holds it.

Without `--token` or `$JUPYTER_TOKEN`, the token is the one in `<data_dir>/token` (0600), generated
on the first start: a restart keeps it, so agents and clients holding it reconnect.

`codefy start` spawns `python -m codefy_jupyter.server.headless serve ...` as a detached process
(its own session, output appended to `<data_dir>/server.log`) and returns once the server answers
`GET {url}codefy/api/runs` with its token; `--foreground` serves in the calling process instead.

`codefy stop` sends SIGTERM, which jupyter-server turns into a graceful shutdown: the extension's
stop hook retires waiting runs at once and gives executing ones `SHUTDOWN_GRACE_S` (5 s) to stop.
It waits a little longer than that grace, then sends SIGKILL (the process group, for a server
`codefy start` detached); a run still going then is retired as `server_restart` at the next start.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, TextIO

from ..core.store.lock import DATABASE_FILE, WHERE_ELSE, held_message, holder_of
from ..wire import local_server
from ..wire.local_server import STATE_FILE
from ..wire.local_server import pid_alive
from .event_loop import LOOP_ENV, LoopChoiceError, loop_choice, new_server_loop
from .hub_service import HubService, HubServiceError, hub_service, server_config

try:
    import fcntl
except ImportError:  # Windows: no advisory locks; the pid check alone decides
    fcntl = None  # type: ignore[assignment]

LOCK_FILE = "server.lock"
LOG_FILE = "server.log"
TOKEN_FILE = "token"  # the generated token, kept across restarts so agents and clients stay connected
TOKEN_ENV = "_CODEFY_HEADLESS_TOKEN"  # hands the token to the server process without putting it on argv

DEFAULT_IP = "127.0.0.1"
START_TIMEOUT_S = 90.0
# The extension gives executing runs 5 s after SIGTERM, then writes their closing events: wait
# for that, plus a margin for the database writes and the process exit, before SIGKILL.
STOP_TIMEOUT_S = 8.0
KILL_WAIT_S = 5.0

EXIT_OK, EXIT_FAILED, EXIT_INTERRUPTED = 0, 1, 130


class HeadlessError(RuntimeError):
    """A start or stop that could not be done; the message is for the user."""


# -- where things are -----------------------------------------------------------------------------
def resolve_data_dir(data_dir: str | os.PathLike[str] | None = None) -> Path:
    """`--data-dir`, else `CODEFY_DATA_DIR`, else the Jupyter data dir's codefy/ folder."""
    return local_server.data_dir(data_dir).resolve()


def state_path(data_dir: Path) -> Path:
    return data_dir / STATE_FILE


def read_state(data_dir: Path) -> dict[str, Any] | None:
    """The state file's contents, or None when there is none (or it is unreadable)."""
    try:
        state = json.loads(state_path(data_dir).read_text(encoding="utf-8"))
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) and isinstance(state.get("pid"), int) else None


def running_server(data_dir: str | os.PathLike[str] | None = None) -> dict[str, Any] | None:
    """The state of the codefy server running on this data dir, or None. Clients use this to find
    the server (`url`, `token`)."""
    directory = resolve_data_dir(data_dir)
    state = read_state(directory)
    if state is None or not _server_alive(directory, state["pid"]):
        return None
    return state


def _write_state(path: Path, state: dict[str, Any]) -> None:
    """Atomically, readable by the owner only (it holds the token)."""
    _write_private(path, json.dumps(state, indent=2) + "\n")


def _remove_state_if_ours(path: Path, pid: int) -> None:
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    if isinstance(state, dict) and state.get("pid") == pid:
        path.unlink(missing_ok=True)


def stored_token(data_dir: Path) -> str:
    """The token this data dir's server uses when none is given: generated on the first start and
    kept (0600) in `<data_dir>/token`, so a restart does not lock out the agents and clients that
    hold it."""
    path = data_dir / TOKEN_FILE
    try:
        token = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        token = ""
    except OSError as err:
        raise HeadlessError(f"cannot read the server token {path}: {err}") from None
    if token:
        with contextlib.suppress(OSError):
            os.chmod(path, 0o600)
        return token
    # Written whole under another name, then linked into place: a start racing this one either
    # finds no file or the whole token, and the first one linked wins.
    token = secrets.token_hex(24)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    _write_private(tmp, token + "\n")
    try:
        os.link(tmp, path)
    except FileExistsError:
        if path.read_text(encoding="utf-8").strip():
            return stored_token(data_dir)
        os.replace(tmp, path)  # an empty file (damaged): ours replaces it
    finally:
        tmp.unlink(missing_ok=True)
    return token


def _write_private(path: Path, text: str) -> None:
    """Atomically, readable by the owner only."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o600)  # a umask cannot widen it, but an old file of that name might be wider
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _refuse_if_database_held(data_dir: Path) -> None:
    """Another server (a Lab with the extension, say) holds this data dir's database: refuse before
    starting one that would only answer 503."""
    database = data_dir / DATABASE_FILE
    holder = holder_of(database)
    if holder is not None:
        raise HeadlessError(held_message(database, holder))


def _open_log(path: Path) -> TextIO:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with contextlib.suppress(OSError):
        os.fchmod(fd, 0o600)  # a log from before logs were private
    return os.fdopen(fd, "a", encoding="utf-8")


# -- processes ------------------------------------------------------------------------------------


def _lock_held(data_dir: Path) -> bool | None:
    """Whether some process holds the server lock (None where locks are not available)."""
    if fcntl is None:
        return None
    path = data_dir / LOCK_FILE
    if not path.exists():
        return False
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return None
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def _server_alive(data_dir: Path, pid: int) -> bool:
    # A free lock means no server serves this data dir, even if the recorded pid now names some
    # other process.
    return _lock_held(data_dir) is not False and pid_alive(pid)


def _acquire_lock(data_dir: Path) -> int:
    """The server's lock, held (by the returned fd) until the process exits."""
    fd = os.open(data_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    if fcntl is not None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            state = read_state(data_dir) or {}
            where = f" at {state['url']} (pid {state['pid']})" if state.get("url") else ""
            raise HeadlessError(f"a codefy server is already running on {data_dir}{where}; "
                                f"`codefy stop` stops it, or {WHERE_ELSE}") from None
    return fd


def _host_for_url(ip: str) -> str:
    if ip in ("", "0.0.0.0", "*"):
        return "127.0.0.1"
    if ip == "::":
        return "[::1]"
    return f"[{ip}]" if ":" in ip and not ip.startswith("[") else ip


def _log_tail(path: Path | None, lines: int = 30) -> str:
    if path is None:
        return ""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    tail = text.splitlines()[-lines:]
    return "\n".join("  | " + line for line in tail)


# -- the server process ---------------------------------------------------------------------------
def serve(*, data_dir: Path, port: int | None = None, ip: str = DEFAULT_IP, token: str | None = None,
          log_path: Path | None = None, foreground: bool = False, out: TextIO | None = None) -> int:
    """Run the headless server in this process until it is stopped. Returns the exit code."""
    service = _hub_service()
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    # The CLI's choice of data dir beats any CODEFY_DATA_DIR the caller's environment had: the
    # extension reads it from here, and the state file sits next to the database it describes.
    os.environ["CODEFY_DATA_DIR"] = str(data_dir)
    lock_fd = _acquire_lock(data_dir)
    try:
        _refuse_if_database_held(data_dir)
        # As a Hub service people sign in with the Hub: no token of ours lets anyone in.
        token = None if service is not None else (token or os.environ.pop(TOKEN_ENV, None)
                                                  or os.environ.get("JUPYTER_TOKEN") or stored_token(data_dir))
    except BaseException:
        os.close(lock_fd)
        raise
    path = state_path(data_dir)
    stale = read_state(data_dir)
    if stale is not None:  # the lock was free, so whoever wrote it is gone (kill -9, power cut)
        path.unlink(missing_ok=True)

    from jupyter_core.utils import ensure_event_loop
    from jupyter_server.serverapp import ServerApp
    from traitlets.config import Config

    class HeadlessServerApp(ServerApp):
        def init_server_extensions(self) -> None:
            # Only this extension, whatever the Jupyter config (jupyter_server_config.d) enables.
            self.jpserver_extensions = {"codefy_jupyter": True}
            super().init_server_extensions()

    config = Config()
    config.ServerApp.ip = ip
    config.ServerApp.open_browser = False
    config.ServerApp.root_dir = str(data_dir)
    config.ServerApp.jpserver_extensions = {"codefy_jupyter": True}
    if port is not None:
        config.ServerApp.port = port
        config.ServerApp.port_retries = 0  # the port asked for, or a clear failure
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        config.ServerApp.allow_root = True  # sessions and CI run as root
    if service is None:
        config.IdentityProvider.token = token
    else:  # the Hub says where to listen and who may come in
        for key, value in server_config(service).items():
            setattr(config.ServerApp, key, value)

    interrupted = False
    loop, loop_name = new_server_loop(_checked_loop_choice())
    asyncio.set_event_loop(loop)  # jupyter-server and tornado take the current loop
    loop = ensure_event_loop()
    app = HeadlessServerApp(config=config)
    try:
        # Constructor config acts like command-line config: it beats the Jupyter config files.
        app.initialize(argv=[], find_extensions=False)
    except SystemExit as exc:
        os.close(lock_fd)
        return int(exc.code or 0) if isinstance(exc.code, int) else EXIT_FAILED
    app.no_browser_open_file = True  # no browser here: no redirect file (not a configurable trait)
    if service is not None:
        # Hub OAuth replaces the handlers' XSRF check with its own, which tornado would call before
        # the request's user is known and so refuse every token-authenticated POST; jupyter-server
        # checks XSRF itself once the user is known (as JupyterHub's single-user server does).
        app.web_app.settings["xsrf_cookies"] = False
    _skip_unseen_records(app.log)
    app.log.info("codefy: serving on the %s event loop (%s)", loop_name, LOOP_ENV)

    if foreground:
        def on_sigint(signum: int, frame: Any) -> None:
            nonlocal interrupted
            if interrupted:  # a second Ctrl+C: stop waiting for the graceful steps
                _remove_state_if_ours(path, os.getpid())
                print("\n■ interrupted", file=sys.stderr, flush=True)
                os._exit(EXIT_INTERRUPTED)
            interrupted = True
            print("\n■ stopping: retiring waiting runs, executing runs get 5 s (Ctrl+C again to quit)",
                  file=sys.stderr, flush=True)
            app._signal_stop(signum, frame)

        signal.signal(signal.SIGINT, on_sigint)

    def record() -> None:
        # Runs after the http server's bind callback (queued during initialize), so the file
        # appears once the port is bound.
        base_url = app.base_url if app.base_url.endswith("/") else app.base_url + "/"
        url = f"http://{_host_for_url(app.ip)}:{app.port}{base_url}"
        state = {"pid": os.getpid(), "url": url, "port": app.port, "ip": app.ip, "token": token,
                 "hub_service": service.name if service is not None else None,
                 "base_url": base_url, "started_at": time.time(), "data_dir": str(data_dir),
                 "mode": "foreground" if foreground else "daemon",
                 "log": str(log_path) if log_path is not None else None}
        from .._version import __version__

        state["version"] = __version__
        _freeze_startup_heap()
        _write_state(path, state)
        if out is not None and service is not None:
            print(f"codefy server running at {url} as JupyterHub service {service.name!r} (pid {os.getpid()}); "
                  f"people sign in with the Hub, agents with worker tokens\n  state: {path}", file=out, flush=True)
        elif out is not None:
            print(f"codefy server running at {url} (pid {os.getpid()}; Ctrl+C stops it)\n"
                  f"  token: {token}\n  state: {path}", file=out, flush=True)

    code = EXIT_OK
    try:
        app.io_loop.add_callback(record)
        app.start()
    except SystemExit as exc:
        code = int(exc.code) if isinstance(exc.code, int) else EXIT_FAILED
    finally:
        _remove_state_if_ours(path, os.getpid())
        try:
            loop.close()
        except RuntimeError:
            pass
        os.close(lock_fd)
    return EXIT_INTERRUPTED if interrupted and code == EXIT_OK else code


def _hub_service() -> HubService | None:
    try:
        return hub_service(os.environ)
    except HubServiceError as err:
        raise HeadlessError(str(err)) from None


def _checked_loop_choice() -> str:
    try:
        return loop_choice(os.environ)
    except LoopChoiceError as err:
        raise HeadlessError(str(err)) from None


def _freeze_startup_heap() -> None:
    """What is alive once the server is up (jupyter-server, tornado, the extension) lives as long
    as the process. Out of the collector's reach, a full collection scans only what runs added
    since: in the queue benchmark the full collections during the run paused the server's loop
    for 98-133 ms (the slowest submits waited for them) and now take about 7 ms. This process is
    ours; inside `jupyter lab` the extension leaves the host's collector alone."""
    import gc

    gc.collect()
    gc.freeze()


def _skip_unseen_records(logger: Any) -> None:
    """traitlets leaves an application's logger at DEBUG and filters in its handlers, so every
    debug call (jupyter-server's identity provider makes two per token-authenticated request)
    builds a record no handler keeps. In this process, which is ours, the logger's own level is
    raised to the lowest one its handlers accept: the same output, fewer records built."""
    import logging

    if not isinstance(logger, logging.Logger) or logger.propagate or not logger.handlers:
        return
    lowest = min(h.level for h in logger.handlers)
    if lowest > logger.level:
        logger.setLevel(lowest)


# -- start ----------------------------------------------------------------------------------------
class _Refused(Exception):
    """The server answered, but not with the run list: it will not become ready by waiting."""


def _probe(state: dict[str, Any], timeout: float = 2.0) -> bool:
    """True once the run queue answers; False while nothing listens yet (or it still recovers);
    `_Refused` when the server answers with an error (the extension failed to start, the token is
    refused)."""
    request = urllib.request.Request(f"{state['url']}codefy/api/runs?limit=1",
                                     headers={"Authorization": f"token {state['token']}"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            response.read()
            return response.status == 200
    except urllib.error.HTTPError as err:
        with err:
            body = err.read()
        try:
            error = json.loads(body)["error"]
            message = error["message"]
        except (ValueError, KeyError, TypeError):
            error, message = {}, f"{err.code} {err.reason}"
        if err.code == 503 and error.get("code") in ("recovering", "standby"):
            return error["code"] == "standby"  # recovering: it will be; a standby is ready as one
        raise _Refused(f"the codefy server answered {err.code}: {message}") from None
    except (urllib.error.URLError, OSError, ValueError):
        return False


def start(*, data_dir: Path, port: int | None = None, ip: str = DEFAULT_IP, token: str | None = None,
          timeout: float = START_TIMEOUT_S) -> dict[str, Any]:
    """Spawn a detached server and wait until it answers. Returns its state."""
    _checked_loop_choice()  # refused here, not in a detached process's log
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    existing = read_state(data_dir)
    if existing is not None and _server_alive(data_dir, existing["pid"]):
        raise HeadlessError(f"a codefy server is already running at {existing.get('url')} "
                            f"(pid {existing['pid']}, {state_path(data_dir)}); `codefy stop` stops it, "
                            f"or {WHERE_ELSE}")
    _refuse_if_database_held(data_dir)
    log_path = data_dir / LOG_FILE
    argv = [sys.executable, "-m", "codefy_jupyter.server.headless", "serve", "--data-dir", str(data_dir),
            "--ip", ip, "--log", str(log_path)]
    if port is not None:
        argv += ["--port", str(port)]
    env = dict(os.environ)
    env[TOKEN_ENV] = token or os.environ.get("JUPYTER_TOKEN") or stored_token(data_dir)
    env["CODEFY_DATA_DIR"] = str(data_dir)
    env.setdefault("PYTHONUNBUFFERED", "1")
    with _open_log(log_path) as log:
        log.write(f"\n=== codefy start {time.strftime('%Y-%m-%d %H:%M:%S')} ===\n")
        log.flush()
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                env=env, start_new_session=True, close_fds=True)
    deadline = time.monotonic() + timeout
    try:
        while True:
            code = proc.poll()
            if code is not None:
                raise HeadlessError(f"the codefy server exited with code {code} while starting; "
                                    f"the end of {log_path}:\n{_log_tail(log_path)}")
            state = read_state(data_dir)
            if state is not None and state["pid"] == proc.pid:
                try:
                    if _probe(state):
                        return state
                except _Refused as refused:
                    _terminate(proc)
                    raise HeadlessError(f"{refused}; stopped it. The end of {log_path}:\n"
                                        f"{_log_tail(log_path)}") from None
            if time.monotonic() > deadline:
                _terminate(proc)
                raise HeadlessError(f"the codefy server did not answer within {timeout:.0f} s; "
                                    f"the end of {log_path}:\n{_log_tail(log_path)}")
            time.sleep(0.1)
    except KeyboardInterrupt:
        _terminate(proc)
        raise


def _terminate(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# -- stop -----------------------------------------------------------------------------------------
def stop(*, data_dir: Path, timeout: float = STOP_TIMEOUT_S) -> tuple[dict[str, Any], bool]:
    """Stop the server on this data dir: SIGTERM, then SIGKILL after `timeout`. Returns its state
    and whether it had to be killed."""
    path = state_path(data_dir)
    state = read_state(data_dir)
    if state is None:
        raise HeadlessError(f"no codefy server is running (no {path})")
    pid = state["pid"]
    if not _server_alive(data_dir, pid):
        path.unlink(missing_ok=True)
        raise HeadlessError(f"no codefy server is running (pid {pid} from {path} is gone; "
                            "removed the stale file)")
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        path.unlink(missing_ok=True)
        return state, False
    if _wait_gone(pid, timeout):
        path.unlink(missing_ok=True)
        return state, False
    try:
        # A server `codefy start` detached leads its own process group: take any stray children too.
        if hasattr(os, "getpgid") and os.getpgid(pid) == pid:
            os.killpg(pid, signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    if not _wait_gone(pid, KILL_WAIT_S):
        raise HeadlessError(f"the codefy server (pid {pid}) survived SIGKILL")
    path.unlink(missing_ok=True)
    return state, True


def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while pid_alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


# -- the CLI's subcommands ------------------------------------------------------------------------
def start_command(args: argparse.Namespace) -> int:
    try:
        data_dir = resolve_data_dir(args.data_dir)
        # The Hub supervises a managed service's process (and restarts it when it exits): serve in
        # it, never detached, whatever the flags say.
        if args.foreground or _hub_service() is not None:
            return serve(data_dir=data_dir, port=args.port, ip=args.ip, token=args.token, foreground=True,
                         out=sys.stdout)
        state = start(data_dir=data_dir, port=args.port, ip=args.ip, token=args.token)
    except HeadlessError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("\n■ interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    print(f"codefy server running at {state['url']} (pid {state['pid']})\n"
          f"  token: {state['token']}\n  state: {state_path(data_dir)}\n  log:   {data_dir / LOG_FILE}\n"
          "`codefy stop` stops it.")
    return EXIT_OK


def stop_command(args: argparse.Namespace) -> int:
    try:
        state, killed = stop(data_dir=resolve_data_dir(args.data_dir), timeout=args.timeout)
    except HeadlessError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("\n■ interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    if killed:
        print(f"! the server did not stop within {args.timeout:g} s of SIGTERM; killed it. Runs it left "
              "queued or running end interrupted at the next start.", file=sys.stderr)
    print(f"stopped the codefy server at {state.get('url')} (pid {state['pid']})")
    return EXIT_OK


def _main(argv: list[str] | None = None) -> int:
    """`python -m codefy_jupyter.server.headless serve ...`: the detached server process."""
    parser = argparse.ArgumentParser(prog="python -m codefy_jupyter.server.headless")
    sub = parser.add_subparsers(dest="command", required=True)
    sv = sub.add_parser("serve")
    sv.add_argument("--data-dir", required=True)
    sv.add_argument("--port", type=int)
    sv.add_argument("--ip", default=DEFAULT_IP)
    sv.add_argument("--log")
    args = parser.parse_args(argv)
    try:
        return serve(data_dir=resolve_data_dir(args.data_dir), port=args.port, ip=args.ip,
                     log_path=Path(args.log) if args.log else None)
    except HeadlessError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(_main())
