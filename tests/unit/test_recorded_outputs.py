"""Recorded outputs without servers: the answers (wire/output_reads.py) from the in-memory store
and from a worker's files are the same; the store's and the worker's limits; the frames."""

from __future__ import annotations

import json

import pytest

from codefy_jupyter.agent.output_reader import answer_from_folder
from codefy_jupyter.agent.outputs import runs_to_evict
from codefy_jupyter.core.runs.recorded import local_answer
from codefy_jupyter.engine import recorded
from codefy_jupyter.engine.recorded import RunOutputStore, index_of, summarize, write_outputs
from codefy_jupyter.wire import output_reads
from codefy_jupyter.wire.codec import decode, encode
from codefy_jupyter.wire.frames import CancelFetch, DropOutputs, FetchOutput, OutputAnswer
from codefy_jupyter.wire.output_reads import LIST, PORT, answer, chunks, joined, read_index

torch = pytest.importorskip("torch")


def captures():
    return {"x": {"value": torch.arange(100, dtype=torch.float32).reshape(10, 10)},
            "n": {"value": 3, "name": "three"}, "l": {"values": [1, 2, 3]}}


def test_a_listing_gives_type_and_shape_of_every_port():
    status, body = answer("r1", LIST, {}, index_of(captures()), None)
    assert status == 200
    ports = {(n["node_id"], p["port"]): p for n in body["nodes"] for p in n["ports"]}
    assert ports[("x", "value")] == {"port": "value", "type": "tensor", "shape": [10, 10], "dtype": "float32",
                                     "bytes": 400}
    assert ports[("n", "value")]["type"] == "int" and ports[("l", "values")]["shape"] == [3]


def test_a_port_read_summarises_a_tensor():
    body = summarize(torch.arange(100, dtype=torch.float32))
    assert body["stats"]["min"] == 0.0 and body["stats"]["max"] == 99.0 and body["stats"]["mean"] == 49.5
    assert body["preview"] == list(range(64)) and body["truncated"] is True and body["numel"] == 100


def test_unknown_runs_ports_and_reads_answer_in_the_error_shape():
    store = RunOutputStore()
    store.put("r1", captures())
    assert local_answer(store, "nope", LIST, {})[0] == 404
    status, body = local_answer(store, "r1", PORT, {"node_id": "x", "port": "nope"})
    assert status == 404 and body["error"]["code"] == "output_not_found"
    assert set(body["error"]) == {"code", "message", "params"}
    assert local_answer(store, "r1", "strange", {})[1]["error"]["code"] == "bad_output_read"


def test_the_files_of_a_worker_answer_exactly_as_the_store(tmp_path):
    store = RunOutputStore()
    store.put("r1", captures())
    write_outputs(tmp_path, captures())
    for kind, query in [(LIST, {}), (PORT, {"node_id": "x", "port": "value"}), (PORT, {"node_id": "n", "port": "name"}),
                        (PORT, {"node_id": "l", "port": "values"}), (PORT, {"node_id": "q", "port": "q"})]:
        assert answer_from_folder(tmp_path, "r1", kind, query) == local_answer(store, "r1", kind, query)


def test_a_damaged_file_fails_its_own_port_and_the_listing_still_answers(tmp_path):
    write_outputs(tmp_path, captures())
    index = read_index(tmp_path)
    (tmp_path / index["nodes"]["x"]["value"]["file"]).write_bytes(b"not a torch file")
    status, body = answer_from_folder(tmp_path, "r1", PORT, {"node_id": "x", "port": "value"})
    assert status == 500 and body["error"]["code"] == "output_unreadable"
    assert answer_from_folder(tmp_path, "r1", PORT, {"node_id": "n", "port": "value"})[0] == 200
    assert answer_from_folder(tmp_path, "r1", LIST, {})[0] == 200


def test_a_value_torch_cannot_save_is_listed_with_its_error(tmp_path):
    index = write_outputs(tmp_path, {"f": {"fn": lambda: 1}})
    assert "error" in index["nodes"]["f"]["fn"] and "file" not in index["nodes"]["f"]["fn"]
    status, body = answer_from_folder(tmp_path, "r1", PORT, {"node_id": "f", "port": "fn"})
    assert status == 500 and body["error"]["code"] == "output_unreadable"


def test_the_store_keeps_the_newest_runs_and_never_the_one_just_put():
    store = RunOutputStore(max_runs=3)
    evicted = [store.put(f"r{i}", {"a": {"v": i}}) for i in range(5)]
    assert evicted == [[], [], [], ["r0"], ["r1"]] and store.run_ids() == ["r2", "r3", "r4"]
    big = RunOutputStore(max_bytes=500)
    big.put("a", {"x": {"v": torch.zeros(100)}})  # 400 bytes
    assert big.put("b", {"x": {"v": torch.zeros(200)}}) == ["a"]  # 800 bytes alone: kept anyway
    assert big.run_ids() == ["b"]


def test_the_worker_evicts_oldest_first_and_never_the_newest():
    held = [("a", 10), ("b", 10), ("c", 10)]
    assert runs_to_evict(held, 2, None) == ["a"]
    assert runs_to_evict(held, 20, 15) == ["a", "b"]
    assert runs_to_evict([("a", 100)], 20, 1) == []


def test_an_answer_travels_in_chunks_and_joins_back():
    body = {"text": "x" * 1000}
    parts = chunks(body, size=100)
    assert len(parts) > 5 and joined(parts) == body


def test_the_output_frames_round_trip():
    for frame in (FetchOutput(request_id="q1", run_id="r1", kind="port", query={"node_id": "x", "port": "v"}, wait_s=60),
                  CancelFetch(request_id="q1"), DropOutputs(run_id="r1")):
        assert decode(encode(frame), sender="server") == frame
    answer_frame = OutputAnswer(request_id="q1", http_status=200, chunk=json.dumps({"a": 1}), final=True)
    assert decode(encode(answer_frame), sender="agent") == answer_frame


def test_both_ends_name_the_index_file_alike():
    assert recorded.INDEX == output_reads.INDEX
