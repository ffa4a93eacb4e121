"""Who may manage a worker: the pure rule (every asker × every kind of worker × every action), and
who enrolled a worker as the store records it (new enrollment, re-issue, and workers enrolled
before the column existed, which migration 3 fills in), on SQLite and on PostgreSQL (`store_at`)."""

from __future__ import annotations

import contextlib
import sqlite3

import pytest
from pg_server import connect_raw

from codefy_jupyter.core.errors import Forbidden
from codefy_jupyter.core.store.migrations import SCHEMA_STEPS, migrate as sqlite_migrate
from codefy_jupyter.core.store.postgres import migrate as pg_migrate
from codefy_jupyter.core.store.database import Store
from codefy_jupyter.core.workers.access import ACTIONS, check_issue, check_manage, may_manage
from codefy_jupyter.core.workers.enrollment import Enrollment, RateLimiter
from codefy_jupyter.core.workers.registry import WorkerRegistry

# asker -> (user, admin). "anonymous": a shared token on a shared server (no name, not an admin).
ASKERS = {"admin": ("boss", True), "owner": ("alice", False), "other": ("bob", False),
          "anonymous": (None, False), "single-user": (None, True)}
# worker kind -> enrolled_by
WORKERS = {"alice's": "alice", "the admin's": "boss", "the server token's": None}

ALLOWED = {
    ("admin", "alice's"), ("admin", "the admin's"), ("admin", "the server token's"),
    ("single-user", "alice's"), ("single-user", "the admin's"), ("single-user", "the server token's"),
    ("owner", "alice's"),
}


@pytest.mark.parametrize("asker", ASKERS)
@pytest.mark.parametrize("kind", WORKERS)
@pytest.mark.parametrize("action", ACTIONS)
def test_admins_manage_every_worker_and_users_only_their_own(asker, kind, action):
    user, admin = ASKERS[asker]
    enrolled_by = WORKERS[kind]
    expected = (asker, kind) in ALLOWED
    assert may_manage(enrolled_by, user=user, admin=admin) is expected
    if expected:
        check_manage("gpu-box", enrolled_by, user=user, admin=admin, action=action)
        return
    with pytest.raises(Forbidden) as info:
        check_manage("gpu-box", enrolled_by, user=user, admin=admin, action=action)
    err = info.value
    assert err.status == 403 and err.code == "not_worker_owner"
    assert err.params == {"worker": "gpu-box", "enrolled_by": enrolled_by, "action": action}
    assert "gpu-box" in str(err) and ACTIONS[action] in str(err)
    assert (enrolled_by or "admins only") in str(err)


def test_a_worker_enrolled_by_nobody_is_never_managed_by_a_nameless_user():
    # A None owner must not match a None user: a shared token would otherwise own the server's workers.
    assert not may_manage(None, user=None, admin=False)


@pytest.mark.parametrize("asker", ASKERS)
def test_fresh_tokens_need_a_name_or_admin(asker):
    user, admin = ASKERS[asker]
    if asker == "anonymous":
        with pytest.raises(Forbidden) as info:
            check_issue(user=user, admin=admin)
        assert info.value.code == "enrollment_needs_user"
    else:
        check_issue(user=user, admin=admin)


@contextlib.asynccontextmanager
async def opened(store_at):
    store = await Store.open(store_at("db.sqlite"))
    try:
        yield Enrollment(store, limiter=RateLimiter(limit=1000)), store
    finally:
        await store.close()


async def test_the_issuer_of_the_token_is_who_enrolled_the_worker_and_a_reissue_keeps_it(store_at):
    async with opened(store_at) as (enrollment, store):
        issued = await enrollment.issue(created_by="alice")
        row, token, _ = await enrollment.enroll({"token": issued.token, "name": "box"}, peer="p")
        assert row["enrolled_by"] == "alice"
        # The worker token says so too: its instances (`box.<instance>`) connect with it.
        credential = await enrollment.authenticate(token, loopback=False, server_token="srv")
        assert credential is not None and credential.enrolled_by == "alice"
        anonymous = await enrollment.issue()
        row, _, _ = await enrollment.enroll({"token": anonymous.token, "name": "local-box"}, peer="p")
        assert row["enrolled_by"] is None
        # An admin re-keys alice's worker: it stays alice's.
        reissue = await enrollment.issue(worker="box", created_by="boss", enrolled={"box", "local-box"})
        row, _, replaced = await enrollment.enroll({"token": reissue.token, "name": "box"}, peer="p")
        assert replaced is not None and row["enrolled_by"] == "alice"
        assert {w["name"]: w["enrolled_by"] for w in await store.list_workers()} == {"box": "alice",
                                                                                     "local-box": None}
        # Removed, then enrolled afresh by someone else: theirs.
        assert await store.delete_worker("box")
        bobs = await enrollment.issue(created_by="bob")
        row, _, _ = await enrollment.enroll({"token": bobs.token, "name": "box"}, peer="p")
        assert row["enrolled_by"] == "bob"

    # A restart loads who enrolled each worker (the registry is what the routes check).
    async with opened(store_at) as (_, store):
        registry = WorkerRegistry()
        registry.load_enrolled(await store.list_workers())
        assert registry.get("box").enrolled_by == "bob"
        assert registry.get("box").view()["enrolled_by"] == "bob"
        assert registry.get("local-box").enrolled_by is None


def test_migration_3_records_who_enrolled_the_workers_enrolled_before_it(store_at):
    conn = connect_raw(store_at("old.db"))
    migrate = sqlite_migrate if isinstance(conn, sqlite3.Connection) else pg_migrate
    try:
        assert migrate(conn, SCHEMA_STEPS[:2]) == 2
        conn.executemany(
            "INSERT INTO worker_enrollments (token_hash, worker_id, created_at, expires_at, created_by, used_at,"
            " used_by) VALUES (?, ?, ?, ?, ?, ?, ?)", [
                ("h1", None, 1, 99, "carol", 2, "box"),      # box: enrolled by carol, then removed
                ("h2", None, 3, 99, "alice", 4, "box"),      # box enrolled afresh by alice: the current row
                ("h3", "box", 5, 99, "boss", 6, "box"),      # a re-issue by an admin: box stays alice's
                ("h4", None, 5, 99, None, 6, "tok-box"),     # issued with the server's token
                ("h5", None, 7, 99, "dave", None, None),     # never used
            ])
        conn.executemany("INSERT INTO workers (id, name, token_hash, enrolled_at) VALUES (?, ?, ?, ?)",
                         [("box", "box", "w1", 6), ("tok-box", "tok-box", "w2", 6), ("gone", "gone", "w3", 1)])
        assert migrate(conn) == len(SCHEMA_STEPS)
        rows = dict(conn.execute("SELECT name, enrolled_by FROM workers").fetchall())
        assert rows == {"box": "alice", "tok-box": None, "gone": None}
    finally:
        conn.close()
