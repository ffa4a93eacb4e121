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


class _StrictLoader(yaml.SafeLoader):
    """A mapping that names a key twice is refused: YAML loaders keep the last one silently, so a
    merge that brings the same rule twice would hide which one the spec means."""

    def construct_mapping(self, node, deep=False):
        seen: set = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def test_no_mapping_names_a_key_twice():
    text = (Path(__file__).resolve().parents[2] / "codefy_jupyter/server/openapi.yaml").read_text()
    assert yaml.load(text, Loader=_StrictLoader) == SPEC


def test_a_key_named_twice_is_caught():
    try:
        yaml.load("a:\n  if: 1\n  if: 2\n", Loader=_StrictLoader)
    except yaml.constructor.ConstructorError as err:
        assert "duplicate key 'if'" in str(err)
    else:
        raise AssertionError("a duplicate key was accepted")
