"""The run environment fingerprint: what a run's results depend on besides its graph.

A document (python, platform, torch and its CUDA build, installed packages, the node catalog)
and its sha256 digest. Many runs share one environment, so the document is stored once per
distinct digest and each run records only the digest.
"""

from __future__ import annotations

import hashlib
import json
import platform
import sys
from importlib import metadata
from typing import Any


def _packages() -> list[str]:
    seen = {}
    for dist in metadata.distributions():
        name = (dist.metadata.get("Name") or "").strip()
        if name:
            seen.setdefault(name.lower(), f"{name}=={dist.version}")
    return sorted(seen.values(), key=str.lower)


def _torch() -> dict[str, Any]:
    """torch's version and CUDA build, read without initialising CUDA (and without importing
    torch when nothing has yet)."""
    torch = sys.modules.get("torch")
    if torch is None:
        try:
            return {"version": metadata.version("torch"), "cuda": None}
        except metadata.PackageNotFoundError:
            return {"version": None, "cuda": None}
    return {"version": torch.__version__, "cuda": getattr(torch.version, "cuda", None)}


def environment_document(catalog: dict[str, Any]) -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "torch": _torch(),
        "packages": _packages(),
        "node_catalog": catalog.get("hash"),
    }


def digest(document: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(document, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
