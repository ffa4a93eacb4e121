"""A run's S3 credentials refuse everything outside the run's prefix and its own inputs.

Why moto's policy evaluator and not a request to an S3 endpoint: the endpoint these tests can start
(moto, 5.x) records the session policy an AssumeRole call carries (`moto.sts.models.AssumedRole
.policy`) but never applies it: `moto.iam.access_control.AssumedRoleAccessKey.collect_policies`
returns the role's own policies only, and no moto setting changes that. So a request signed with
run A's credentials for run B's prefix is allowed by moto whenever the role allows it, and such a
request proves nothing. Here the control plane's real code (`S3Bucket.credentials_for`) calls STS
(moto in-process), the policy is read back from what STS recorded for the issued access key (the
exact JSON sent, not a rebuilt copy), and each access is judged by moto's own evaluator
(`IAMPolicy`, the class moto uses for the role's policies on every signed request) on both the
role's policies and the session policy, combined as AWS does for a session: an explicit deny in
either refuses, otherwise both must allow. Resources are written the way moto writes them for an
S3 request (`ActionAuthenticatorMixin._authenticate_and_authorize_s3_action`).
"""

from __future__ import annotations

import hashlib
import json
import uuid
from typing import Any

import pytest

from codefy_jupyter.core.storage.s3 import S3Bucket, S3Config
from codefy_jupyter.wire import s3_keys

pytest.importorskip("boto3")
moto = pytest.importorskip("moto")
from moto.iam.access_control import AssumedRoleAccessKey, IAMPolicy, PermissionResult  # noqa: E402
from moto.sts.models import sts_backends  # noqa: E402

BUCKET = "codefy-runs"
REGION = "us-east-1"
ACCOUNT = "123456789012"  # moto's default account

# The role a deployment gives runs: the integration tests' role (runs/* and inputs/* only), and a
# role that may do anything in S3, so that every refusal below is the session policy's own.
RUNS_AND_INPUTS = {"Version": "2012-10-17", "Statement": [
    {"Effect": "Allow", "Action": ["s3:GetObject", "s3:PutObject", "s3:AbortMultipartUpload"],
     "Resource": [f"arn:aws:s3:::{BUCKET}/runs/*", f"arn:aws:s3:::{BUCKET}/inputs/*"]}]}
ALL_OF_S3 = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}


def object_arn(key: str) -> str:
    return f"arn:aws:s3:::{BUCKET}/{key}"


def bucket_arn() -> str:
    return f"arn:aws:s3:::{BUCKET}"


def judge(policies: list[Any], action: str, resource: str, conditions: dict[str, str] | None) -> PermissionResult:
    """One set of policies the way moto judges a signed request (IAMRequestBase.check_action_permitted)."""
    result = PermissionResult.NEUTRAL
    for policy in policies:
        answer = IAMPolicy(policy).is_action_permitted(action, resource, incoming_condition_values=conditions)
        if answer == PermissionResult.DENIED:
            return answer
        if answer == PermissionResult.PERMITTED:
            result = answer
    return result


class Session:
    """What one issued set of run credentials may do: the role's policies meet the session policy."""

    def __init__(self, role_policies: list[Any], session_policy: str) -> None:
        self.role_policies = role_policies
        self.session_policy = session_policy

    def may(self, action: str, resource: str, conditions: dict[str, str] | None = None) -> bool:
        role = judge(self.role_policies, action, resource, conditions)
        session = judge([self.session_policy], action, resource, conditions)
        if PermissionResult.DENIED in (role, session):
            return False
        return role == session == PermissionResult.PERMITTED

    def role_alone_may(self, action: str, resource: str, conditions: dict[str, str] | None = None) -> bool:
        return judge(self.role_policies, action, resource, conditions) == PermissionResult.PERMITTED


@pytest.fixture
def aws(monkeypatch):
    # No credentials of the machine may leak into the in-process endpoint's requests.
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    with moto.mock_aws():
        yield


def issue(role_policy: dict[str, Any], run_id: str, input_keys: list[str]) -> tuple[Session, dict[str, Any]]:
    """Credentials for the run from the control plane's own code, and what they may do."""
    import boto3

    iam = boto3.client("iam", region_name=REGION, aws_access_key_id="setup", aws_secret_access_key="setup")
    role_arn = iam.create_role(RoleName="codefy-run", AssumeRolePolicyDocument=json.dumps(
        {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": {"AWS": "*"},
                                                "Action": "sts:AssumeRole"}]}))["Role"]["Arn"]
    iam.put_role_policy(RoleName="codefy-run", PolicyName="runs", PolicyDocument=json.dumps(role_policy))
    config = S3Config(bucket=BUCKET, endpoint_url=None, region=REGION, access_key_id="control",
                      secret_access_key="control", role_arn=role_arn, credentials_seconds=900,
                      presigned_downloads=False)
    creds = S3Bucket(config).credentials_for(run_id, input_keys)
    recorded = [r for r in sts_backends[ACCOUNT]["aws"].assumed_roles
                if r.access_key_id == creds["access_key_id"]]
    assert len(recorded) == 1 and recorded[0].role_arn == role_arn
    # moto's own view of who these credentials are: it checks the session token and finds the role.
    key = AssumedRoleAccessKey(ACCOUNT, "aws", creds["access_key_id"],
                               {"X-Amz-Security-Token": creds["session_token"]})
    return Session(key.collect_policies(), recorded[0].policy), creds


@pytest.mark.parametrize("role_policy", [RUNS_AND_INPUTS, ALL_OF_S3], ids=["runs-and-inputs-role", "all-of-s3-role"])
def test_a_runs_credentials_reach_its_prefix_and_reads_its_inputs_and_nothing_else(aws, role_policy):
    run_a, run_b = uuid.uuid4().hex[:16], uuid.uuid4().hex[:16]  # as RunService.submit makes them
    mine = s3_keys.input_key(hashlib.sha256(b"x,y\n1,2\n").hexdigest())
    theirs = s3_keys.input_key(hashlib.sha256(b"x,y\n3,4\n").hexdigest())
    session, creds = issue(role_policy, run_a, [mine])
    assert creds["session_token"]
    a, b = s3_keys.run_prefix(run_a), s3_keys.run_prefix(run_b)

    # Its own prefix: read and write (what the agent does: checkpoints, outputs, multipart aborts).
    for key in (a + "checkpoint/train-epoch1.pt", a + "output/model.pt", a + "output/deep/er/file.bin"):
        for action in ("s3:GetObject", "s3:PutObject", "s3:AbortMultipartUpload"):
            assert session.may(action, object_arn(key)), (action, key)
    # Its own input: read only (inputs are the control plane's to write).
    assert session.may("s3:GetObject", object_arn(mine))
    for action in ("s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"):
        assert not session.may(action, object_arn(mine)), action

    # Another run's prefix, and a run whose id begins with ours: nothing.
    for key in (b + "output/model.pt", b + "checkpoint/train-epoch1.pt", f"runs/{run_a[:-1]}x/output/m.pt",
                f"runs/{run_a}0/output/model.pt"):
        for action in ("s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"):
            assert not session.may(action, object_arn(key)), (action, key)
    # Another run's input, the inputs folder itself, other places in the bucket, another bucket.
    for resource in (object_arn(theirs), object_arn("inputs/"), object_arn("inputs/*"), object_arn("secret.txt"),
                     object_arn(f"elsewhere/{a}x"), f"arn:aws:s3:::other-bucket/{a}output/model.pt"):
        for action in ("s3:GetObject", "s3:PutObject", "s3:DeleteObject"):
            assert not session.may(action, resource), (action, resource)
    # Listing: the bucket is the resource and the prefix a condition; no prefix is granted, ours neither.
    for prefix in (b, "runs/", "inputs/", "", a):
        assert not session.may("s3:ListBucket", bucket_arn(), {"s3:prefix": prefix}), prefix
    # Deleting its own objects is retention's job, with the control plane's keys.
    assert not session.may("s3:DeleteObject", object_arn(a + "output/model.pt"))
    # Nor anything on the bucket or beyond S3.
    for action, resource in (("s3:DeleteBucket", bucket_arn()), ("s3:PutBucketPolicy", bucket_arn()),
                             ("iam:CreateUser", "*"), ("sts:AssumeRole", "*")):
        assert not session.may(action, resource), action


def test_the_refusals_are_the_session_policys_own_when_the_role_allows_all_of_s3(aws):
    run_a, run_b = uuid.uuid4().hex[:16], uuid.uuid4().hex[:16]
    mine = s3_keys.input_key("ab" * 32)
    session, _ = issue(ALL_OF_S3, run_a, [mine])
    b = s3_keys.run_prefix(run_b)
    refused = [("s3:GetObject", object_arn(b + "output/model.pt")), ("s3:PutObject", object_arn(b + "output/x")),
               ("s3:DeleteObject", object_arn(b + "output/model.pt")), ("s3:PutObject", object_arn(mine)),
               ("s3:GetObject", object_arn("inputs/" + "cd" * 32))]
    for action, resource in refused:
        assert session.role_alone_may(action, resource) and not session.may(action, resource), (action, resource)
    assert session.role_alone_may("s3:ListBucket", bucket_arn(), {"s3:prefix": b})
    assert not session.may("s3:ListBucket", bucket_arn(), {"s3:prefix": b})


def test_the_role_still_bounds_what_the_session_policy_names(aws):
    # A session policy can only narrow: a role that may only read leaves the run unable to write
    # even its own prefix, although the session policy names PutObject there.
    run_a = uuid.uuid4().hex[:16]
    read_only = {"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Action": ["s3:GetObject"], "Resource": [f"arn:aws:s3:::{BUCKET}/*"]}]}
    session, _ = issue(read_only, run_a, [])
    a = s3_keys.run_prefix(run_a)
    assert session.may("s3:GetObject", object_arn(a + "output/model.pt"))
    assert not session.may("s3:PutObject", object_arn(a + "output/model.pt"))
    # With no inputs the run reads none, whatever the role allows.
    assert not session.may("s3:GetObject", object_arn("inputs/" + "ab" * 32))
