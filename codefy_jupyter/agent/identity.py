"""What the agent tells the control plane about itself, gathered without importing torch: its devices
(NVML, or the declared inventory file), the machine id digest, the platform, and the node catalog and
environment fingerprint (from the catalog helper subprocess).

Devices. With `CODEFY_DEVICE_INVENTORY` the declared file is the truth (machines whose devices are
declared, and tests). Otherwise NVML lists the CUDA cards in PCI bus order; when the agent itself was
started with `CUDA_VISIBLE_DEVICES` (a Slurm or Kubernetes allocation), it offers only those cards,
renumbered `cuda:0..` in that order, and each keeps the entry that names it there (an index, a
`GPU-...` UUID or a MIG id) for the runs' own CUDA_VISIBLE_DEVICES. An Apple-silicon Mac offers
`mps:0`. The CPU is always offered.
"""

from __future__ import annotations

import asyncio
import json
import logging
import platform
import sys
from dataclasses import dataclass
from typing import Any, Mapping

from ..wire.devices import DeviceError, InventoryError, canonical_device, inventory_from_file
from .isolation import CPU, OfferedDevice

log = logging.getLogger("codefy.agent")

MIB = 1024 * 1024
CATALOG_TIMEOUT_S = 300.0


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def nvml_cards() -> list[dict[str, Any]]:
    """Every CUDA card NVML sees: index (PCI bus order), name, uuid, total and free memory in bytes."""
    try:
        import pynvml
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except Exception:  # no driver, no GPU: a CPU machine
        return []
    try:
        cards = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
            cards.append({"index": i, "name": _text(pynvml.nvmlDeviceGetName(handle)),
                          "uuid": _text(pynvml.nvmlDeviceGetUUID(handle)),
                          "total_memory": int(memory.total), "free_memory": int(memory.free)})
        return cards
    except Exception as err:  # a card that fails to answer: offer none rather than a wrong list
        log.warning("NVML failed to list the cards: %s", err)
        return []
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def restrict_to_visible(cards: list[dict[str, Any]], visible: str | None) -> list[OfferedDevice]:
    """The cards offered, renumbered, given the agent's own CUDA_VISIBLE_DEVICES (None: unset)."""
    if visible is None:
        return [OfferedDevice(f"cuda:{c['index']}", str(c["index"]), c.get("name"), c.get("uuid"), c.get("total_memory"))
                for c in cards]
    offered = []
    for entry in [e.strip() for e in visible.split(",") if e.strip()]:
        if entry.startswith("-"):  # CUDA stops at the first invalid entry; so do we
            break
        card = None
        if entry.isdigit():
            card = next((c for c in cards if c["index"] == int(entry)), None)
            if card is None:
                break
        else:
            card = next((c for c in cards if str(c.get("uuid", "")).startswith(entry)), None)
        name = f"cuda:{len(offered)}"
        if card is None:  # a MIG instance or a card NVML does not list: offered, without details
            offered.append(OfferedDevice(name, entry, None, entry if entry.startswith(("GPU-", "MIG-")) else None))
        else:
            offered.append(OfferedDevice(name, entry, card.get("name"), card.get("uuid"), card.get("total_memory")))
    return offered


def declared_devices(path: str) -> list[OfferedDevice]:
    out = []
    for item in inventory_from_file(path):
        key = item["key"]
        total = item.get("memory_total_mib")
        out.append(OfferedDevice(key, key.split(":")[1] if key.startswith("cuda:") else "", item.get("name"),
                                 item.get("uuid") or None, int(total) * MIB if isinstance(total, (int, float)) else None))
    return out


def declared_free(path: str) -> list[dict[str, Any]]:
    try:
        items = inventory_from_file(path)
    except InventoryError as err:
        log.warning("%s", err)
        return []
    return [{"device": i["key"], "free_memory": int(i["memory_free_mib"]) * MIB} for i in items
            if isinstance(i.get("memory_free_mib"), (int, float)) and not isinstance(i.get("memory_free_mib"), bool)]


def apple_gpu() -> list[OfferedDevice]:
    if sys.platform == "darwin" and platform.machine() == "arm64":
        return [OfferedDevice("mps:0", "", "Apple GPU")]
    return []


@dataclass
class Inventory:
    """The agent's devices. `declared`: from a file (no live memory figures)."""

    devices: list[OfferedDevice]
    declared: bool
    path: str = ""  # the declared file, read again for each heartbeat's memory figures
    shared: frozenset[str] = frozenset()  # cards shared by memory (--share-memory), in hello

    def share_by_memory(self, names: list[str]) -> None:
        """Mark cards shared by memory; InventoryError for a name that is not one of its CUDA cards."""
        shared = set()
        for name in names:
            try:
                device = canonical_device(name)
            except DeviceError as err:
                raise InventoryError(f"--share-memory: {err}") from None
            if not device.startswith("cuda:") or device not in self.by_name:
                offered = ", ".join(d.device for d in self.devices if d.device.startswith("cuda:")) or "none"
                raise InventoryError(f"--share-memory {name}: not a CUDA card of this machine (cards: {offered})")
            shared.add(device)
        self.shared = frozenset(shared)

    @classmethod
    def probe(cls, env: Mapping[str, str]) -> Inventory:
        declared = env.get("CODEFY_DEVICE_INVENTORY", "")
        if declared:
            return cls([CPU] + declared_devices(declared), True, declared)
        cards = restrict_to_visible(nvml_cards(), env.get("CUDA_VISIBLE_DEVICES"))
        return cls([CPU] + cards + apple_gpu(), False)

    @property
    def by_name(self) -> dict[str, OfferedDevice]:
        return {d.device: d for d in self.devices}

    def hello(self) -> list[dict[str, Any]]:
        memory = {d["device"]: d for d in self.heartbeat()} if self.shared else {}
        return [{**d.hello(), **memory.get(d.device, {}), **({"share": "memory"} if d.device in self.shared else {})}
                for d in self.devices]

    def heartbeat(self) -> list[dict[str, Any]]:
        """Free memory now, for the cards NVML can ask (by UUID, whatever their number here). A
        declared inventory reports each card's `memory_free_mib` as the file says now (tests change it)."""
        if self.declared:
            return declared_free(self.path)
        free = {c["uuid"]: c["free_memory"] for c in nvml_cards()}
        return [{"device": d.device, "free_memory": free[d.uuid]} for d in self.devices if d.uuid in free]


def platform_string() -> str:
    return f"{platform.system()} {platform.release()} {platform.machine()}; Python {platform.python_version()}"


@dataclass(frozen=True)
class Catalog:
    catalog_hash: str | None
    node_types: dict[str, str] | None
    fingerprint: dict[str, Any]


async def probe_catalog(env: Mapping[str, str], python: str = sys.executable) -> Catalog:
    """Node catalog and fingerprint from the helper subprocess; no catalog when it fails (the control
    plane then lists the worker degraded, and `any` never picks it)."""
    try:
        proc = await asyncio.create_subprocess_exec(
            python, "-m", "codefy_jupyter.agent.catalog", env=dict(env), stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        try:
            out, err = await asyncio.wait_for(proc.communicate(), CATALOG_TIMEOUT_S)
        except asyncio.TimeoutError:
            proc.kill()
            await proc.wait()
            raise RuntimeError(f"no answer within {CATALOG_TIMEOUT_S:g} s") from None
        if proc.returncode != 0:
            raise RuntimeError(err.decode(errors="replace").strip().splitlines()[-1:] or f"exit {proc.returncode}")
        data = json.loads(out)
        return Catalog(data["catalog_hash"], data["node_types"], data["fingerprint"])
    except (OSError, RuntimeError, ValueError, KeyError) as err:
        log.error("could not list this machine's node types (the worker will be listed degraded): %s", err)
        return Catalog(None, None, {})


__all__ = ["Catalog", "Inventory", "InventoryError", "platform_string", "probe_catalog", "restrict_to_visible"]
