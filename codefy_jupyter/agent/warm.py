"""The warm process: a fork server that has imported the engine, the node packs and torch (without
initialising CUDA), so a run's process starts in milliseconds instead of paying for a new
interpreter and the torch import, while every run still gets a fresh process of its own.

The agent starts it (`python -m codefy_jupyter.agent.warm --fd N`) with an environment that already
lacks the removed variables (`isolation.removed_variable`), so no run forked from it can find the
agent's secrets even in `/proc/self/environ`. They talk over a SOCK_SEQPACKET socket pair, one JSON
object per message:

    warm -> agent   {"ready": true, "pid", "preloaded": [...], "import_s"}    once, after preloading
    agent -> warm   {"start": run_id, "env": {...}, "log": path} + the run's socket (SCM_RIGHTS)
    warm -> agent   {"started": run_id, "pid"}  or  {"start_failed": run_id, "error"}
    warm -> agent   {"exit": pid, "status": <raw wait status>}                 for every run process

Each fork: a new session (the agent signals the run's whole process group), default signal
handlers, the run's environment, stdout/stderr to the run's output.log, then `child.serve`. The warm
process is single-threaded and never touches CUDA, which is what makes forking it safe. When the
agent goes away (EOF), it exits; its run processes see their own sockets close and stop.

Linux only (SOCK_SEQPACKET, and forking after importing torch is not safe on macOS); elsewhere the
agent spawns each run cold.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import selectors
import signal
import socket
import sys
import time
from typing import Any, NoReturn

from . import private

MAX_MESSAGE = 1024 * 1024
# Imported before the first fork. torch is optional (a pack-free install runs without it).
PRELOAD = ("numpy", "torch", "codefy_jupyter.engine", "codefy_jupyter.wire.run_events",
           "codefy_jupyter.wire.fingerprint", "codefy_jupyter.agent.child")


def supported() -> bool:
    return sys.platform.startswith("linux") and hasattr(socket, "SOCK_SEQPACKET") and hasattr(socket, "send_fds")


def preload() -> list[str]:
    loaded = []
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:
            continue
        loaded.append(name)
    from ..engine import default_registry

    default_registry()  # every installed node pack, imported once for all runs
    loaded.append("node packs")
    from .child import environment_facts

    environment_facts()  # the same for every run forked from here
    loaded.append("fingerprint")
    return loaded


class Server:
    def __init__(self, ctrl: socket.socket) -> None:
        self.ctrl = ctrl
        self.children: set[int] = set()
        self.sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)

    def send(self, message: dict[str, Any]) -> None:
        try:
            self.ctrl.send(json.dumps(message).encode())
        except OSError:
            pass  # the agent is gone: the loop sees EOF next

    def serve(self) -> NoReturn:
        signal.set_wakeup_fd(self._wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so the wakeup fd is written
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the agent decides when we stop (EOF)
        self.sel.register(self.ctrl, selectors.EVENT_READ, "ctrl")
        self.sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        while True:
            for key, _ in self.sel.select():
                if key.data == "wake":
                    try:
                        os.read(self._wake_r, 4096)
                    except BlockingIOError:
                        pass
                    self.reap()
                elif not self.request():
                    os._exit(0)
            self.reap()  # a SIGCHLD that raced with select

    def reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                self.children.clear()
                return
            if pid == 0:
                return
            self.children.discard(pid)
            self.send({"exit": pid, "status": status})

    def request(self) -> bool:
        """Handle one message from the agent; False at EOF."""
        try:
            data, fds, _flags, _addr = socket.recv_fds(self.ctrl, MAX_MESSAGE, 4)
        except InterruptedError:
            return True
        except OSError:
            return False
        if not data:
            for fd in fds:
                os.close(fd)
            return False
        try:
            message = json.loads(data)
            run_id = str(message["start"])
            env = {str(k): str(v) for k, v in message["env"].items()}
            log = str(message["log"])
            if len(fds) != 1:
                raise ValueError(f"expected the run's socket, got {len(fds)} descriptors")
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            for fd in fds:
                os.close(fd)
            self.send({"start_failed": str(message.get("start")) if isinstance(message, dict) else None,
                       "error": f"bad start request: {err}"})
            return True
        try:
            pid = os.fork()
        except OSError as err:
            os.close(fds[0])
            self.send({"start_failed": run_id, "error": f"fork failed: {err}"})
            return True
        if pid == 0:
            self._become_run(fds[0], env, log)
        os.close(fds[0])
        self.children.add(pid)
        self.send({"started": run_id, "pid": pid})
        return True

    def _become_run(self, fd: int, env: dict[str, str], log: str) -> NoReturn:
        try:
            self.sel.close()
            self.ctrl.close()
            signal.set_wakeup_fd(-1)
            os.close(self._wake_r)
            os.close(self._wake_w)
            for sig in (signal.SIGCHLD, signal.SIGINT, signal.SIGTERM):
                signal.signal(sig, signal.SIG_DFL)
            os.setsid()
            os.environ.clear()
            os.environ.update(env)
            redirect_output(log)
            from .child import serve

            serve(socket.socket(fileno=fd))
        except BaseException:  # never return into the server's loop from a forked run
            import traceback

            traceback.print_exc()
            os._exit(70)


def redirect_output(log: str) -> None:
    """stdout and stderr (the fds, so native code's output too) to the run's output.log."""
    out = private.os_open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(out)
    sys.stdout = open(1, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)
    sys.stderr = open(2, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)


def main(argv: list[str] | None = None) -> NoReturn:
    parser = argparse.ArgumentParser(prog="python -m codefy_jupyter.agent.warm")
    parser.add_argument("--fd", type=int, required=True, help="the control socket inherited from the agent")
    args = parser.parse_args(argv)
    private.restrict_umask()  # before preloading: the runs it forks inherit it
    ctrl = socket.socket(fileno=args.fd)
    started = time.monotonic()
    loaded = preload()
    server = Server(ctrl)
    server.send({"ready": True, "pid": os.getpid(), "preloaded": loaded, "import_s": time.monotonic() - started})
    server.serve()


if __name__ == "__main__":
    main()
