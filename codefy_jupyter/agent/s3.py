"""The S3 backend's agent side (seed: storage, S3): a run's inputs come from the bucket into the
agent's cache (the same cache and hash checks as the transfer backend: `InputCache`), and the
files the run wrote go to the bucket under its prefix (keys: wire/s3_keys.py), before its
run_finished, from a thread, with the credentials its assign carried or the newest a
`credentials` frame brought since.

boto3 is optional (the `agent` extra): an agent lists `s3` in its hello only when it imports.
"""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path
from typing import Any, Callable

from ..wire import s3_keys
from .transfer import CHUNK, InputCache, TransferFailed, before_upload, upload_order


class S3TransferFailed(TransferFailed):
    code = "worker_s3_transfer_failed"


_available: bool | None = None


def available() -> bool:
    """Whether boto3 imports here (decides the `s3` capability; asked once)."""
    global _available
    if _available is None:
        try:
            import boto3  # noqa: F401
            _available = True
        except Exception:  # an ImportError, or a broken install: no S3 either way
            _available = False
    return _available


class S3Transfer(InputCache):
    """One run's bucket. `doc`: the assign's `storage.s3`."""

    def __init__(self, doc: dict[str, Any], cache_dir: Path) -> None:
        self.cache_dir = Path(cache_dir)
        self.bucket = str(doc.get("bucket") or "")
        self.prefix = str(doc.get("prefix") or "")
        if not self.bucket or not self.prefix.startswith("runs/"):
            raise S3TransferFailed(f"the assign's S3 storage names no bucket or run prefix: {doc!r:.200}")
        self.endpoint_url = doc.get("endpoint_url") or None
        self.region = doc.get("region") or "us-east-1"
        self._lock = threading.Lock()
        self._credentials = dict(doc.get("credentials") or {})
        self._client: Any = None
        self.updates = 0  # credentials frames applied

    def update(self, credentials: dict[str, Any]) -> None:
        """Fresh credentials (a `credentials` frame): the next request uses them."""
        with self._lock:
            self._credentials = dict(credentials)
            self._client = None
            self.updates += 1

    @property
    def access_key_id(self) -> str:
        with self._lock:
            return str(self._credentials.get("access_key_id", ""))

    def client(self) -> Any:
        with self._lock:
            if self._client is None:
                import boto3
                from botocore.config import Config

                c = self._credentials
                self._client = boto3.session.Session(
                    aws_access_key_id=c.get("access_key_id"), aws_secret_access_key=c.get("secret_access_key"),
                    aws_session_token=c.get("session_token"), region_name=self.region,
                ).client("s3", endpoint_url=self.endpoint_url,
                         config=Config(retries={"max_attempts": 3, "mode": "standard"}, signature_version="s3v4"))
            return self._client

    @staticmethod
    def _errors() -> tuple[type[BaseException], ...]:
        from boto3.exceptions import Boto3Error
        from botocore.exceptions import BotoCoreError, ClientError

        return (Boto3Error, BotoCoreError, ClientError, OSError)

    def _download(self, run_id: str, item: dict[str, Any], out: Any) -> str:
        sha = str(item["sha256"])
        key = str(item.get("key") or s3_keys.input_key(sha))
        digest = hashlib.sha256()
        try:
            body = self.client().get_object(Bucket=self.bucket, Key=key)["Body"]
            while chunk := body.read(CHUNK):
                digest.update(chunk)
                out.write(chunk)
        except self._errors() as err:
            raise S3TransferFailed(f"downloading input {sha[:12]} from s3://{self.bucket}/{key}: {err}") from err
        return digest.hexdigest()

    def key_of(self, relative: str) -> str:
        return s3_keys.object_key(self.prefix, relative)

    def upload_outputs(self, run_id: str, folder: Path, stop: Callable[[], bool] | None = None
                       ) -> list[tuple[str, int]]:
        """Every file under `folder` to its key (interrupted checkpoints last); (key, bytes) each."""
        sent = []
        for path in upload_order(folder):
            before_upload(stop)
            key = self.key_of(path.relative_to(folder).as_posix())
            size = path.stat().st_size
            try:
                self.client().upload_file(str(path), self.bucket, key)
            except self._errors() as err:
                raise S3TransferFailed(f"uploading {key} to s3://{self.bucket}: {err}") from err
            sent.append((key, size))
        return sent
