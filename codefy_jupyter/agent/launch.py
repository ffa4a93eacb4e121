"""Starting a run's process: cold (a new interpreter per run) or forked from the warm process.

Both launchers give back a `Launched`: the process id, the agent's end of the run's socket, and a
future that resolves with how the process ended. The runner does not care which one made it.
Measured on a 2-core CPU machine (benchmarks/workers.py): a cold spawn pays the interpreter and the
torch import on every run (~1-2 s), a warm fork takes milliseconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from . import private
from . import warm
from .isolation import removed_variable

log = logging.getLogger("codefy.agent")

WARM_READY_TIMEOUT_S = 120.0  # the torch import on a slow, busy disk


@dataclass(frozen=True)
class ProcessExit:
    """How a run's process ended: `exit_code` when it exited, `signal` when a signal killed it;
    both None when nobody could tell (the warm process that reaps it died)."""

    exit_code: int | None
    signal: int | None = None

    @classmethod
    def from_returncode(cls, code: int) -> ProcessExit:
        return cls(None, -code) if code < 0 else cls(code, None)

    @classmethod
    def from_wait_status(cls, status: int) -> ProcessExit:
        if os.WIFSIGNALED(status):
            return cls(None, os.WTERMSIG(status))
        return cls(os.WEXITSTATUS(status) if os.WIFEXITED(status) else None, None)

    def describe(self) -> str:
        if self.signal is not None:
            try:
                name = signal.Signals(self.signal).name
            except ValueError:
                name = f"signal {self.signal}"
            return f"killed by {name}"
        if self.exit_code is not None:
            return f"exited with code {self.exit_code}"
        return "ended (its exit status is unknown)"


@dataclass
class Launched:
    pid: int
    sock: socket.socket
    exited: asyncio.Future[ProcessExit]
    how: str  # "spawn" or "warm"


class LaunchError(Exception):
    pass


def _open_log(path: Path) -> int:
    private.make_dir(path.parent)
    return private.os_open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)


class SpawnLauncher:
    """A new interpreter per run (`python -m codefy_jupyter.agent.child`): the seed's spawn context."""

    how = "spawn"

    def __init__(self, python: str = sys.executable) -> None:
        self.python = python

    async def start(self) -> None:
        return None

    async def launch(self, run_id: str, env: Mapping[str, str], log_path: Path) -> Launched:
        ours, theirs = socket.socketpair()
        out = _open_log(log_path)
        try:
            proc = await asyncio.create_subprocess_exec(
                self.python, "-m", "codefy_jupyter.agent.child", "--fd", str(theirs.fileno()),
                pass_fds=(theirs.fileno(),), env=dict(env), stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                start_new_session=True)  # its own process group: a kill reaches its helpers too
        except OSError as err:
            ours.close()
            raise LaunchError(f"cannot start the run's process: {err}") from err
        finally:
            theirs.close()
            os.close(out)
        exited: asyncio.Future[ProcessExit] = asyncio.get_running_loop().create_future()

        async def wait() -> None:
            code = await proc.wait()
            if not exited.done():
                exited.set_result(ProcessExit.from_returncode(code))

        exited.waiter = asyncio.ensure_future(wait())  # type: ignore[attr-defined]  # keep a reference
        return Launched(proc.pid, ours, exited, self.how)

    async def close(self) -> None:
        return None


class WarmLauncher:
    """Forks each run from the warm process (`warm.py`); starts it on `start()` and again if it dies."""

    how = "warm"

    def __init__(self, base_env: Mapping[str, str], python: str = sys.executable) -> None:
        # Scrubbed here, at the warm process's exec: a forked run inherits its memory, and
        # /proc/<pid>/environ shows the exec-time environment whatever os.environ says later.
        self.base_env = {k: v for k, v in base_env.items() if not removed_variable(k)}
        # No card is visible until a run's own variables are applied (nothing here touches CUDA).
        self.base_env.update(CUDA_DEVICE_ORDER="PCI_BUS_ID", CUDA_VISIBLE_DEVICES="")
        self.python = python
        self.pid: int | None = None
        self.import_s: float | None = None
        self._ctrl: socket.socket | None = None
        self._proc: asyncio.subprocess.Process | None = None
        self._ready: asyncio.Future[None] | None = None
        self._starting: dict[str, asyncio.Future[int]] = {}
        self._exits: dict[int, asyncio.Future[ProcessExit]] = {}
        self._reaper: asyncio.Future[int] | None = None

    @property
    def alive(self) -> bool:
        return self._ctrl is not None

    async def start(self) -> None:
        if self._ready is None:
            self._ready = asyncio.get_running_loop().create_future()
            try:
                await self._spawn()
            except BaseException as err:
                if not self._ready.done():
                    self._ready.set_exception(LaunchError(f"the warm process did not start: {err}"))
        await asyncio.wait_for(asyncio.shield(self._ready), WARM_READY_TIMEOUT_S)

    async def _spawn(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._proc = await asyncio.create_subprocess_exec(
                self.python, "-m", "codefy_jupyter.agent.warm", "--fd", str(theirs.fileno()),
                pass_fds=(theirs.fileno(),), env=self.base_env, stdin=subprocess.DEVNULL,
                start_new_session=True)
        finally:
            theirs.close()
        ours.setblocking(False)
        self._ctrl = ours
        asyncio.get_running_loop().add_reader(ours.fileno(), self._readable)

    def _readable(self) -> None:
        assert self._ctrl is not None
        while True:
            try:
                data = self._ctrl.recv(warm.MAX_MESSAGE)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                self._lost()
                return
            self._handle(json.loads(data))

    def _handle(self, message: dict) -> None:
        if message.get("ready"):
            self.pid = message.get("pid")
            self.import_s = message.get("import_s")
            log.info("warm process %s ready (preloaded %s in %.2f s)", self.pid,
                     ", ".join(message.get("preloaded", [])), self.import_s or 0.0)
            if self._ready is not None and not self._ready.done():
                self._ready.set_result(None)
        elif "started" in message:
            fut = self._starting.pop(message["started"], None)
            pid = int(message["pid"])
            self._exits[pid] = asyncio.get_running_loop().create_future()
            if fut is not None and not fut.done():
                fut.set_result(pid)
        elif "start_failed" in message:
            fut = self._starting.pop(message.get("start_failed"), None)
            if fut is not None and not fut.done():
                fut.set_exception(LaunchError(message.get("error", "the warm process could not fork")))
        elif "exit" in message:
            fut = self._exits.pop(int(message["exit"]), None)
            if fut is not None and not fut.done():
                fut.set_result(ProcessExit.from_wait_status(int(message["status"])))

    def _lost(self) -> None:
        """The warm process went away: pending starts fail, exit statuses of its runs are unknown
        (their sockets still tell the runner when they end); the next launch starts a new one."""
        if self._ctrl is not None:
            asyncio.get_running_loop().remove_reader(self._ctrl.fileno())
            self._ctrl.close()
            self._ctrl = None
        err = LaunchError("the warm process exited")
        if self._ready is not None and not self._ready.done():
            self._ready.set_exception(err)
        self._ready = None
        for fut in self._starting.values():
            if not fut.done():
                fut.set_exception(err)
        self._starting.clear()
        for fut in self._exits.values():
            if not fut.done():
                fut.set_result(ProcessExit(None, None))
        self._exits.clear()
        if self._proc is not None:
            proc, self._proc = self._proc, None
            self._reaper = asyncio.ensure_future(proc.wait())

    async def launch(self, run_id: str, env: Mapping[str, str], log_path: Path) -> Launched:
        await self.start()
        if self._ctrl is None:
            raise LaunchError("the warm process is not running")
        ours, theirs = socket.socketpair()
        private.make_dir(log_path.parent)
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._starting[run_id] = fut
        request = json.dumps({"start": run_id, "env": dict(env), "log": str(log_path)}).encode()
        try:
            while True:
                try:
                    socket.send_fds(self._ctrl, [request], [theirs.fileno()])
                    break
                except BlockingIOError:
                    await asyncio.sleep(0.005)
        except OSError as err:
            self._starting.pop(run_id, None)
            ours.close()
            raise LaunchError(f"cannot reach the warm process: {err}") from err
        finally:
            theirs.close()
        try:
            pid = await fut
        except BaseException:
            ours.close()
            raise
        return Launched(pid, ours, self._exits[pid], self.how)

    async def close(self) -> None:
        """Stop the warm process (it exits when its socket closes); run processes it forked go on
        until their own sockets close."""
        proc = self._proc
        if self._ctrl is not None:
            self._lost()
        if proc is not None and self._reaper is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._reaper), 10)
            except asyncio.TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await self._reaper


class AutoLauncher:
    """The warm process where it works (Linux), falling back to a cold spawn for a run when the warm
    process cannot start or fork."""

    def __init__(self, base_env: Mapping[str, str], *, prefer_warm: bool = True) -> None:
        self.spawn = SpawnLauncher()
        self.warm = WarmLauncher(base_env) if prefer_warm and warm.supported() else None
        self.how = "warm" if self.warm is not None else "spawn"

    async def start(self) -> None:
        if self.warm is not None:
            try:
                await self.warm.start()
            except (LaunchError, asyncio.TimeoutError) as err:
                log.warning("warm process unavailable, runs start cold: %s", err)

    async def launch(self, run_id: str, env: Mapping[str, str], log_path: Path) -> Launched:
        if self.warm is not None:
            try:
                return await self.warm.launch(run_id, env, log_path)
            except (LaunchError, asyncio.TimeoutError) as err:
                log.warning("run %s starts cold: %s", run_id, err)
        return await self.spawn.launch(run_id, env, log_path)

    async def close(self) -> None:
        if self.warm is not None:
            await self.warm.close()
