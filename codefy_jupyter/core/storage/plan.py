"""How a placed worker run reaches its files, and how its artifact rows are stored and read back.
Pure (seed: storage, mounts and transfer).

Backends (`placement.storage_backend` chooses one per placement):
  none      the run uses no files: the agent's own folder, plain rows
  local     a same-machine worker borrows this server's folder: the run's folder is
            `<data folder>/runs/<run id>` as for a run here; plain rows
  mount     the worker mounts the data folder at `hello.mounts[CODEFY_MOUNT_LABEL]`: inputs in the
            data folder are rewritten to the mount, the run's folder is `<mount>/runs/<run id>`;
            rows keep `backend: "mount"`, the label and the path relative to the mount
  transfer  inputs listed by SHA-256 for the agent to download, outputs uploaded by the agent into
            `<data folder>/runs/<run id>/`; rows keep `backend: "transfer"` and the path relative
            to that folder. `fallback`: S3 is on but the worker's agent does not list `s3`
  s3        what transfer would serve, through the bucket (core/storage/s3.py): `run_dir` is the
            run's key prefix, `label` the bucket; rows keep `backend: "s3"`, the bucket (in the
            label column) and the object's key
"""

from __future__ import annotations

import copy
import posixpath
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from ...wire import s3_keys
from .run_needs import FileInput, inside

NONE, LOCAL, MOUNT, TRANSFER, S3 = "none", "local", "mount", "transfer", "s3"


@dataclass(frozen=True)
class StoragePlan:
    backend: str
    run_dir: str | None = None  # the run's folder as the worker sees it (local, mount)
    label: str | None = None
    mount_root: str | None = None  # the data folder as the worker sees it (mount)
    inputs: tuple[FileInput, ...] = ()
    relative: Mapping[str, str] = field(default_factory=dict)  # input path -> path in the data folder
    fallback: bool = False  # transfer only because the worker's agent cannot do S3

    def facts(self) -> dict[str, Any]:
        """What the run's execution_facts keep of it: enough to map its artifacts after a restart."""
        return {"backend": self.backend, "run_dir": self.run_dir, "label": self.label, "mount_root": self.mount_root}

    @classmethod
    def from_facts(cls, doc: Mapping[str, Any] | None) -> StoragePlan | None:
        if not isinstance(doc, Mapping) or doc.get("backend") not in (NONE, LOCAL, MOUNT, TRANSFER, S3):
            return None
        return cls(str(doc["backend"]), run_dir=doc.get("run_dir"), label=doc.get("label"),
                   mount_root=doc.get("mount_root"))

    def assign_doc(self, hashed: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any] | None:
        """The assign's `storage` (None for `none`: an agent without it runs as before).
        `hashed`: for transfer, each input as `{node_id, param, sha256, size}`."""
        if self.backend == NONE:
            return None
        doc: dict[str, Any] = {"backend": self.backend}
        if self.run_dir is not None:
            doc["run_dir"] = self.run_dir
        if self.backend == MOUNT:
            doc["label"] = self.label
        if self.backend == TRANSFER:
            doc["inputs"] = [dict(item) for item in hashed]
        return doc

    def graph_for_worker(self, graph: dict[str, Any]) -> dict[str, Any]:
        """The graph with its data-folder inputs pointing into the mount (other backends: as is;
        transfer inputs are pointed at the agent's cache by the agent)."""
        if self.backend != MOUNT or not self.inputs:
            return graph
        out = copy.deepcopy(graph)
        by_node = {n.get("id"): n for n in out.get("nodes") or () if isinstance(n, dict)}
        for item in self.inputs:
            rel = self.relative.get(item.path)
            node = by_node.get(item.node_id)
            if rel is None or node is None or self.mount_root is None:
                continue
            node.setdefault("params", {})[item.param] = posixpath.join(self.mount_root, rel)
        return out

    def artifact_row(self, path: str) -> tuple[str | None, str | None, str]:
        """(backend, label, stored path) of an artifact the run reported at `path` (as its worker
        saw it). A path outside what the backend maps is stored as reported (a plain row)."""
        if self.backend == MOUNT and self.mount_root is not None:
            rel = inside(path, self.mount_root)
            if rel is not None:
                return MOUNT, self.label, rel
        if self.backend == TRANSFER and safe_relative(path) is not None:
            return TRANSFER, None, safe_relative(path) or path
        if self.backend == S3 and self.run_dir and path.startswith(self.run_dir) and safe_relative(path):
            return S3, self.label, path
        return None, None, path


def plan_for(backend: str, *, run_id: str, data_dir: str, label: str, mounts: Mapping[str, str],
             inputs: Sequence[FileInput] = (), relative: Mapping[str, str] | None = None) -> StoragePlan:
    if backend == LOCAL:
        return StoragePlan(LOCAL, run_dir=posixpath.join(data_dir, "runs", run_id))
    if backend == MOUNT:
        root = mounts.get(label, "")
        return StoragePlan(MOUNT, run_dir=posixpath.join(root, "runs", run_id), label=label, mount_root=root,
                           inputs=tuple(inputs), relative=dict(relative or {}))
    if backend == TRANSFER:
        return StoragePlan(TRANSFER, inputs=tuple(inputs), relative=dict(relative or {}))
    return StoragePlan(NONE)


def with_s3(plan: StoragePlan, *, run_id: str, bucket: str | None, worker_has_s3: bool) -> StoragePlan:
    """With S3 on (`bucket` given), what transfer would serve goes through the bucket when the
    worker's agent lists `s3`; otherwise it stays transfer, marked as a fallback."""
    if plan.backend != TRANSFER or bucket is None:
        return plan
    if not worker_has_s3:
        return StoragePlan(TRANSFER, inputs=plan.inputs, relative=plan.relative, fallback=True)
    return StoragePlan(S3, run_dir=s3_keys.run_prefix(run_id), label=bucket, inputs=plan.inputs,
                       relative=plan.relative)


def safe_relative(path: str) -> str | None:
    """`path` as a relative path that stays inside its folder (no absolute path, no `..`, no empty
    or dot parts, no backslash), normalised; None when it is not one."""
    if not path or "\\" in path or "\x00" in path or path.startswith("/"):
        return None
    parts = path.split("/")
    if any(p in ("", ".", "..") for p in parts):
        return None
    return "/".join(parts)


def read_view(row: Mapping[str, Any], data_dir: Path, label: str) -> dict[str, Any]:
    """An artifact row as GET runs/{id}/artifacts shows it: `path` on this server, with `backend`
    (`local`, `mount`, `transfer`, `s3`) and, for the mapped ones, the stored relative path; an S3
    row's `path` is its `s3://bucket/key` URL, with `bucket`, `key` and a `download` route."""
    out = dict(row)
    backend = out.pop("backend", None) or "local"
    mount_label = out.pop("mount_label", None)
    out["backend"] = backend
    if backend == MOUNT:
        out["mount_label"] = mount_label
        out["relative_path"] = row["path"]
        # A row of another label (the setting changed since) cannot be mapped: shown as stored.
        out["path"] = str(data_dir / row["path"]) if mount_label == label else row["path"]
    elif backend == TRANSFER:
        out["relative_path"] = row["path"]
        out["path"] = str(data_dir / "runs" / row["run_id"] / row["path"])
    elif backend == S3:
        out.update(bucket=mount_label, key=row["path"], path=f"s3://{mount_label}/{row['path']}",
                   download=f"artifacts/{row['id']}/download")
    return out
