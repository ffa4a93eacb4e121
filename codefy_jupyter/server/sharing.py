"""Is this server used by several people? Decides who may stop or delete whose runs.

`c.CodefyApp.shared_server` left unset means "detect": a JupyterHub single-user server
(JupyterHub sets `JUPYTERHUB_USER`) can be opened by other hub users through sharing or admin
access, and an identity provider other than jupyter-server's own token/password ones can
authenticate several people. On a hub server its owner is an admin of the queue implicitly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

# jupyter-server's single-person identity providers: one token or password for whoever holds it.
SINGLE_PERSON_PROVIDERS = frozenset({
    "jupyter_server.auth.identity.IdentityProvider",
    "jupyter_server.auth.identity.PasswordIdentityProvider",
    "jupyter_server.auth.identity.LegacyIdentityProvider",
})


@dataclass(frozen=True)
class Sharing:
    shared: bool
    reason: str
    admins: frozenset[str]


def decide_sharing(configured: bool | None, admin_users: list[str] | tuple[str, ...],
                   env: Mapping[str, str], identity_provider: str) -> Sharing:
    """`configured` is the trait (None = detect); `identity_provider` the provider's dotted class name."""
    admins = set(admin_users)
    hub_user = env.get("JUPYTERHUB_USER") or None
    if hub_user:
        admins.add(hub_user)
    if configured is not None:
        return Sharing(configured, "set by c.CodefyApp.shared_server", frozenset(admins))
    if hub_user:
        return Sharing(True, f"JupyterHub single-user server of {hub_user!r}", frozenset(admins))
    if identity_provider not in SINGLE_PERSON_PROVIDERS:
        return Sharing(True, f"multi-user identity provider {identity_provider}", frozenset(admins))
    return Sharing(False, "one person's server (token or password login)", frozenset(admins))
