"""Worker credentials over a real store (SQLite, and PostgreSQL: `store_at`) with an injected clock: expiry, single use, re-issue,
revocation, hashes only, who a token is; the per-address rate limiter; the registry's states."""

from __future__ import annotations

import contextlib
import sqlite3

import pytest
from pg_server import connect_raw

from codefy_jupyter.core.errors import ServiceError
from codefy_jupyter.core.store.database import Store
from codefy_jupyter.core.workers.enrollment import Enrollment, RateLimiter, token_hash
from codefy_jupyter.core.workers.handshake import Accepted, CatalogDiff, Credential
from codefy_jupyter.wire.protocol import Heartbeat, Hello
from codefy_jupyter.core.workers.registry import CONNECTED, DISCONNECTED, DRAINING, OFFLINE, WorkerRegistry


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@contextlib.asynccontextmanager
async def opened(store_at):
    clock = Clock()
    store = await Store.open(store_at("db.sqlite"), clock=clock)
    try:
        yield Enrollment(store, clock=clock, limiter=RateLimiter(limit=1000, clock=clock)), clock, store
    finally:
        await store.close()


async def refused(coro) -> ServiceError:
    with pytest.raises(ServiceError) as info:
        await coro
    return info.value


async def test_a_one_time_token_expires_after_24_hours(store_at):
    async with opened(store_at) as (enrollment, clock, _):
        issued = await enrollment.issue()
        assert issued.expires_at == clock.now + 24 * 3600
        clock.now += 24 * 3600
        err = await refused(enrollment.enroll({"token": issued.token, "name": "box"}, peer="10.0.0.2"))
        assert err.status == 401 and err.code == "enrollment_expired"
        short = await enrollment.issue(expires_in_s=60)
        clock.now += 59
        row, token, replaced = await enrollment.enroll({"token": short.token, "name": "box"}, peer="10.0.0.2")
        assert row["name"] == "box" and token.startswith("cfw_") and replaced is None


async def test_single_use_rebinding_and_revocation(store_at):
    async with opened(store_at) as (enrollment, clock, store):
        first = await enrollment.issue()
        _, token, _ = await enrollment.enroll({"token": first.token, "name": "box"}, peer="p")
        err = await refused(enrollment.enroll({"token": first.token, "name": "box"}, peer="p"))
        assert err.code == "enrollment_used"
        cred = await enrollment.authenticate(token, loopback=False, server_token="srv")
        assert cred is not None and cred.kind == "worker" and cred.bound_name == "box"

        # An unbound token cannot take an enrolled name; a re-issue for the worker can, and only for it.
        other = await enrollment.issue()
        err = await refused(enrollment.enroll({"token": other.token, "name": "box"}, peer="p"))
        assert err.status == 403 and err.code == "worker_name_taken"
        reissue = await enrollment.issue(worker="box", enrolled={"box"})
        newer = await enrollment.issue(worker="box", enrolled={"box"})  # replaces the unused re-issue
        err = await refused(enrollment.enroll({"token": reissue.token, "name": "box"}, peer="p"))
        assert err.code == "enrollment_unknown"
        err = await refused(enrollment.enroll({"token": newer.token, "name": "box-2"}, peer="p"))
        assert err.code == "enrollment_bound"
        _, rekeyed, replaced = await enrollment.enroll({"token": newer.token, "name": "box"}, peer="p")
        assert replaced == token_hash(token)
        assert await enrollment.authenticate(token, loopback=True, server_token="srv") is None
        again = await enrollment.authenticate(rekeyed, loopback=False, server_token="srv")
        assert again is not None and again.identity != cred.identity
        err = await refused(enrollment.issue(worker="nobody", enrolled={"box"}))
        assert err.status == 404

        assert await store.delete_worker("box")
        assert await enrollment.authenticate(rekeyed, loopback=False, server_token="srv") is None

        # Only hashes reach the database.
        await store.close()
        conn = connect_raw(store_at("db.sqlite"))
        if isinstance(conn, sqlite3.Connection):
            dump = "\n".join(conn.iterdump())
        else:
            dump = "\n".join(repr(row) for table in ("workers", "worker_enrollments")
                             for row in conn.execute(f"SELECT * FROM {table}").fetchall())
        assert "box" in dump
        conn.close()
        for secret in (first.token, token, rekeyed, newer.token):
            assert secret not in dump


async def test_the_server_token_counts_only_from_a_loopback_peer(store_at):
    async with opened(store_at) as (enrollment, _, _):
        assert await enrollment.authenticate("srv", loopback=True, server_token="srv") == Credential("server", "server")
        assert await enrollment.authenticate("srv", loopback=False, server_token="srv") is None
        assert await enrollment.authenticate("", loopback=True, server_token="") is None
        assert await enrollment.authenticate("nope", loopback=True, server_token="srv") is None


async def test_bad_requests_name_their_field(store_at):
    async with opened(store_at) as (enrollment, _, _):
        err = await refused(enrollment.enroll({"name": "box"}, peer="p"))
        assert err.params["field"] == "token"
        err = await refused(enrollment.enroll({"token": "x", "name": "any"}, peer="p"))
        assert err.params["field"] == "name" and "reserved" in str(err)
        err = await refused(enrollment.issue(expires_in_s=0))
        assert err.params["field"] == "expires_in_s"


def test_the_rate_limiter_allows_a_window_per_address():
    clock = Clock(0.0)
    limiter = RateLimiter(limit=3, window_s=60, clock=clock)
    assert [limiter.attempt("a") for _ in range(3)] == [None, None, None]
    assert limiter.attempt("a") == 60
    assert limiter.attempt("b") is None  # another address has its own window
    clock.now = 30
    assert limiter.attempt("a") == 30
    clock.now = 60
    assert limiter.attempt("a") is None


def _hello(name: str = "box", **kw) -> Hello:
    return Hello(name=name, version="1", protocol_version=3, devices=[{"device": "cpu"}, {"device": "cuda:0"}], **kw)


def _accepted(name: str = "box") -> Accepted:
    return Accepted(name=name, capabilities=("ack",), catalog=CatalogDiff(reported=True, matches=True),
                    heartbeat_s=10.0, grace_s=30.0)


class Link:
    peer = "127.0.0.1"

    def send(self, frame):  # pragma: no cover - the registry never sends
        raise AssertionError("the registry does no I/O")

    def close(self, code, reason):  # pragma: no cover
        raise AssertionError("the registry does no I/O")


def test_registry_states_heartbeats_and_replacement():
    reg = WorkerRegistry()
    reg.load_enrolled([{"name": "box", "info": {"devices": [{"device": "cpu"}], "version": "0.9"}}])
    box = reg.get("box")
    assert box.state == OFFLINE and reg.known("box") and box.view()["version"] == "0.9"
    assert not reg.known("other")
    first, second = Link(), Link()
    worker, old = reg.register(_accepted(), _hello(), Credential("worker", "w:box"), first, now=0.0)
    assert old is None and worker.state == CONNECTED and worker.device_names == ["cpu", "cuda:0"]
    assert reg.connected_identities() == {"box": "w:box"}
    reg.heartbeat("box", Heartbeat(devices=[{"device": "cuda:0", "free_memory": 5}]), now=25.0)
    assert worker.devices[1]["free_memory"] == 5
    assert reg.silent(now=55.0) == [] and reg.silent(now=55.1) == [worker]  # three missed heartbeats
    _, old = reg.register(_accepted(), _hello(), Credential("worker", "w:box"), second, now=60.0)
    assert old is first
    assert reg.drop("box", first, reason={}) is None  # the replaced link's close changes nothing
    reg.set_draining("box", True)
    assert worker.state == DRAINING
    assert reg.drop("box", second, reason={"code": "connection_closed"}) is worker
    assert worker.state == DISCONNECTED and worker.view()["disconnect_reason"] == {"code": "connection_closed"}
    hidden = reg.placeholder("ghost")
    assert reg.get("ghost") is hidden and [w.name for w in reg.workers()] == ["box"]
