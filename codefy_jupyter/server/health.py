"""`GET codefy/api/health`: whether this control plane leads, is a standby, or is still recovering,
for load balancers that route to the leader. No login: a load balancer's probe carries no token,
and the answer says nothing but the role and the leader's URL (which every standby's 503 names)."""

from __future__ import annotations

from typing import Any

from jupyter_server.auth.decorator import allow_unauthenticated

from ..core.errors import Unavailable
from .handlers import CodefyAPIHandler


class HealthHandler(CodefyAPIHandler):
    async def prepare(self) -> None:
        # Not the run queue's readiness wait: a probe is answered at once, whatever the role.
        await super(CodefyAPIHandler, self).prepare()

    def check_xsrf_cookie(self) -> None:
        return None  # GET only; nothing ambient is used

    @allow_unauthenticated
    async def get(self) -> None:
        try:  # started by the first request when the server did not start it (a test's server)
            await self.extensionapp.ready()
        except Unavailable:
            pass  # told below as the role
        role, leader = self.extensionapp.health()
        if role == "leader":
            return self.send(200, {"role": role, "leader": leader})
        if role == "standby":
            where = f"; the leader is {leader}" if leader else ""
            return self.fail(Unavailable(f"this codefy server is a standby{where}", code="standby",
                                         params={"role": role, "leader": leader}))
        self.fail(Unavailable("the run queue is starting or recovering the previous leader's runs",
                              code="recovering", params={"role": role, "retry_after_s": 2}, retry_after_s=2))


def health_routes(base: str) -> list[tuple[str, type, dict[str, Any]]]:
    return [(f"{base}codefy/api/health", HealthHandler, {})]
