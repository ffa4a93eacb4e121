"""Is this server used by several people, and who among them is an admin? Decides who may stop or
delete whose runs and manage whose workers.

`c.CodefyApp.shared_server` left unset means "detect": a JupyterHub single-user server
(JupyterHub sets `JUPYTERHUB_USER`) can be opened by other hub users through sharing or admin
access, and an identity provider other than jupyter-server's own token/password ones can
authenticate several people; so is `codefy start` run as a JupyterHub service (the team's queue,
owned by no one). On a hub server its owner is an admin of the queue implicitly, and so
is every Hub admin and every member of `admin_groups` (read from the Hub's model of the user who
made the request, which JupyterHub's single-user server keeps on the request's user).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

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
    admin_groups: frozenset[str] = frozenset()

    def is_admin(self, username: str | None, hub_user: Mapping[str, Any] | None = None) -> bool:
        """`hub_user`: JupyterHub's model of the requester (`name`, `admin`, `groups`), None off a Hub.
        The Hub's own admin flag counts: a Hub admin can open, stop and delete the server anyway."""
        if not self.shared or username in self.admins:
            return True
        if not username or not hub_user or hub_user.get("name") != username:
            return False
        groups = hub_user.get("groups") or ()
        return hub_user.get("admin") is True or not self.admin_groups.isdisjoint(
            g for g in groups if isinstance(g, str))


def decide_sharing(configured: bool | None, admin_users: list[str] | tuple[str, ...],
                   env: Mapping[str, str], identity_provider: str,
                   admin_groups: list[str] | tuple[str, ...] = ()) -> Sharing:
    """`configured` is the trait (None = detect); `identity_provider` the provider's dotted class name."""
    admins = set(admin_users)
    groups = frozenset(admin_groups)
    hub_user = env.get("JUPYTERHUB_USER") or None
    if hub_user:
        admins.add(hub_user)
    if configured is not None:
        return Sharing(configured, "set by c.CodefyApp.shared_server", frozenset(admins), groups)
    if hub_user:
        return Sharing(True, f"JupyterHub single-user server of {hub_user!r}", frozenset(admins), groups)
    service = env.get("JUPYTERHUB_SERVICE_NAME") or None
    if service and identity_provider not in SINGLE_PERSON_PROVIDERS:
        # The team's queue: every Hub user with access is a person of their own; no one owns it.
        return Sharing(True, f"JupyterHub service {service!r}", frozenset(admins), groups)
    if identity_provider not in SINGLE_PERSON_PROVIDERS:
        return Sharing(True, f"multi-user identity provider {identity_provider}", frozenset(admins), groups)
    return Sharing(False, "one person's server (token or password login)", frozenset(admins), groups)
