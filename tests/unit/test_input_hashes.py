"""Hashes of transfer inputs kept in the store's `file_hashes` table (seed: execution architecture,
storage, transfer): a file is hashed again only when its size or mtime changed. A real store (an
SQLite file, and a real PostgreSQL), real files."""

from __future__ import annotations

import asyncio
import hashlib
import os

from codefy_jupyter.core.storage.transfer import InputHashes
from codefy_jupyter.core.store.database import Store


def test_an_input_is_hashed_again_only_when_its_size_or_mtime_changed(store_at, tmp_path):
    data = tmp_path / "train.csv"

    async def main():
        async with await Store.open(store_at("h.db")) as store:
            hashes = InputHashes(store)
            data.write_bytes(b"a,b\n1,2\n")
            first = hashlib.sha256(b"a,b\n1,2\n").hexdigest()
            assert await hashes.sha256(str(data)) == (first, 8)
            stamp = data.stat().st_mtime_ns

            # Same size, same mtime: the stored hash answers, the file is not read.
            data.write_bytes(b"a,b\n3,4\n")
            os.utime(data, ns=(stamp, stamp))
            assert await hashes.sha256(str(data)) == (first, 8)

            # Another mtime: hashed again.
            os.utime(data, ns=(stamp + 1_000_000_000, stamp + 1_000_000_000))
            second = hashlib.sha256(b"a,b\n3,4\n").hexdigest()
            assert await hashes.sha256(str(data)) == (second, 8)

            # Another size with the mtime put back: hashed again.
            data.write_bytes(b"a,b\n3,4\n5,6\n")
            os.utime(data, ns=(stamp + 1_000_000_000, stamp + 1_000_000_000))
            assert await hashes.sha256(str(data)) == (hashlib.sha256(b"a,b\n3,4\n5,6\n").hexdigest(), 12)

        async with await Store.open(store_at("h.db")) as store:  # kept across a restart
            assert (await store.file_hash(str(data)))[:2] == (12, stamp + 1_000_000_000)

    asyncio.run(main())
