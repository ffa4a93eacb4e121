"""The shape of one input provenance record on the wire (a `run_facts` frame of kind
`provenance`), checked where the control plane receives it. Pure: stdlib only.

A worker is trusted to run graphs, not to size the control plane's database: every text has a cap
and a record that breaks one is refused whole, with the field that broke it.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Iterable, Mapping, Sequence

KINDS = ("dataset", "model")
PATH_CHARS = 4096
NODE_ID_CHARS = 1024
REVISION_CHARS = 256
RECORDS_PER_RUN = 256
_SHA256 = re.compile(r"[0-9a-f]{64}")


def _count(value: Any) -> bool:
    return type(value) is int and value >= 0


def check_record(facts: Mapping[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
    """(the record as kept, None) or (None, the field that is wrong)."""
    node_id, path, revision, rows = facts.get("node_id"), facts.get("path"), facts.get("revision"), facts.get("rows")
    if node_id is not None and not (isinstance(node_id, str) and len(node_id) <= NODE_ID_CHARS):
        return None, "node_id"
    if facts.get("kind") not in KINDS:
        return None, "kind"
    if not (isinstance(path, str) and 0 < len(path) <= PATH_CHARS):
        return None, "path"
    if not (isinstance(facts.get("sha256"), str) and _SHA256.fullmatch(facts["sha256"])):
        return None, "sha256"
    if not _count(facts.get("size")):
        return None, "size"
    if revision is not None and not (isinstance(revision, str) and len(revision) <= REVISION_CHARS):
        return None, "revision"
    if rows is not None and not _count(rows):
        return None, "rows"
    return {"node_id": node_id, "kind": facts["kind"], "path": path, "sha256": facts["sha256"],
            "size": facts["size"], "revision": revision, "rows": rows}, None


def describe(record: Mapping[str, Any]) -> dict[str, Any]:
    """How a record is shown to people (the notebook's RunView, `codefy runs show`; Lab's
    runRecords.ts inputRows says the same): the first 12 hex digits of its sha256, and its size,
    row count and revision when known."""
    detail = [f"{record['size']} bytes"]
    if record.get("rows") is not None:
        detail.append(f"{record['rows']} rows")
    if record.get("revision"):
        detail.append(f"revision {record['revision']}")
    return {"kind": record["kind"], "path": record["path"], "sha256": record["sha256"],
            "digest": record["sha256"][:12], "detail": ", ".join(detail)}


DATA_IDENTITY = "data_identity"


def data_identity(records: Iterable[Mapping[str, Any]]) -> str:
    """One CSV cell naming every file a run read by content: `kind:path@sha256`, `;`-separated
    (a sweep's and a study's export share it)."""
    return ";".join(f"{r['kind']}:{r['path']}@{r['sha256']}" for r in records)


def identity_column(inputs: Mapping[str, Sequence[Mapping[str, Any]]]) -> tuple[list[str], Callable[[Any], list[str]]]:
    """The header and the per-row cells of an export's data_identity column: none at all when no
    run of the export recorded inputs (the table is then as it was before provenance), else one
    cell per row, empty for a run that recorded nothing (or has no run yet)."""
    if not inputs:
        return [], lambda run_id: []
    return [DATA_IDENTITY], lambda run_id: [data_identity(inputs.get(run_id, ()) if run_id else ())]
