"""Recorded outputs of a run (`options.record_outputs`): `GET execution/outputs/{run}` lists the
ports with their type and shape, `GET execution/outputs/{run}/{node}/{port}` summarises one port
(statistics and the first elements), `DELETE execution/outputs/{run}` gives them up. The answer
comes from core/runs/recorded.py, wherever the captures are (here, or on the run's worker)."""

from __future__ import annotations

import asyncio
from typing import Any

from jupyter_server.auth.decorator import authorized
from tornado import web

from ..core.runs.recorded import LIST, PORT
from .handlers import CodefyAPIHandler, api


class _OutputRead(CodefyAPIHandler):
    """A read that may wait for a worker: when the client goes away the wait ends, and with it the
    read on the worker (core/workers/outputs.py sends cancel_fetch)."""

    _read: asyncio.Future[Any] | None = None

    def on_connection_close(self) -> None:
        if self._read is not None:
            self._read.cancel()
        super().on_connection_close()

    async def answer(self, run_id: str, kind: str, query: dict[str, Any]) -> None:
        self._read = asyncio.ensure_future(self.service.outputs.read(run_id, kind, query))
        try:
            status, body = await self._read
        except asyncio.CancelledError:
            return  # nobody to answer
        self.send(status, body)


class OutputsHandler(_OutputRead):
    @web.authenticated
    @authorized
    @api
    async def get(self, run_id: str) -> None:
        await self.answer(run_id, LIST, {})

    @web.authenticated
    @authorized
    @api
    async def delete(self, run_id: str) -> None:
        if not await self.service.delete_outputs(run_id, user=self.username, admin=self.is_admin):
            self.send(*_not_recorded(run_id))
            return
        self.set_status(204)
        self.finish()


class OutputPortHandler(_OutputRead):
    @web.authenticated
    @authorized
    @api
    async def get(self, run_id: str, node_id: str, port: str) -> None:
        await self.answer(run_id, PORT, {"node_id": node_id, "port": port})


def _not_recorded(run_id: str) -> tuple[int, dict[str, Any]]:
    from ..wire.output_reads import not_recorded

    return not_recorded(run_id)


def output_routes(base: str) -> list[tuple[str, type, dict[str, Any]]]:
    run = r"(?P<run_id>[^/]+)"
    return [
        (f"{base}codefy/api/execution/outputs/{run}", OutputsHandler, {}),
        (f"{base}codefy/api/execution/outputs/{run}/(?P<node_id>[^/]+)/(?P<port>[^/]+)", OutputPortHandler, {}),
    ]
