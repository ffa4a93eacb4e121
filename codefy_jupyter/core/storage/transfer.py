"""The transfer backend's control-plane side (seed: storage, transfer): the SHA-256 of each input a
run lists (kept in `file_hashes`, recomputed only when the file's size or mtime changed), and the
outputs an agent uploads into `<data folder>/runs/<run id>/`."""

from __future__ import annotations

import asyncio
import hashlib
import os
from pathlib import Path
from typing import Any, Sequence

from ..errors import ServiceError
from .plan import safe_relative
from .run_needs import UPLOADS, FileInput, inside, run_files

CHUNK = 1 << 20


class TransferError(ServiceError):
    """A refused download or upload (400, 401, 403, 404, 413), in the routes' one error shape."""

    def __init__(self, status: int, code: str, message: str, params: dict[str, Any] | None = None) -> None:
        super().__init__(message, code=code, params=params or {}, status=status)


def sha256_of(path: str | os.PathLike[str]) -> str:
    digest = hashlib.sha256()
    with open(path, "rb", buffering=0) as f:
        buffer = bytearray(CHUNK)
        view = memoryview(buffer)
        while n := f.readinto(buffer):
            digest.update(view[:n])
    return digest.hexdigest()


class InputHashes:
    """`sha256(path)` through the store's `file_hashes` table."""

    def __init__(self, store: Any) -> None:
        self.store = store

    async def sha256(self, path: str) -> tuple[str, int]:
        """(sha256, size) of the file now; FileNotFoundError when it is gone."""
        st = await asyncio.to_thread(os.stat, path)
        known = await self.store.file_hash(path)
        if known is not None and known[0] == st.st_size and known[1] == st.st_mtime_ns:
            return known[2], st.st_size
        sha = await asyncio.to_thread(sha256_of, path)
        await self.store.put_file_hash(path, st.st_size, st.st_mtime_ns, sha)
        return sha, st.st_size

    async def listing(self, inputs: Sequence[FileInput]) -> list[dict[str, Any]]:
        """The assign's `storage.inputs`: one entry per input param, with the file's hash and size."""
        out = []
        for item in inputs:
            sha, size = await self.sha256(item.path)
            out.append({"node_id": item.node_id, "param": item.param, "sha256": sha, "size": size,
                        "name": Path(item.path).name})
        return out


def upload_target(run_dir: Path, relative: str) -> Path:
    """Where an uploaded output goes; TransferError 400 for a path that would leave the run's folder."""
    rel = safe_relative(relative)
    if rel is None:
        raise TransferError(400, "bad_upload_path", f"path {relative!r}: expected a relative path inside the "
                            "run's folder (no '..', no leading '/')", {"field": "path"})
    target = (run_dir / rel).resolve()
    if not target.is_relative_to(run_dir.resolve()):
        raise TransferError(400, "bad_upload_path", f"path {relative!r} leaves the run's folder", {"field": "path"})
    return target


def write_upload(run_dir: Path, relative: str, body: bytes) -> Path:
    """Write one uploaded file (then rename, so a reader never sees half of it)."""
    target = upload_target(run_dir, relative)
    target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".uploading")
    with open(partial, "wb") as f:
        f.write(body)
    partial.replace(target)
    return target


def check_access(credential: Any, row: dict[str, Any] | None, run_id: str) -> None:
    """Only the agent the run was placed on moves its files: its worker token (an instance's too),
    or the server's own token from a same-machine agent. TransferError otherwise."""
    if credential is None:
        raise TransferError(401, "worker_token_required", "a worker token is required (Authorization: token ...)")
    if row is None:
        raise TransferError(404, "run_not_found", f"no run {run_id}", {"run_id": run_id})
    worker = row.get("worker_id")
    if not worker:
        raise TransferError(403, "not_a_worker_run", f"run {run_id} is not a worker run", {"run_id": run_id})
    if credential.kind == "server":
        return
    bound = credential.bound_name or ""
    if worker != bound and not worker.startswith(bound + "."):
        raise TransferError(403, "not_this_workers_run", f"run {run_id} runs on worker {worker}, not {bound}",
                            {"run_id": run_id, "worker": bound})


async def find_input(hashes: InputHashes, row: dict[str, Any], registry: Any, data_dir: Path,
                     sha256: str) -> Path:
    """The upload of the run's graph whose content has `sha256` (TransferError 404 when none)."""
    uploads = str(data_dir.resolve() / UPLOADS)
    for item in run_files(row.get("graph") or {}, registry).inputs:
        if inside(item.path, uploads) is None:
            continue
        try:
            sha, _ = await hashes.sha256(item.path)
        except OSError:
            continue
        if sha == sha256:
            return Path(item.path)
    raise TransferError(404, "input_not_found", f"run {row['id']} lists no upload with sha256 {sha256}",
                        {"run_id": row["id"], "sha256": sha256})
