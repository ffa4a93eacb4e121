"""A real JupyterHub on loopback for the Hub tests: `jupyterhub` from this environment, its proxy
(configurable-http-proxy) from tests/hub/node_modules (`make venv` installs it from
tests/hub/package-lock.json), DummyAuthenticator, and SimpleLocalProcessSpawner starting
`jupyterhub-singleuser` (so the codefy extension, enabled in this environment) as this same user,
each user with their own home folder (and so their own codefy data dir) under the test's folder.

The tests act through the Hub's REST API with a service token that may manage users, servers,
tokens and shares, and reach single-user servers through the proxy with each user's own API token,
as a script would, or signed in with a session cookie, as a browser (Lab's panels) would.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests  # a dependency of jupyterhub: a browser's cookie jar

HERE = Path(__file__).parent
PROXY = HERE / "node_modules" / ".bin" / "configurable-http-proxy"
SERVICE_TOKEN = "codefy-hub-tests-" + "0" * 32


def proxy_missing() -> str | None:
    """Why the Hub cannot start here, or None."""
    if not PROXY.exists():
        return f"JupyterHub's proxy is not installed ({PROXY} missing: run `make venv`)"
    if shutil.which("node") is None:
        return "JupyterHub's proxy needs Node.js, which is not on PATH"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request(url: str, *, method: str = "GET", token: str | None = None, body: Any = None,
            timeout: float = 30.0) -> tuple[int, Any]:
    """One HTTP request; the status and the JSON body (raw text if not JSON, None if empty)."""
    data = None if body is None else json.dumps(body).encode()
    if data is None and method in ("POST", "PUT", "PATCH"):
        data = b""
    req = urllib.request.Request(url, data=data, method=method)
    if token is not None:
        req.add_header("Authorization", f"token {token}")
    if body is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as response:
            code, raw = response.status, response.read()
    except urllib.error.HTTPError as err:
        code, raw = err.code, err.read()
    if not raw:
        return code, None
    try:
        return code, json.loads(raw)
    except ValueError:
        return code, raw.decode(errors="replace")


@dataclass
class Browser:
    """A signed-in browser on one server: its session cookie, and the XSRF header Lab sends."""

    session: requests.Session
    server_url: str

    def codefy(self, *path: str, method: str = "GET", body: Any = None, xsrf: bool = True) -> tuple[int, Any]:
        path_prefix = urllib.parse.urlsplit(self.server_url).path
        token = next((c.value for c in self.session.cookies if c.name == "_xsrf" and c.path == path_prefix), None)
        headers = {"X-XSRFToken": token} if xsrf and token else {}
        response = self.session.request(method, self.server_url + "codefy/" + "/".join(path), json=body,
                                        headers=headers, allow_redirects=False)
        try:
            return response.status_code, response.json()
        except ValueError:
            return response.status_code, response.text


@dataclass
class Hub:
    root: Path
    port: int
    process: subprocess.Popen[bytes]
    log_path: Path
    tokens: dict[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def api(self, path: str, *, method: str = "GET", body: Any = None, token: str | None = None,
            timeout: float = 30.0) -> tuple[int, Any]:
        return request(f"{self.url}/hub/api/{path.lstrip('/')}", method=method, body=body,
                       token=token or SERVICE_TOKEN, timeout=timeout)

    def token(self, user: str) -> str:
        """An API token of `user` (with all of their permissions, shares included)."""
        if user not in self.tokens:
            code, body = self.api(f"users/{user}/tokens", method="POST", body={"note": "codefy hub tests"})
            assert code == 201, (code, body)
            self.tokens[user] = body["token"]
        return self.tokens[user]

    def server(self, user: str) -> dict[str, Any] | None:
        code, model = self.api(f"users/{user}")
        assert code == 200, (code, model)
        return (model.get("servers") or {}).get("")

    def start_server(self, user: str, timeout: float = 90.0) -> None:
        code, body = self.api(f"users/{user}/server", method="POST")
        assert code in (201, 202, 400), (code, body)  # 400: already running
        deadline = time.monotonic() + timeout
        while True:
            server = self.server(user)
            if server and server.get("ready"):
                return
            assert time.monotonic() < deadline, f"{user}'s server did not become ready:\n{self.log_tail()}"
            time.sleep(0.2)

    def stop_server(self, user: str, timeout: float = 30.0) -> None:
        code, body = self.api(f"users/{user}/server", method="DELETE")
        assert code in (202, 204), (code, body)
        deadline = time.monotonic() + timeout
        while self.server(user) is not None:
            assert time.monotonic() < deadline, f"{user}'s server did not stop"
            time.sleep(0.2)

    def share(self, owner: str, with_user: str) -> None:
        """`owner` shares their server with `with_user` (JupyterHub 5's shares), as `owner` would."""
        code, body = self.api(f"shares/{owner}/", method="POST", body={"user": with_user}, token=self.token(owner))
        assert code in (200, 201), (code, body)

    def codefy(self, user: str, owner: str, *path: str, method: str = "GET", body: Any = None,
               token: str | None = "", **params: Any) -> tuple[int, Any]:
        """`user` calls `owner`'s codefy API through the proxy (token "": the user's; None: no token)."""
        query = "&".join(f"{k}={v}" for k, v in params.items())
        url = f"{self.url}/user/{owner}/codefy/" + "/".join(path) + (f"?{query}" if query else "")
        return request(url, method=method, body=body, token=self.token(user) if token == "" else token)

    def browser(self, user: str, owner: str) -> "Browser":
        """`user` signs in on the Hub's login page and opens `owner`'s Lab, approving the Hub's
        OAuth prompt (shown when the server is someone else's), as in a browser."""
        session = requests.Session()
        session.get(f"{self.url}/hub/login").raise_for_status()
        session.post(f"{self.url}/hub/login", data={"username": user, "password": "any",
                                                    "_xsrf": session.cookies.get("_xsrf", path="/hub/")})
        page = session.get(f"{self.url}/user/{owner}/lab")
        if "/oauth2/authorize" in page.url:
            fields = [(m.group(1), html.unescape(m.group(2)))
                      for m in re.finditer(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', page.text)]
            page = session.post(page.url, data=fields)
        assert page.status_code == 200 and page.url.startswith(f"{self.url}/user/{owner}/"), (page.status_code, page.url)
        return Browser(session, f"{self.url}/user/{owner}/")

    def data_dir(self, user: str) -> Path:
        """The user's codefy data dir: the default one, in the home folder the spawner gave them."""
        return self.root / "home" / user / ".local" / "share" / "jupyter" / "codefy"

    def log_tail(self, chars: int = 6000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:]

    def close(self) -> None:
        """SIGTERM: the Hub stops the proxy; its single-user servers are stopped first."""
        for user in list(self.tokens):
            try:
                if self.server(user) is not None:
                    self.api(f"users/{user}/server", method="DELETE")
            except (OSError, AssertionError):
                pass
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)


def write_config(root: Path, port: int, *, users: list[str], admins: list[str], groups: dict[str, list[str]],
                 singleuser_args: list[str], environment: dict[str, str], services: list[dict[str, Any]],
                 roles: list[dict[str, Any]], extra: str = "") -> Path:
    config = root / "jupyterhub_config.py"
    settings = {
        "port": port, "hub_port": free_port(), "proxy_api_port": free_port(), "proxy": str(PROXY),
        "root": str(root), "users": users, "admins": admins,
        "groups": {name: {"users": members} for name, members in groups.items()},
        "cmd": [sys.executable, "-m", "jupyterhub.singleuser"],
        # root in these containers: jupyter-server refuses root without it
        "args": ["--allow-root", *singleuser_args],
        "environment": environment,
        "services": [{"name": "tests", "api_token": SERVICE_TOKEN}, *services],
        "roles": [
            # Users may share their servers by name (JupyterHub's sharing tutorial).
            {"name": "user", "scopes": ["self", "shares!user", "read:users:name", "read:groups:name"]},
            {"name": "tests", "services": ["tests"],
             "scopes": ["admin:users", "admin:servers", "tokens", "shares", "admin:groups", "access:servers"]},
            *roles,
        ],
    }
    config.write_text(f"""\
import json
s = json.loads({json.dumps(json.dumps(settings))})
c = get_config()  # noqa: F821
c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = s["port"]
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = s["hub_port"]
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{{s['proxy_api_port']}}"
c.ConfigurableHTTPProxy.command = [s["proxy"]]
c.JupyterHub.db_url = f"sqlite:///{{s['root']}}/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = f"{{s['root']}}/cookie_secret"
c.JupyterHub.pid_file = f"{{s['root']}}/jupyterhub.pid"
c.JupyterHub.authenticator_class = "dummy"
c.Authenticator.allowed_users = set(s["users"])
c.Authenticator.admin_users = set(s["admins"])
c.JupyterHub.load_groups = s["groups"]
c.JupyterHub.spawner_class = "simple"
c.SimpleLocalProcessSpawner.home_dir_template = s["root"] + "/home/{{username}}"
c.Spawner.cmd = s["cmd"]
c.Spawner.args = s["args"]
c.Spawner.environment = s["environment"]
c.Spawner.start_timeout = 90
c.Spawner.http_timeout = 90
c.JupyterHub.services = s["services"]
c.JupyterHub.load_roles = s["roles"]
{extra}
""")
    return config


def start_hub(root: Path, *, users: list[str], admins: list[str] = (), groups: dict[str, list[str]] | None = None,
              singleuser_args: list[str] = (), environment: dict[str, str] | None = None,
              services: list[dict[str, Any]] = (), roles: list[dict[str, Any]] = (), extra: str = "",
              timeout: float = 120.0) -> Hub:
    root.mkdir(parents=True, exist_ok=True)
    port = free_port()
    config = write_config(root, port, users=list(users), admins=list(admins), groups=groups or {},
                          singleuser_args=list(singleuser_args), environment=environment or {},
                          services=list(services), roles=list(roles), extra=extra)
    log_path = root / "hub.log"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    with open(log_path, "wb") as log:
        process = subprocess.Popen([sys.executable, "-m", "jupyterhub", "-f", str(config)], cwd=root, env=env,
                                   stdout=log, stderr=subprocess.STDOUT)
    hub = Hub(root, port, process, log_path)
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"JupyterHub exited with {process.returncode}:\n{hub.log_tail()}")
        try:
            code, _ = hub.api("users", timeout=5)
            if code == 200:
                return hub
        except OSError:
            pass
        if time.monotonic() > deadline:
            hub.close()
            raise RuntimeError(f"JupyterHub did not answer in {timeout:.0f} s:\n{hub.log_tail()}")
        time.sleep(0.25)
