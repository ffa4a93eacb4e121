"""REST handlers for studies under `{base_url}codefy/api/studies`. Thin: parse, call the study
service, render."""

from __future__ import annotations

from typing import Any

from tornado import web
from jupyter_server.auth.decorator import authorized

from ..core.errors import ServiceError
from .handlers import CodefyAPIHandler, api


class StudiesHandler(CodefyAPIHandler):
    @web.authenticated
    @authorized
    @api
    async def get(self) -> None:
        statuses = [s for s in self.get_arguments("status") for s in s.split(",") if s] or None
        self.send(200, await self.experiments.studies.list(status=statuses, offset=self.int_arg("offset", 0),
                                                           limit=self.int_arg("limit", 50)))

    @web.authenticated
    @authorized
    @api
    async def post(self) -> None:
        created, study = await self.experiments.studies.create(
            await self.body(), owner=self.username, header_key=self.request.headers.get("Idempotency-Key"))
        self.send(201 if created else 200, {**study, "created": created})


class StudyHandler(CodefyAPIHandler):
    @web.authenticated
    @authorized
    @api
    async def get(self, study_id: str) -> None:
        fmt = self.get_argument("format", "json")
        if fmt not in ("json", "csv"):
            raise ServiceError("format must be json or csv", code="invalid_format", params={"field": "format"})
        studies = self.experiments.studies
        view, wait = self.get_argument("view", "full"), self.float_arg("wait", 0.0)
        revision = None if self.get_argument("revision", None) is None else self.int_arg("revision", 0)
        if fmt == "json":
            return self.send_encoded(200, *await studies.get_json(study_id, view, wait=wait, revision=revision))
        text = await studies.csv(study_id, view, wait, revision)
        self.set_header("Content-Disposition", f'attachment; filename="study-{study_id}.csv"')
        self.finish(text, set_content_type="text/csv; charset=utf-8")


class StudyEventsHandler(CodefyAPIHandler):
    @web.authenticated
    @authorized
    @api
    async def get(self, study_id: str) -> None:
        self.send(200, await self.experiments.studies.events(study_id, self.int_arg("cursor", 0),
                                                             self.float_arg("wait", 0.0)))


class StudyCancelHandler(CodefyAPIHandler):
    @web.authenticated
    @authorized
    @api
    async def post(self, study_id: str) -> None:
        self.send(200, await self.experiments.studies.cancel(study_id, await self.body(), user=self.username,
                                                             admin=self.is_admin))


class StudyResumeHandler(CodefyAPIHandler):
    @web.authenticated
    @authorized
    @api
    async def post(self, study_id: str) -> None:
        self.send(200, await self.experiments.studies.resume(study_id, await self.body(), user=self.username,
                                                             admin=self.is_admin))


def study_routes(base: str) -> list[tuple[str, type, dict[str, Any]]]:
    study = r"(?P<study_id>[^/]+)"
    return [
        (f"{base}codefy/api/studies", StudiesHandler, {}),
        (f"{base}codefy/api/studies/{study}", StudyHandler, {}),
        (f"{base}codefy/api/studies/{study}/events", StudyEventsHandler, {}),
        (f"{base}codefy/api/studies/{study}/cancel", StudyCancelHandler, {}),
        (f"{base}codefy/api/studies/{study}/resume", StudyResumeHandler, {}),
    ]
