"""One typed `RunOptions` from the submit to the run's process (wire/run_options.py): parsed once
from a submit body, written to the run row and read back unchanged, carried typed in the assign
frame, and every bad option refused naming its field."""

from __future__ import annotations

import pytest

from codefy_jupyter.core.runs.requests import SchemaError, parse_submit
from codefy_jupyter.wire import codec
from codefy_jupyter.wire.frames import Assign
from codefy_jupyter.wire.run_options import (ExecutionOptions, OptionError, RunOptions, Target, parse_options)

GRAPH = {"nodes": [{"id": "k", "type": "Float", "params": {"value": 2}}], "edges": []}
FULL = {"seed": 7, "deterministic": True, "record_outputs": True, "provenance": True, "device": "cuda:0",
        "lane": "interactive", "session": "s1", "cpu_threads": 3,
        "target": {"worker": "gpu1", "devices": ["cuda:0", "cuda:1"], "memory_gib": 1.5,
                   "memory_source": "estimate", "wait": False}}


def test_a_submit_body_is_parsed_once_into_typed_options():
    options = parse_submit({"graph": GRAPH, "options": FULL}).options
    assert options == RunOptions(
        device="cuda:0", seed=7, seed_given=True, deterministic=True, record_outputs=True, provenance=True,
        lane="interactive", session="s1", cpu_threads=3,
        target=Target(worker="gpu1", devices=("cuda:0", "cuda:1"), memory_gib=1.5, memory_source="estimate",
                      wait=False))
    # GiB -> MiB in one place, rounded up.
    assert options.memory_mib == 1536 and Target(memory_gib=0.0001).memory_mib == 1
    assert parse_options(None) == RunOptions() and RunOptions().memory_mib is None


def test_the_seed_is_decided_once_the_options_or_the_graphs():
    assert parse_options({}).resolved(11).seed == 11
    assert parse_options({"seed": None}).resolved(11).seed is None  # null: unseeded, not the graph's
    assert parse_options({"seed": 3.0}).resolved(11).seed == 3


# The row names a local target's worker None and a pool's "any", as the submit means them.
@pytest.mark.parametrize("raw", [FULL, {}, {"seed": None}, {"target": {"worker": "any", "pool": "one-shot"}},
                                 {"target": {"memory_gib": 2}}])
def test_the_stored_row_reads_back_the_same_options(raw):
    options = parse_options(raw).resolved(5)
    row = {"id": "r1", **options.to_row(options.device)}
    again = RunOptions.from_row(row)
    assert again == options
    # And a queued run queued again after a restart or takeover submits the same options.
    assert parse_options(again.to_submit()) == options


def test_a_row_from_before_a_key_existed_reads_its_default():
    assert RunOptions.from_row({"id": "r"}) == RunOptions(seed_given=True)


def test_the_assign_frame_carries_the_execution_options_unchanged():
    execution = parse_options(FULL).execution(max_parallel_nodes=2)
    frame = Assign(run_id="r1", graph=GRAPH, device="cuda:0", options=execution)
    wire = codec.to_dict(frame)
    assert wire["options"] == {"seed": 7, "deterministic": True, "max_parallel_nodes": 2, "record_outputs": True,
                               "provenance": True}
    back = codec.decode(codec.encode(frame), sender="server")
    assert back.options == execution and isinstance(back.options, ExecutionOptions)


def test_an_assign_of_the_previous_version_still_reads():
    # The server of the previous version sent `name` and `queue_key` too; unknown keys are ignored.
    old = {"seed": None, "deterministic": False, "max_parallel_nodes": 4, "name": "n", "queue_key": "w/cpu"}
    assert ExecutionOptions.from_json(old) == ExecutionOptions()


@pytest.mark.parametrize("raw, field", [
    ({"seed": -1}, "options.seed"), ({"seed": 2**32}, "options.seed"), ({"seed": 1.5}, "options.seed"),
    ({"seed": True}, "options.seed"), ({"deterministic": "yes"}, "options.deterministic"),
    ({"lane": "fast"}, "options.lane"), ({"cpu_threads": 0}, "options.cpu_threads"),
    ({"colour": 1}, "options.colour"), ({"target": {"memory_gib": 0}}, "options.target.memory_gib"),
    ({"target": {"memory_gib": "4"}}, "options.target.memory_gib"),
    ({"target": {"memory_source": "estimate"}}, "options.target.memory_source"),
    ({"target": {"pool": "many"}}, "options.target.pool"), ({"target": {"devices": [1]}}, "options.target.devices[0]"),
    ({"target": {"wait": 1}}, "options.target.wait"), ({"target": {"x": 1}}, "options.target.x"),
])
def test_bad_options_are_refused_naming_the_field(raw, field):
    with pytest.raises(OptionError) as err:
        parse_options(raw)
    assert err.value.field == field
    with pytest.raises(SchemaError) as schema:
        parse_submit({"graph": GRAPH, "options": raw})
    assert schema.value.field == field


@pytest.mark.parametrize("raw, field", [({"seed": "7"}, "seed"), ({"deterministic": 1}, "deterministic"),
                                        ({"max_parallel_nodes": 0}, "max_parallel_nodes"), ("x", "")])
def test_a_bad_assign_option_is_refused_naming_it(raw, field):
    with pytest.raises(OptionError) as err:
        ExecutionOptions.from_json(raw)
    assert err.value.field == field
