"""A hand-written identity provider for tests of a shared server: the user is whoever the
`X-Test-User` header names. A true edge: real deployments get identities from JupyterHub."""

from __future__ import annotations

from jupyter_server.auth.identity import IdentityProvider, User


class HeaderIdentityProvider(IdentityProvider):
    def get_user(self, handler):  # noqa: ANN001, ANN201 - jupyter_server's signature
        name = handler.request.headers.get("X-Test-User")
        return User(username=name) if name else None


class UserTokenIdentityProvider(IdentityProvider):
    """Each user signs in with their own token, as on a Hub: `Authorization: token user-<name>` is
    <name>. Any other token is jupyter-server's own login (the server's token identifies nobody)."""

    def get_user(self, handler):  # noqa: ANN001, ANN201 - jupyter_server's signature
        scheme, _, token = handler.request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() == "token" and token.startswith("user-") and len(token) > 5:
            handler._token_authenticated = True  # a token, not a cookie: no XSRF check, as for jupyter's
            return User(username=token[5:])
        return super().get_user(handler)
