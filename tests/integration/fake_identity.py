"""A hand-written identity provider for tests of a shared server: the user is whoever the
`X-Test-User` header names. A true edge: real deployments get identities from JupyterHub."""

from __future__ import annotations

from jupyter_server.auth.identity import IdentityProvider, User


class HeaderIdentityProvider(IdentityProvider):
    def get_user(self, handler):  # noqa: ANN001, ANN201 - jupyter_server's signature
        name = handler.request.headers.get("X-Test-User")
        return User(username=name) if name else None
