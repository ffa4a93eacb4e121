"""`codefy start` as a JupyterHub service, and a single-user server passing its routes on to it:
the decisions, without a Hub (tests/hub/test_hub_service.py runs them under a real one)."""

import pytest

from codefy_jupyter.server.forward import upstream_url
from codefy_jupyter.server.hub_service import IDENTITY_PROVIDER, HubServiceError, hub_service, server_config
from codefy_jupyter.server.sharing import decide_sharing

SERVICE_ENV = {"JUPYTERHUB_SERVICE_NAME": "codefy", "JUPYTERHUB_API_TOKEN": "t",
               "JUPYTERHUB_SERVICE_URL": "http://127.0.0.1:10101", "JUPYTERHUB_SERVICE_PREFIX": "/services/codefy/"}


def test_the_hubs_environment_makes_a_service_listening_where_the_hub_said():
    service = hub_service(SERVICE_ENV)
    assert service is not None
    assert (service.name, service.ip, service.port, service.base_url) == ("codefy", "127.0.0.1", 10101,
                                                                          "/services/codefy/")
    assert service.access_scope == "access:services!service=codefy"
    config = server_config(service)
    assert config["identity_provider_class"] == IDENTITY_PROVIDER
    assert (config["ip"], config["port"], config["port_retries"], config["base_url"]) == (
        "127.0.0.1", 10101, 0, "/services/codefy/")
    assert config["trust_xheaders"] and config["allow_remote_access"]


@pytest.mark.parametrize("missing", ["JUPYTERHUB_SERVICE_NAME", "JUPYTERHUB_API_TOKEN"])
def test_without_a_service_name_and_token_it_is_no_service(missing):
    assert hub_service({k: v for k, v in SERVICE_ENV.items() if k != missing}) is None


def test_a_single_user_server_is_never_the_service():
    assert hub_service({**SERVICE_ENV, "JUPYTERHUB_USER": "alice"}) is None


def test_defaults_and_refusals_of_the_hubs_url():
    env = {**SERVICE_ENV, "JUPYTERHUB_SERVICE_URL": "https://team.example", "JUPYTERHUB_SERVICE_PREFIX": ""}
    service = hub_service(env)
    assert service is not None and service.port == 443 and service.base_url == "/services/codefy/"
    with pytest.raises(HubServiceError, match="without a url"):
        hub_service({k: v for k, v in SERVICE_ENV.items() if k != "JUPYTERHUB_SERVICE_URL"})
    with pytest.raises(HubServiceError, match="http"):
        hub_service({**SERVICE_ENV, "JUPYTERHUB_SERVICE_URL": "unix:///tmp/x"})


def test_the_service_is_a_shared_server_owned_by_no_one():
    s = decide_sharing(None, [], SERVICE_ENV, IDENTITY_PROVIDER, admin_groups=["gpu-admins"])
    assert s.shared and "JupyterHub service 'codefy'" in s.reason and s.admins == frozenset()
    assert not s.is_admin("alice", {"name": "alice", "admin": False, "groups": []})
    assert s.is_admin("carol", {"name": "carol", "admin": True, "groups": []})
    assert s.is_admin("dave", {"name": "dave", "admin": False, "groups": ["gpu-admins"]})
    # someone else's model never makes an admin
    assert not s.is_admin("bob", {"name": "carol", "admin": True, "groups": []})


def test_upstream_urls_keep_path_and_query():
    base = "http://127.0.0.1:10101/services/codefy/"
    assert upstream_url(base, "api", "runs/abc/events", "cursor=3&wait=20") == (
        "http://127.0.0.1:10101/services/codefy/codefy/api/runs/abc/events?cursor=3&wait=20")
    assert upstream_url(base.rstrip("/"), "api", "runs", "") == "http://127.0.0.1:10101/services/codefy/codefy/api/runs"
    assert upstream_url("https://hub.example/services/codefy/", "ws", "execution", "session=s1",
                        websocket_=True) == "wss://hub.example/services/codefy/codefy/ws/execution?session=s1"
    assert upstream_url(base, "api", "runs/a b", "").endswith("/codefy/api/runs/a%20b")


def test_codefy_start_as_a_service_without_a_url_is_refused_and_writes_nothing(tmp_path):
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith(("CODEFY_", "JUPYTER"))}
    env.update(JUPYTERHUB_SERVICE_NAME="codefy", JUPYTERHUB_API_TOKEN="t", JUPYTER_PLATFORM_DIRS="0",
               JUPYTER_DATA_DIR=str(tmp_path / "jupyter"))
    data_dir = tmp_path / "codefy"
    done = subprocess.run([sys.executable, "-m", "codefy_jupyter.cli", "start", "--data-dir", str(data_dir)],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "JupyterHub started service 'codefy' without a url" in done.stderr
    assert not data_dir.exists()
