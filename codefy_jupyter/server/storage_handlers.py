"""The transfer backend's routes (seed: storage, transfer), used by worker agents, not people:
`GET runs/{id}/inputs/{sha256}` (an input the assign listed) and `POST runs/{id}/artifacts/upload?path=`
(one output file of the run, the raw body, written under `<data folder>/runs/<run id>/`).

Both authenticate like the worker socket (a worker token, or the server's own token from a
loopback peer), not with a person's session, and only the run's own worker is let through
(core/storage/transfer.py `check_access`). An upload streams to disk as it arrives: it is refused
with 413 from its Content-Length, or as soon as it passes CODEFY_TRANSFER_MAX_INPUT_BYTES.

And, for people, `GET runs/{id}/artifacts/{artifact id}/download`: an S3 artifact's bytes.
"""

from __future__ import annotations

import os
from typing import Any

from jupyter_server.auth.decorator import allow_unauthenticated, authorized
from tornado import web

from ..core.errors import ServiceError, StorageFull, is_storage_full
from ..core.storage.transfer import TransferError, check_access, find_input, upload_target
from .handlers import CodefyAPIHandler, api
from .request_body import CodefyHTTPError
from .worker_handlers import is_loopback

READ_CHUNK = 4 << 20


class _WorkerRoute(CodefyAPIHandler):
    resolves_ids = False  # an agent names its run whole
    def check_xsrf_cookie(self) -> None:
        return None  # no cookie is used: the worker token is in the Authorization header

    def _token(self) -> str | None:
        scheme, _, value = self.request.headers.get("Authorization", "").partition(" ")
        return value.strip() if scheme.lower() in ("token", "bearer") and value.strip() else None

    async def _authorise(self, run_id: str) -> dict[str, Any]:
        service = await self.extensionapp.ready()
        self.service = service
        credential = await service.workers.authenticate(self._token(), loopback=is_loopback(self.request.remote_ip),
                                                        server_token=self.token)
        row = await service.store.get_run(run_id)
        check_access(credential, row, run_id)
        assert row is not None
        return row


class InputHandler(_WorkerRoute):
    @allow_unauthenticated
    @api
    async def get(self, run_id: str, sha256: str) -> None:
        row = await self._authorise(run_id)
        service = self.service
        path = await find_input(service.workers.executor.hashes, row, service.registry, service.data_dir, sha256)
        self.set_header("Content-Type", "application/octet-stream")
        self.set_header("Content-Length", str(path.stat().st_size))
        with open(path, "rb") as f:
            while chunk := f.read(READ_CHUNK):
                self.write(chunk)
                await self.flush()
        self.finish()


class UploadHandler(_WorkerRoute):
    _out: Any = None

    def max_body_bytes(self) -> int:
        return int(self.extensionapp.codefy_settings.transfer_max_input_bytes)

    async def prepare(self) -> None:
        self._out, self._partial, self._target, self._written = None, None, None, 0
        length = self.request.headers.get("Content-Length", "")
        if length.strip().isdigit() and int(length) > self.max_body_bytes():
            raise _too_big(self.max_body_bytes(), int(length))
        await super().prepare()
        if self._finished or self.request.method != "POST":  # another method: tornado answers 405
            return
        try:
            await self._authorise(self.path_kwargs["run_id"])
            folder = self.service.data_dir / "runs" / self.path_kwargs["run_id"]
            self._target = upload_target(folder, self.get_argument("path", ""))
        except ServiceError as err:
            self.fail(err)
            return
        self._partial = self._target.with_name(self._target.name + f".uploading-{os.getpid()}-{id(self)}")
        try:
            self._target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            self._out = open(self._partial, "wb")
        except OSError as exc:
            self.fail(self._refused(exc))

    def data_received(self, chunk: bytes) -> None:
        if self._out is None:
            return
        self._written += len(chunk)
        limit = self.max_body_bytes()
        if self._written > limit:  # a chunked body that outgrew the cap
            self._discard()
            self.fail(_too_big(limit).error)
            return
        try:
            self._out.write(chunk)
        except OSError as exc:  # a full disk: refused now, and the part written so far removed
            self._discard()
            self.fail(self._refused(exc))

    def _discard(self) -> None:
        if self._out is not None:
            out, self._out = self._out, None
            try:
                out.close()
            except OSError:  # what was buffered could not be written either: the file goes anyway
                pass
            self._partial.unlink(missing_ok=True)

    def _refused(self, exc: OSError) -> Exception:
        """A write the disk refused: 507 storage_full (the agent's upload fails saying so) when it is
        full; anything else is a fault of this server (500)."""
        if not is_storage_full(exc):
            return exc
        folder = self.service.data_dir / "runs"
        error = StorageFull(f"the disk holding the run files ({folder}) is full ({exc}); the upload was not kept",
                            params={"path": str(folder)})
        error.__cause__ = exc
        return error

    def on_connection_close(self) -> None:
        self._discard()
        super().on_connection_close()

    @allow_unauthenticated
    @api
    async def post(self, run_id: str) -> None:
        if self._out is None:
            raise TransferError(400, "upload_refused", "the upload was refused")
        try:
            self._out.close()
            self._out = None
            self._partial.replace(self._target)
        except OSError as exc:
            self._discard()
            self._partial.unlink(missing_ok=True)
            refused = self._refused(exc)
            if refused is exc:
                raise
            raise refused from exc
        relative = self._target.relative_to((self.service.data_dir / "runs" / run_id).resolve()).as_posix()
        self.send(201, {"run_id": run_id, "path": relative, "bytes": self._written})


class ArtifactDownloadHandler(CodefyAPIHandler):
    """An S3 artifact's bytes (seed: storage, S3): streamed from the bucket, or, with
    `s3_presigned_downloads`, a redirect to a presigned URL so the bytes skip this server."""

    @web.authenticated
    @authorized
    @api
    async def get(self, run_id: str, artifact_id: str) -> None:
        s3, key = await self.service.s3_artifact(run_id, artifact_id)
        if s3.config.presigned_downloads:
            self.redirect(await s3.presigned(key), status=302)
            return
        body, size = await s3.open(key)
        try:
            self.set_header("Content-Type", "application/octet-stream")
            self.set_header("Content-Length", str(size))
            self.set_header("Content-Disposition", f'attachment; filename="{key.rsplit("/", 1)[-1]}"')
            while chunk := await s3.read(body, READ_CHUNK):
                self.write(chunk)
                await self.flush()
        finally:
            body.close()
        self.finish()


def _too_big(limit: int, size: int | None = None) -> CodefyHTTPError:
    size_text = f" ({size} bytes)" if size is not None else ""
    return CodefyHTTPError(413, f"the upload{size_text} is over the limit of {limit} bytes (setting "
                                "transfer_max_input_bytes)", code="upload_too_large",
                           params={"limit_bytes": limit, **({"size_bytes": size} if size is not None else {})})


def storage_routes(base: str) -> list[tuple[str, type, dict[str, Any]]]:
    run = r"(?P<run_id>[^/]+)"
    return [
        (f"{base}codefy/api/runs/{run}/inputs/(?P<sha256>[^/]+)", InputHandler, {}),
        (f"{base}codefy/api/runs/{run}/artifacts/upload", UploadHandler, {}),
        (f"{base}codefy/api/runs/{run}/artifacts/(?P<artifact_id>[^/]+)/download", ArtifactDownloadHandler, {}),
    ]


__all__ = ["storage_routes"]
