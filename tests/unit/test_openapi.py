"""openapi.yaml describes every REST route the extension serves."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from codefy_jupyter.server.routes import route_table

SPEC = yaml.safe_load((Path(__file__).resolve().parents[2] / "codefy_jupyter/server/openapi.yaml").read_text())


def _spec_path(pattern: str) -> str:
    return re.sub(r"\(\?P<(\w+)>[^)]*\)", r"{\1}", pattern.removeprefix("/codefy/api"))


def test_every_rest_route_is_described_with_its_methods():
    for pattern, handler, _ in route_table("/"):
        if "/ws/" in pattern or pattern.endswith("openapi.yaml"):
            continue
        path = _spec_path(pattern)
        assert path in SPEC["paths"], f"{path} is missing from openapi.yaml"
        served = {m for m in ("get", "post", "delete") if m.upper() in handler.__dict__ or m in handler.__dict__}
        assert served <= set(SPEC["paths"][path]), f"{path}: {served - set(SPEC['paths'][path])} undocumented"


def test_every_reference_resolves():
    text = (Path(__file__).resolve().parents[2] / "codefy_jupyter/server/openapi.yaml").read_text()
    for ref in re.findall(r'\$ref: "#/([^"]+)"', text):
        node = SPEC
        for part in ref.split("/"):
            node = node[part]
        assert node is not None
