"""Every setting of the control plane, declared once.

Each setting has a name (the `CodefyApp` trait: `c.CodefyApp.run_queue_max_concurrent_gpu = 1`),
an environment twin (`CODEFY_RUN_QUEUE_MAX_CONCURRENT_GPU`), a type, a default and its help text.
The server turns this table into traitlets; `Settings.load` resolves values with the environment
winning over configured values, and refuses a malformed value naming its variable.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping
from urllib.parse import urlsplit, urlunsplit

from ..wire import local_server

ENV_PREFIX = "CODEFY_"


@dataclass(frozen=True)
class Setting:
    name: str
    kind: type
    default: Any
    help: str

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.name.upper()


SETTINGS: tuple[Setting, ...] = (
    Setting("data_dir", str, "",
            "Folder for the run database and run files. Empty: the Jupyter data dir's codefy/ folder."),
    Setting("store_url", str, "",
            "Where the run database lives. Empty: the SQLite file codefy.sqlite in data_dir. "
            "`postgresql://user:password@host:port/dbname` (libpq's URL; `postgres://` too): a PostgreSQL database, "
            "through psycopg 3 (pip install 'codefy-jupyter[postgresql]'). A preview: see Outgrowing one machine."),
    Setting("lease_ttl_s", float, 4.0,
            "PostgreSQL store only: seconds after its last renewal that the leader's lease is lost, and a "
            "standby on the same database takes over (see Leader and standbys)."),
    Setting("lease_renew_s", float, 1.0,
            "PostgreSQL store only: seconds between the leader's lease renewals (and a standby's looks at "
            "the lease); at most half of lease_ttl_s."),
    Setting("leader_url", str, "",
            "PostgreSQL store only: the URL this server gives in the lease while it leads, which standbys "
            "name in their 503 `standby` answers. Empty: the server's own connection URL."),
    Setting("run_files_shared", int, 0,
            "1: this server's data dir (run files, uploads, checkpoints, recorded outputs) is on storage every "
            "control plane on the same PostgreSQL store_url reaches (a shared mount). A PostgreSQL store_url is "
            "refused at start-up unless this or s3_enabled is 1: after a takeover the new leader must reach "
            "the run files the old one wrote. Ignored on SQLite."),
    Setting("ready_wait_s", int, 10,
            "Seconds a request (REST, either socket) waits while the run queue starts, which after a restart "
            "includes recovering the previous server's runs, before it is answered 503 `recovering` with a "
            "Retry-After header. 0 answers at once."),
    Setting("run_queue_max_concurrent_gpu", int, 1, "Concurrent runs per accelerator queue (cuda:N, mps:N)."),
    Setting("run_queue_max_concurrent_cpu", int, 2, "Concurrent runs on the cpu queue."),
    Setting("run_queue_max_concurrent", str, "",
            "Per-slot overrides, e.g. 'cuda:0=2,cpu=8'. A bare device is this server's; "
            "'<worker>/<device>' is that worker's. Beats the two defaults above. Malformed entries are "
            "ignored with a warning; limits below 1 count as 1."),
    Setting("run_interactive_max_concurrent", int, 2, "Concurrent interactive runs (at most one per session)."),
    Setting("run_quota_max_running", int, 0,
            "Queued-lane runs one owner may have executing at once, on this server and its workers together. "
            "Their next run waits (reason owner_quota) without holding up other owners' runs. 0: unlimited."),
    Setting("run_quota_max_queued", int, 0,
            "Queued-lane runs one owner may have waiting at once. A submit past it is refused with 429 "
            "owner_queue_full; a sweep or study whose children would pass it is refused whole, and a study's "
            "later child waits for a place (study_waiting). Counted with the places reserved for sweeps and "
            "studies being submitted, so concurrent submits never pass it. 0: unlimited."),
    Setting("run_quota_exempt_users", str, "",
            "Comma-separated owners neither quota applies to (e.g. the team's admins)."),
    Setting("worker_resume_grace_s", int, 300,
            "Seconds a disconnected worker's runs wait for it before they end interrupted. 0 ends them at once."),
    Setting("worker_output_fetch_timeout_s", int, 60,
            "Seconds a read of a worker run's recorded outputs waits for the worker before answering 504."),
    Setting("worker_outputs_write_timeout_s", int, 300,
            "Seconds a finished record_outputs run's process on a worker has to write its outputs after it "
            "reported its end (the agent's own value counts: set it where the agent runs)."),
    Setting("run_output_store_max_mb", int, 2048,
            "Megabytes of recorded outputs kept (the newest 20 runs at most, oldest dropped first, never the "
            "run just ended): in the control plane's memory, and on each worker by its agent's own value."),
    Setting("worker_one_shot_queue_timeout_s", int, 86400,
            "Seconds a run waits for a one-shot worker (target pool 'one-shot', or naming a one-shot worker) "
            "before it fails."),
    Setting("worker_max_instances", int, 256,
            "Instances of one worker (`codefy agent start --instance`, e.g. Slurm one-shot agents sharing a "
            "token) the server holds at once, connected or disconnected with runs waiting for them. A hello "
            "past it is refused (too_many_instances); idle disconnected instances are forgotten first."),
    Setting("worker_heartbeat_s", int, 10,
            "Seconds between a worker agent's heartbeats (sent to it in welcome.heartbeat_s); a worker that "
            "misses three in a row is marked disconnected."),
    Setting("node_catalog_check_s", float, 30.0,
            "Seconds between looks at the installed node packs while the server runs: a pack installed or "
            "removed since changes the server's node catalog, and every connected worker is compared again "
            "(degraded when its catalog differs, healthy when it matches again). 0: off (the catalog is read "
            "once, at start)."),
    Setting("worker_cancel_grace_s", int, 30,
            "Seconds a stopped worker run has to end cooperatively before its agent terminates the run's "
            "process (and kills it 5 s later)."),
    Setting("run_cpu_threads", int, 0,
            "CPU threads each run may use (torch intra/inter-op, OMP_NUM_THREADS, MKL_NUM_THREADS, "
            "OPENBLAS_NUM_THREADS in a worker run's process). 0: automatic, the machine's cores divided among its "
            "cpu queue's slots (run_queue_max_concurrent_cpu, or its override), at least 1. A run's "
            "options.cpu_threads beats it; the run's execution_facts.cpu_threads says what it got."),
    Setting("system_metrics_interval_s", float, 5.0,
            "Seconds between samples of a running run's system metrics, recorded as metrics of the run: "
            "system/cpu_percent and system/rss_bytes of its process (for a run in the control plane, the "
            "control plane's process), and system/gpu_util_percent/<card> and system/gpu_memory_bytes/<card> "
            "through NVML for its CUDA cards. 0: off. A worker agent reads the same variable from its own "
            "environment (or `codefy agent start --system-metrics-interval`) for the runs it executes."),
    Setting("max_parallel_nodes", int, 4, "Nodes executing concurrently inside one run (a seeded run uses 1)."),
    Setting("session_cache_min_available_mb", int, 0,
            "The execution cache each editor session (a notebook kernel, a lab document) keeps across its runs. "
            "0: its 512 most recently used node outputs. More than 0: RAM-pressure mode: it keeps every output "
            "until this machine's available memory falls under this many MB, then frees at node boundaries: "
            "other runs' outputs first, then the run's large ones, pinned memory, then the rest."),
    Setting("run_retention_keep_last", int, 200,
            "How many finished runs to keep. 0 keeps none; a negative value disables retention."),
    Setting("run_event_payload_cap_bytes", int, 131072,
            "Largest event payload stored and fanned out; an over-cap output entry is replaced by an elision "
            "marker naming its port. 0 or less disables the cap."),
    Setting("run_events_response_cap_bytes", int, 4194304,
            "Byte budget for one events page; a page that stops early hands back a cursor to resume from."),
    Setting("mount_label", str, "data", "The label of this server's data folder for workers that share it "
            "(`codefy agent start --mount data=/nas/codefy`)."),
    Setting("transfer_max_input_bytes", int, 2147483648,
            "Largest total size of a worker run's uploaded inputs that the transfer backend serves to a worker "
            "without the mount label (the agent downloads them; its outputs are uploaded back). A run over it, "
            "or reading files of the data folder that are not uploads, waits for a worker with the mount label."),
    Setting("s3_enabled", int, 0,
            "1: worker runs that the transfer backend would serve go through an S3 bucket instead when the worker's "
            "agent lists `s3` (it has boto3): inputs uploaded once to inputs/<sha256>, the run's files to "
            "runs/<run id>/. Other workers keep the transfer backend, with a worker_storage_fallback warning."),
    Setting("s3_bucket", str, "", "The bucket of the S3 backend (it must exist)."),
    Setting("s3_endpoint_url", str, "",
            "The S3 (and STS) endpoint, for an S3-compatible server; empty: AWS's own for s3_region."),
    Setting("s3_region", str, "us-east-1", "The region of the bucket and of STS."),
    Setting("s3_credentials", str, "",
            "The control plane's own keys, 'ACCESS_KEY_ID:SECRET_ACCESS_KEY'; empty: boto3's usual chain "
            "(environment, ~/.aws, instance role). Without s3_role_arn they are what agents get, too."),
    Setting("s3_role_arn", str, "",
            "A role the control plane assumes (STS AssumeRole) for each S3 run, with a session policy that allows "
            "only the run's prefix and its inputs: agents get those short-lived credentials, never the keys."),
    Setting("s3_credentials_seconds", int, 3600,
            "Lifetime asked of STS for a run's credentials (AWS accepts 900 to the role's maximum); a run gets "
            "fresh ones in a credentials frame when a third of it remains."),
    Setting("s3_presigned_downloads", int, 0,
            "1: an S3 artifact's download route redirects to a presigned URL (valid 300 s); 0: the control plane "
            "streams the object itself."),
    Setting("execution_cuda_context_mib", int, 500,
            "MiB added to a run's memory budget when admitting it to a worker card shared by memory: the CUDA "
            "context, which the run's allocator cap does not govern."),
    Setting("device_inventory", str, "",
            "A JSON file declaring this machine's devices, used instead of probing NVML/MPS (machines whose "
            "devices are declared, and tests)."),
    Setting("request_max_body_bytes", int, 16777216,
            "Largest request body a REST route reads, and largest /ws/execution message; a larger one is "
            "refused with 413 body_too_large (an error frame on the socket) before it is read."),
    Setting("max_sweep_runs", int, 32,
            "Variants in one sweep (the grid's size, or samples), and variants in one study. A larger sweep is "
            "refused, never cut short."),
    Setting("max_sweep_params", int, 4, "Entries in a sweep's params."),
    Setting("max_sweep_domain", int, 32, "Distinct values of one swept parameter, after a range is expanded."),
    Setting("service_url", str, "",
            "The team control plane's URL (a `codefy start` run as a JupyterHub service, e.g. "
            "http://127.0.0.1:10101/services/codefy/). Set: this server opens no run database and forwards its "
            "codefy/api/* and codefy/ws/* requests there, as the Hub user who made each one. Empty: its own queue."),
)

BY_NAME = {s.name: s for s in SETTINGS}


class ConfigError(ValueError):
    def __init__(self, setting: Setting, value: Any, reason: str) -> None:
        self.setting = setting
        super().__init__(f"{setting.env} (c.CodefyApp.{setting.name}) = {value!r}: {reason}")


def _coerce(setting: Setting, value: Any) -> Any:
    if setting.kind is int:
        if isinstance(value, bool):
            raise ConfigError(setting, value, "expected an integer")
        try:
            return int(str(value).strip()) if not isinstance(value, int) else value
        except ValueError:
            raise ConfigError(setting, value, "expected an integer") from None
    if setting.kind is float:
        if isinstance(value, bool):
            raise ConfigError(setting, value, "expected a number")
        try:
            number = float(str(value).strip()) if not isinstance(value, (int, float)) else float(value)
        except ValueError:
            raise ConfigError(setting, value, "expected a number") from None
        if number != number or number in (float("inf"), float("-inf")):
            raise ConfigError(setting, value, "expected a finite number")
        return number
    return str(value)


STORE_URL_SCHEMES = ("postgresql", "postgres")


def check_store_url(setting: Setting, url: str) -> None:
    """Refuse a store_url this code cannot open, naming the setting (and never its password)."""
    if not url.strip():
        return
    shown = redact_url(url)
    try:
        parts = urlsplit(url.strip())
        parts.port  # noqa: B018 -- raises ValueError on a port that is not a number
    except ValueError as exc:
        raise ConfigError(setting, shown, f"not a URL ({exc})") from None
    if parts.scheme.lower() not in STORE_URL_SCHEMES:
        raise ConfigError(setting, shown, "expected empty (the SQLite file in data_dir) or a postgresql:// URL, "
                                          f"not scheme {parts.scheme or '(none)'!r}")
    if not parts.hostname and "host=" not in parts.query:
        raise ConfigError(setting, shown, "a postgresql:// URL needs a host (postgresql://user@host:5432/dbname)")


def redact_url(url: str) -> str:
    """`url` with its password replaced by ***, for logs and errors."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        netloc = parts.netloc.rsplit("@", 1)
        user = netloc[0].split(":", 1)[0]
        return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc[1]}"))
    except ValueError:
        return "(unparsable URL)"


@dataclass(frozen=True)
class Settings:
    data_dir: str = ""
    store_url: str = ""
    lease_ttl_s: float = 4.0
    lease_renew_s: float = 1.0
    leader_url: str = ""
    run_files_shared: int = 0
    ready_wait_s: int = 10
    run_queue_max_concurrent_gpu: int = 1
    run_queue_max_concurrent_cpu: int = 2
    run_queue_max_concurrent: str = ""
    run_interactive_max_concurrent: int = 2
    run_quota_max_running: int = 0
    run_quota_max_queued: int = 0
    run_quota_exempt_users: str = ""
    worker_resume_grace_s: int = 300
    worker_output_fetch_timeout_s: int = 60
    worker_outputs_write_timeout_s: int = 300
    run_output_store_max_mb: int = 2048
    worker_one_shot_queue_timeout_s: int = 86400
    worker_max_instances: int = 256
    worker_heartbeat_s: int = 10
    node_catalog_check_s: float = 30.0
    worker_cancel_grace_s: int = 30
    run_cpu_threads: int = 0
    system_metrics_interval_s: float = 5.0
    max_parallel_nodes: int = 4
    session_cache_min_available_mb: int = 0
    run_retention_keep_last: int = 200
    run_event_payload_cap_bytes: int = 131072
    run_events_response_cap_bytes: int = 4194304
    mount_label: str = "data"
    transfer_max_input_bytes: int = 2147483648
    s3_enabled: int = 0
    s3_bucket: str = ""
    s3_endpoint_url: str = ""
    s3_region: str = "us-east-1"
    s3_credentials: str = ""
    s3_role_arn: str = ""
    s3_credentials_seconds: int = 3600
    s3_presigned_downloads: int = 0
    execution_cuda_context_mib: int = 500
    device_inventory: str = ""
    request_max_body_bytes: int = 16777216
    max_sweep_runs: int = 32
    max_sweep_params: int = 4
    max_sweep_domain: int = 32
    service_url: str = ""
    # Where each value came from ("default", "config", "env"), for the startup log.
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)

    @classmethod
    def load(cls, configured: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None) -> Settings:
        """Defaults, then configured values (traits), then `CODEFY_*` environment variables."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        sources: dict[str, str] = {}
        for s in SETTINGS:
            value, source = s.default, "default"
            if configured and s.name in configured and configured[s.name] is not None:
                value, source = configured[s.name], "config"
            if s.env in env:
                value, source = env[s.env], "env"
            values[s.name] = _coerce(s, value)
            if s.name == "store_url":
                check_store_url(s, values[s.name])
            sources[s.name] = source
        _check_lease(values["lease_ttl_s"], values["lease_renew_s"])
        _check_run_files_reachable(values)
        return cls(**values, sources=sources)

    def resolved_data_dir(self) -> Path:
        return local_server.data_dir(self.data_dir, env={})


def _check_lease(ttl_s: float, renew_s: float) -> None:
    """At least two renewals fit in a lease (as store/lease.py's check_timing holds it)."""
    by_name = {s.name: s for s in SETTINGS}
    if not ttl_s > 0:
        raise ConfigError(by_name["lease_ttl_s"], ttl_s, "must be positive")
    if not 0 < renew_s <= ttl_s / 2:
        raise ConfigError(by_name["lease_renew_s"], renew_s, f"must be positive and at most half of lease_ttl_s ({ttl_s})")


def _check_run_files_reachable(values: Mapping[str, Any]) -> None:
    """A PostgreSQL store is shared by replicas, and any of them may lead next: run files local to one
    replica would be out of the next leader's reach (its runs' outputs, uploads and checkpoints gone).
    Refused unless the operator says the data dir is shared, or S3 carries the run files."""
    if not values["store_url"].strip() or values["run_files_shared"] or values["s3_enabled"]:
        return
    raise ConfigError(BY_NAME["run_files_shared"], values["run_files_shared"],
                      f"a PostgreSQL store_url ({redact_url(values['store_url'])}) needs run files every control "
                      "plane on that database reaches: put data_dir on a shared mount and set "
                      "CODEFY_RUN_FILES_SHARED=1, or turn on the S3 backend (CODEFY_S3_ENABLED=1)")


def _check_table_matches_dataclass() -> None:
    names = [f.name for f in fields(Settings) if f.name != "sources"]
    if names != [s.name for s in SETTINGS]:
        raise RuntimeError("Settings fields and SETTINGS must list the same names in order")
    for s in SETTINGS:
        if getattr(Settings, s.name) != s.default:
            raise RuntimeError(f"default of {s.name} differs between Settings and SETTINGS")


_check_table_matches_dataclass()
