"""The transfer backend's agent side (seed: storage, transfer): a run's inputs downloaded by SHA-256
into the agent's cache, and the files the run wrote uploaded back, both with the worker token.

Inputs: `agent-cache/<sha256>/blob`. A cached blob is used after its hash is checked again (a
second run with the same input transfers nothing); a missing or damaged one is downloaded to a
temporary name while it is hashed, checked, then renamed into place. Outputs: every file under the
run's folder, one request each (`POST runs/{id}/artifacts/upload?path=<relative path>`), the
checkpoints of an interrupted run last. Blocking code on purpose: the runner calls it from a thread
of its own, so the agent's event loop (heartbeats, other runs) never waits for it.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import ssl
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable
from urllib.parse import quote, urlsplit

from . import private

CHUNK = 4 << 20
BLOB = "blob"
TIMEOUT_S = 60.0


class TransferFailed(Exception):
    """A download or upload did not complete; the message says which and why. `code`: the
    run_warning / error code the run gets."""

    code = "worker_transfer_failed"


class UploadStopped(TransferFailed):
    """The run was cancelled while its files uploaded: the rest stay on the worker."""

    code = "worker_upload_stopped"


# Tests and benchmarks only: seconds each file waits before its upload, so a run is reliably caught
# mid-upload (a loopback upload is otherwise too quick to watch). Unset in production.
UPLOAD_DELAY_ENV = "CODEFY_AGENT_TEST_UPLOAD_DELAY_S"


def before_upload(stop: Callable[[], bool] | None) -> None:
    """Between files: the test delay (if set), then UploadStopped if the run was cancelled."""
    try:
        delay = float(os.environ.get(UPLOAD_DELAY_ENV) or 0)
    except ValueError:
        delay = 0.0
    deadline = time.monotonic() + delay
    while True:
        if stop is not None and stop():
            raise UploadStopped("the run was cancelled while its files uploaded")
        left = deadline - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(left, 0.05))


@dataclass
class Fetched:
    """What fetching a run's inputs did: the local path of each input entry, bytes downloaded,
    entries served from the cache, seconds spent."""

    paths: list[str]
    downloaded: int = 0
    cached: int = 0
    seconds: float = 0.0


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    buffer = bytearray(CHUNK)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buffer):
            digest.update(view[:n])
    return digest.hexdigest()


class InputCache:
    """The seam both remote backends share (the transfer backend here, S3 in agent/s3.py): a
    run's inputs fetched by SHA-256 through the agent's cache, and its files sent back. A backend
    supplies `_download` (one input into an open file, returning the content's sha256) and
    `upload_outputs`."""

    cache_dir: Path

    def _download(self, run_id: str, item: dict[str, Any], out: Any) -> str:
        raise NotImplementedError

    def upload_outputs(self, run_id: str, folder: Path, stop: Callable[[], bool] | None = None
                       ) -> list[tuple[str, int]]:
        """Every file under `folder`; `stop` is asked between files (UploadStopped when true)."""
        raise NotImplementedError

    # -- inputs ---------------------------------------------------------------------------------
    def fetch_inputs(self, run_id: str, inputs: list[dict[str, Any]]) -> Fetched:
        started = time.perf_counter()
        out = Fetched(paths=[])
        done: dict[str, Path] = {}
        for item in inputs:
            sha = str(item.get("sha256", ""))
            if len(sha) != 64 or any(c not in "0123456789abcdef" for c in sha):
                raise TransferFailed(f"the assign lists an input with a bad sha256: {sha!r}")
            if sha not in done:
                path, fetched = self._fetch(run_id, sha, item)
                done[sha] = path
                if fetched:
                    out.downloaded += path.stat().st_size
                else:
                    out.cached += 1
            out.paths.append(str(done[sha]))
        out.seconds = time.perf_counter() - started
        return out

    def _fetch(self, run_id: str, sha: str, item: dict[str, Any]) -> tuple[Path, bool]:
        folder = self.cache_dir / sha
        blob = folder / BLOB
        if blob.is_file():
            if sha256_file(blob) == sha:
                return blob, False
            blob.unlink(missing_ok=True)  # damaged: fetch it again
        private.make_dir(folder)
        partial = folder / f"{BLOB}.{os.getpid()}.partial"
        try:
            with private.open_file(partial, "wb", buffering=0) as f:
                got = self._download(run_id, item, f)
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        if got != sha:
            partial.unlink(missing_ok=True)
            raise TransferFailed(f"downloading input {sha[:12]}: the content's sha256 is {got}")
        partial.replace(blob)
        return blob, True


class RunTransfer(InputCache):
    """The transfer backend. `control`: the control plane's base URL (`http://host:port/base/`), or
    a function answering the one the agent is connected to now (a leader and its standbys: files go
    to whichever leads)."""

    def __init__(self, control: str | Callable[[], str], token: str | Callable[[], str], cache_dir: Path, *,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self.control = control
        self.token = token
        self.cache_dir = Path(cache_dir)
        self.ssl_context = ssl_context

    @property
    def base(self) -> str:
        parts = urlsplit(self.control() if callable(self.control) else self.control)
        return (parts.path or "/").rstrip("/") + "/"

    def _connection(self) -> http.client.HTTPConnection:
        parts = urlsplit(self.control() if callable(self.control) else self.control)
        https = parts.scheme in ("https", "wss")
        host, port = parts.hostname or "127.0.0.1", parts.port or (443 if https else 80)
        if https:
            return http.client.HTTPSConnection(host, port, timeout=TIMEOUT_S, context=self.ssl_context)
        return http.client.HTTPConnection(host, port, timeout=TIMEOUT_S)

    def _headers(self) -> dict[str, str]:
        token = self.token() if callable(self.token) else self.token  # read again: it may change on reconnect
        return {"Authorization": f"token {token}"}

    def _download(self, run_id: str, item: dict[str, Any], out: Any) -> str:
        sha = str(item["sha256"])
        conn = self._connection()
        try:
            conn.request("GET", f"{self.base}codefy/api/runs/{quote(run_id)}/inputs/{sha}", headers=self._headers())
            response = conn.getresponse()
            if response.status != 200:
                raise TransferFailed(f"downloading input {sha[:12]}: HTTP {response.status}: "
                                     f"{response.read(2000).decode('utf-8', 'replace')}")
            digest = hashlib.sha256()
            buffer = bytearray(CHUNK)
            view = memoryview(buffer)
            while n := response.readinto(buffer):
                digest.update(view[:n])
                out.write(view[:n])
        except (OSError, http.client.HTTPException) as err:
            raise TransferFailed(f"downloading input {sha[:12]}: {err}") from err
        finally:
            conn.close()
        return digest.hexdigest()

    # -- outputs --------------------------------------------------------------------------------
    def upload_outputs(self, run_id: str, folder: Path, stop: Callable[[], bool] | None = None
                       ) -> list[tuple[str, int]]:
        """Upload every file under `folder`; (relative path, bytes) of each, in upload order."""
        sent = []
        for path in upload_order(folder):
            before_upload(stop)
            rel = path.relative_to(folder).as_posix()
            size = path.stat().st_size
            conn = self._connection()
            try:
                with open(path, "rb") as body:
                    conn.request("POST", f"{self.base}codefy/api/runs/{quote(run_id)}/artifacts/upload?path={quote(rel)}",
                                 body=body, headers={**self._headers(), "Content-Length": str(size),
                                                     "Content-Type": "application/octet-stream"})
                response = conn.getresponse()
                text = response.read(2000).decode("utf-8", "replace")
                if response.status != 201:
                    raise TransferFailed(f"uploading {rel}: HTTP {response.status}: {text}")
            except (OSError, http.client.HTTPException) as err:
                raise TransferFailed(f"uploading {rel}: {err}") from err
            finally:
                conn.close()
            sent.append((rel, size))
        return sent


def upload_order(folder: Path) -> list[Path]:
    """The run's files, interrupted checkpoints last (they matter only once the rest is home)."""
    if not folder.is_dir():
        return []
    files = sorted(p for p in folder.rglob("*") if p.is_file() and not p.name.endswith(".partial"))
    return sorted(files, key=lambda p: "interrupted" in p.name)


def point_inputs(graph: dict[str, Any], inputs: Iterable[dict[str, Any]], paths: list[str]) -> dict[str, Any]:
    """The graph with each listed input param pointing at its local copy."""
    nodes = {n.get("id"): n for n in graph.get("nodes") or () if isinstance(n, dict)}
    for item, path in zip(inputs, paths):
        node = nodes.get(item.get("node_id"))
        if node is not None and isinstance(item.get("param"), str):
            node.setdefault("params", {})[item["param"]] = path
    return graph
