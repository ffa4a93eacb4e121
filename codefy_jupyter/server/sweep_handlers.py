"""REST handlers for sweeps under `{base_url}codefy/api/sweeps`. Thin: parse, call the sweep
service, render (JSON, or the ranked table as CSV)."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from tornado import web
from jupyter_server.auth.decorator import authorized

from ..core.errors import ServiceError
from ..wire.provenance import identity_column
from .handlers import CodefyAPIHandler, api


def sweep_csv(doc: dict[str, Any], inputs: dict[str, list[dict[str, Any]]] | None = None) -> str:
    """The ranked table: one row per variant, one column per swept parameter; and, when any child
    ran with options.provenance, a data_identity column (wire/provenance.py, shared with a study's)."""
    out = io.StringIO()
    writer = csv.writer(out)
    swept = [f"{p['node_id']}.{p['param']}" for p in doc["params"]]
    identity, cells = identity_column(inputs or {})
    writer.writerow(["rank", "index", "run_id", "status", "objective", "objective_metric", "objective_node_id",
                     "ambiguous_producers", "seed", *swept, *identity])
    for v in doc["variants"]:
        writer.writerow([v["rank"], v["index"], v["run_id"], v["status"], v["objective"], doc["objective"]["metric"],
                         v["objective_node_id"], ";".join(v["ambiguous_producers"] or ()), v["seed"],
                         *[json.dumps(p["value"]) if not isinstance(p["value"], str) else p["value"]
                           for p in v["params"]], *cells(v["run_id"])])
    return out.getvalue()


class SweepsHandler(CodefyAPIHandler):
    @web.authenticated
    @authorized
    @api
    async def get(self) -> None:
        self.send(200, await self.experiments.sweeps.list(offset=self.int_arg("offset", 0),
                                                          limit=self.int_arg("limit", 50)))

    @web.authenticated
    @authorized
    @api
    async def post(self) -> None:
        self.send(201, await self.experiments.sweeps.create(await self.body(), owner=self.username))


class SweepHandler(CodefyAPIHandler):
    @web.authenticated
    @authorized
    @api
    async def get(self, sweep_id: str) -> None:
        fmt = self.get_argument("format", "json")
        if fmt not in ("json", "csv"):
            raise ServiceError("format must be json or csv", code="invalid_format", params={"field": "format"})
        changes = self.get_argument("changes", None)
        doc = await self.experiments.sweeps.get(
            sweep_id, wait=self.float_arg("wait", 0.0),
            changes=None if changes is None else self.int_arg("changes", 0))
        if fmt == "json":
            return self.send(200, doc)
        self.set_header("Content-Disposition", f'attachment; filename="sweep-{sweep_id}.csv"')
        inputs = await self.service.store.inputs_of([v["run_id"] for v in doc["variants"] if v.get("run_id")])
        self.finish(sweep_csv(doc, inputs), set_content_type="text/csv; charset=utf-8")


class SweepCancelHandler(CodefyAPIHandler):
    @web.authenticated
    @authorized
    @api
    async def post(self, sweep_id: str) -> None:
        self.send(200, await self.experiments.sweeps.cancel(sweep_id, user=self.username, admin=self.is_admin))


def sweep_routes(base: str) -> list[tuple[str, type, dict[str, Any]]]:
    sweep = r"(?P<sweep_id>[^/]+)"
    return [
        (f"{base}codefy/api/sweeps", SweepsHandler, {}),
        (f"{base}codefy/api/sweeps/{sweep}", SweepHandler, {}),
        (f"{base}codefy/api/sweeps/{sweep}/cancel", SweepCancelHandler, {}),
    ]
