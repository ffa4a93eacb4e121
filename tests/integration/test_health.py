"""`GET codefy/api/health` on the default SQLite store: always the leader (nobody shares the file),
answered without a login, as a load balancer's probe carries none. The PostgreSQL roles are in
test_standby.py."""

from __future__ import annotations

import pytest

from test_server_runs import call


@pytest.fixture
def jp_server_config(tmp_path):
    return {"ServerApp": {"jpserver_extensions": {"codefy_jupyter": True}},
            "CodefyApp": {"data_dir": str(tmp_path / "codefy")}}


async def test_health_on_sqlite_always_says_leader_with_this_servers_url(jp_fetch, jp_serverapp):
    code, body = await call(jp_fetch, "api", "health")
    assert code == 200 and body == {"role": "leader", "leader": jp_serverapp.connection_url}


async def test_health_needs_no_login(jp_fetch):
    code, body = await call(jp_fetch, "api", "health", headers={"Authorization": ""})
    assert code == 200 and body["role"] == "leader"
