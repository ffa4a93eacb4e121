"""labextension/src/types.ts against codefy_jupyter/server/openapi.yaml: every field Lab reads of a
REST payload is one the spec names, with a type the spec allows, so the copy cannot drift from the
server. A field Lab reads that the spec lacks fails here until the spec says what the server sends."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
TYPES = (ROOT / "labextension" / "src" / "types.ts").read_text()
SPEC = yaml.safe_load((ROOT / "codefy_jupyter" / "server" / "openapi.yaml").read_text())
SCHEMAS = SPEC["components"]["schemas"]

# TypeScript interface -> where the spec describes it: a schema, then properties / items to walk.
WHERE = {
    "Run": ("Run",),
    "RunPage": ("RunPage",),
    "RunCard": ("Run", "cards", "[]"),
    "Worker": ("Worker",),
    "WorkerList": ("WorkerList",),
    "SlotCount": ("WorkerSlot", "slots"),
    "RunEvent": ("Event",),
    "GraphNode": ("Graph", "nodes", "[]"),
    "GraphEdge": ("Graph", "edges", "[]"),
    "Graph": ("Graph",),
    "SubmitRequest": ("SubmitRequest",),
    "SubmitOptions": ("SubmitRequest", "options"),
    "RunTarget": ("Run", "options", "target"),
    "SweepParamValue": ("SweepParamValue",),
    "SweepVariant": ("SweepVariant",),
    "Sweep": ("Sweep",),
    "StudyAttempt": ("StudyAttempt",),
    "StudyComparison": ("StudyVariant", "comparison"),
    "StudyVariant": ("StudyVariant",),
    "Study": ("Study",),
}
# Interfaces that are not REST payloads of a schema, and why.
NOT_IN_SPEC = {
    "Notice": "the {code, message, params} inside Error and queue_reason (test_error_shape.py holds it)",
    "WorkerDevice": "a device as the worker reported it: the spec leaves Worker.devices open",
    "Enrollment": "POST workers/enrollments' answer, described in its path",
    "EventsFrame": "a /ws/execution frame (server/execution_socket.py), not REST",
    "BatchFrame": "a /ws/execution frame",
    "ErrorFrame": "a /ws/execution frame",
    "ParamDefinition": "GET nodes lists node definitions as open objects",
    "NodeDefinition": "GET nodes lists node definitions as open objects",
    "MemoryEstimate": "POST memory-estimate's answer, described in its path",
    "StudySummary": "StudyPage lists studies as open objects",
}


def interfaces(text: str) -> dict[str, dict[str, tuple[str, bool]]]:
    """name -> {field: (TypeScript type, optional)} of each exported interface (index signatures
    left out)."""
    out = {}
    for match in re.finditer(r"export interface (\w+) \{", text):
        depth, i = 1, match.end()
        while depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        body = re.sub(r"/\*\*.*?\*/|//[^\n]*", "", text[match.end():i - 1], flags=re.S)
        fields, depth, start = {}, 0, 0
        for j, ch in enumerate(body + ";"):
            depth += {"{": 1, "(": 1, "[": 1, "<": 1, "}": -1, ")": -1, "]": -1, ">": -1}.get(ch, 0)
            if depth == 0 and ch in ";\n":
                part = body[start:j].strip().rstrip(",")
                start = j + 1
                m = re.match(r"(\w+)(\?)?\s*:\s*(.+)$", part, re.S)
                if m:
                    fields[m.group(1)] = (m.group(3).strip(), bool(m.group(2)))
        out[match.group(1)] = fields
    return out


def ts_kinds(ts: str) -> set[str]:
    """The JSON kinds a TypeScript type admits: string, number, boolean, null, array, object, any."""
    kinds, depth, start, parts = set(), 0, 0, []
    for i, ch in enumerate(ts + "|"):
        depth += {"{": 1, "(": 1, "[": 1, "<": 1, "}": -1, ")": -1, "]": -1, ">": -1}.get(ch, 0)
        if depth == 0 and ch == "|":
            parts.append(ts[start:i].strip())
            start = i + 1
    for part in filter(None, parts):
        if part.endswith("[]") or part.startswith("["):
            kinds.add("array")
        elif part in ("string", "number", "boolean", "null"):
            kinds.add(part)
        elif part.startswith("'"):
            kinds.add("string")
        elif part == "unknown":
            kinds.add("any")
        elif part == "RunStatus":
            kinds.add("string")
        else:  # an object literal, a Record<...>, or another interface
            kinds.add("object")
    return kinds


def schema_at(path: tuple[str, ...]) -> dict:
    schema = SCHEMAS[path[0]]
    for step in path[1:]:
        schema = resolve(schema)
        schema = schema["items"] if step == "[]" else schema.get("properties", {})[step]
    return resolve(schema)


def resolve(schema: dict) -> dict:
    while "$ref" in schema:
        schema = SCHEMAS[schema["$ref"].rsplit("/", 1)[1]]
    return schema


def spec_kinds(schema: dict) -> set[str]:
    schema = resolve(schema)
    if "oneOf" in schema:
        return set().union(*(spec_kinds(s) for s in schema["oneOf"]))
    kind = schema.get("type")
    if kind is None:
        return {"any"}
    kinds = set(kind if isinstance(kind, list) else [kind])
    return {"number" if k == "integer" else k for k in kinds}


PARSED = interfaces(TYPES)


def test_every_interface_is_placed_in_the_spec_or_said_why_not():
    assert sorted(set(PARSED) - set(WHERE) - set(NOT_IN_SPEC)) == []
    assert sorted((set(WHERE) | set(NOT_IN_SPEC)) - set(PARSED)) == []


@pytest.mark.parametrize("name", sorted(WHERE))
def test_each_field_lab_reads_is_in_the_spec_with_a_type_it_allows(name):
    schema = schema_at(WHERE[name])
    properties = schema.get("properties") or {}
    problems = []
    for field, (ts, _optional) in PARSED[name].items():
        if field not in properties:
            problems.append(f"{name}.{field}: not in the spec")
            continue
        allowed = spec_kinds(properties[field])
        wanted = ts_kinds(ts) - {"any"}
        if "any" not in allowed and not wanted <= allowed:
            problems.append(f"{name}.{field}: Lab reads {ts}, the spec allows {sorted(allowed)}")
    assert problems == []


def test_the_checker_sees_a_field_the_spec_lacks_and_a_wrong_type():
    made_up = interfaces("export interface Run {\n  id: number;\n  not_a_field?: string;\n}\n")["Run"]
    properties = SCHEMAS["Run"]["properties"]
    assert "not_a_field" not in properties
    assert not ts_kinds(made_up["id"][0]) <= spec_kinds(properties["id"])
    assert ts_kinds("{ name: string; value: number } | null") == {"object", "null"}
    assert ts_kinds("(number | null)[]") == {"array"} and ts_kinds("'queued' | 'interactive'") == {"string"}
