"""Ids by prefix: the one rule every reader of a run, sweep or study by id follows.

A surface may show an id shortened (Lab and the widgets show 12 characters); every other surface
must accept what it shows. So a reader takes any prefix of at least `MIN_PREFIX` characters that
starts exactly one id of its kind, and answers 409 `ambiguous_id` (with the first
`CANDIDATES_SHOWN` candidates) for one that starts several. An id of `FULL_ID_LENGTH` or more
characters is taken as given, and so is a shorter string that matches nothing or is under
`MIN_PREFIX`: the reader then answers its own 404 (`run_not_found`, ...), as for any unknown id.

The lookup is a range over the primary key (`id >= p AND id < p || U+10FFFF`), which SQLite answers
from the key's index; a store backend implements `ids_with_prefix` (the `IdIndex` protocol).
"""

from __future__ import annotations

import sqlite3
from typing import Protocol

from ..errors import Conflict

MIN_PREFIX = 8
FULL_ID_LENGTH = 16  # the ids the server makes (uuid4 hex, 16 characters)
CANDIDATES_SHOWN = 10

# The kinds of id a reader resolves, and their table.
TABLES = {"run": "runs", "sweep": "sweeps", "study": "studies"}
# Above every character a text id can hold: the exclusive upper end of a prefix's range.
_TOP = chr(0x10FFFF)


class IdIndex(Protocol):
    async def ids_with_prefix(self, kind: str, prefix: str, limit: int) -> list[str]: ...


def select_ids_with_prefix(conn: sqlite3.Connection, kind: str, prefix: str, limit: int) -> list[str]:
    """Up to `limit` ids of `kind` that start with `prefix`, in order (the prefix itself first
    when it is an id)."""
    table = TABLES[kind]
    rows = conn.execute(f"SELECT id FROM {table} WHERE id >= ? AND id < ? ORDER BY id LIMIT ?",
                        (prefix, prefix + _TOP, limit)).fetchall()
    return [r[0] for r in rows if r[0].startswith(prefix)]


def needs_lookup(given: str) -> bool:
    """Whether `given` may be a prefix to look up: long enough, and shorter than a whole id."""
    return MIN_PREFIX <= len(given) < FULL_ID_LENGTH


async def resolve_id(index: IdIndex, kind: str, given: str, *, field: str | None = None) -> str:
    """The whole id `given` stands for: itself when it is an id (or not a prefix to look up, or
    one that starts none), the one id it starts, or 409 `ambiguous_id` naming the candidates."""
    if kind not in TABLES:
        raise ValueError(f"unknown id kind {kind!r}; one of {sorted(TABLES)}")
    if not needs_lookup(given):
        return given
    found = await index.ids_with_prefix(kind, given, CANDIDATES_SHOWN + 1)
    if not found or found[0] == given:
        return given
    if len(found) == 1:
        return found[0]
    shown = found[:CANDIDATES_SHOWN]
    more = len(found) > CANDIDATES_SHOWN
    listed = ", ".join(shown) + (", ..." if more else "")
    raise Conflict(f"{kind} id {given!r} is ambiguous: it starts {'more than ' if more else ''}{len(shown)} "
                   f"{kind} ids ({listed}); give more characters",
                   code="ambiguous_id",
                   params={"field": field or f"{kind}_id", "kind": kind, "id": given, "candidates": shown,
                           "more": more})
