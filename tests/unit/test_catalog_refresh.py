"""Node packs installed or removed while a process runs: NodeRegistry.refresh_entry_points follows
them (a new pack loads, a removed one takes its types away, a module pack installed again registers
again, a broken one is named and left out), and CatalogWatch.check says when the catalog changed."""

from __future__ import annotations

import asyncio
import shutil
import sys
import uuid

import pytest

from codefy_jupyter.core.workers.catalog_watch import CatalogWatch
from codefy_jupyter.engine import NodeRegistry, RegistryError

GROUP = "codefy_test.refresh"


class Site:
    """A folder on sys.path where packs are installed (a module and its dist-info folder) and removed."""

    def __init__(self, path, monkeypatch) -> None:
        self.path = path
        path.mkdir()
        monkeypatch.syspath_prepend(str(path))
        self.tag = uuid.uuid4().hex[:8]  # module names of this test alone (sys.modules outlives it)

    def install(self, pack: str, source: str, attr: str | None = None) -> str:
        module = f"refresh_{pack}_{self.tag}"
        (self.path / f"{module}.py").write_text(source)
        info = self.path / f"{module}-0.0.dist-info"
        info.mkdir(exist_ok=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 0.0\n")
        target = f"{module}:{attr}" if attr else module
        (info / "entry_points.txt").write_text(f"[{GROUP}]\n{pack} = {target}\n")
        return module

    def remove(self, module: str) -> None:
        shutil.rmtree(self.path / f"{module}-0.0.dist-info")


REGISTER = """
def register(registry):
    @registry.node("{name}", outputs={{"y": "float"}})
    def fn(ctx):
        return {{"y": 1.0}}
"""

MODULE = """
from codefy_jupyter.engine.registry import NodeRegistry
import {holder} as holder

@holder.REGISTRY.node("{name}", outputs={{"y": "float"}})
def fn(ctx):
    return {{"y": 2.0}}
"""


def test_an_installed_pack_loads_and_a_removed_one_takes_its_types_away(tmp_path, monkeypatch):
    site = Site(tmp_path / "site", monkeypatch)
    first = site.install("first", REGISTER.format(name="First"), "register")
    registry = NodeRegistry()
    registry.load_entry_points(GROUP)
    assert registry.types() == ["First"] and registry.pack_names() == {"first"}
    assert registry.refresh_entry_points(GROUP) is False  # nothing new
    site.install("second", REGISTER.format(name="Second"), "register")
    assert registry.refresh_entry_points(GROUP) is True
    assert registry.types() == ["First", "Second"]
    site.remove(first)
    assert registry.refresh_entry_points(GROUP) is True
    assert registry.types() == ["Second"] and registry.pack_names() == {"second"}
    site.install("first", REGISTER.format(name="First"), "register")  # installed again
    assert registry.refresh_entry_points(GROUP) is True and registry.types() == ["First", "Second"]


def test_a_module_pack_installed_again_registers_its_nodes_again(tmp_path, monkeypatch):
    site = Site(tmp_path / "site", monkeypatch)
    holder = f"refresh_holder_{site.tag}"
    (site.path / f"{holder}.py").write_text("from codefy_jupyter.engine import NodeRegistry\nREGISTRY = NodeRegistry()\n")
    module = site.install("mod", MODULE.format(holder=holder, name="Mod"))
    registry = __import__(holder).REGISTRY
    assert registry.refresh_entry_points(GROUP) is True and registry.types() == ["Mod"]
    site.remove(module)
    assert registry.refresh_entry_points(GROUP) is True and registry.types() == []
    site.install("mod", MODULE.format(holder=holder, name="Mod"))  # its module is imported already
    assert registry.refresh_entry_points(GROUP) is True and registry.types() == ["Mod"]


def test_a_broken_new_pack_is_named_and_the_others_still_load(tmp_path, monkeypatch):
    site = Site(tmp_path / "site", monkeypatch)
    site.install("broken", "raise RuntimeError('no luck')\n")
    site.install("good", REGISTER.format(name="Good"), "register")
    registry = NodeRegistry()
    with pytest.raises(RegistryError, match=r"broken: RuntimeError: no luck"):
        registry.refresh_entry_points(GROUP)
    assert registry.types() == ["Good"]
    assert registry.refresh_entry_points(GROUP) is False  # named once, not again at every look


def test_the_watch_says_a_change_once_and_calls_back(tmp_path, monkeypatch):
    site = Site(tmp_path / "site", monkeypatch)
    registry = NodeRegistry()
    calls = []
    watch = CatalogWatch(registry, 0, lambda: calls.append(registry.types()), group=GROUP)
    watch.seen()
    assert asyncio.run(watch.check()) is False
    site.install("w", REGISTER.format(name="Watched"), "register")
    assert asyncio.run(watch.check()) is True and calls == [["Watched"]]
    assert asyncio.run(watch.check()) is False and calls == [["Watched"]]
    assert sys.path[0] == str(site.path)
