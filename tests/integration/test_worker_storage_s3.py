"""The S3 backend end to end: a real S3/STS endpoint on loopback (`moto_server` in a subprocess,
with its IAM authentication on), a real control plane (jupyter-server with the extension, real
SQLite) and real `codefy agent start` subprocesses.

Authentication: moto checks IAM only after its first INITIAL_NO_AUTH_ACTION_COUNT requests, which
the fixture spends on setting up a user for the control plane (its own keys), a role for runs
(allowed only `runs/*` and `inputs/*` of the bucket) and the bucket. From then on every request is
signed and checked against the caller's IAM policies: a run's STS credentials get what the role
allows. moto does not apply an AssumeRole *session policy* (it evaluates the role's own policies
only: moto/iam/access_control.py `AssumedRoleAccessKey.collect_policies`), nor does it expire STS
credentials, so the narrowing to one run's prefix is checked where it is decided
(tests/unit/test_storage_s3.py) and by moto's own policy evaluator on the exact policy STS received
(tests/integration/test_s3_session_policy_eval.py); here only what the endpoint truly enforces is asserted.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path
from typing import Any

import pytest

from test_server_runs import call, wait_status
from test_worker_storage_e2e import artifacts, checkpoints, edge, other_machine, submit, training, upload_csv
from test_workers_e2e import (  # noqa: F401  (fixtures)
    AgentProcess, agents, control, server_token, until_connected, worker_state,
)

boto3 = pytest.importorskip("boto3")
from botocore.config import Config  # noqa: E402
from botocore.exceptions import ClientError  # noqa: E402

pytestmark = pytest.mark.slow

BUCKET = "codefy-runs"
REGION = "us-east-1"
ROLE = "codefy-run"
# The requests `moto` serves before it checks IAM: exactly the fixture's set-up calls.
SETUP_REQUESTS = 6


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def client(service: str, url: str, key: str, secret: str, token: str | None = None) -> Any:
    return boto3.session.Session(aws_access_key_id=key, aws_secret_access_key=secret, aws_session_token=token,
                                 region_name=REGION).client(
        service, endpoint_url=url, config=Config(retries={"max_attempts": 1}, signature_version="s3v4"))


def role_policy(actions: list[str]) -> str:
    return json.dumps({"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Action": actions,
         "Resource": [f"arn:aws:s3:::{BUCKET}/runs/*", f"arn:aws:s3:::{BUCKET}/inputs/*"]}]})


class Moto:
    """moto_server on loopback with IAM on, set up: the control plane's user and keys, the runs'
    role, the bucket."""

    def __init__(self, tmp_path: Path, role_actions: list[str]) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(tmp_path / "moto.log", "wb")
        env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": str(SETUP_REQUESTS)}
        exe = Path(sys.executable).with_name("moto_server")
        self.proc = subprocess.Popen([str(exe), "-H", "127.0.0.1", "-p", str(self.port)], env=env,
                                     stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                assert self.proc.poll() is None, (tmp_path / "moto.log").read_text()
                assert time.monotonic() < deadline, "moto_server did not start"
                time.sleep(0.1)
        iam = client("iam", self.url, "setup", "setup")
        iam.create_user(UserName="control-plane")
        iam.put_user_policy(UserName="control-plane", PolicyName="all", PolicyDocument=json.dumps(
            {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}))
        key = iam.create_access_key(UserName="control-plane")["AccessKey"]
        self.key, self.secret = key["AccessKeyId"], key["SecretAccessKey"]
        self.role_arn = iam.create_role(RoleName=ROLE, AssumeRolePolicyDocument=json.dumps(
            {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": {"AWS": "*"},
                                                    "Action": "sts:AssumeRole"}]}))["Role"]["Arn"]
        iam.put_role_policy(RoleName=ROLE, PolicyName="runs-and-inputs", PolicyDocument=role_policy(role_actions))
        client("s3", self.url, "setup", "setup").create_bucket(Bucket=BUCKET)

    def s3(self) -> Any:
        """The bucket with the control plane's own keys (everything allowed)."""
        return client("s3", self.url, self.key, self.secret)

    def keys(self, prefix: str = "") -> dict[str, dict[str, Any]]:
        pages = self.s3().get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
        return {o["Key"]: o for page in pages for o in page.get("Contents", ())}

    def read(self, key: str) -> bytes:
        return self.s3().get_object(Bucket=BUCKET, Key=key)["Body"].read()

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


@pytest.fixture
def moto(tmp_path, request):
    actions = getattr(request, "param", None) or ["s3:GetObject", "s3:PutObject", "s3:AbortMultipartUpload"]
    server = Moto(tmp_path, actions)
    yield server
    server.stop()


@pytest.fixture
def s3_settings() -> dict[str, Any]:
    return {}


@pytest.fixture
def jp_server_config(tmp_path, moto, s3_settings):
    codefy = {"data_dir": str(tmp_path / "codefy"), "s3_enabled": 1, "s3_bucket": BUCKET,
              "s3_endpoint_url": moto.url, "s3_region": REGION, "s3_credentials": f"{moto.key}:{moto.secret}",
              "s3_role_arn": moto.role_arn, **s3_settings}
    return {"ServerApp": {"jpserver_extensions": {"codefy_jupyter": True}}, "CodefyApp": codefy}


def saving(csv_path: str, nap_s: float = 0.0) -> dict[str, Any]:
    """The CSV + checkpoint graph, then the trained model saved (an `output` file), after a nap."""
    graph = training(csv_path)
    graph["nodes"] += [{"id": "nap", "type": "Sleep", "params": {"seconds": nap_s}},
                       {"id": "save", "type": "SaveModel", "params": {"filename": "model.pt"}}]
    graph["edges"] += [edge("train", "model", "nap", "value"), edge("nap", "value", "save", "model")]
    return graph


def run_facts(run: dict[str, Any], kind: str) -> dict[str, Any]:
    found = [f["facts"] for f in (run.get("execution_facts") or {}).get("run_facts", []) if f["kind"] == kind]
    assert found, (kind, run.get("execution_facts"))
    return found[0]


async def s3_agent(jp_fetch, agents, name: str = "cloud", **kw: Any) -> AgentProcess:
    agent = agents(name=name, env=other_machine(name), **kw)
    worker = await until_connected(jp_fetch, agent)
    assert "s3" in worker["capabilities"], worker
    return agent


async def finished(jp_fetch, run_id: str, agent: AgentProcess) -> dict[str, Any]:
    done = await wait_status(jp_fetch, run_id, {"succeeded", "failed"}, timeout=90)
    assert done["status"] == "succeeded", (done, agent.output()[-3000:])
    return done


async def test_the_csv_and_checkpoint_graph_runs_on_s3_and_its_input_is_uploaded_once(jp_fetch, agents, moto,
                                                                                      tmp_path):
    csv = upload_csv(tmp_path)
    sha = hashlib.sha256(csv.read_bytes()).hexdigest()
    agent = await s3_agent(jp_fetch, agents)
    code, run = await submit(jp_fetch, saving(str(csv)), {"worker": "cloud", "devices": ["cpu"]})
    assert code == 201, run
    done = await finished(jp_fetch, run["id"], agent)
    prefix = f"runs/{run['id']}/"
    assert done["execution_facts"]["storage"]["backend"] == "s3"
    # The control plane put the input in the bucket by its hash; the agent fetched it from there.
    assert moto.read(f"inputs/{sha}") == csv.read_bytes()
    assert done["execution_facts"]["s3_inputs_uploaded"] == 1
    fetched = run_facts(done, "transfer")
    assert fetched["backend"] == "s3" and fetched["downloaded_bytes"] == csv.stat().st_size
    # Checkpoints and the saved model went to the run's prefix, from the agent's own folder.
    rows = await artifacts(jp_fetch, run["id"])
    assert len(checkpoints(rows)) == 2
    local = agent.dir / "agent-runs" / run["id"] / "data"
    for row in rows:
        assert row["backend"] == "s3" and row["bucket"] == BUCKET, row
        assert row["path"] == f"s3://{BUCKET}/{row['key']}"
        folder = "checkpoint/" if row["kind"] == "checkpoint" else "output/"
        assert row["key"].startswith(prefix + folder), row
        relative = row["key"][len(prefix + folder):]
        on_agent = local / ("checkpoints/" + relative if row["kind"] == "checkpoint" else relative)
        assert moto.read(row["key"]) == on_agent.read_bytes()
        # The download route streams the object (the bucket is not reachable by browsers here).
        response = await jp_fetch("codefy", "api", "runs", run["id"], *row["download"].split("/"))
        assert response.code == 200 and response.body == on_agent.read_bytes()
    assert not (tmp_path / "codefy" / "runs" / run["id"]).exists()  # nothing came through the control plane
    uploaded_at = moto.keys("inputs/")[f"inputs/{sha}"]["LastModified"]

    # The same input for a second run: not uploaded again, and the agent's cache serves it.
    code, again = await submit(jp_fetch, saving(str(csv)), {"worker": "cloud", "devices": ["cpu"]})
    done = await finished(jp_fetch, again["id"], agent)
    assert done["execution_facts"]["s3_inputs_uploaded"] == 0
    assert moto.keys("inputs/")[f"inputs/{sha}"]["LastModified"] == uploaded_at
    assert run_facts(done, "transfer")["downloaded_bytes"] == 0

    # Deleting the first run removes its prefix but for output/ (the saved model outlives it).
    code, _ = await call(jp_fetch, "api", "runs", run["id"], method="DELETE")
    assert code == 204
    assert sorted(moto.keys(prefix)) == [prefix + "output/model.pt"]
    assert f"inputs/{sha}" in moto.keys("inputs/")
    # Its download route has no row any more; the other run's objects are untouched.
    response = await jp_fetch("codefy", "api", "runs", run["id"], "artifacts", "1", "download", raise_error=False)
    assert response.code == 404
    assert len([k for k in moto.keys(f"runs/{again['id']}/") if "/checkpoint/" in k]) == 2


@pytest.mark.parametrize("s3_settings", [{"s3_credentials_seconds": 2}])
async def test_a_long_run_gets_fresh_credentials_before_its_expire_and_uploads_with_them(jp_fetch, agents, moto,
                                                                                         tmp_path):
    csv = upload_csv(tmp_path)
    agent = await s3_agent(jp_fetch, agents)
    # Credentials for 2 s, refreshed every 1.33 s: a run that naps 4 s sees at least two.
    code, run = await submit(jp_fetch, saving(str(csv), nap_s=4.0), {"worker": "cloud", "devices": ["cpu"]})
    assert code == 201, run
    done = await finished(jp_fetch, run["id"], agent)
    assert done["execution_facts"]["s3_credentials_sent"] >= 2
    facts = run_facts(done, "s3")
    assert facts["credential_updates"] >= 2, agent.output()[-3000:]
    assert {k for k, _ in facts["uploaded"]} == set(moto.keys(f"runs/{run['id']}/"))
    assert "fresh S3 credentials" in agent.output()


async def test_run_credentials_reach_only_what_the_role_allows(jp_fetch, jp_serverapp, agents, moto, tmp_path):
    csv = upload_csv(tmp_path)
    sha = hashlib.sha256(csv.read_bytes()).hexdigest()
    agent = await s3_agent(jp_fetch, agents)
    code, run = await submit(jp_fetch, saving(str(csv)), {"worker": "cloud", "devices": ["cpu"]})
    await finished(jp_fetch, run["id"], agent)
    # The credentials a run gets: STS AssumeRole of the runs' role, issued by the control plane.
    service = await codefy_service(jp_serverapp)
    creds = await service.workers.s3.credentials(run["id"], [f"inputs/{sha}"])
    assert creds["session_token"] and creds["expires_at"] > time.time()
    as_run = client("s3", moto.url, creds["access_key_id"], creds["secret_access_key"], creds["session_token"])
    prefix = f"runs/{run['id']}/"
    await asyncio.to_thread(as_run.put_object, Bucket=BUCKET, Key=prefix + "output/extra.txt", Body=b"ok")
    body = await asyncio.to_thread(as_run.get_object, Bucket=BUCKET, Key=f"inputs/{sha}")
    assert body["Body"].read() == csv.read_bytes()
    # Outside runs/ and inputs/: refused by the endpoint, and nothing written.
    for key in ("elsewhere/secret.txt", "secret.txt"):
        with pytest.raises(ClientError) as refused:
            await asyncio.to_thread(as_run.put_object, Bucket=BUCKET, Key=key, Body=b"no")
        assert refused.value.response["Error"]["Code"] == "AccessDenied", refused.value.response
    assert "elsewhere/secret.txt" not in moto.keys() and "secret.txt" not in moto.keys()
    # Listing or deleting is not the role's either.
    with pytest.raises(ClientError) as refused:
        await asyncio.to_thread(as_run.list_objects_v2, Bucket=BUCKET)
    assert refused.value.response["Error"]["Code"] == "AccessDenied"
    with pytest.raises(ClientError) as refused:
        await asyncio.to_thread(as_run.delete_object, Bucket=BUCKET, Key=prefix + "output/model.pt")
    assert refused.value.response["Error"]["Code"] == "AccessDenied"
    # A forged secret is refused too.
    forged = client("s3", moto.url, creds["access_key_id"], "not-the-secret", creds["session_token"])
    with pytest.raises(ClientError):
        await asyncio.to_thread(forged.get_object, Bucket=BUCKET, Key=f"inputs/{sha}")


async def codefy_service(serverapp: Any) -> Any:
    for extension in serverapp.extension_manager.extension_apps.get("codefy_jupyter", ()):
        return await extension.ready()
    raise AssertionError("the codefy extension is not loaded")


@pytest.mark.parametrize("s3_settings", [{"run_retention_keep_last": 1}])
async def test_retention_removes_a_pruned_runs_prefix_but_keeps_its_output(jp_fetch, agents, moto, tmp_path):
    csv = upload_csv(tmp_path)
    agent = await s3_agent(jp_fetch, agents)
    code, first = await submit(jp_fetch, saving(str(csv)), {"worker": "cloud", "devices": ["cpu"]})
    await finished(jp_fetch, first["id"], agent)
    prefix = f"runs/{first['id']}/"
    assert len(moto.keys(prefix)) == 3  # two checkpoints, the model
    code, second = await submit(jp_fetch, saving(str(csv)), {"worker": "cloud", "devices": ["cpu"]})
    await finished(jp_fetch, second["id"], agent)
    deadline = time.monotonic() + 90
    while (await call(jp_fetch, "api", "runs", first["id"]))[0] != 404:
        assert time.monotonic() < deadline, "retention never pruned the first run"
        await asyncio.sleep(0.1)
    deadline = time.monotonic() + 90
    while sorted(moto.keys(prefix)) != [prefix + "output/model.pt"]:
        assert time.monotonic() < deadline, sorted(moto.keys(prefix))
        await asyncio.sleep(0.1)
    assert len(moto.keys(f"runs/{second['id']}/")) == 3


async def test_an_agent_without_boto3_gets_the_transfer_backend_with_a_warning(jp_fetch, agents, tmp_path):
    csv = upload_csv(tmp_path)
    # This agent's Python cannot import boto3 (a package of that name that refuses to load).
    shadow = tmp_path / "no-boto3"
    (shadow / "boto3").mkdir(parents=True)
    (shadow / "boto3" / "__init__.py").write_text("raise ImportError('boto3 is not installed here')\n")
    agent = agents(name="plain", env={**other_machine("plain"), "PYTHONPATH": str(shadow)})
    worker = await until_connected(jp_fetch, agent)
    assert "s3" not in worker["capabilities"] and "transfer" in worker["capabilities"], worker
    code, run = await submit(jp_fetch, saving(str(csv)), {"worker": "plain", "devices": ["cpu"]})
    done = await finished(jp_fetch, run["id"], agent)
    assert done["execution_facts"]["storage"]["backend"] == "transfer"
    code, page = await call(jp_fetch, "api", "runs", run["id"], "events")
    warnings = [e["payload"] for e in page["events"] if e["type"] == "run_warning"]
    assert [(w["code"], w["params"]) for w in warnings] == [
        ("worker_storage_fallback", {"worker": "plain", "backend": "transfer"})], warnings
    assert {r["backend"] for r in await artifacts(jp_fetch, run["id"])} == {"transfer"}


@pytest.mark.parametrize("moto", [["s3:GetObject"]], indirect=True)
async def test_an_upload_the_bucket_refuses_is_a_worker_s3_transfer_failed_warning(jp_fetch, agents, moto, tmp_path):
    csv = upload_csv(tmp_path)
    agent = await s3_agent(jp_fetch, agents)
    code, run = await submit(jp_fetch, saving(str(csv)), {"worker": "cloud", "devices": ["cpu"]})
    done = await finished(jp_fetch, run["id"], agent)  # the graph itself succeeded on the worker
    code, page = await call(jp_fetch, "api", "runs", run["id"], "events")
    warnings = [e["payload"] for e in page["events"] if e["type"] == "run_warning"]
    assert [w["code"] for w in warnings] == ["worker_s3_transfer_failed"], warnings
    assert "AccessDenied" in warnings[0]["params"]["reason"]
    assert moto.keys(f"runs/{run['id']}/") == {}
    assert done["execution_facts"]["storage"]["backend"] == "s3"


@pytest.mark.parametrize("s3_settings", [{"s3_presigned_downloads": 1}])
async def test_downloads_can_redirect_to_a_presigned_url(jp_fetch, agents, moto, tmp_path):
    csv = upload_csv(tmp_path)
    agent = await s3_agent(jp_fetch, agents)
    code, run = await submit(jp_fetch, saving(str(csv)), {"worker": "cloud", "devices": ["cpu"]})
    await finished(jp_fetch, run["id"], agent)
    row = next(r for r in await artifacts(jp_fetch, run["id"]) if r["kind"] == "model")
    response = await jp_fetch("codefy", "api", "runs", run["id"], *row["download"].split("/"),
                              follow_redirects=False, raise_error=False)
    assert response.code == 302
    location = urllib.parse.urlsplit(response.headers["Location"])
    query = urllib.parse.parse_qs(location.query)
    assert f"{location.scheme}://{location.netloc}{location.path}" == f"{moto.url}/{BUCKET}/{row['key']}"
    # Signed with the control plane's own key, valid 300 s. (moto's IAM mode cannot check a
    # query-string signature: it answers such a GET 500, KeyError 'HTTP_AUTHORIZATION', so the
    # URL is not fetched here.)
    assert query["X-Amz-Credential"][0].startswith(moto.key + "/")
    assert query["X-Amz-Expires"] == ["300"] and query["X-Amz-Signature"][0]


@pytest.mark.parametrize("s3_settings", [{"s3_bucket": "no-such-bucket"}])
async def test_inputs_the_bucket_refuses_fail_the_run_before_it_starts(jp_fetch, agents, moto, tmp_path):
    csv = upload_csv(tmp_path)
    agent = await s3_agent(jp_fetch, agents)
    code, run = await submit(jp_fetch, saving(str(csv)), {"worker": "cloud", "devices": ["cpu"]})
    assert code == 201, run
    done = await wait_status(jp_fetch, run["id"], {"succeeded", "failed"}, timeout=120)
    assert done["status"] == "failed"
    assert done["error"]["code"] == "worker_s3_transfer_failed", done["error"]
    assert "NoSuchBucket" in done["error"]["message"]
    # The agent never got it: no run folder there, nothing in the real bucket.
    assert not (agent.dir / "agent-runs" / run["id"]).exists()
    assert moto.keys() == {}


async def test_an_interrupted_runs_checkpoints_outlive_its_delete(jp_fetch, agents, moto, tmp_path):
    csv = upload_csv(tmp_path)
    agent = await s3_agent(jp_fetch, agents)
    code, run = await submit(jp_fetch, saving(str(csv), nap_s=60.0), {"worker": "cloud", "devices": ["cpu"]})
    assert code == 201, run
    # Both epochs' checkpoints are written before the nap; then the agent is stopped under it.
    deadline = time.monotonic() + 120
    while len(checkpoints(await artifacts(jp_fetch, run["id"]))) < 2:
        assert time.monotonic() < deadline, agent.output()[-3000:]
        await asyncio.sleep(0.1)
    agent.proc.terminate()
    done = await wait_status(jp_fetch, run["id"], {"interrupted", "failed", "cancelled", "succeeded"}, timeout=120)
    assert done["status"] == "interrupted", (done, agent.output()[-3000:])
    prefix = f"runs/{run['id']}/"
    kept = sorted(moto.keys(prefix))
    assert len(kept) == 2 and all(k.startswith(prefix + "checkpoint/") for k in kept), kept
    code, _ = await call(jp_fetch, "api", "runs", run["id"], method="DELETE")
    assert code == 204
    assert sorted(moto.keys(prefix)) == kept  # the resume point stays
