"""Per-request behaviour of the API handlers on a real jupyter-server: auth stays on every route,
no login cookie for clients that authenticate with the Authorization header, and the access log
(errors always; successes when DEBUG output is on)."""

from __future__ import annotations

import json
import logging

import pytest
from tornado.httpclient import HTTPClientError


@pytest.fixture
def jp_server_config(tmp_path):
    return {"ServerApp": {"jpserver_extensions": {"codefy_jupyter": True}},
            "CodefyApp": {"data_dir": str(tmp_path / "codefy")}}


def login_cookies(response) -> list[str]:
    return [c for c in response.headers.get_list("Set-Cookie") if c.startswith("username-")]


async def test_a_header_token_gets_no_login_cookie_a_url_token_does(jp_fetch, jp_serverapp):
    response = await jp_fetch("codefy", "api", "runs")
    assert response.code == 200 and login_cookies(response) == []
    token = jp_serverapp.identity_provider.token
    response = await jp_fetch("codefy", "api", "runs", headers={"Authorization": ""}, params={"token": token})
    assert response.code == 200 and len(login_cookies(response)) == 1


async def test_every_route_still_refuses_a_request_without_a_token(jp_fetch):
    for parts, method, body in ((("api", "runs"), "GET", None), (("api", "runs"), "POST", "{}"),
                                (("api", "runs", "x"), "GET", None), (("api", "nodes"), "GET", None)):
        with pytest.raises(HTTPClientError) as refused:
            await jp_fetch("codefy", *parts, method=method, body=body, headers={"Authorization": ""})
        assert refused.value.code == 403


class Records(logging.Handler):
    def __init__(self, level: int) -> None:
        super().__init__(level)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


async def test_errors_are_logged_and_successes_when_debug_output_is_on(jp_fetch, jp_serverapp):
    log = jp_serverapp.extension_manager.extension_points["codefy"].app.log
    records = Records(logging.DEBUG)
    log.addHandler(records)
    try:
        response = await jp_fetch("codefy", "api", "runs")
        assert json.loads(response.body)["total"] == 0
        with pytest.raises(HTTPClientError):
            await jp_fetch("codefy", "api", "runs", "nope")
    finally:
        log.removeHandler(records)
    assert any(m.startswith("200 GET") and m.split()[2].endswith("/codefy/api/runs") for m in records.messages)
    assert any(m.startswith("404 GET") and "/codefy/api/runs/nope" in m for m in records.messages)


def test_a_record_is_shown_only_if_a_handler_on_its_way_keeps_it():
    from codefy_jupyter.server.handlers import _shows

    root = logging.getLogger("codefy-test-shows")
    child = logging.getLogger("codefy-test-shows.app")
    child.setLevel(logging.DEBUG)
    root.propagate = False
    try:
        quiet = logging.StreamHandler()
        quiet.setLevel(logging.INFO)
        root.addHandler(quiet)
        assert not _shows(child, logging.DEBUG) and _shows(child, logging.INFO)
        loud = logging.NullHandler()  # level 0: keeps everything
        child.addHandler(loud)
        assert _shows(child, logging.DEBUG)
        child.removeHandler(loud)
        child.propagate = False  # no handler at all on the way: logging's last resort (WARNING)
        assert not _shows(child, logging.INFO) and _shows(child, logging.WARNING)
        child.setLevel(logging.ERROR)
        assert not _shows(child, logging.WARNING)
    finally:
        root.handlers.clear()
        child.handlers.clear()
        child.propagate = True
