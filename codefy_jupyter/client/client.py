"""The Python client of the run queue: `AsyncClient` and its synchronous twin `Client`.

It talks to the control plane over HTTP only, like any other client. Without arguments it finds
the server itself (see `discovery.py`): inside a notebook kernel, the server that runs the kernel.

    from codefy_jupyter import Client
    client = Client()
    run = client.submit("examples/train_mlp.json", name="mlp", seed=42)
    for event in client.follow(run["id"]):
        ...
"""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.parse
from contextlib import aclosing
from pathlib import Path
from typing import Any, AsyncIterator, Awaitable, Callable, Iterator

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest

from ..wire.control_urls import ControlUrls
from .discovery import ServerInfo, discover
from .errors import CodefyError

_UNSET: Any = object()
CLOSING = ("execution_complete", "execution_error", "execution_stopped")
ACTIVE = ("queued", "running", "disconnected")


def load_graph(graph: dict[str, Any] | str | Path | Any) -> dict[str, Any]:
    """A graph given as a dict, a `Graph` (anything with `to_dict()`), or the path of a graph JSON file."""
    if isinstance(graph, dict):
        return graph
    if callable(getattr(graph, "to_dict", None)):
        return graph.to_dict()
    path = Path(graph)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise not_found(path) from None
    except json.JSONDecodeError as err:
        raise CodefyError(f"{path} is not valid JSON: {err.msg} at line {err.lineno} column {err.colno}",
                          code="invalid_json") from None
    if not isinstance(data, dict):
        raise CodefyError(f"{path} does not hold a graph object", code="invalid_json")
    return data


MAX_PARENTS_SEARCHED = 5


def load_sweep_spec(spec: dict[str, Any] | str | Path) -> dict[str, Any]:
    """A sweep's request body: the dict itself, or read from a JSON file. A spec file may name its
    `base_graph` by a path (relative to the spec's folder) instead of holding it."""
    if isinstance(spec, dict):
        return spec
    path = Path(spec).expanduser()
    body = _read_spec(path, "sweep")
    if isinstance(body.get("base_graph"), str):
        body = {**body, "base_graph": load_graph(path.parent / body["base_graph"])}
    return body


def load_study_spec(spec: dict[str, Any] | str | Path) -> dict[str, Any]:
    """A study's request body: the dict itself, or read from a JSON file. In a file, `base_graph`
    and each variant's `graph` may be the path of a graph file (relative to the spec's folder)."""
    if isinstance(spec, dict):
        return spec
    path = Path(spec).expanduser()
    body = _read_spec(path, "study")
    folder = path.parent
    if isinstance(body.get("base_graph"), str):
        body = {**body, "base_graph": load_graph(folder / body["base_graph"])}
    if isinstance(body.get("variants"), list):
        body["variants"] = [{**v, "graph": load_graph(folder / v["graph"])}
                            if isinstance(v, dict) and isinstance(v.get("graph"), str) else v
                            for v in body["variants"]]
    return body


def _read_spec(path: Path, what: str) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise not_found(path) from None
    except OSError as err:
        raise CodefyError(f"cannot read {what} spec {path}: {err}", code="spec_unreadable") from None
    try:
        body = json.loads(text)
    except ValueError as err:
        raise CodefyError(f"{path} is not JSON: {err}", code="invalid_spec") from None
    if not isinstance(body, dict):
        raise CodefyError(f"{path}: a {what} spec is a JSON object", code="invalid_spec")
    return body


STUDY_ACTIVE = ("queued", "running", "cancel_requested")


def sweep_settled(doc: dict[str, Any]) -> bool:
    """Nothing more will change: finished or failed, and no child queued or running."""
    counts = doc.get("counts") or {}
    return doc.get("state") in ("finished", "failed") and not any(counts.get(s) for s in ACTIVE)


def not_found(path: Path, cwd: Path | None = None) -> CodefyError:
    """A graph file that is not there, said with where it was looked for: a relative path is read
    from the working directory, which in a notebook kernel is the notebook's folder, not the
    project's. A parent folder that has the path is suggested."""
    cwd = cwd or Path.cwd()
    resolved = path if path.is_absolute() else cwd / path
    text = f"graph file not found: {resolved}"
    if not path.is_absolute():
        text = f"graph file not found: {path} (looked for {resolved})"
    text += f"; working directory {cwd}"
    params: dict[str, Any] = {"path": str(resolved), "cwd": str(cwd)}
    if not path.is_absolute():
        for up, parent in enumerate(list(cwd.parents)[:MAX_PARENTS_SEARCHED], start=1):
            if (parent / path).is_file():
                suggestion = Path(*[".."] * up) / path
                text += f"; there is {suggestion} ({parent / path})"
                params["suggestion"] = str(suggestion)
                break
    return CodefyError(text, code="file_not_found", params=params)


class _ElsewhereError(Exception):
    """This URL did not act on the request and another of the deployment may (carries the error
    to raise when none is left, and the leader a standby named)."""

    def __init__(self, error: CodefyError, leader: Any = None) -> None:
        super().__init__(str(error))
        self.error, self.leader = error, leader


class AsyncClient:
    def __init__(self, url: str | None = None, token: str | None = None, *, timeout: float = 30.0,
                 server: ServerInfo | None = None) -> None:
        self.server = server or discover(url=url, token=token)
        self.timeout = timeout
        self._http = AsyncHTTPClient(force_instance=True)
        self._urls = ControlUrls(self.server.urls)

    @property
    def url(self) -> str:
        """The URL in use now: with standbys, the one that last answered as the leader."""
        return self._urls.current

    async def close(self) -> None:
        self._http.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def _call(self, method: str, path: str, body: Any = None, *, timeout: float | None = None,
                    raw: bool = False, headers: dict[str, str] | None = None, **query: Any) -> Any:
        """One request, to the leader: with standbys, a URL that refuses the connection or answers
        503 `standby` is left for the next (straight to the leader a standby names), each at most
        once per call. Neither can have acted on the request, so a POST is sent again safely; a
        request that timed out might have, and is not."""
        for _ in range(len(self._urls.urls) - 1):
            try:
                return await self._call_one(method, path, body, timeout=timeout, raw=raw, headers=headers, **query)
            except _ElsewhereError as err:
                if not self._urls.leader_is(err.leader):
                    self._urls.failed()
        try:
            return await self._call_one(method, path, body, timeout=timeout, raw=raw, headers=headers, **query)
        except _ElsewhereError as err:
            raise err.error from None

    async def _call_one(self, method: str, path: str, body: Any = None, *, timeout: float | None = None,
                        raw: bool = False, headers: dict[str, str] | None = None, **query: Any) -> Any:
        params = {k: v for k, v in query.items() if v is not None}
        base = self.url
        url = f"{base.rstrip('/')}/codefy/api/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params, doseq=True)
        headers = {**(headers or {}), **({"Authorization": f"token {self.server.token}"} if self.server.token else {})}
        request = HTTPRequest(url, method=method, headers=headers,
                              body=json.dumps(body) if body is not None else (b"" if method == "POST" else None),
                              request_timeout=timeout or self.timeout, connect_timeout=10)
        try:
            response = await self._http.fetch(request, raise_error=False)
        except (OSError, asyncio.TimeoutError, HTTPClientError) as err:  # no HTTP answer at all
            unreachable = CodefyError(f"cannot reach the codefy server at {base}: {err}", code="unreachable")
            if isinstance(err, ConnectionRefusedError) or method == "GET":
                raise _ElsewhereError(unreachable) from None
            raise unreachable from None
        if response.code == 599:
            unreachable = CodefyError(f"cannot reach the codefy server at {base}: {response.error}", code="unreachable")
            if isinstance(response.error, ConnectionRefusedError) or method == "GET":
                raise _ElsewhereError(unreachable)
            raise unreachable
        if response.code >= 400:
            try:
                error = json.loads(response.body)["error"]
            except (ValueError, KeyError, TypeError):
                error = {"code": "http_error", "message": f"HTTP {response.code} from {url}", "params": {}}
            refusal = CodefyError(error.get("message", ""), status=response.code, code=error.get("code", "error"),
                                  params=error.get("params") or {})
            if response.code == 503 and refusal.code == "standby":
                raise _ElsewhereError(refusal, (error.get("params") or {}).get("leader"))
            raise refusal
        if raw:
            return response.body.decode()
        return json.loads(response.body) if response.body else None

    # -- runs ---------------------------------------------------------------------------------
    async def submit(self, graph: dict[str, Any] | str | Path | Any, *, name: str | None = None,
                     device: str | None = None, seed: int | None = _UNSET, deterministic: bool = False,
                     record_outputs: bool = False, worker: str | None = None, devices: list[str] | None = None,
                     lane: str | None = None, session: str | None = None, provenance: bool = False) -> dict[str, Any]:
        """Queue a run. `seed` omitted: the graph's settings.seed; `seed=None`: unseeded.
        `provenance`: keep the content identity of each dataset and checkpoint file the run reads."""
        options: dict[str, Any] = {}
        if device is not None:
            options["device"] = device
        if seed is not _UNSET:
            options["seed"] = seed
        if deterministic:
            options["deterministic"] = True
        if record_outputs:
            options["record_outputs"] = True
        if provenance:
            options["provenance"] = True
        if worker is not None or devices:
            options["target"] = {k: v for k, v in (("worker", worker), ("devices", devices)) if v}
        if lane is not None:
            options["lane"] = lane
        if session is not None:
            options["session"] = session
        body: dict[str, Any] = {"graph": load_graph(graph)}
        if name is not None:
            body["name"] = name
        if options:
            body["options"] = options
        return await self._call("POST", "runs", body)

    async def get(self, run_id: str) -> dict[str, Any]:
        return await self._call("GET", f"runs/{run_id}")

    async def list(self, *, status: str | list[str] | None = None, offset: int = 0, limit: int = 50,
                   after: str | None = None) -> dict[str, Any]:
        """A page of runs, newest first; `after`: an earlier page's `next` (keyset paging)."""
        if isinstance(status, list):
            status = ",".join(status)
        return await self._call("GET", "runs", status=status, offset=offset, limit=limit, after=after)

    async def cancel(self, run_id: str) -> dict[str, Any]:
        return await self._call("POST", f"runs/{run_id}/cancel")

    async def delete(self, run_id: str) -> None:
        await self._call("DELETE", f"runs/{run_id}")

    async def events(self, run_id: str, cursor: int = 0, wait: float = 0.0) -> dict[str, Any]:
        return await self._call("GET", f"runs/{run_id}/events", cursor=cursor, wait=wait or None,
                                timeout=self.timeout + wait)

    async def follow(self, run_id: str, cursor: int = 0, *, wait: float = 25.0,
                     reconnect_s: float = 30.0) -> AsyncIterator[dict[str, Any]]:
        """Every event of the run after `cursor`, live until its closing event. A dropped server
        is retried from the last cursor for up to `reconnect_s`, then CodefyError("unreachable")."""
        async with aclosing(self._pages(lambda c: self.events(run_id, c, wait=wait), cursor, reconnect_s)) as pages:
            async for page in pages:
                for event in page["events"]:
                    yield event
                if page["events"] and page["events"][-1]["type"] in CLOSING:
                    return
                if not page["more"] and page["status"] not in ACTIVE and not page["events"]:
                    return

    async def _pages(self, read: Callable[[int], Awaitable[dict[str, Any]]], cursor: int,
                     reconnect_s: float) -> AsyncIterator[dict[str, Any]]:
        """Pages of a log read with `read(cursor)`, each from where the last one ended, for ever
        (the caller stops). A server that drops is asked again from the last cursor for up to
        `reconnect_s`, then CodefyError("unreachable") is raised."""
        while True:
            page = await self._through_drops(lambda: read(cursor), reconnect_s)
            yield page
            cursor = page["cursor"]

    @staticmethod
    async def _through_drops(read: Callable[[], Awaitable[dict[str, Any]]], reconnect_s: float) -> dict[str, Any]:
        """`read()`, asked again every 0.5 s while the server is unreachable, for up to
        `reconnect_s`; then CodefyError("unreachable")."""
        loop = asyncio.get_running_loop()
        lost_since: float | None = None
        while True:
            try:
                return await read()
            except CodefyError as err:
                if err.code != "unreachable":
                    raise
                lost_since = lost_since or loop.time()
                if loop.time() - lost_since > reconnect_s:
                    raise
                await asyncio.sleep(0.5)

    async def metrics(self, run_id: str, *, csv: bool = False) -> Any:
        if csv:
            return await self._call("GET", f"runs/{run_id}/metrics", format="csv", raw=True)
        return (await self._call("GET", f"runs/{run_id}/metrics"))["metrics"]

    async def artifacts(self, run_id: str) -> list[dict[str, Any]]:
        return (await self._call("GET", f"runs/{run_id}/artifacts"))["artifacts"]

    async def nodes(self) -> dict[str, Any]:
        return await self._call("GET", "nodes")

    async def workers(self) -> Any:
        """GET codefy/api/workers: the worker agents with their devices and slots."""
        return await self._call("GET", "workers")

    # -- sweeps -------------------------------------------------------------------------------
    async def sweep(self, spec: dict[str, Any] | str | Path) -> dict[str, Any]:
        """POST codefy/api/sweeps: start a sweep from its request body (a dict, e.g. `Graph.sweep(...)`,
        or a JSON file); the answer names the sweep and every queued variant."""
        return await self._call("POST", "sweeps", load_sweep_spec(spec))

    async def get_sweep(self, sweep_id: str, *, wait: float = 0.0, changes: int | None = None) -> dict[str, Any]:
        """The sweep with its variants ranked best first. With `wait`, answers once a child starts
        or ends after the `changes` seen last (or the sweep has settled), at most `wait` s later."""
        return await self._call("GET", f"sweeps/{sweep_id}", wait=wait or None, changes=changes,
                                timeout=self.timeout + wait)

    async def sweep_csv(self, sweep_id: str) -> str:
        return await self._call("GET", f"sweeps/{sweep_id}", format="csv", raw=True)

    async def list_sweeps(self, *, offset: int = 0, limit: int = 50) -> dict[str, Any]:
        return await self._call("GET", "sweeps", offset=offset, limit=limit)

    async def cancel_sweep(self, sweep_id: str) -> dict[str, Any]:
        return await self._call("POST", f"sweeps/{sweep_id}/cancel")

    async def follow_sweep(self, sweep_id: str, *, wait: float = 25.0) -> AsyncIterator[dict[str, Any]]:
        """The sweep each time one of its children starts or ends (long-poll, not a read per run),
        until it has settled: finished or failed with no child queued or running."""
        changes: int | None = None
        while True:
            doc = await self.get_sweep(sweep_id, wait=wait if changes is not None else 0.0, changes=changes)
            yield doc
            if sweep_settled(doc):
                return
            changes = doc["changes"]

    # -- studies ------------------------------------------------------------------------------
    async def study(self, spec: dict[str, Any] | str | Path, *, idempotency_key: str | None = None) -> dict[str, Any]:
        """POST codefy/api/studies: start a study from its request body (a dict, e.g. `Graph.study(...)`,
        or a JSON file). With `idempotency_key`, sending it again (a retry after a lost answer)
        returns the same study with `created: false` and starts nothing."""
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        return await self._call("POST", "studies", load_study_spec(spec), headers=headers)

    async def get_study(self, study_id: str, *, view: str | None = None, revision: int | None = None,
                        wait: float = 0.0) -> dict[str, Any]:
        """The study: status, revision, counts, budget_usage, variants with every attempt, rankings.
        `view="summary"`: without each variant's attempts, a repetition's current attempt cut to
        what a progress view draws (a quarter of the size of a large study; for following one).
        With `revision` (the one held) and `wait`, a long-poll: answered once the study is past
        that revision (or has stopped), at most `wait` s later."""
        return await self._call("GET", f"studies/{study_id}", view=view, revision=revision,
                                wait=wait or None, timeout=self.timeout + wait)

    async def watch_study(self, study_id: str, *, view: str | None = "summary", wait: float = 25.0,
                          reconnect_s: float = 30.0) -> AsyncIterator[dict[str, Any]]:
        """The study at once, then each time it changes (one long-poll per change, twice a second
        at most while it is busy), until it has stopped: the last one yielded is the stopped study,
        in the full form. A dropped server is asked again for up to `reconnect_s`, then
        CodefyError("unreachable")."""
        revision: int | None = None
        while True:
            doc = await self._through_drops(lambda: self.get_study(
                study_id, view=view, revision=revision, wait=wait if revision is not None else 0.0), reconnect_s)
            if doc["status"] not in STUDY_ACTIVE:
                yield doc if view in (None, "full") else await self.get_study(study_id)
                return
            if doc["revision"] != revision:
                yield doc
            revision = doc["revision"]

    async def list_studies(self, *, status: str | list[str] | None = None, offset: int = 0,
                           limit: int = 50) -> dict[str, Any]:
        if isinstance(status, list):
            status = ",".join(status)
        return await self._call("GET", "studies", status=status, offset=offset, limit=limit)

    async def study_events(self, study_id: str, cursor: int = 0, wait: float = 0.0) -> dict[str, Any]:
        """A page of the study's audit log after `cursor`; with `wait`, a long-poll while it is active."""
        return await self._call("GET", f"studies/{study_id}/events", cursor=cursor, wait=wait or None,
                                timeout=self.timeout + wait)

    async def study_csv(self, study_id: str) -> str:
        return await self._call("GET", f"studies/{study_id}", format="csv", raw=True)

    async def cancel_study(self, study_id: str, *, expected_revision: int | None = None) -> dict[str, Any]:
        body = {"expected_revision": expected_revision} if expected_revision is not None else None
        return await self._call("POST", f"studies/{study_id}/cancel", body)

    async def resume_study(self, study_id: str, *, budget: dict[str, Any] | None = None,
                           expected_revision: int | None = None) -> dict[str, Any]:
        body = {k: v for k, v in (("budget", budget), ("expected_revision", expected_revision)) if v is not None}
        return await self._call("POST", f"studies/{study_id}/resume", body or None)

    async def follow_study(self, study_id: str, cursor: int = 0, *, wait: float = 25.0,
                           reconnect_s: float = 30.0) -> AsyncIterator[dict[str, Any]]:
        """Every audit-log event of the study after `cursor`, by long-poll (one request per page,
        not a read per run), until the study has stopped (not queued, running or cancel_requested)
        and its log is read to the end. A dropped server is retried from the last cursor for up
        to `reconnect_s`, then CodefyError("unreachable")."""
        async with aclosing(self._pages(lambda c: self.study_events(study_id, c, wait=wait), cursor,
                                        reconnect_s)) as pages:
            async for page in pages:
                for event in page["events"]:
                    yield event
                if page["status"] not in STUDY_ACTIVE and not page["more"]:
                    return

    async def wait_study(self, study_id: str, *, wait: float = 25.0) -> dict[str, Any]:
        """Follow the study until it stops; the study as it ended."""
        async for _ in self.follow_study(study_id, wait=wait):
            pass
        return await self.get_study(study_id)


class Client:
    """The synchronous client: the async one on a private event loop in a thread of its own, so
    it also works where a loop is already running (a notebook kernel)."""

    def __init__(self, url: str | None = None, token: str | None = None, *, timeout: float = 30.0) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="codefy-client", daemon=True)
        self._thread.start()
        self._async = self._run(self._make(url, token, timeout))

    async def _make(self, url: str | None, token: str | None, timeout: float) -> AsyncClient:
        return AsyncClient(url, token, timeout=timeout)

    def _run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    @property
    def url(self) -> str:
        return self._async.url

    def close(self) -> None:
        if self._loop.is_running():
            self._run(self._async.close())
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)
            self._loop.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def submit(self, graph: dict[str, Any] | str | Path, **options: Any) -> dict[str, Any]:
        return self._run(self._async.submit(graph, **options))

    def get(self, run_id: str) -> dict[str, Any]:
        return self._run(self._async.get(run_id))

    def list(self, **kwargs: Any) -> dict[str, Any]:
        return self._run(self._async.list(**kwargs))

    def cancel(self, run_id: str) -> dict[str, Any]:
        return self._run(self._async.cancel(run_id))

    def delete(self, run_id: str) -> None:
        self._run(self._async.delete(run_id))

    def events(self, run_id: str, cursor: int = 0, wait: float = 0.0) -> dict[str, Any]:
        return self._run(self._async.events(run_id, cursor, wait))

    def follow(self, run_id: str, cursor: int = 0, **kwargs: Any) -> Iterator[dict[str, Any]]:
        agen = self._async.follow(run_id, cursor, **kwargs)
        while True:
            try:
                yield self._run(agen.__anext__())
            except StopAsyncIteration:
                return

    def wait(self, run_id: str) -> dict[str, Any]:
        """Follow the run to its end; its final row."""
        for _ in self.follow(run_id):
            pass
        return self.get(run_id)

    def metrics(self, run_id: str, *, csv: bool = False) -> Any:
        return self._run(self._async.metrics(run_id, csv=csv))

    def artifacts(self, run_id: str) -> list[dict[str, Any]]:
        return self._run(self._async.artifacts(run_id))

    def nodes(self) -> dict[str, Any]:
        return self._run(self._async.nodes())

    def workers(self) -> Any:
        return self._run(self._async.workers())

    def sweep(self, spec: dict[str, Any] | str | Path) -> dict[str, Any]:
        return self._run(self._async.sweep(spec))

    def get_sweep(self, sweep_id: str, **kwargs: Any) -> dict[str, Any]:
        return self._run(self._async.get_sweep(sweep_id, **kwargs))

    def sweep_csv(self, sweep_id: str) -> str:
        return self._run(self._async.sweep_csv(sweep_id))

    def list_sweeps(self, **kwargs: Any) -> dict[str, Any]:
        return self._run(self._async.list_sweeps(**kwargs))

    def cancel_sweep(self, sweep_id: str) -> dict[str, Any]:
        return self._run(self._async.cancel_sweep(sweep_id))

    def study(self, spec: dict[str, Any] | str | Path, *, idempotency_key: str | None = None) -> dict[str, Any]:
        return self._run(self._async.study(spec, idempotency_key=idempotency_key))

    def get_study(self, study_id: str, **kwargs: Any) -> dict[str, Any]:
        return self._run(self._async.get_study(study_id, **kwargs))

    def watch_study(self, study_id: str, **kwargs: Any) -> Iterator[dict[str, Any]]:
        agen = self._async.watch_study(study_id, **kwargs)
        while True:
            try:
                yield self._run(agen.__anext__())
            except StopAsyncIteration:
                return

    def list_studies(self, **kwargs: Any) -> dict[str, Any]:
        return self._run(self._async.list_studies(**kwargs))

    def study_events(self, study_id: str, cursor: int = 0, wait: float = 0.0) -> dict[str, Any]:
        return self._run(self._async.study_events(study_id, cursor, wait))

    def study_csv(self, study_id: str) -> str:
        return self._run(self._async.study_csv(study_id))

    def cancel_study(self, study_id: str, **kwargs: Any) -> dict[str, Any]:
        return self._run(self._async.cancel_study(study_id, **kwargs))

    def resume_study(self, study_id: str, **kwargs: Any) -> dict[str, Any]:
        return self._run(self._async.resume_study(study_id, **kwargs))

    def follow_study(self, study_id: str, cursor: int = 0, **kwargs: Any) -> Iterator[dict[str, Any]]:
        agen = self._async.follow_study(study_id, cursor, **kwargs)
        while True:
            try:
                yield self._run(agen.__anext__())
            except StopAsyncIteration:
                return

    def wait_study(self, study_id: str, **kwargs: Any) -> dict[str, Any]:
        """Follow the study until it stops; the study as it ended."""
        return self._run(self._async.wait_study(study_id, **kwargs))

    def wait_sweep(self, sweep_id: str) -> dict[str, Any]:
        """Follow the sweep until it settles; its final table."""
        agen = self._async.follow_sweep(sweep_id)
        doc: dict[str, Any] = {}
        while True:
            try:
                doc = self._run(agen.__anext__())
            except StopAsyncIteration:
                return doc
