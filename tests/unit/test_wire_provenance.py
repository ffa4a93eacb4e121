"""A worker's provenance records (run_facts of kind `provenance`): each field checked and capped,
and a run's count capped, before the control plane stores one."""

from __future__ import annotations

import asyncio

import pytest

from codefy_jupyter.core.workers.provenance import kept_input
from codefy_jupyter.wire.provenance import PATH_CHARS, RECORDS_PER_RUN, REVISION_CHARS, check_record

GOOD = {"node_id": "csv", "kind": "dataset", "path": "/d/a.csv", "sha256": "0f" * 32, "size": 10,
        "revision": None, "rows": 3}


def test_a_good_record_is_kept_as_is_and_extra_keys_are_dropped():
    assert check_record({**GOOD, "extra": "x" * 100}) == (GOOD, None)


@pytest.mark.parametrize(("change", "field"), [
    ({"kind": "table"}, "kind"), ({"path": ""}, "path"), ({"path": "/" + "p" * PATH_CHARS}, "path"),
    ({"sha256": "0F" * 32}, "sha256"), ({"sha256": "ab"}, "sha256"), ({"size": -1}, "size"),
    ({"size": True}, "size"), ({"revision": "r" * (REVISION_CHARS + 1)}, "revision"), ({"rows": 1.5}, "rows"),
    ({"node_id": 7}, "node_id"),
])
def test_a_bad_field_refuses_the_record_naming_it(change, field):
    assert check_record({**GOOD, **change}) == (None, field)


class FakeRun:
    run_id = "r1"

    def __init__(self):
        self.facts = {}


class Store:
    def __init__(self):
        self.kept = []

    async def record_inputs(self, run_id, records):
        self.kept.extend((run_id, r) for r in records)
        return len(records)


def test_a_run_keeps_at_most_its_cap_and_counts_what_it_dropped():
    run, store = FakeRun(), Store()

    async def main():
        for _ in range(RECORDS_PER_RUN + 2):
            write = kept_input(run, store, GOOD)
            if write is not None:
                await write
        assert kept_input(run, store, {**GOOD, "sha256": "nope"}) is None

    asyncio.run(main())
    assert len(store.kept) == RECORDS_PER_RUN and store.kept[0] == ("r1", GOOD)
    assert run.facts["run_facts_dropped"] == {"provenance_too_many": 2, "provenance_sha256": 1}
