"""Request JSON (REST bodies, /ws/execution messages) → Python values, at a cost one request
cannot turn against the others.

Three things here, all pure:

- `loads` parses in bounded slices. The C parser holds the GIL for a whole document (~0.2 s for
  10 MB), which would stall the server's event loop even from a worker thread. Small documents
  go to it whole; in a large one, containers are descended in Python and each element that fits
  in a window (at most `WINDOW` characters) is handed to the C scanner, so no single call holds
  the GIL for long and the thread yields to the loop between elements.
- Bodies are refused cleanly where the stdlib would accept and later code would fail: invalid
  UTF-8, NaN/Infinity, nesting deeper than `MAX_DEPTH` (deep enough for any graph: subgraphs nest
  16 levels), and lone UTF-16 surrogates (`"\\ud800"`), which no store or socket can encode.
- Every refusal names where it is: a `SchemaError` with the field path (422), or a `BadJSON` (400)
  with the character position of a syntax error.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ..core.errors import ServiceError
from ..core.runs.requests import SchemaError

MAX_DEPTH = 256
# Documents up to this many characters are parsed in one C call (a few ms at most).
INLINE_CHARS = 256 * 1024
# The largest element handed to the C scanner in one call while slicing a large document.
WINDOW = 256 * 1024
_FIRST_WINDOW = 4096

_WS = re.compile(r"[ \t\n\r]*")
# A \uD800-\uDFFF escape; only then can a parsed string hold a surrogate (the text is valid UTF-8).
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


class BadJSON(ServiceError):
    """Not JSON at all (or not UTF-8): 400, with the position of the first wrong character."""

    status = 400
    code = "invalid_json"


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON (numbers must be finite)")


_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)
_scan_once = _DECODER.scan_once
_scanstring = json.decoder.scanstring


class _TooDeep(Exception):
    def __init__(self, path: str) -> None:
        self.path = path


def loads(data: bytes | str, *, max_depth: int = MAX_DEPTH, what: str = "the request body") -> Any:
    """The JSON value of `data`, or BadJSON (syntax, encoding) / SchemaError (depth, surrogates)."""
    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as err:
            raise BadJSON(f"{what} is not UTF-8: byte {err.start} is invalid", params={"position": err.start}) from None
    else:
        text = data
    text = text.removeprefix("\ufeff")
    try:
        value = _parse(text, max_depth)
    except _TooDeep as err:
        raise SchemaError(err.path, f"nested deeper than {max_depth} levels") from None
    except json.JSONDecodeError as err:
        raise BadJSON(f"{what} is not JSON: {err}", params={"position": err.pos}) from None
    except ValueError as err:  # NaN/Infinity, or an integer too long to convert
        raise BadJSON(f"{what} is not JSON: {err}") from None
    _check_tree(value, max_depth, bool(_SURROGATE_ESCAPE.search(text)))
    return value


def _parse(text: str, max_depth: int) -> Any:
    n = len(text)
    start = _WS.match(text, 0).end()
    if n <= INLINE_CHARS:
        try:
            value, end = _scan_once(text, start)
        except StopIteration as err:  # the C scanner's "no value at err.value"
            raise json.JSONDecodeError("Expecting value", text, err.value) from None
        except RecursionError:  # deeper than the C parser goes: find the path the slow way
            value, end = _Slices(text, max_depth).value(start, 0, "")
    else:
        value, end = _Slices(text, max_depth).value(start, 0, "")
    end = _WS.match(text, end).end()
    if end != n:
        raise json.JSONDecodeError("Extra data", text, end)
    return value


class _Slices:
    """Descends containers that do not fit a window; each element that does is parsed in C."""

    def __init__(self, text: str, max_depth: int) -> None:
        self.text = text
        self.n = len(text)
        self.max_depth = max_depth
        self.chunk = _FIRST_WINDOW  # the next chunk's window: grows on success, shrinks on failure
        self.cooldown = 0  # elements to take one by one before the next chunk is tried

    def value(self, i: int, depth: int, path: str) -> tuple[Any, int]:
        text = self.text
        ch = text[i:i + 1]
        if ch not in ("[", "{"):
            try:
                return _scan_once(text, i)  # a scalar: its own size bounds the call
            except StopIteration as err:
                raise json.JSONDecodeError("Expecting value", text, err.value) from None
        if depth >= self.max_depth:
            raise _TooDeep(path)
        window = _FIRST_WINDOW
        while window <= WINDOW:
            try:
                if i + window >= self.n:  # the rest of the text fits: its errors are real ones
                    try:
                        return _scan_once(text, i)
                    except StopIteration as err:
                        raise json.JSONDecodeError("Expecting value", text, err.value) from None
                value, end = _scan_once(text[i:i + window], 0)
                return value, i + end
            except (StopIteration, json.JSONDecodeError):
                if i + window >= self.n:
                    break  # a real syntax error: the descent below finds where
                window *= 16
            except RecursionError:
                break
        return (self._array if ch == "[" else self._object)(i, depth, path)

    def _chunk(self, i: int, close: str) -> tuple[Any, int] | None:
        """Many small elements of a large container in one C call: the text up to the last comma
        in a window, closed with `close`. A cut inside a string or a nested container never
        parses, so a success is exactly the elements before that comma. None when it fails."""
        if self.cooldown > 0 or self.n - i <= self.chunk:
            self.cooldown -= 1
            return None
        text, end = self.text, i + self.chunk
        opener = "[" if close == "]" else "{"
        # Cuts to try: the last comma, then the last ones right after a closed element (an array
        # of objects has most of its commas inside them).
        cuts = sorted({text.rfind(",", i, end), text.rfind("},", i, end) + 1, text.rfind("],", i, end) + 1},
                      reverse=True)
        for j in cuts:
            if j <= i:
                break
            candidate = opener + text[i:j] + close
            try:
                value, stop = _scan_once(candidate, 0)
            except (StopIteration, ValueError, RecursionError):
                continue
            if stop != len(candidate):
                # The container itself closed inside the window (its `]` or `}` and more after
                # it): what parsed is only its tail, and the rest of the cut is another value's.
                continue
            self.chunk = min(WINDOW, self.chunk * 2)
            return value, j
        # Element by element for a while, in smaller windows: the waste stays a constant factor
        # of the text read, whatever the document looks like.
        self.chunk = max(_FIRST_WINDOW, self.chunk // 2)
        self.cooldown = 64
        return None
    def _array(self, i: int, depth: int, path: str) -> tuple[list[Any], int]:
        text, ws = self.text, _WS.match
        items: list[Any] = []
        i = ws(text, i + 1).end()
        if text[i:i + 1] == "]":
            return items, i + 1
        while True:
            chunk = self._chunk(i, "]")
            if chunk is not None:
                items.extend(chunk[0])
                i = chunk[1]
            else:
                value, i = self.value(i, depth + 1, f"{path}[{len(items)}]")
                items.append(value)
                i = ws(text, i).end()
            ch = text[i:i + 1]
            if ch == "]":
                return items, i + 1
            if ch != ",":
                raise json.JSONDecodeError("Expecting ',' delimiter", text, i)
            i = ws(text, i + 1).end()

    def _object(self, i: int, depth: int, path: str) -> tuple[dict[str, Any], int]:
        text, ws = self.text, _WS.match
        obj: dict[str, Any] = {}
        i = ws(text, i + 1).end()
        if text[i:i + 1] == "}":
            return obj, i + 1
        while True:
            chunk = self._chunk(i, "}")
            if chunk is not None:
                obj.update(chunk[0])
                i = chunk[1]
            else:
                if text[i:i + 1] != '"':
                    raise json.JSONDecodeError("Expecting property name enclosed in double quotes", text, i)
                key, i = _scanstring(text, i + 1, True)
                i = ws(text, i).end()
                if text[i:i + 1] != ":":
                    raise json.JSONDecodeError("Expecting ':' delimiter", text, i)
                i = ws(text, i + 1).end()
                obj[key], i = self.value(i, depth + 1, f"{path}.{key}" if path else key)
                i = ws(text, i).end()
            ch = text[i:i + 1]
            if ch == "}":
                return obj, i + 1
            if ch != ",":
                raise json.JSONDecodeError("Expecting ',' delimiter", text, i)
            i = ws(text, i + 1).end()


def _check_tree(value: Any, max_depth: int, surrogates: bool) -> None:
    """Depth (always) and lone surrogates (only when the text had a surrogate escape), without
    recursion; a path is built only for the refusal."""
    if type(value) not in (dict, list):
        if surrogates and type(value) is str and not _encodable(value):
            raise SchemaError("", "a string holds a lone UTF-16 surrogate (not valid Unicode)")
        return
    # (container, depth, parent entry, key): the parent chain names the path when one is refused.
    stack: list[tuple[Any, int, Any, Any]] = [(value, 1, None, None)]
    while stack:
        entry = stack.pop()
        node, depth = entry[0], entry[1]
        items = node.items() if type(node) is dict else enumerate(node)
        for key, child in items:
            kind = type(child)
            if kind is dict or kind is list:
                if depth >= max_depth:
                    raise SchemaError(_path(entry, key), f"nested deeper than {max_depth} levels")
                stack.append((child, depth + 1, entry, key))
            elif surrogates and kind is str and not _encodable(child):
                raise SchemaError(_path(entry, key), "holds a lone UTF-16 surrogate (not valid Unicode)")
            if surrogates and type(key) is str and not _encodable(key):
                raise SchemaError(_path(entry, None), f"key {key.encode('utf-8', 'backslashreplace').decode()!r} "
                                  "holds a lone UTF-16 surrogate (not valid Unicode)")


def _encodable(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _path(entry: Any, key: Any) -> str:
    parts: list[Any] = [] if key is None else [key]
    while entry is not None and entry[2] is not None:
        parts.append(entry[3])
        entry = entry[2]
    out = ""
    for part in reversed(parts):
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            safe = part.encode("utf-8", "backslashreplace").decode()
            out += f".{safe}" if out else safe
    return out
