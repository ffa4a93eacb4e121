"""The agent's credentials: enrolling with a one-time token, and the worker token kept in a 0600 file.

`codefy agent start --token T`:
- T shaped like a one-time enrollment token (`abcdef.0123...`): exchanged once at
  `POST <control>/codefy/api/workers/enroll` `{"token", "name"}` for a long-lived worker token, stored in
  `<agent dir>/credentials/<name>.json` (0600, folder 0700) with the sha256 of T, so starting again with
  the same command line reuses the stored token instead of spending T a second time;
- any other T (a worker token, or the server's own token for an agent on the server's machine) is
  used as it is.
Without `--token`: the stored worker token of this name for this control plane, else `$CODEFY_TOKEN`,
else the token of a `codefy start` server on this machine at the same address. That last one (or a
`--token` equal to it) is read again from the server's `server.json` before each dial, so the agent
follows a server restarted with another token instead of being locked out.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import private
from ..wire import local_server

LOCAL_SERVER = "the codefy start server on this machine"  # a token source the agent re-reads
ENROLLMENT_TOKEN = re.compile(r"[0-9A-Za-z]{4,16}\.[0-9A-Za-z]{16,128}")
ENROLL_TIMEOUT_S = 30.0


class CredentialError(Exception):
    """No usable credential: the message says what to do. `elsewhere`: another URL of the same
    deployment may answer (this one was unreachable, or a standby)."""

    def __init__(self, message: str, *, elsewhere: bool = False) -> None:
        super().__init__(message)
        self.elsewhere = elsewhere


def is_enrollment_token(token: str) -> bool:
    return bool(ENROLLMENT_TOKEN.fullmatch(token.strip()))


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def normalise_control(url: str) -> str:
    return url if url.endswith("/") else url + "/"


@dataclass
class Stored:
    control: str
    name: str
    worker_token: str
    enrollment: str | None = None  # sha256 of the one-time token it came from


class CredentialStore:
    def __init__(self, agent_dir: Path) -> None:
        self.folder = Path(agent_dir) / "credentials"

    def path(self, name: str) -> Path:
        return self.folder / f"{name}.json"

    def load(self, name: str) -> Stored | None:
        try:
            data = json.loads(self.path(name).read_text(encoding="utf-8"))
            return Stored(data["control"], data["name"], data["worker_token"], data.get("enrollment"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise CredentialError(f"{self.path(name)} is damaged ({err}); delete it and enroll again") from None

    def save(self, stored: Stored) -> Path:
        private.make_dir(self.folder)
        path = self.path(stored.name)
        tmp = path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(stored.__dict__, f)
        os.replace(tmp, path)
        return path


def enroll(control: str, token: str, name: str, ssl_context: ssl.SSLContext | None) -> dict[str, Any]:
    """Exchange a one-time token for a worker token (blocking HTTP)."""
    url = normalise_control(control) + "codefy/api/workers/enroll"
    request = urllib.request.Request(url, data=json.dumps({"token": token, "name": name}).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=ENROLL_TIMEOUT_S, context=ssl_context) as response:
            body = json.loads(response.read())
    except urllib.error.HTTPError as err:
        try:
            detail = json.loads(err.read()).get("error", {})
        except ValueError:
            detail = {}
        message = detail.get("message") or err.reason
        raise CredentialError(f"enrollment refused by {url} ({err.code} {detail.get('code', '')}): {message}",
                              elsewhere=err.code == 503) from None
    except (urllib.error.URLError, OSError, ValueError) as err:
        raise CredentialError(f"cannot enroll at {url}: {getattr(err, 'reason', err)}",
                              elsewhere=not isinstance(err, ValueError)) from None
    if not isinstance(body, dict) or not isinstance(body.get("worker_token"), str):
        raise CredentialError(f"{url} answered without a worker token")
    return body


def _enroll_at_any(urls: list[str], token: str, name: str, ssl_context: ssl.SSLContext | None) -> dict[str, Any]:
    """Enroll at the first URL that answers as the leader (a standby answers 503)."""
    for i, url in enumerate(urls):
        try:
            return enroll(url, token, name, ssl_context)
        except CredentialError as err:
            if not err.elsewhere or i == len(urls) - 1:
                raise
    raise CredentialError("no control-plane URL")  # pragma: no cover - urls is never empty


def local_server_token(control: str) -> str | None:
    """The token of a `codefy start` server on this machine serving `control`, if there is one."""
    try:
        state = json.loads(local_server.state_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(state, dict) or normalise_control(str(state.get("url", ""))) != normalise_control(control):
        return None
    token = state.get("token")
    return token if isinstance(token, str) and token else None


def resolve_token(control: str, name: str, token: str | None, store: CredentialStore,
                  ssl_context: ssl.SSLContext | None, env: dict[str, str] | None = None) -> tuple[str, str]:
    """(token to connect with, where it came from). `control`: the deployment's URLs, comma-separated
    (a leader and its standbys share one database, hence one worker token)."""
    env = os.environ if env is None else env
    urls = [normalise_control(u.strip()) for u in control.split(",") if u.strip()]
    control = ",".join(urls)
    stored = store.load(name)
    ours = stored is not None and (stored.control == control or stored.control in urls)
    if token:
        token = token.strip()
        if not is_enrollment_token(token):
            return token, "--token"
        if ours and stored is not None and stored.enrollment == _digest(token):
            return stored.worker_token, f"stored in {store.path(name)}"
        body = _enroll_at_any(urls, token, name, ssl_context)
        path = store.save(Stored(control, name, body["worker_token"], _digest(token)))
        return body["worker_token"], f"enrolled as {body.get('name', name)}; stored in {path}"
    if ours and stored is not None:
        return stored.worker_token, f"stored in {store.path(name)}"
    if env.get("CODEFY_TOKEN"):
        return env["CODEFY_TOKEN"], "$CODEFY_TOKEN"
    local = local_server_token(urls[0])
    if local:
        return local, LOCAL_SERVER
    raise CredentialError(f"no token for worker {name!r} at {control}: pass --token (a one-time token from the "
                          "Workers panel or POST codefy/api/workers/enrollments, or a worker token)")
