"""Which runs use files, decided from node definitions alone (seed: storage, `run_needs`).

The issue names `core/run_needs.py`; DESIGN.md keeps storage work in `core/storage/`, so it lives
here. Pure: the caller gives the graph, the node registry (definitions only) and, for `classify`,
the sizes of the input files it found.

A param declares its file role in the registry (`ParamSpec.file`, engine/registry.py):
`input` (the value names a file the node reads), `output` (a file it writes into the run's folder),
`writes` (a set value makes the node write there: TrainingLoop's checkpoint_every). A relative
input names the run's own files, which are wherever the run runs, so only absolute inputs matter.

What a worker run needs (`Need.level`, best served first):
  none          no files: any worker
  transfer      every input is an upload (`<data folder>/uploads/...`) and together they are at most
                CODEFY_TRANSFER_MAX_INPUT_BYTES (outputs alone qualify too): a worker with the mount
                label, a same-machine worker, or one whose agent lists `transfer`
  mount         an input elsewhere in the data folder, or uploads over the limit: the mount label
                or the same machine
  same_machine  an input outside the data folder: only this machine has it
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any, Mapping

NONE, TRANSFER, MOUNT, SAME_MACHINE = "none", "transfer", "mount", "same_machine"
LEVELS = (NONE, TRANSFER, MOUNT, SAME_MACHINE)
UPLOADS = "uploads"


@dataclass(frozen=True)
class FileInput:
    """An absolute file a node reads: `graph.nodes[node_id].params[param]`."""

    node_id: str
    param: str
    path: str


@dataclass(frozen=True)
class RunFiles:
    """The files a graph's nodes read (absolute paths) and whether any node writes files."""

    inputs: tuple[FileInput, ...] = ()
    writes: tuple[str, ...] = ()  # node ids that write into the run's folder

    @property
    def uses_files(self) -> bool:
        return bool(self.inputs or self.writes)


@dataclass(frozen=True)
class Need:
    """`level` (see the module docstring); `why`: why transfer cannot serve it (`{code, text, params}`)."""

    level: str
    why: dict[str, Any] | None = None
    relative: Mapping[str, str] = field(default_factory=dict)  # input path -> path in the data folder


def run_files(graph: Mapping[str, Any], registry: Any) -> RunFiles:
    """The graph's file inputs and writers, from its nodes' declared param roles (top-level nodes;
    an input inside a Subgraph's JSON is not seen)."""
    inputs: list[FileInput] = []
    writes: list[str] = []
    for node in graph.get("nodes") or ():
        if not isinstance(node, Mapping):
            continue
        definition = registry.get(node.get("type"))
        if definition is None:
            continue
        params = node.get("params") or {}
        for name, spec in definition.params.items():
            role = getattr(spec, "file", None)
            if role is None:
                continue
            value = params.get(name, spec.default)
            if role == "input" and isinstance(value, str) and value and _absolute(value):
                inputs.append(FileInput(str(node.get("id")), name, value))
            elif role in ("output", "writes") and value not in (None, "", 0, False):
                writes.append(str(node.get("id")))
    return RunFiles(tuple(inputs), tuple(dict.fromkeys(writes)))


def _absolute(path: str) -> bool:
    return path.startswith(("/", "~"))


def inside(path: str, folder: str) -> str | None:
    """`path` relative to `folder` when it lies inside it (lexically, after normalising `..`), else None."""
    parts: list[str] = []
    for part in PurePosixPath(path).parts[1:]:
        if part == "..":
            if parts:
                parts.pop()
        elif part not in (".", ""):
            parts.append(part)
    base = [p for p in PurePosixPath(folder).parts[1:] if p not in (".", "")]
    if parts[:len(base)] != base or len(parts) == len(base):
        return None
    return "/".join(parts[len(base):])


def classify(files: RunFiles, data_dir: str, sizes: Mapping[str, int | None], max_input_bytes: int) -> Need:
    """The run's need level. `sizes`: each input's size in bytes (None: missing, which the run
    will report itself). `data_dir`: the control plane's data folder, resolved."""
    if not files.uses_files:
        return Need(NONE)
    relative: dict[str, str] = {}
    outside: list[str] = []
    not_uploads: list[str] = []
    for item in files.inputs:
        rel = inside(item.path, data_dir)
        if rel is None:
            outside.append(item.path)
            continue
        relative[item.path] = rel
        if not rel.startswith(UPLOADS + "/"):
            not_uploads.append(item.path)
    if outside:
        return Need(SAME_MACHINE, {"code": "outside_data_folder", "params": {"paths": outside},
                                   "text": f"it reads {', '.join(outside)}, outside the data folder {data_dir}"},
                    relative)
    if not_uploads:
        return Need(MOUNT, {"code": "not_uploads", "params": {"paths": not_uploads},
                            "text": f"it reads {', '.join(not_uploads)}, which is not an upload "
                                    f"({data_dir}/{UPLOADS}/)"}, relative)
    total = sum(sizes.get(item.path) or 0 for item in files.inputs)
    if total > max_input_bytes:
        return Need(MOUNT, {"code": "inputs_too_big", "params": {"bytes": total, "max_bytes": max_input_bytes},
                            "text": f"its uploads total {total} bytes, over CODEFY_TRANSFER_MAX_INPUT_BYTES "
                                    f"({max_input_bytes})"}, relative)
    return Need(TRANSFER, None, relative)
