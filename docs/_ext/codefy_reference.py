"""The reference pages, generated from the code at build time so that they cannot drift from it.

A page asks for a generated section with a marker line of its own,

    <!-- codefy-reference: cli -->

which the `source-read` hook replaces with Markdown rendered from the code: `cli` from the `codefy`
command's argparse parser, `rest` from `codefy_jupyter/server/openapi.yaml`, `settings` from
`codefy_jupyter/core/config.py`, `nodes` from the engine's node registry, `lifecycle` from the run
service's transition table (`core/contract/lifecycle.py`). The renderers are plain
functions returning Markdown, so tests read the same text the site shows. An unknown marker is an
error, not an empty section.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any, Callable, Iterable

ROOT = Path(__file__).resolve().parents[2]
OPENAPI = ROOT / "codefy_jupyter" / "server" / "openapi.yaml"
MARKER = re.compile(r"^<!-- codefy-reference: ([a-z-]+) -->$", re.MULTILINE)
METHODS = ("get", "put", "post", "delete", "patch")


def cell(text: Any) -> str:
    """One Markdown table cell: no line breaks, and a `|` that does not end the cell."""
    return " ".join(str(text).split()).replace("|", "\\|")


def code(text: Any) -> str:
    """Inline code for any text (a value holding backticks gets a longer fence)."""
    text = str(text)
    fence = "``" if "`" in text else "`"
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


_CODE_SPAN = re.compile(r"(`+)(.+?)\1")


def text(value: Any) -> str:
    """Prose from the code as Markdown: code spans kept, and outside them the characters Markdown
    would read as markup (`<data dir>` as an HTML tag, `*` as emphasis) shown as they are."""
    value, out, at = str(value), [], 0
    for match in _CODE_SPAN.finditer(value):
        out.append(_escape(value[at:match.start()]))
        out.append(match.group(0))
        at = match.end()
    out.append(_escape(value[at:]))
    return "".join(out)


def _escape(plain: str) -> str:
    return re.sub(r"([<>*\[\]])", r"\\\1", plain)


def table(headers: Iterable[str], rows: Iterable[Iterable[Any]]) -> str:
    headers = list(headers)
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


# --- the `codefy` command -------------------------------------------------------------------------

def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    if not action.help or action.help == argparse.SUPPRESS:
        return ""
    # argparse's own expansion: `%(default)s` and an escaped `%%` read as `--help` prints them.
    return parser._get_formatter()._expand_help(action)


def _argument_rows(parser: argparse.ArgumentParser) -> list[list[str]]:
    rows = []
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        if action.option_strings:
            name = ", ".join(action.option_strings)
            if action.nargs != 0:
                name += " " + (action.metavar or action.dest.upper())
        else:
            name = action.metavar or action.dest
        default = action.default
        shown = "" if default in (None, False, argparse.SUPPRESS) or action.nargs == 0 else code(default)
        rows.append([code(name), text(_help(parser, action)), shown])
    return rows


def _command(path: str, parser: argparse.ArgumentParser, level: int) -> list[str]:
    out = [f"{'#' * level} `{path}`", ""]
    about = parser.description or ""
    if about:
        out += [text(about), ""]
    out += ["```text", parser.format_usage().replace("usage: ", "", 1).strip(), "```", ""]
    rows = _argument_rows(parser)
    if rows:
        out += [table(["argument", "meaning", "default"], rows), ""]
    for name, sub in _subcommands(parser).items():
        out += _command(f"{path} {name}", sub, min(level + 1, 4))
    return out


def render_cli() -> str:
    from codefy_jupyter.cli import build_parser

    parser = build_parser()
    out = [text(parser.description or ""), ""]
    rows = _argument_rows(parser)
    if rows:
        out += [table(["argument", "meaning", "default"], rows), ""]
    for name, sub in _subcommands(parser).items():
        out += _command(f"codefy {name}", sub, 2)
    return "\n".join(out)


# --- REST routes ----------------------------------------------------------------------------------

def _load_openapi() -> dict[str, Any]:
    import yaml

    return yaml.safe_load(OPENAPI.read_text())


def _resolve(spec: dict[str, Any], item: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in item:
        node: Any = spec
        for part in item["$ref"].lstrip("#/").split("/"):
            node = node[part]
        item = node
    return item


# The codes a description names: "code owner_queue_full", "codes `a`, `b`", "(`memory_over_card`)".
_CODE_WORDS = re.compile(r"\bcodes?\s*[:=]?\s*((?:`?[a-z][a-z0-9_]+`?(?:\s*(?:,|or|and)\s*)?)+)")
_NAME = re.compile(r"`?([a-z][a-z0-9]*_[a-z0-9_]+)`?")


def error_codes(text: str) -> list[str]:
    found: list[str] = []
    for match in _CODE_WORDS.finditer(text or ""):
        for name in _NAME.findall(match.group(1)):
            if name not in found:
                found.append(name)
    return found


def _schema_text(spec: dict[str, Any], schema: dict[str, Any] | None) -> str:
    if not schema:
        return ""
    if "$ref" in schema:
        return code(schema["$ref"].rsplit("/", 1)[-1])
    kind = schema.get("type", "")
    bounds = [f"{k} {schema[k]}" for k in ("minimum", "maximum", "default") if k in schema]
    if "enum" in schema:
        bounds.append("one of " + ", ".join(code(v) for v in schema["enum"]))
    return " ".join([code(kind) if kind else "", ", ".join(bounds)]).strip()


def _operation(spec: dict[str, Any], path: str, method: str, shared: list[dict[str, Any]],
               op: dict[str, Any]) -> list[str]:
    out = [f"### `{method.upper()} {path}`", ""]
    if op.get("summary"):
        out += [text(op["summary"]), ""]
    if op.get("description"):
        out += [text(" ".join(op["description"].split())), ""]
    params = [_resolve(spec, p) for p in [*shared, *op.get("parameters", [])]]
    if params:
        out += [table(["parameter", "in", "schema", "meaning"],
                      [[code(p["name"]) + (" (required)" if p.get("required") else ""), p.get("in", ""),
                        _schema_text(spec, p.get("schema")), text(p.get("description", ""))] for p in params]), ""]
    body = op.get("requestBody")
    if body:
        body = _resolve(spec, body)
        kinds = ", ".join(f"{code(k)} {_schema_text(spec, v.get('schema'))}"
                          for k, v in body.get("content", {}).items())
        out += [f"Request body{' (required)' if body.get('required') else ''}: {kinds}", ""]
    rows = []
    for status, response in op.get("responses", {}).items():
        response = _resolve(spec, response)
        answer = response.get("description", "")
        codes = error_codes(answer)
        rows.append([code(status), text(answer), ", ".join(code(c) for c in codes)])
    out += [table(["status", "answer", "error codes"], rows), ""]
    return out


def render_rest() -> str:
    spec = _load_openapi()
    base = spec.get("servers", [{}])[0].get("url", "")
    out = [text(" ".join(spec["info"].get("description", "").split())), "",
           f"Every path below is under {code(base)} (that is, `{{base_url}}codefy/api`).", ""]
    for path, item in spec["paths"].items():
        shared = item.get("parameters", [])
        for method in METHODS:
            if method in item:
                out += _operation(spec, path, method, shared, item[method])
    return "\n".join(out)


def routes() -> list[tuple[str, str]]:
    """Every (METHOD, path) the specification has, for the tests."""
    spec = _load_openapi()
    return [(m.upper(), p) for p, item in spec["paths"].items() for m in METHODS if m in item]


# --- settings -------------------------------------------------------------------------------------

def render_settings() -> str:
    from codefy_jupyter.core.config import SETTINGS

    rows = []
    for s in SETTINGS:
        env = getattr(s, "env", None)
        default = s.default
        shown = "(empty)" if default in ("", None) else code(repr(default) if isinstance(default, str) else default)
        rows.append([code(s.name), code(env) if env else "", shown, text(s.help)])
    return table(["trait", "environment", "default", "meaning"], rows)


# --- the node catalog -----------------------------------------------------------------------------

def _port_text(name: str, port: Any) -> str:
    if isinstance(port, str):
        return f"{code(name)}: {port}"
    marks = [m for m in ("lazy", "optional") if port.get(m)]
    return f"{code(name)}: {port['type']}" + (f" ({', '.join(marks)})" if marks else "")


def _param_text(name: str, p: dict[str, Any]) -> str:
    extra = [f"{k} {p[k]}" for k in ("min", "max") if k in p]
    if "options" in p:
        extra.append("one of " + ", ".join(code(json.dumps(o)) for o in p["options"]))
    if p.get("file"):
        extra.append(f"file: {p['file']}")
    shown = f"{code(name)}: {p['type']} = {code(json.dumps(p.get('default')))}"
    if extra:
        shown += f" ({'; '.join(extra)})"
    if p.get("description"):
        shown += f" — {text(p['description'])}"
    return shown


def render_nodes() -> str:
    from codefy_jupyter.engine import default_registry

    defs = sorted(default_registry().definitions(), key=lambda d: (d["category"], d["type"]))
    out: list[str] = []
    category = None
    for d in defs:
        if d["category"] != category:
            category = d["category"]
            out += [f"## {category}", ""]
        out += [f"### `{d['type']}`", ""]
        if d.get("description"):
            out += [text(d["description"]), ""]
        flags = [f for f, on in (("output node", d["output_node"]), ("async", d["async"]),
                                 ("never cached", not d["cacheable"]),
                                 ("ports from its params", d["dynamic_ports"])) if on]
        rows = [["inputs", "; ".join(_port_text(k, v) for k, v in d["inputs"].items()) or "none"],
                ["outputs", "; ".join(_port_text(k, v) for k, v in d["outputs"].items()) or "none"],
                ["params", "; ".join(_param_text(k, v) for k, v in d["params"].items()) or "none"]]
        if flags:
            rows.append(["marks", ", ".join(flags)])
        out += [table(["", ""], rows), ""]
    return "\n".join(out)


# --- the run lifecycle ----------------------------------------------------------------------------

def render_lifecycle() -> str:
    from codefy_jupyter.core.contract import lifecycle as state

    rows = [[code(before), code(event), code(after)] for (before, event), after in state.TRANSITIONS.items()]
    return table(["status", "event", "becomes"], rows)


RENDERERS: dict[str, Callable[[], str]] = {
    "cli": render_cli, "rest": render_rest, "settings": render_settings, "nodes": render_nodes,
    "lifecycle": render_lifecycle,
}


def expand(text: str) -> str:
    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in RENDERERS:
            raise ValueError(f"codefy-reference: no generated section named {name!r} "
                             f"(known: {', '.join(sorted(RENDERERS))})")
        return RENDERERS[name]()

    return MARKER.sub(one, text)


def _source_read(app: Any, docname: str, source: list[str]) -> None:
    source[0] = expand(source[0])


def setup(app: Any) -> dict[str, Any]:
    app.connect("source-read", _source_read)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
