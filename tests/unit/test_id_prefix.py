"""The id-prefix rule (core/store/ids.py) on a real store (SQLite, and PostgreSQL: `store_at`): a unique prefix of 8+ characters
stands for its id, for runs, sweeps and studies alike; an ambiguous one is a 409 naming at most 10
candidates; shorter or whole strings are taken as given. And the lookup is a range on the key."""

from __future__ import annotations

import asyncio
import sqlite3

import pytest

from codefy_jupyter.core.errors import Conflict
from codefy_jupyter.core.store.database import Store
from codefy_jupyter.core.store.ids import CANDIDATES_SHOWN, TABLES, resolve_id, select_ids_with_prefix


def required_columns(conn, table: str) -> list[tuple[str, str]]:
    """(name, type) of the NOT NULL columns without a default, but id, on either backend."""
    if isinstance(conn, sqlite3.Connection):
        return [(c[1], c[2]) for c in conn.execute(f"PRAGMA table_info({table})") if c[3] and c[4] is None
                and c[1] != "id"]
    return [(name, "INT" if "int" in kind else "REAL" if kind == "double precision" else "TEXT")
            for name, kind in conn.execute(
                "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = ? AND "
                "is_nullable = 'NO' AND column_default IS NULL AND is_identity = 'NO' AND column_name <> 'id'",
                (table,)).fetchall()]


def insert_ids(conn, table: str, ids: list[str]) -> None:
    """Rows with just these ids (every other NOT NULL column gets a value of its type)."""
    columns = required_columns(conn, table)
    names = ", ".join(["id", *(c[0] for c in columns)])
    marks = ", ".join("?" * (len(columns) + 1))
    for n, ident in enumerate(ids):
        values = [n + 1 if "INT" in c[1].upper() else 0.0 if "REAL" in c[1].upper() else "x" for c in columns]
        conn.execute(f"INSERT INTO {table} ({names}) VALUES ({marks})", (ident, *values))


def with_store(store_at, rows: dict[str, list[str]], check) -> None:
    async def main() -> None:
        store = await Store.open(store_at("codefy.sqlite"))
        try:
            for kind, ids in rows.items():
                await store.write(lambda conn, kind=kind, ids=ids: insert_ids(conn, TABLES[kind], ids))
            await check(store)
        finally:
            await store.close()

    asyncio.run(main())


@pytest.mark.parametrize("kind", sorted(TABLES))
def test_a_unique_prefix_is_its_id_and_an_ambiguous_one_names_the_candidates(store_at, kind):
    ids = ["0a1b2c3d4e5f6a7b", "0a1b2c3d99990000", "0a1b2c3d99991111", "0a1b2c3e00000000"]

    async def check(store: Store) -> None:
        assert await resolve_id(store, kind, "0a1b2c3d4e5f") == ids[0]
        assert await resolve_id(store, kind, "0a1b2c3e") == ids[3]
        assert await resolve_id(store, kind, "0a1b2c3d99991") == ids[2]
        with pytest.raises(Conflict) as info:
            await resolve_id(store, kind, "0a1b2c3d")
        err = info.value
        assert err.status == 409 and err.code == "ambiguous_id"
        assert err.params == {"field": f"{kind}_id", "kind": kind, "id": "0a1b2c3d", "candidates": ids[:3],
                              "more": False}
        assert f"{kind} id '0a1b2c3d' is ambiguous" in str(err) and ", ".join(ids[:3]) in str(err)
        with pytest.raises(Conflict) as info:
            await resolve_id(store, kind, "0a1b2c3d9999")
        assert info.value.params["candidates"] == ids[1:3]
        # Taken as given (the reader then answers its own 404): no match, too short, whole.
        assert await resolve_id(store, kind, "ffffffff") == "ffffffff"
        assert await resolve_id(store, kind, "0a1b2c3") == "0a1b2c3"
        assert await resolve_id(store, kind, "0a1b2c3d4e5f6a7bXX") == "0a1b2c3d4e5f6a7bXX"
        assert await resolve_id(store, kind, ids[0]) == ids[0]

    with_store(store_at, {kind: ids}, check)


def test_kinds_do_not_mix_and_an_exact_id_wins_over_the_longer_ones_it_starts(store_at):
    async def check(store: Store) -> None:
        assert await resolve_id(store, "run", "abcdef01") == "abcdef0123456789"
        assert await resolve_id(store, "sweep", "abcdef01") == "abcdef01ffffffff"
        assert await resolve_id(store, "study", "abcdef01") == "abcdef01"  # none: as given
        assert await resolve_id(store, "run", "12345678") == "12345678"  # an id, though it starts another
        with pytest.raises(ValueError, match="unknown id kind"):
            await resolve_id(store, "worker", "abcdef01")

    with_store(store_at, {"run": ["abcdef0123456789", "12345678", "1234567800000000"],
                          "sweep": ["abcdef01ffffffff"]}, check)


def test_more_than_ten_candidates_are_counted_not_listed(store_at):
    ids = [f"beefbeef{i:08x}" for i in range(CANDIDATES_SHOWN + 3)]

    async def check(store: Store) -> None:
        with pytest.raises(Conflict) as info:
            await resolve_id(store, "run", "beefbeef")
        assert info.value.params["candidates"] == ids[:CANDIDATES_SHOWN] and info.value.params["more"] is True
        assert "more than 10 run ids" in str(info.value) and ", ...)" in str(info.value)

    with_store(store_at, {"run": ids}, check)


def test_the_lookup_is_a_range_on_the_primary_key_not_a_scan():
    from codefy_jupyter.core.store.migrations import migrate

    conn = sqlite3.connect(":memory:")
    migrate(conn)
    for table in TABLES.values():
        plan = " ".join(str(row[-1]) for row in conn.execute(
            f"EXPLAIN QUERY PLAN SELECT id FROM {table} WHERE id >= ? AND id < ? ORDER BY id LIMIT ?", ("a", "b", 3)))
        assert "SEARCH" in plan and "id>? AND id<?" in plan.replace("=", ""), (table, plan)
    insert_ids(conn, "runs", ["aaaaaaaa1", "aaaaaaaa\u00e9", "aaaaaaab"])
    assert select_ids_with_prefix(conn, "run", "aaaaaaaa", 5) == ["aaaaaaaa1", "aaaaaaaa\u00e9"]
