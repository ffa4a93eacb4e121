"""Finding the control plane without being told where it is, quickly, and saying which and why.

In order: a URL given (argument, or `CODEFY_URL` with `CODEFY_TOKEN`; `find_server` also takes a
host and port, as the `codefy` command's and the magics' --url/--token/--host/--port give them);
inside a notebook kernel, the Jupyter server that runs this kernel; the `codefy start` server
recorded in the data dir's `server.json`; a running Jupyter server of this user that serves the
extension (the newest when several do). Otherwise a clear error that says what to do.

The answer (`ServerInfo`) says why it was picked and names the other servers that could have been,
so a command never talks to another server than the user thinks without saying so.

Speed (≤ 200 ms when a server is found, `benchmarks/discovery.py`): the servers' own files are read
directly (`server.json`, and jupyter-server's `jpserver-<pid>.json` in the runtime dir rather than
`list_running_servers`, whose import of jupyter_server costs about 2 s), and every candidate is
probed at once on its own thread with a short timeout. Once the best-ranked candidate has answered,
the rest get only a short grace to be named as alternatives.

`choose` is the pure decision; the rest reads files and probes.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Sequence

from ..wire import local_server
from ..wire.control_urls import ControlUrlError, parse_control_urls
from ..wire.local_server import pid_alive
from .errors import CodefyError

PROBE_TIMEOUT_S = 1.0  # a loopback server answers in milliseconds; a hung one must not hold every command
OTHERS_GRACE_S = 0.1  # after the choice is settled, how long the other candidates get to be named

CODEFY_START, JUPYTER = "codefy start", "jupyter server"

# What a probe of `codefy/api/runs` said.
UNCHECKED, CODEFY, RECOVERING, FORBIDDEN, ABSENT, UNREACHABLE, TIMEOUT = (
    "unchecked", "codefy", "recovering", "forbidden", "absent", "unreachable", "timeout")


@dataclass(frozen=True)
class ServerInfo:
    url: str  # ends with "/": the server's base URL
    token: str
    source: str  # "arguments", "environment", "kernel", "codefy start", "jupyter server"
    why: str = ""  # why this one, for the person reading
    others: tuple[str, ...] = field(default=())  # the other servers that could have been used, described
    # Other URLs of the same deployment (a leader's standbys, `--url A,B` / CODEFY_URL="A,B"): the
    # client moves to the next when one cannot be reached or answers 503 `standby`.
    alternates: tuple[str, ...] = field(default=())

    @property
    def urls(self) -> tuple[str, ...]:
        return (self.url, *self.alternates)

    def describe(self) -> list[str]:
        """The lines a command prints about the server it uses (the token never appears)."""
        lines = [f"server {self.url} — {self.why or self.source}"]
        if self.alternates:
            lines.append(f"  standbys: {', '.join(self.alternates)}")
        lines += [f"  also running: {other}" for other in self.others]
        if self.others:
            lines.append("  (pass --url to use another)")
        return lines

    def as_dict(self) -> dict[str, Any]:
        return {"url": self.url, "source": self.source, "why": self.why, "others": list(self.others)}


@dataclass(frozen=True)
class Candidate:
    """A server some file says is running, and what probing it said."""

    url: str
    token: str
    source: str  # CODEFY_START or JUPYTER
    found_in: str  # the file that recorded it
    pid: int | None = None
    root_dir: str = ""
    started_at: float = 0.0  # when its file was written: the newest Jupyter server wins among several
    answer: str = UNCHECKED
    serves_kernel: bool = False

    @property
    def usable(self) -> bool:
        # A recorded `codefy start` whose process lives but answers slowly is still ours (busy, not gone).
        return self.answer in (CODEFY, RECOVERING) or (self.source == CODEFY_START and self.answer == TIMEOUT)

    def label(self) -> str:
        if self.source == CODEFY_START:
            what = f"the `codefy start` server (pid {self.pid})"
        else:
            root = f", root {self.root_dir}" if self.root_dir else ""
            what = f"Jupyter server pid {self.pid}{root}"
        note = {FORBIDDEN: "; it has codefy-jupyter but refused its recorded token (password login?)",
                RECOVERING: "; restarting (recovering its runs)"}.get(self.answer, "")
        return f"{self.url} ({what}{note})"


# -- the decision (pure) -----------------------------------------------------------------------------


def choose(candidates: Sequence[Candidate], *, in_kernel: bool, state_file: str) -> ServerInfo | None:
    """The server to use among the probed candidates, with why, naming the others; None if none will do."""
    usable = [c for c in candidates if c.usable]
    started = [c for c in candidates if c.source == CODEFY_START]
    jupyters = sorted((c for c in usable if c.source == JUPYTER), key=lambda c: -c.started_at)
    picked: Candidate | None = None
    why = ""
    kernel_servers = [c for c in usable if c.serves_kernel] if in_kernel else []
    if kernel_servers:
        picked, why = kernel_servers[0], "the Jupyter server running this kernel"
    elif any(c.usable for c in started):
        picked = next(c for c in started if c.usable)
        why = f"the `codefy start` server recorded in {picked.found_in}"
        if picked.answer == TIMEOUT:
            why += f" (busy: it did not answer within {PROBE_TIMEOUT_S:g} s)"
    elif jupyters:
        picked = jupyters[0]
        root = f", root {picked.root_dir}" if picked.root_dir else ""
        why = ("the only running Jupyter server with codefy-jupyter" if len(jupyters) == 1 else
               f"the newest of {len(jupyters)} running Jupyter servers with codefy-jupyter")
        why += f" (pid {picked.pid}{root})"
        if started:
            why += f"; the `codefy start` server in {started[0].found_in} does not answer"
        else:
            why += f"; no `codefy start` server is running (none in {state_file})"
    if picked is None:
        return None
    others = tuple(c.label() for c in candidates
                   if c is not picked and c.url != picked.url and (c.usable or c.answer == FORBIDDEN))
    source = "kernel" if kernel_servers else picked.source
    return ServerInfo(picked.url, picked.token, source, why, others)


def settled(candidates: Sequence[Candidate], *, in_kernel: bool) -> bool:
    """Whether answers still missing can no longer change the choice (only who is named beside it)."""
    if in_kernel:
        return all(c.answer != UNCHECKED for c in candidates)
    return any(c.source == CODEFY_START and c.answer in (CODEFY, RECOVERING) for c in candidates)


def no_server_message(candidates: Sequence[Candidate], state_file: str) -> str:
    text = ("no codefy server found: start one with `codefy start` (none recorded in "
            f"{state_file}), run JupyterLab with codefy-jupyter installed, or pass --url and --token")
    seen = [f"{c.url} ({c.source}, pid {c.pid}): {_SAID.get(c.answer, c.answer)}" for c in candidates]
    if seen:
        text += "\n  servers seen:\n" + "\n".join(f"    {line}" for line in seen)
    return text


_SAID = {ABSENT: "no codefy-jupyter extension", UNREACHABLE: "does not answer",
         TIMEOUT: f"no answer within {PROBE_TIMEOUT_S:g} s", FORBIDDEN: "refused its recorded token",
         UNCHECKED: "not checked"}


# -- reading the servers' files and probing them --------------------------------------------------------


def _base(url: str) -> str:
    return url if url.endswith("/") else url + "/"


def _url_list(text: str, what: str) -> tuple[str, tuple[str, ...]]:
    """A URL, or several of one deployment (comma-separated): (the first, the rest)."""
    try:
        urls = parse_control_urls(text, what=what)
    except ControlUrlError as err:
        raise CodefyError(str(err), code="invalid_url", params={"field": what}) from None
    return urls[0], urls[1:]


def discover(url: str | None = None, token: str | None = None, data_dir: str | None = None) -> ServerInfo:
    if url:
        first, rest = _url_list(url, "--url")
        return ServerInfo(first, token if token is not None else os.environ.get("CODEFY_TOKEN", ""),
                          "arguments", "given with --url/--host/--port", alternates=rest)
    if os.environ.get("CODEFY_URL"):
        first, rest = _url_list(os.environ["CODEFY_URL"], "CODEFY_URL")
        return ServerInfo(first, token or os.environ.get("CODEFY_TOKEN", ""),
                          "environment", "from $CODEFY_URL", alternates=rest)
    state_file = str(_state_file(data_dir))
    kernel_id = _kernel_id()
    candidates = _candidates(data_dir)
    probed = probe_all(candidates, kernel_id)
    found = choose(probed, in_kernel=kernel_id is not None, state_file=state_file)
    if found is None:
        raise CodefyError(no_server_message(probed, state_file), code="no_server")
    return found


def find_server(url: str | None = None, token: str | None = None, host: str | None = None,
                port: int | None = None) -> ServerInfo:
    """The server a client uses, chosen from what a person gave (a URL, or a host and/or port as a
    shortcut for one; a token) and otherwise by `discover`. A URL given without a token takes
    $CODEFY_TOKEN, else the token of the `codefy start` server recorded at that address; a token
    given beats the one discovery found. The `codefy` command's and the magics' --url/--token/
    --host/--port mean exactly this."""
    if not url and (host or port):
        url = f"http://{host or '127.0.0.1'}:{port or 8888}/"
    if url and token is None and not os.environ.get("CODEFY_TOKEN"):
        state = _codefy_start_state(None)  # the token of the `codefy start` at that address
        if state is not None and state.url.rstrip("/") == url.rstrip("/"):
            token = state.token
    info = discover(url=url, token=token)
    if token is not None and info.token != token:  # a --token beats the one discovery found
        info = replace(info, token=token)
    return info


def _state_file(data_dir: str | None) -> Path:
    return local_server.state_path(data_dir)


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):  # gone, unreadable, or half written
        return None
    return data if isinstance(data, dict) else None


def _codefy_start_state(data_dir: str | None) -> ServerInfo | None:
    """The recorded `codefy start` server if its process lives (not probed)."""
    found = _codefy_start_candidate(_state_file(data_dir))
    return ServerInfo(found.url, found.token, CODEFY_START) if found else None


def _codefy_start_candidate(path: Path) -> Candidate | None:
    state = _read_json(path)
    if state is None or not pid_alive(state.get("pid")) or not state.get("url"):
        return None
    return Candidate(_base(state["url"]), str(state.get("token") or ""), CODEFY_START, str(path),
                     pid=state["pid"], started_at=float(state.get("started_at") or 0.0))


def _runtime_dir() -> Path:
    from jupyter_core.paths import jupyter_runtime_dir

    return Path(jupyter_runtime_dir())


def _jupyter_candidates() -> list[Candidate]:
    """The live servers of the runtime dir's `jpserver-*.json` files, as jupyter-server lists them."""
    try:
        paths = sorted(_runtime_dir().glob("jpserver-*.json"))
    except (ImportError, OSError):
        return []
    found = []
    for path in paths:
        info = _read_json(path)
        if info is None or not pid_alive(info.get("pid")) or not str(info.get("url", "")).startswith("http"):
            continue
        try:
            started = path.stat().st_mtime
        except OSError:
            continue
        found.append(Candidate(_base(info["url"]), str(info.get("token") or ""), JUPYTER, str(path),
                               pid=info["pid"], root_dir=str(info.get("root_dir") or ""), started_at=started))
    return found


def _candidates(data_dir: str | None) -> list[Candidate]:
    started = _codefy_start_candidate(_state_file(data_dir))
    # A `codefy start` server is a jupyter-server too, with its own jpserver file: count it once.
    jupyters = [c for c in _jupyter_candidates() if started is None or c.url != started.url]
    return ([started] if started else []) + jupyters


def probe_all(candidates: Sequence[Candidate], kernel_id: str | None, *, timeout: float = PROBE_TIMEOUT_S,
              grace: float = OTHERS_GRACE_S, clock: Callable[[], float] = time.monotonic,
              probe: Callable[[Candidate, str | None, float], Candidate] | None = None) -> list[Candidate]:
    """Every candidate probed at once; returns when all have answered, or the choice is settled and
    the others had `grace` more, or `timeout` passed. Candidates that did not answer stay UNCHECKED
    (TIMEOUT for a recorded `codefy start`, whose silence itself is an answer)."""
    probe = probe or _probe
    results: dict[int, Candidate] = {}
    changed = threading.Condition()

    def work(index: int, candidate: Candidate) -> None:
        answered = probe(candidate, kernel_id, timeout)
        with changed:
            results[index] = answered
            changed.notify()

    for index, candidate in enumerate(candidates):
        # Daemon threads: one stuck on a hung server must not hold the command's exit.
        threading.Thread(target=work, args=(index, candidate), daemon=True, name="codefy-probe").start()
    deadline = clock() + timeout + 0.05
    in_kernel = kernel_id is not None
    with changed:
        while len(results) < len(candidates):
            current = [results.get(i, c) for i, c in enumerate(candidates)]
            if settled(current, in_kernel=in_kernel):
                deadline = min(deadline, clock() + grace)
            remaining = deadline - clock()
            if remaining <= 0:
                break
            changed.wait(remaining)
        final = [results.get(i, c) for i, c in enumerate(candidates)]
    return [replace(c, answer=TIMEOUT) if c.source == CODEFY_START and c.answer == UNCHECKED else c
            for c in final]


_OPENER: Any = None


def _get(candidate: Candidate, path: str, timeout: float) -> Any:
    import urllib.request

    global _OPENER
    if _OPENER is None:  # these servers are on this machine: never through an HTTP proxy
        _OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    headers = {"Authorization": f"token {candidate.token}"} if candidate.token else {}
    request = urllib.request.Request(candidate.url + path, headers=headers)
    with _OPENER.open(request, timeout=timeout) as response:
        return json.loads(response.read() or b"null")


def _probe(candidate: Candidate, kernel_id: str | None, timeout: float) -> Candidate:
    import socket
    import urllib.error

    try:
        _get(candidate, "codefy/api/runs?limit=1", timeout)
        answer = CODEFY
    except urllib.error.HTTPError as err:
        err.close()
        answer = {503: RECOVERING, 403: FORBIDDEN}.get(err.code, ABSENT)
    except (socket.timeout, TimeoutError):
        answer = TIMEOUT
    except urllib.error.URLError as err:
        answer = TIMEOUT if isinstance(err.reason, (socket.timeout, TimeoutError)) else UNREACHABLE
    except (OSError, ValueError):
        answer = UNREACHABLE
    serves = False
    if kernel_id and answer in (CODEFY, RECOVERING):
        try:
            serves = any(k.get("id") == kernel_id for k in _get(candidate, "api/kernels", timeout) or [])
        except (OSError, ValueError, AttributeError):
            serves = False
    return replace(candidate, answer=answer, serves_kernel=serves)


def _kernel_id() -> str | None:
    """The id of the kernel we run in, from its connection file (None outside a kernel)."""
    if "ipykernel" not in sys.modules:
        return None
    try:
        from ipykernel import get_connection_file

        name = Path(get_connection_file()).name
    except Exception:  # not in a kernel after all
        return None
    if name.startswith("kernel-") and name.endswith(".json"):
        return name[len("kernel-"):-len(".json")]
    return None
