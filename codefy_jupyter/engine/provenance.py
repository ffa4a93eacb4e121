"""Provenance of a run's inputs: which file versions (datasets, model weights) a run read.

A node calls `ctx.record_input(path, kind=...)` after it has read a file; when the run was queued
with provenance on, the run keeps one record per call with the file's content identity (sha256).

Hashing a multi-gigabyte checkpoint on every run would cost more than the read itself, so each
file version is hashed once per process: the digest is kept under (resolved path, size, mtime_ns),
which changes whenever the file is rewritten in place or replaced.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

KINDS = ("dataset", "model")
_CHUNK = 1 << 20
_CACHE_MAX = 1024

_lock = threading.Lock()
_digests: OrderedDict[tuple[str, int, int], str] = OrderedDict()


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def file_identity(path: str | os.PathLike[str]) -> dict[str, Any]:
    """{"path", "sha256", "size"} of the file as it is now; the digest comes from the cache while
    the file's size and mtime are unchanged."""
    file = Path(path).expanduser().resolve()
    stat = file.stat()
    key = (str(file), stat.st_size, stat.st_mtime_ns)
    with _lock:
        digest = _digests.get(key)
        if digest is not None:
            _digests.move_to_end(key)
    if digest is None:
        # Hashed outside the lock: another node's small file should not wait behind a large one.
        digest = _sha256_file(file)
        with _lock:
            _digests[key] = digest
            while len(_digests) > _CACHE_MAX:
                _digests.popitem(last=False)
    return {"path": str(file), "sha256": digest, "size": stat.st_size}


def input_record(node_id: str, path: str | os.PathLike[str], *, kind: str, revision: str | None = None,
                 rows: int | None = None) -> dict[str, Any]:
    """One provenance record; bad arguments raise ValueError naming the argument (a node author's bug)."""
    if kind not in KINDS:
        raise ValueError(f"record_input: 'kind' must be one of {list(KINDS)}, got {kind!r}")
    if revision is not None and not isinstance(revision, str):
        raise ValueError(f"record_input: 'revision' must be a string or None, got {type(revision).__name__}")
    if rows is not None and (type(rows) is not int or rows < 0):
        raise ValueError(f"record_input: 'rows' must be a non-negative integer or None, got {rows!r}")
    return {"node_id": node_id, "kind": kind, **file_identity(path), "revision": revision, "rows": rows}


def clear_cache() -> None:
    """Forget every cached digest (tests)."""
    with _lock:
        _digests.clear()
