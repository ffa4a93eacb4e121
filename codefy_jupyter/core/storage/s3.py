"""The S3 backend's control-plane side (seed: storage, S3): inputs uploaded once, per-run
credentials, a run's objects removed by retention and delete, downloads of its artifacts.

Key layout and what retention keeps: wire/s3_keys.py. boto3 is imported only when S3 is enabled
(it is the `s3` extra). The `S3Bucket` methods block (boto3): callers run them in a thread.

Credentials (`credentials_for`): with `s3_role_arn`, STS AssumeRole with a session policy
(`session_policy`) that allows the run's own prefix and reading its inputs, nothing else, for
`s3_credentials_seconds`; without it, the control plane's own keys (`s3_credentials`, or boto3's
chain), which do not expire. `refresh_delay` says when a running run gets fresh ones.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from ...wire import s3_keys
from ..errors import ServiceError

log = logging.getLogger("codefy.storage")

PRESIGNED_URL_S = 300
DELETE_BATCH = 1000  # DeleteObjects takes at most this many keys


class S3Error(ServiceError):
    """The bucket refused or could not be reached (502 on a route)."""

    def __init__(self, message: str, params: dict[str, Any] | None = None) -> None:
        super().__init__(message, code="s3_unavailable", params=params or {}, status=502)


@dataclass(frozen=True)
class S3Config:
    bucket: str
    endpoint_url: str | None
    region: str
    access_key_id: str | None
    secret_access_key: str | None
    role_arn: str | None
    credentials_seconds: int
    presigned_downloads: bool

    @classmethod
    def from_settings(cls, settings: Any) -> S3Config | None:
        if not settings.s3_enabled:
            return None
        key, _, secret = settings.s3_credentials.partition(":")
        return cls(bucket=settings.s3_bucket, endpoint_url=settings.s3_endpoint_url or None,
                   region=settings.s3_region or "us-east-1", access_key_id=key or None,
                   secret_access_key=secret or None, role_arn=settings.s3_role_arn or None,
                   credentials_seconds=int(settings.s3_credentials_seconds),
                   presigned_downloads=bool(settings.s3_presigned_downloads))

    def agent_doc(self, run_id: str, credentials: Mapping[str, Any]) -> dict[str, Any]:
        """The assign's `storage.s3`."""
        doc: dict[str, Any] = {"bucket": self.bucket, "prefix": s3_keys.run_prefix(run_id), "region": self.region,
                               "credentials": dict(credentials)}
        if self.endpoint_url:
            doc["endpoint_url"] = self.endpoint_url
        return doc


# -- pure ---------------------------------------------------------------------------------------

def session_policy(bucket: str, run_id: str, input_keys: Iterable[str]) -> dict[str, Any]:
    """What a run's credentials allow: read and write its prefix, read its inputs. An STS session
    policy can only narrow the role's own permissions, never widen them."""
    arn = f"arn:aws:s3:::{bucket}/"
    statements: list[dict[str, Any]] = [
        {"Sid": "RunPrefix", "Effect": "Allow", "Action": ["s3:GetObject", "s3:PutObject", "s3:AbortMultipartUpload"],
         "Resource": [arn + s3_keys.run_prefix(run_id) + "*"]}]
    keys = sorted(set(input_keys))
    if keys:
        statements.append({"Sid": "RunInputs", "Effect": "Allow", "Action": ["s3:GetObject"],
                           "Resource": [arn + key for key in keys]})
    return {"Version": "2012-10-17", "Statement": statements}


def session_name(run_id: str) -> str:
    """STS RoleSessionName: [\\w+=,.@-]{2,64}; our run ids already are."""
    return ("codefy-" + "".join(c if c.isalnum() or c in "+=,.@-_" else "-" for c in run_id))[:64]


def refresh_delay(credentials_seconds: float) -> float:
    """Seconds after issuing a run's credentials to issue the next ones: when a third of their
    lifetime remains (a slow refresh or a short disconnect still leaves time)."""
    return max(0.5, credentials_seconds * 2 / 3)


def keys_to_delete(keys: Iterable[str], prefix: str, *, interrupted: bool) -> list[str]:
    return [k for k in keys if k.startswith(prefix) and not s3_keys.kept(prefix, k, interrupted=interrupted)]


# -- the bucket ---------------------------------------------------------------------------------

class S3Bucket:
    """The bucket through the control plane's own keys; blocking (boto3)."""

    def __init__(self, config: S3Config) -> None:
        import boto3  # the `s3` extra: only a control plane with S3 enabled needs it
        from botocore.config import Config

        self.config = config
        session = boto3.session.Session(aws_access_key_id=config.access_key_id,
                                        aws_secret_access_key=config.secret_access_key, region_name=config.region)
        retries = Config(retries={"max_attempts": 3, "mode": "standard"}, signature_version="s3v4")
        self.s3 = session.client("s3", endpoint_url=config.endpoint_url, config=retries)
        # STS judges DurationSeconds itself (AWS: 900 up to the role's maximum); botocore's own
        # check would also refuse the short lifetimes an S3-compatible server may allow.
        self.sts = session.client("sts", endpoint_url=config.endpoint_url,
                                  config=retries.merge(Config(parameter_validation=False)))
        self._own = session.get_credentials()

    def _errors(self) -> tuple[type[BaseException], ...]:
        from boto3.exceptions import Boto3Error  # upload_file's S3UploadFailedError
        from botocore.exceptions import BotoCoreError, ClientError

        return (Boto3Error, BotoCoreError, ClientError)

    def has(self, key: str) -> bool:
        from botocore.exceptions import ClientError

        try:
            self.s3.head_object(Bucket=self.config.bucket, Key=key)
            return True
        except ClientError as err:
            if err.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return False
            raise

    def ensure_input(self, sha256: str, path: str) -> bool:
        """Upload the input unless the bucket has it already; whether it was uploaded now."""
        key = s3_keys.input_key(sha256)
        if self.has(key):
            return False
        self.s3.upload_file(path, self.config.bucket, key)
        return True

    def credentials_for(self, run_id: str, input_keys: Sequence[str]) -> dict[str, Any]:
        c = self.config
        if c.role_arn:
            answer = self.sts.assume_role(
                RoleArn=c.role_arn, RoleSessionName=session_name(run_id), DurationSeconds=c.credentials_seconds,
                Policy=json.dumps(session_policy(c.bucket, run_id, input_keys)))["Credentials"]
            return {"access_key_id": answer["AccessKeyId"], "secret_access_key": answer["SecretAccessKey"],
                    "session_token": answer["SessionToken"], "expires_at": answer["Expiration"].timestamp()}
        own = self._own.get_frozen_credentials() if self._own is not None else None
        if own is None:
            raise S3Error("the control plane has no S3 credentials (setting s3_credentials)")
        doc = {"access_key_id": own.access_key, "secret_access_key": own.secret_key}
        if own.token:
            doc["session_token"] = own.token
        return doc

    def run_keys(self, run_id: str) -> list[str]:
        keys: list[str] = []
        pages = self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.config.bucket,
                                                                 Prefix=s3_keys.run_prefix(run_id))
        for page in pages:
            keys.extend(item["Key"] for item in page.get("Contents", ()))
        return keys

    def remove_run(self, run_id: str, *, interrupted: bool) -> int:
        """Delete the run's objects but those kept (wire/s3_keys.py `kept`); how many went."""
        doomed = keys_to_delete(self.run_keys(run_id), s3_keys.run_prefix(run_id), interrupted=interrupted)
        for start in range(0, len(doomed), DELETE_BATCH):
            chunk = doomed[start:start + DELETE_BATCH]
            self.s3.delete_objects(Bucket=self.config.bucket,
                                   Delete={"Objects": [{"Key": k} for k in chunk], "Quiet": True})
        return len(doomed)

    def presigned(self, key: str) -> str:
        return self.s3.generate_presigned_url("get_object", Params={"Bucket": self.config.bucket, "Key": key},
                                              ExpiresIn=PRESIGNED_URL_S)

    def open(self, key: str) -> tuple[Any, int]:
        """(the object's streaming body, its length)."""
        answer = self.s3.get_object(Bucket=self.config.bucket, Key=key)
        return answer["Body"], int(answer["ContentLength"])


class S3Storage:
    """The async face of the bucket for the worker executor and the run service."""

    def __init__(self, config: S3Config) -> None:
        self.config = config
        self._bucket: S3Bucket | None = None
        self._uploading: dict[str, asyncio.Lock] = {}

    @property
    def bucket(self) -> S3Bucket:
        if self._bucket is None:
            self._bucket = S3Bucket(self.config)
        return self._bucket

    async def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        bucket = self.bucket
        try:
            return await asyncio.to_thread(fn, *args, **kwargs)
        except bucket._errors() as err:
            raise S3Error(f"S3 bucket {self.config.bucket}: {err}", {"bucket": self.config.bucket}) from err

    async def ensure_input(self, sha256: str, path: str) -> bool:
        # One upload at a time per input: two runs starting together upload it once.
        lock = self._uploading.setdefault(sha256, asyncio.Lock())
        async with lock:
            uploaded = await self._call(self.bucket.ensure_input, sha256, path)
        if not lock.locked():
            self._uploading.pop(sha256, None)
        if uploaded:
            log.info("codefy: S3 input %s uploaded to %s", sha256[:12], self.config.bucket)
        return uploaded

    async def assign_doc(self, run_id: str, hashed: Sequence[Mapping[str, Any]],
                         paths: Sequence[str]) -> tuple[dict[str, Any], int]:
        """The assign's `storage` for an S3 run: each input in the bucket (uploaded now if it is
        not there yet) with its key, and the run's credentials; and how many inputs were
        uploaded now. S3Error when the bucket fails."""
        inputs = []
        uploaded = 0
        for item, path in zip(hashed, paths):
            uploaded += await self.ensure_input(str(item["sha256"]), path)
            inputs.append({**item, "key": s3_keys.input_key(str(item["sha256"]))})
        credentials = await self.credentials(run_id, [i["key"] for i in inputs])
        return {"backend": "s3", "inputs": inputs, "s3": self.config.agent_doc(run_id, credentials)}, uploaded

    async def credentials(self, run_id: str, input_keys: Sequence[str]) -> dict[str, Any]:
        return await self._call(self.bucket.credentials_for, run_id, list(input_keys))

    @property
    def expiring(self) -> bool:
        """Whether run credentials expire (and so need refreshing)."""
        return bool(self.config.role_arn)

    async def remove_run(self, run_id: str, *, interrupted: bool) -> int:
        return await self._call(self.bucket.remove_run, run_id, interrupted=interrupted)

    async def presigned(self, key: str) -> str:
        return await self._call(self.bucket.presigned, key)

    async def open(self, key: str) -> tuple[Any, int]:
        return await self._call(self.bucket.open, key)

    async def read(self, body: Any, size: int) -> bytes:
        return await self._call(body.read, size)


def storage_from_settings(settings: Any) -> S3Storage | None:
    config = S3Config.from_settings(settings)
    return S3Storage(config) if config is not None else None
