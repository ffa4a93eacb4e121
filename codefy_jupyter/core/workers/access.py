"""Who may manage a worker agent. Pure: the caller says who asks and whether they are an admin.

On a shared server (server/sharing.py) a worker is part of everyone's queue, so removing or
draining it is not a private matter: removing one fails the runs queued for it and ends the runs
on it, whoever submitted them. The rule:

- everyone may read the workers listing (it says who enrolled each, `enrolled_by`);
- admins may do everything (on a single-user server the one person is an admin);
- anyone else may issue fresh enrollment tokens for themselves (the worker enrolled with one is
  theirs: `enrolled_by` is their name), and may re-issue a token for, drain, undrain or remove only
  workers they enrolled;
- a worker nobody in particular enrolled (connected with the server's own token, or enrolled with a
  token issued without a user name) is managed by admins only.

Whose runs a worker takes is not decided here: any run may be placed on any worker, as before.
"""

from __future__ import annotations

from ..errors import Forbidden

# What each action is called in a refusal ("only they or an admin may <action> it").
ACTIONS = {"remove": "remove", "drain": "drain", "undrain": "undrain", "reissue": "re-issue a token for"}


def may_manage(enrolled_by: str | None, *, user: str | None, admin: bool) -> bool:
    return admin or (enrolled_by is not None and user is not None and enrolled_by == user)


def check_manage(worker: str, enrolled_by: str | None, *, user: str | None, admin: bool, action: str) -> None:
    """Raise Forbidden (`not_worker_owner`, naming the worker) unless `user` may do `action` to it."""
    if may_manage(enrolled_by, user=user, admin=admin):
        return
    verb = ACTIONS[action]
    if enrolled_by is None:
        message = f"worker {worker} is managed by admins only; only an admin may {verb} it"
    else:
        message = f"worker {worker} was enrolled by {enrolled_by}; only they or an admin may {verb} it"
    raise Forbidden(message, code="not_worker_owner",
                    params={"worker": worker, "enrolled_by": enrolled_by, "action": action})


def check_issue(*, user: str | None, admin: bool) -> None:
    """A fresh enrollment token enrolls a worker its issuer will manage, so it needs a name to
    record: someone who is neither an admin nor named (a shared token on a shared server) gets none."""
    if admin or user is not None:
        return
    raise Forbidden("on a shared server only an admin or a signed-in user may issue enrollment tokens",
                    code="enrollment_needs_user", params={"action": "issue"})


__all__ = ["ACTIONS", "check_issue", "check_manage", "may_manage"]
