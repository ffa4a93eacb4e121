"""A study's evidence outlives its children (retention prunes them; GET still returns every value
and ranking), and on a shared server only a study's owner or an admin may cancel or resume it."""

from __future__ import annotations

import asyncio

import pytest

from test_studies import call, post_study, probe, probe_spec, register_probe_node, wait_study


def _config(tmp_path, **codefy):
    return {"ServerApp": {"jpserver_extensions": {"codefy_jupyter": True}},
            "CodefyApp": {"data_dir": str(tmp_path / "codefy"), **codefy}}


class TestRetention:
    @pytest.fixture
    def jp_server_config(self, tmp_path):
        return _config(tmp_path, run_retention_keep_last=0)

    async def test_values_and_ranks_survive_the_children_being_pruned(self, jp_fetch):
        register_probe_node()
        code, study = await post_study(jp_fetch, probe_spec())
        assert code == 201, study
        done = await wait_study(jp_fetch, study["id"], {"succeeded"})
        code, page = await call(jp_fetch, "api", "runs")
        assert page["runs"] == []  # every child was pruned
        assert [r["label"] for r in done["rankings"]] == ["one", "three"]
        for variant in done["variants"]:
            assert variant["aggregate"]["count"] == 2 and variant["eligible"]
            for rep in variant["repetitions"]:
                current = rep["current"]
                assert current["objective_value"] is not None and current["final_metrics"]["score"] is not None
                assert current["fingerprint_digest"] and current["started_at"] and current["finished_at"]
                assert current["run_exists"] is False and current["run_id"]


class TestSharedServer:
    @pytest.fixture
    def jp_server_config(self, tmp_path):
        config = _config(tmp_path, shared_server=True, admin_users=["boss"])
        config["ServerApp"]["identity_provider_class"] = "fake_identity.HeaderIdentityProvider"
        config["ServerApp"]["disable_check_xsrf"] = True
        return config

    async def test_only_the_owner_or_an_admin_may_cancel_or_resume(self, jp_fetch):
        register_probe_node()

        async def as_user(user, *path, **kw):
            return await call(jp_fetch, *path, headers={"X-Test-User": user}, **kw)

        code, study = await as_user("alice", "api", "studies", method="POST",
                                    body=probe_spec(base_graph=probe(seconds=30)))
        assert code == 201 and study["owner"] == "alice"
        code, err = await as_user("bob", "api", "studies", study["id"], "cancel", method="POST")
        assert code == 403 and err["error"]["params"]["owner"] == "alice"
        code, seen = await as_user("bob", "api", "studies", study["id"])
        assert code == 200
        code, _ = await as_user("boss", "api", "studies", study["id"], "cancel", method="POST")
        assert code == 200
        deadline = asyncio.get_running_loop().time() + 30
        while (current := (await as_user("alice", "api", "studies", study["id"]))[1])["status"] != "cancelled":
            assert asyncio.get_running_loop().time() < deadline, current
            await asyncio.sleep(0.05)
        code, err = await as_user("bob", "api", "studies", study["id"], "resume", method="POST")
        assert code == 403
        code, resumed = await as_user("alice", "api", "studies", study["id"], "resume", method="POST")
        assert code == 200 and resumed["status"] == "running"
        code, _ = await as_user("alice", "api", "studies", study["id"], "cancel", method="POST")
        assert code == 200
