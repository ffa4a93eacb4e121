"""Node-pack discovery: the direct scan finds what importlib.metadata finds, on the real install and
on metadata folders written by the test, and the engine's first call in a fresh process imports
no importlib.metadata."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from importlib.metadata import entry_points as metadata_entry_points
from pathlib import Path

from codefy_jupyter.engine.entry_points import entry_points, scan
from codefy_jupyter.engine.registry import ENTRY_POINT_GROUP, NodeRegistry


def dist(site: Path, folder: str, text: str) -> None:
    info = site / folder
    info.mkdir(parents=True)
    name = folder.split("-")[0]
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(text)


def test_the_scan_finds_what_importlib_metadata_finds_on_this_install():
    found = scan(ENTRY_POINT_GROUP)
    assert found is not None
    expected = sorted((ep.name, ep.value) for ep in metadata_entry_points(group=ENTRY_POINT_GROUP))
    assert sorted((ep.name, ep.value) for ep in found) == expected
    assert {"basic", "structure", "data", "models", "training", "evaluation"} <= {ep.name for ep in found}


def test_packs_in_folders_on_the_path_first_distribution_of_a_name_wins(tmp_path, monkeypatch):
    first, second = tmp_path / "first", tmp_path / "second"
    pack = tmp_path / "mods"
    pack.mkdir()
    (pack / "scan_pack_a.py").write_text(
        "def register(registry):\n"
        "    registry.node('FromScanA', outputs={'v': 'int'})(lambda ctx: {'v': 1})\n")
    dist(first, "scan_pack-1.0.dist-info",
         "[console_scripts]\nx = y:z\n\n[codefy_jupyter.nodes]\nmine = scan_pack_a:register [extra]\n")
    # The same distribution again further down the path (an older copy): importlib.metadata skips it.
    dist(second, "Scan.Pack-0.9.dist-info", "[codefy_jupyter.nodes]\nold = scan_pack_old\n")
    dist(second, "other_pack-2.0.dist-info", "[other.group]\nnope = nope\n")
    path = [str(first), str(second), str(pack)]
    monkeypatch.setattr(sys, "path", path + sys.path)
    found = scan(ENTRY_POINT_GROUP, path=path)
    assert [(ep.name, ep.value) for ep in found] == [("mine", "scan_pack_a:register [extra]")]
    expected = {(ep.name, ep.value) for ep in metadata_entry_points(group=ENTRY_POINT_GROUP)}
    assert ("mine", "scan_pack_a:register [extra]") in expected and ("old", "scan_pack_old") not in expected
    reg = NodeRegistry()
    assert "mine" in reg.load_entry_points()
    assert "FromScanA" in reg


def test_a_zip_on_the_path_is_left_to_importlib_metadata(tmp_path, monkeypatch):
    archive = tmp_path / "packs.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("zipped_pack-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: zipped-pack\nVersion: 1.0\n")
        z.writestr("zipped_pack-1.0.dist-info/entry_points.txt", "[codefy_jupyter.nodes]\nzipped = zipped_mod\n")
    assert scan(ENTRY_POINT_GROUP, path=[str(archive)]) is None
    monkeypatch.setattr(sys, "path", [str(archive)] + sys.path)
    assert "zipped" in {ep.name for ep in entry_points(ENTRY_POINT_GROUP)}


def test_a_finder_that_lists_distributions_of_its_own_is_left_to_importlib_metadata():
    class Finder:
        @staticmethod
        def find_distributions(context=None):
            return iter(())

    assert scan(ENTRY_POINT_GROUP, meta_path=[Finder()]) is None


def test_the_first_run_in_a_process_imports_no_importlib_metadata():
    code = ("import sys, json\nimport codefy_jupyter.engine as e\ne.default_registry()\n"
            "r = e.run_graph({'nodes': [{'id': 'a', 'type': 'Float', 'params': {'value': 1.0}}], 'edges': []})\n"
            "print(json.dumps([r.status, 'importlib.metadata' in sys.modules, 'csv' in sys.modules]))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60,
                         check=True)
    assert json.loads(out.stdout) == ["succeeded", False, False]
