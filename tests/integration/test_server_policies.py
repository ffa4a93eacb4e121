"""Server-level rules: owners on a shared server, the interactive lane, retention, activity,
a database file that is not SQLite."""

from __future__ import annotations

import asyncio
import json
import os
import stat

import pytest
from test_server_runs import SMALL, all_events, call, sleepy, wait_status


def _config(tmp_path, **codefy):
    return {"ServerApp": {"jpserver_extensions": {"codefy_jupyter": True}},
            "CodefyApp": {"data_dir": str(tmp_path / "codefy"), **codefy}}


class TestSharedServer:
    @pytest.fixture
    def jp_server_config(self, tmp_path):
        config = _config(tmp_path, shared_server=True, admin_users=["boss"])
        config["ServerApp"]["identity_provider_class"] = "fake_identity.HeaderIdentityProvider"
        config["ServerApp"]["disable_check_xsrf"] = True  # header identities carry no token
        return config

    async def test_only_the_owner_or_an_admin_may_stop_or_delete(self, jp_fetch):
        async def as_user(user, *path, **kw):
            return await call(jp_fetch, *path, headers={"X-Test-User": user}, **kw)

        code, run = await as_user("alice", "api", "runs", method="POST", body={"graph": sleepy(60)})  # cancelled below
        assert code == 201 and run["owner"] == "alice"
        code, body = await as_user("bob", "api", "runs", run["id"], "cancel", method="POST")
        assert code == 403 and body["error"]["code"] == "forbidden" and body["error"]["params"]["owner"] == "alice"
        code, seen = await as_user("bob", "api", "runs", run["id"])  # everyone may read
        assert code == 200 and seen["status"] in ("queued", "running")
        code, _ = await as_user("boss", "api", "runs", run["id"], "cancel", method="POST")
        assert code == 200
        await wait_status(jp_fetch, run["id"], {"cancelled"}, headers={"X-Test-User": "alice"})
        code, _ = await as_user("bob", "api", "runs", run["id"], method="DELETE")
        assert code == 403
        code, _ = await as_user("alice", "api", "runs", run["id"], method="DELETE")
        assert code == 204


class TestSharedServerDetected:
    """No `shared_server` setting: a multi-user identity provider makes the server shared."""

    @pytest.fixture
    def jp_server_config(self, tmp_path):
        config = _config(tmp_path)
        config["ServerApp"]["identity_provider_class"] = "fake_identity.HeaderIdentityProvider"
        config["ServerApp"]["disable_check_xsrf"] = True
        return config

    async def test_another_user_may_not_stop_a_run(self, jp_fetch):
        code, run = await call(jp_fetch, "api", "runs", method="POST", body={"graph": sleepy(60)},  # cancelled below
                               headers={"X-Test-User": "alice"})
        assert code == 201
        code, body = await call(jp_fetch, "api", "runs", run["id"], "cancel", method="POST",
                                headers={"X-Test-User": "bob"})
        assert code == 403 and body["error"]["params"]["owner"] == "alice"
        code, _ = await call(jp_fetch, "api", "runs", run["id"], "cancel", method="POST",
                             headers={"X-Test-User": "alice"})
        assert code == 200


class TestLanesAndRetention:
    @pytest.fixture
    def jp_server_config(self, tmp_path):
        return _config(tmp_path, run_retention_keep_last=2)

    async def test_interactive_lane_refusals_are_immediate_503s(self, jp_fetch):
        def interactive(session):
            # Cancelled at the end: still running at every refusal, however busy the machine.
            return {"graph": sleepy(60), "options": {"lane": "interactive", "session": session}}

        code, first = await call(jp_fetch, "api", "runs", method="POST", body=interactive("s1"))
        assert code == 201 and first["lane"] == "interactive"
        code, body = await call(jp_fetch, "api", "runs", method="POST", body=interactive("s1"))
        assert code == 503 and body["error"]["code"] == "session_busy"
        code, second = await call(jp_fetch, "api", "runs", method="POST", body=interactive("s2"))
        assert code == 201
        code, body = await call(jp_fetch, "api", "runs", method="POST", body=interactive("s3"))
        assert code == 503 and body["error"]["code"] == "interactive_busy"
        code, body = await call(jp_fetch, "api", "runs", method="POST",
                                body={"graph": SMALL, "options": {"lane": "interactive"}})
        assert code == 400 and body["error"]["params"]["field"] == "options.session"
        for run in (first, second):
            await call(jp_fetch, "api", "runs", run["id"], "cancel", method="POST")
            await wait_status(jp_fetch, run["id"], {"cancelled"})

    async def test_retention_keeps_the_newest_finished_runs(self, jp_fetch):
        ids = []
        for _ in range(4):
            code, run = await call(jp_fetch, "api", "runs", method="POST", body={"graph": SMALL})
            ids.append(run["id"])
            await wait_status(jp_fetch, run["id"], {"succeeded"})
        pages = []

        async def pruned() -> bool:
            # Retention runs just after a run's final status is written.
            pages.append((await call(jp_fetch, "api", "runs"))[1])
            return pages[-1]["total"] == 2

        deadline = asyncio.get_running_loop().time() + 90
        while not await pruned():
            assert asyncio.get_running_loop().time() < deadline, pages[-1]
            await asyncio.sleep(0.02)
        assert [r["id"] for r in pages[-1]["runs"]] == ids[:1:-1]
        code, _ = await call(jp_fetch, "api", "runs", ids[0])
        assert code == 404

    async def test_activity_is_reported_while_runs_are_active(self, jp_fetch, jp_serverapp):
        app = jp_serverapp.extension_manager.extension_points["codefy"].app
        settings = jp_serverapp.web_app.settings
        code, run = await call(jp_fetch, "api", "runs", method="POST", body={"graph": sleepy(2)})
        settings["api_last_activity"] = before = settings.get("api_last_activity")
        await asyncio.sleep(0.01)
        app._report_activity()
        during = settings["api_last_activity"]
        assert during is not None and (before is None or during > before)
        await wait_status(jp_fetch, run["id"], {"succeeded"})
        polled = settings["api_last_activity"]  # (our own polling counts as API activity too)
        await asyncio.sleep(0.01)
        app._report_activity()  # the tick the queue emptied on: idle time counts from about now
        idle = settings["api_last_activity"]
        assert idle > polled
        await asyncio.sleep(0.01)
        app._report_activity()
        assert settings["api_last_activity"] == idle  # no active runs: nothing reported


class TestBrokenDatabase:
    @pytest.fixture
    def jp_server_config(self, tmp_path):
        folder = tmp_path / "codefy"
        folder.mkdir()
        (folder / "codefy.sqlite").write_bytes(b"this is not a database, keep me")
        return _config(tmp_path)

    async def test_a_file_that_is_not_sqlite_is_reported_and_left_alone(self, jp_fetch, tmp_path):
        code, body = await call(jp_fetch, "api", "runs")
        assert code == 503 and body["error"]["code"] == "store_unavailable"
        assert "codefy.sqlite" in body["error"]["message"]
        assert (tmp_path / "codefy" / "codefy.sqlite").read_bytes() == b"this is not a database, keep me"
        # Only the lock beside it, taken (and let go) before the file was read.
        assert sorted(p.name for p in (tmp_path / "codefy").iterdir()) == ["codefy.sqlite", "codefy.sqlite.lock"]


class TestPrivateFiles:
    """Inside a jupyter server as in `codefy start`: what the run queue creates is its owner's only."""

    @pytest.fixture
    def jp_server_config(self, tmp_path):
        return _config(tmp_path)

    @pytest.fixture(autouse=True)
    def _usual_umask(self):
        old = os.umask(0o022)  # which would leave all this 0644 / 0755
        yield
        os.umask(old)

    async def test_the_database_its_lock_and_run_folders(self, jp_fetch, jp_serverapp, tmp_path):
        from codefy_jupyter.engine import default_registry

        reg = default_registry()
        if reg.get("WritesAFile") is None:
            @reg.node("WritesAFile", outputs={"done": "bool"})
            def writes_a_file(ctx):
                (ctx.data_dir / "model.pt").write_bytes(b"weights")
                return {"done": True}

        code, run = await call(jp_fetch, "api", "runs", method="POST",
                               body={"graph": {"nodes": [{"id": "w", "type": "WritesAFile"}]}})
        assert code == 201, run
        await wait_status(jp_fetch, run["id"], {"succeeded"})
        data = tmp_path / "codefy"
        assert stat.S_IMODE(data.stat().st_mode) == 0o700
        for name in ("codefy.sqlite", "codefy.sqlite-wal", "codefy.sqlite-shm", "codefy.sqlite.lock"):
            assert stat.S_IMODE((data / name).stat().st_mode) == 0o600, name
        for folder in (data / "runs", data / "runs" / run["id"]):
            assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
        assert (data / "runs" / run["id"] / "model.pt").read_bytes() == b"weights"


async def eventually(check, timeout=60.0):
    """Retention runs just after a run's final status is written: give it a moment."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached"
        await asyncio.sleep(0.02)


class TestRetentionFiles:
    @pytest.fixture
    def jp_server_config(self, tmp_path):
        return _config(tmp_path, run_retention_keep_last=1)

    async def test_pruning_removes_run_files_but_keeps_an_interrupted_runs_checkpoints(self, jp_fetch, jp_serverapp):
        from codefy_jupyter.engine import default_registry

        reg = default_registry()
        if reg.get("WritesFiles") is None:
            @reg.node("WritesFiles", outputs={"done": "bool"})
            def writes_files(ctx):
                (ctx.data_dir / "checkpoints").mkdir(parents=True, exist_ok=True)
                (ctx.data_dir / "checkpoints" / "epoch1.pt").write_bytes(b"ckpt")
                (ctx.data_dir / "log.txt").write_text("log")
                return {"done": True}

        app = jp_serverapp.extension_manager.extension_points["codefy"].app
        runs_dir = app.codefy_settings.resolved_data_dir() / "runs"
        graph = {"nodes": [{"id": "w", "type": "WritesFiles"}]}
        code, first = await call(jp_fetch, "api", "runs", method="POST", body={"graph": graph})
        await wait_status(jp_fetch, first["id"], {"succeeded"})
        assert (runs_dir / first["id"] / "checkpoints" / "epoch1.pt").exists()
        # An interrupted run with a checkpoint (as a restart leaves one), then pruned.
        code, second = await call(jp_fetch, "api", "runs", method="POST", body={"graph": graph})
        await wait_status(jp_fetch, second["id"], {"succeeded"})
        await eventually(lambda: not (runs_dir / first["id"]).exists())  # pruned: its files went too
        await app.store.update_run(second["id"], status="interrupted")
        code, third = await call(jp_fetch, "api", "runs", method="POST", body={"graph": graph})
        await wait_status(jp_fetch, third["id"], {"succeeded"})
        await eventually(lambda: not (runs_dir / second["id"] / "log.txt").exists())
        assert (runs_dir / second["id"] / "checkpoints" / "epoch1.pt").read_bytes() == b"ckpt"


class TestSessionsAndDelete:
    """Seed audit gaps (docs/seed-audit.md): an editor session's runs reuse its cache through the
    control plane, and Delete keeps a run's checkpoint files on disk."""

    @pytest.fixture
    def jp_server_config(self, tmp_path):
        return _config(tmp_path)

    async def test_a_sessions_second_run_reuses_the_first_runs_nodes_and_another_session_does_not(self, jp_fetch):
        async def counts(options):
            code, run = await call(jp_fetch, "api", "runs", method="POST", body={"graph": SMALL, "options": options})
            assert code == 201, run
            await wait_status(jp_fetch, run["id"], {"succeeded"})
            events = await all_events(jp_fetch, run["id"])
            done = [e["payload"] for e in events if e["type"] == "execution_complete"]
            assert len(done) == 1, events
            said = [e["payload"]["nodes"] for e in events if e["type"] == "execution_cached"]
            # The log names the cached nodes once (a run with nothing cached says nothing).
            assert [len(nodes) for nodes in said] == ([done[0]["cached"]] if done[0]["cached"] else []), events
            return done[0]["executed"], done[0]["cached"]

        mine = {"lane": "interactive", "session": "doc-cache"}
        assert await counts(mine) == (2, 0)
        executed, cached = await counts(mine)
        assert executed == 0 and cached >= 1  # clicking Run twice: nothing runs again, all from the cache
        assert await counts({"lane": "interactive", "session": "doc-other"}) == (2, 0)
        assert await counts({}) == (2, 0)  # a queued run lends no session's cache

    async def test_delete_removes_the_run_but_keeps_its_checkpoint_files(self, jp_fetch, jp_serverapp):
        from codefy_jupyter.engine import default_registry

        reg = default_registry()
        if reg.get("WritesCheckpoint") is None:
            @reg.node("WritesCheckpoint", outputs={"done": "bool"})
            def writes_checkpoint(ctx):
                (ctx.data_dir / "checkpoints").mkdir(parents=True, exist_ok=True)
                (ctx.data_dir / "checkpoints" / "epoch1.pt").write_bytes(b"ckpt")
                return {"done": True}

        app = jp_serverapp.extension_manager.extension_points["codefy"].app
        runs_dir = app.codefy_settings.resolved_data_dir() / "runs"
        code, run = await call(jp_fetch, "api", "runs", method="POST",
                               body={"graph": {"nodes": [{"id": "w", "type": "WritesCheckpoint"}]}})
        assert code == 201, run
        await wait_status(jp_fetch, run["id"], {"succeeded"})
        code, _ = await call(jp_fetch, "api", "runs", run["id"], method="DELETE")
        assert code in (200, 204)
        code, _ = await call(jp_fetch, "api", "runs", run["id"])
        assert code == 404
        assert (runs_dir / run["id"] / "checkpoints" / "epoch1.pt").read_bytes() == b"ckpt"


class TestSessionCacheModes:
    """session_cache_min_available_mb (seed: dynamic scheduling, RAM pressure): above 0 an editor
    session's cache keeps outputs until available memory falls under the threshold, then frees them
    at node boundaries. A 1 MB floor is never reached here; a 1 PB floor always is."""

    @pytest.fixture(params=[1, 10**9], ids=["floor-1MB", "floor-1PB"])
    def jp_server_config(self, tmp_path, request):
        return _config(tmp_path, session_cache_min_available_mb=request.param)

    async def test_a_session_reuses_its_outputs_until_memory_runs_short(self, jp_fetch, jp_server_config):
        floor = jp_server_config["CodefyApp"]["session_cache_min_available_mb"]
        done = []
        for _ in range(2):
            code, run = await call(jp_fetch, "api", "runs", method="POST",
                                   body={"graph": SMALL, "options": {"lane": "interactive", "session": "doc"}})
            assert code == 201, run
            await wait_status(jp_fetch, run["id"], {"succeeded"})
            events = await all_events(jp_fetch, run["id"])
            done.append(next(e["payload"] for e in events if e["type"] == "execution_complete"))
        assert (done[0]["executed"], done[0]["cached"]) == (2, 0)
        if floor == 1:  # memory never short: Run twice reuses everything, as the LRU does
            assert done[1]["executed"] == 0 and done[1]["cached"] >= 1
        else:  # always short: every node boundary freed what the session kept
            assert (done[1]["executed"], done[1]["cached"]) == (2, 0)
