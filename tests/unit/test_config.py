"""Settings: defaults, configured values, environment twins winning, refusals naming the variable."""

from __future__ import annotations

import pytest

from codefy_jupyter.core.config import SETTINGS, ConfigError, Settings


def test_defaults_match_the_seed_table():
    s = Settings.load(env={})
    assert (s.run_queue_max_concurrent_gpu, s.run_queue_max_concurrent_cpu, s.run_interactive_max_concurrent) == (1, 2, 2)
    assert (s.worker_resume_grace_s, s.worker_output_fetch_timeout_s, s.max_parallel_nodes) == (300, 60, 4)
    assert (s.run_retention_keep_last, s.run_event_payload_cap_bytes, s.run_events_response_cap_bytes) == (
        200, 131072, 4194304)
    assert s.mount_label == "data" and s.run_queue_max_concurrent == ""
    assert set(s.sources.values()) == {"default"}


def test_environment_wins_over_configuration():
    s = Settings.load({"run_queue_max_concurrent_cpu": 4, "max_parallel_nodes": 8},
                      env={"CODEFY_RUN_QUEUE_MAX_CONCURRENT_CPU": "6"})
    assert s.run_queue_max_concurrent_cpu == 6 and s.sources["run_queue_max_concurrent_cpu"] == "env"
    assert s.max_parallel_nodes == 8 and s.sources["max_parallel_nodes"] == "config"


def test_a_malformed_value_names_its_variable():
    with pytest.raises(ConfigError) as info:
        Settings.load(env={"CODEFY_WORKER_RESUME_GRACE_S": "five"})
    assert "CODEFY_WORKER_RESUME_GRACE_S" in str(info.value) and "c.CodefyApp.worker_resume_grace_s" in str(info.value)


def test_every_setting_has_help_and_an_env_twin():
    for s in SETTINGS:
        assert s.help.strip() and s.env == "CODEFY_" + s.name.upper()


def test_data_dir_setting_is_used(tmp_path):
    assert Settings.load(env={"CODEFY_DATA_DIR": str(tmp_path)}).resolved_data_dir() == tmp_path


def test_store_url_defaults_to_the_sqlite_file_and_takes_a_postgresql_url():
    assert Settings.load(env={}).store_url == ""
    url = "postgresql://codefy:pw@db.example:5432/codefy?sslmode=require"
    s = Settings.load(env={"CODEFY_STORE_URL": url, "CODEFY_RUN_FILES_SHARED": "1"})
    assert s.store_url == url and s.sources["store_url"] == "env"
    configured = {"store_url": "postgres://db.example/runs", "run_files_shared": 1}
    assert Settings.load(configured, env={}).store_url == "postgres://db.example/runs"


def test_a_postgresql_store_is_refused_while_run_files_are_local_to_one_replica_naming_the_setting():
    assert Settings.load(env={}).run_files_shared == 0  # off by default; SQLite needs nothing
    with pytest.raises(ConfigError) as info:
        Settings.load(env={"CODEFY_STORE_URL": "postgresql://codefy:secret@db.example/codefy"})
    message = str(info.value)
    assert "CODEFY_RUN_FILES_SHARED (c.CodefyApp.run_files_shared) = 0" in message
    assert "CODEFY_S3_ENABLED" in message and "shared mount" in message
    assert "secret" not in message and "codefy:***@db.example" in message
    with pytest.raises(ConfigError, match="c.CodefyApp.run_files_shared"):
        Settings.load({"store_url": "postgresql://db.example/codefy", "run_files_shared": 0}, env={})


@pytest.mark.parametrize("passes", [
    {"CODEFY_RUN_FILES_SHARED": "1"},
    {"CODEFY_S3_ENABLED": "1", "CODEFY_S3_BUCKET": "runs"},
])
def test_a_postgresql_store_passes_with_shared_run_files_or_the_s3_backend(passes):
    s = Settings.load(env={"CODEFY_STORE_URL": "postgresql://db.example/codefy", **passes})
    assert s.store_url == "postgresql://db.example/codefy"
    assert (s.run_files_shared, s.s3_enabled) == ((1, 0) if "CODEFY_RUN_FILES_SHARED" in passes else (0, 1))


@pytest.mark.parametrize("url, reason", [
    ("mysql://db.example/codefy", "not scheme 'mysql'"),
    ("sqlite:///tmp/codefy.db", "not scheme 'sqlite'"),
    ("/var/lib/codefy.db", "not scheme '(none)'"),
    ("postgresql://codefy:secret@db.example:port/codefy", "not a URL"),
    ("postgresql://[::1/codefy", "not a URL"),
    ("postgresql:///codefy", "needs a host"),
])
def test_a_bad_store_url_is_refused_naming_the_setting_and_hiding_its_password(url, reason):
    with pytest.raises(ConfigError) as info:
        Settings.load(env={"CODEFY_STORE_URL": url})
    message = str(info.value)
    assert "CODEFY_STORE_URL" in message and "c.CodefyApp.store_url" in message and reason in message
    assert "secret" not in message
