"""`codefy start` as a JupyterHub-managed service: the team's one queue.

The Hub starts a managed service with `JUPYTERHUB_SERVICE_NAME` and `JUPYTERHUB_API_TOKEN` set, and,
for a service with a `url`, `JUPYTERHUB_SERVICE_URL` (where to listen) and
`JUPYTERHUB_SERVICE_PREFIX` (the path the Hub's proxy routes to it, `/services/<name>/`). Such a
server authenticates people with Hub OAuth (JupyterHub's identity provider for jupyter-server: a
Hub API token, or the OAuth cookie of a browser session) and accepts those the Hub grants
`access:services!service=<name>`; worker agents keep their worker tokens.

Pure: what the environment says, and the jupyter-server configuration that follows from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping
from urllib.parse import urlsplit

IDENTITY_PROVIDER = "jupyterhub.singleuser.extension.JupyterHubIdentityProvider"


class HubServiceError(ValueError):
    """The Hub's environment names a service this server cannot be."""


@dataclass(frozen=True)
class HubService:
    name: str
    ip: str
    port: int
    base_url: str

    @property
    def access_scope(self) -> str:
        return f"access:services!service={self.name}"


def hub_service(env: Mapping[str, str]) -> HubService | None:
    """The service this process is started as, or None when no Hub started it as one. A single-user
    server (`JUPYTERHUB_USER` set) is never a service, though it is given a service URL too."""
    name = env.get("JUPYTERHUB_SERVICE_NAME") or ""
    if not name or not env.get("JUPYTERHUB_API_TOKEN") or env.get("JUPYTERHUB_USER"):
        return None
    url = env.get("JUPYTERHUB_SERVICE_URL") or ""
    if not url:
        raise HubServiceError(f"JupyterHub started service {name!r} without a url: give its "
                              "c.JupyterHub.services entry a 'url' (e.g. http://127.0.0.1:10101), where "
                              "it listens and the Hub's proxy reaches it")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise HubServiceError(f"JUPYTERHUB_SERVICE_URL={url!r}: expected an http(s) URL")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    base_url = env.get("JUPYTERHUB_SERVICE_PREFIX") or f"/services/{name}/"
    if not base_url.endswith("/"):
        base_url += "/"
    return HubService(name=name, ip=parts.hostname or "", port=port, base_url=base_url)


def server_config(service: HubService) -> dict[str, Any]:
    """`ServerApp` settings of the service (as JupyterHub's own single-user server sets them from
    the same environment): listen where the Hub said, under its prefix, and let the Hub log
    people in (its identity provider admits only holders of the service's access scope). Requests arrive through the Hub's proxy, so their Host is the Hub's and their
    scheme is in X-Forwarded-Proto."""
    return {"ip": service.ip, "port": service.port, "port_retries": 0, "base_url": service.base_url,
            "identity_provider_class": IDENTITY_PROVIDER,
            "allow_remote_access": True, "trust_xheaders": True}
