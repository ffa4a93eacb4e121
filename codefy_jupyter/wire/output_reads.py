"""Answers to reads of a run's recorded outputs (`/codefy/api/execution/outputs/*`), computed the
same way wherever the captures live: in the control plane's in-process store, or on a worker, whose
agent answers `fetch_output` frames (seed: recorded outputs on a worker). Pure and stdlib only, so
the agent process (which never imports torch) answers a listing itself; reading one port needs the
value, and `summarize` brings it (engine/recorded.py's, on either side: the control plane's
core/runs/recorded.py over its captures in memory, a worker's agent/output_reader.py over files).

An index is `{"nodes": {node_id: {port: {"type", "shape", "dtype"?, "bytes"?, "file"?, "error"?}}}}`:
what `engine.recorded.index_of` builds from captures and what a worker writes as `index.json`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

LIST, PORT = "list", "port"
# A worker run's folder of recorded outputs: one file per port and this index, written last.
INDEX = "index.json"
READ_KINDS = frozenset({LIST, PORT})

Answer = tuple[int, dict[str, Any]]
Summarize = Callable[[str, str], dict[str, Any]]


def error(status: int, code: str, message: str, params: dict[str, Any] | None = None) -> Answer:
    """The server's one error shape (core/errors.py), built here for both ends."""
    return status, {"error": {"code": code, "message": message, "params": params or {}}}


def not_recorded(run_id: str) -> Answer:
    return error(404, "outputs_not_recorded", f"no recorded outputs are kept for run {run_id}", {"run_id": run_id})


def list_answer(run_id: str, index: dict[str, Any]) -> Answer:
    nodes = []
    for node_id, ports in sorted((index.get("nodes") or {}).items()):
        nodes.append({"node_id": node_id, "ports": [
            {"port": port, **{k: v for k, v in entry.items() if k in ("type", "shape", "dtype", "bytes", "error")}}
            for port, entry in sorted(ports.items())]})
    return 200, {"run_id": run_id, "nodes": nodes}


def port_answer(run_id: str, index: dict[str, Any], node_id: str, port: str, summarize: Summarize) -> Answer:
    entry = ((index.get("nodes") or {}).get(node_id) or {}).get(port)
    if entry is None:
        return error(404, "output_not_found", f"run {run_id} recorded no output {node_id}.{port}",
                     {"run_id": run_id, "node_id": node_id, "port": port})
    if entry.get("error"):
        return error(500, "output_unreadable", f"output {node_id}.{port} of run {run_id} was not kept: {entry['error']}",
                     {"run_id": run_id, "node_id": node_id, "port": port})
    try:
        summary = summarize(node_id, port)
    except Exception as err:  # a damaged file (or a value that cannot be summarised) fails its own read only
        return error(500, "output_unreadable",
                     f"output {node_id}.{port} of run {run_id} cannot be read: {type(err).__name__}: {err}"[:2000],
                     {"run_id": run_id, "node_id": node_id, "port": port})
    return 200, {"run_id": run_id, "node_id": node_id, "port": port,
                 **{k: v for k, v in entry.items() if k in ("type", "shape", "dtype")}, **summary}


def answer(run_id: str, kind: str, query: dict[str, Any], index: dict[str, Any] | None,
           summarize: Summarize | None) -> Answer:
    """The status and body of one read. `index` None: nothing is kept for the run."""
    if index is None:
        return not_recorded(run_id)
    if kind == LIST:
        return list_answer(run_id, index)
    if kind == PORT and isinstance(query.get("node_id"), str) and isinstance(query.get("port"), str):
        if summarize is None:
            raise ValueError("a port read needs the values")
        return port_answer(run_id, index, query["node_id"], query["port"], summarize)
    return error(400, "bad_output_read", f"unknown read {kind!r} of recorded outputs", {"kind": kind})


# -- an answer over the worker protocol: its JSON body in chunks ---------------------------------------
ANSWER_CHUNK_CHARS = 256 * 1024


def chunks(body: dict[str, Any], size: int = ANSWER_CHUNK_CHARS) -> list[str]:
    text = json.dumps(body, separators=(",", ":"), allow_nan=False)
    return [text[i:i + size] for i in range(0, len(text), size)] or [""]


def joined(parts: list[str]) -> dict[str, Any]:
    body = json.loads("".join(parts))
    if not isinstance(body, dict):
        raise ValueError("an output answer's body must be a JSON object")
    return body


def read_index(folder: Path) -> dict[str, Any] | None:
    """A worker run's index.json; None when the folder has none (not written, or dropped)."""
    try:
        index = json.loads((Path(folder) / INDEX).read_text())
    except (OSError, ValueError):
        return None
    return index if isinstance(index, dict) else None


def index_bytes(folder: Path) -> int:
    """What a run's recorded files take on disk."""
    total = 0
    try:
        for entry in Path(folder).iterdir():
            total += entry.stat().st_size
    except OSError:
        pass
    return total
