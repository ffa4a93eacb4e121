"""Device names and the declared inventory file."""

from __future__ import annotations

import json

import pytest

from codefy_jupyter.core.devices import probe_inventory
from codefy_jupyter.wire.devices import DeviceError, InventoryError, canonical_device, inventory_from_file, resolve_device


@pytest.mark.parametrize("name,key", [("cpu", "cpu"), ("CUDA", "cuda:0"), ("cuda:3", "cuda:3"), ("mps", "mps:0"),
                                      (" mps:0 ", "mps:0")])
def test_canonical_keys(name, key):
    assert canonical_device(name) == key


@pytest.mark.parametrize("name", ["gpu", "cuda:", "cuda:x", "cpu:1", "", "auto", 3])
def test_bad_names_are_refused(name):
    with pytest.raises(DeviceError):
        canonical_device(name)


def test_auto_prefers_cuda_then_mps_then_cpu_with_a_note():
    assert resolve_device("auto", lambda: ["mps:0", "cuda:1"]) == ("cuda:1", None)
    assert resolve_device("auto", lambda: ["mps:0"]) == ("mps:0", None)
    device, note = resolve_device("auto", lambda: [])
    assert device == "cpu" and "no CUDA or MPS" in note


def test_an_absent_accelerator_is_refused():
    with pytest.raises(DeviceError, match="not available"):
        resolve_device("cuda:1", lambda: ["cuda:0"])


def test_declared_inventory_file(tmp_path):
    path = tmp_path / "inv.json"
    path.write_text(json.dumps({"devices": [{"key": "cuda", "uuid": "GPU-a"}, {"key": "cuda:1", "uuid": "GPU-b"},
                                            {"key": "cpu"}]}))
    devices = inventory_from_file(str(path))
    assert [d["key"] for d in devices] == ["cuda:0", "cuda:1"]
    assert probe_inventory(str(path)) == devices


@pytest.mark.parametrize("content,needle", [
    (None, "does not exist"), ("{oops", "not readable JSON"), ('{"devices": 3}', "expected a list"),
    ('{"devices": [{"name": "x"}]}', "devices[0] needs a 'key'"), ('[{"key": "tpu"}]', "devices[0].key"),
])
def test_bad_inventory_files_name_the_problem(tmp_path, content, needle):
    path = tmp_path / "inv.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(InventoryError, match=needle.replace("[", r"\[").replace("]", r"\]")):
        inventory_from_file(str(path))
