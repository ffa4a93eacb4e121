"""The cards a run holds, by name: the `cards` of GET runs and runs/{id}, which the Runs tables show on
hover over Devices. Each accelerator of the run's device set, with the card's name from where it
runs (this server's declared or detected inventory, or the worker's devices as its hello reported
them) and the name the run itself used for it: a worker renumbers the run's CUDA cards from cuda:0
in the order of its set (CUDA_VISIBLE_DEVICES, the seeds' #774), this server does not. Pure: the
names come in as mappings."""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping

from ..contract import lifecycle as rs


def inventory_names(inventory: Iterable[Any]) -> dict[str, str]:
    """device -> card name, from inventory entries (`key`, as core/devices.py probes them) or hello
    devices (`device`); entries without a name are left out."""
    names: dict[str, str] = {}
    for item in inventory:
        if not isinstance(item, Mapping):
            continue
        device, name = item.get("key") or item.get("device"), item.get("name")
        if isinstance(device, str) and isinstance(name, str) and name.strip():
            names[device] = name.strip()
    return names


def in_run_names(devices: list[str], on_worker: bool, facts: Any) -> dict[str, str]:
    """device -> the name the run used for it. A worker run's own report (execution_facts'
    device_aliases, run's name -> the machine's) wins; before it (or in a page that cut the facts)
    the worker's rule gives the same answer."""
    if not on_worker:
        return {d: d for d in devices}
    cuda = [d for d in devices if d.startswith("cuda:")]
    names = {d: (f"cuda:{cuda.index(d)}" if d in cuda else d) for d in devices}
    aliases = facts.get("device_aliases") if isinstance(facts, Mapping) else None
    if isinstance(aliases, Mapping):
        names.update({machine: run for run, machine in aliases.items()
                      if isinstance(machine, str) and isinstance(run, str) and machine in names})
    return names


def run_cards(row: Mapping[str, Any], names: Mapping[str, str]) -> list[dict[str, Any]] | None:
    """The run's cards ({device, name, in_run}), None for a run that waits (it holds none yet) or
    whose set is the CPU. `names`: its provider's device -> card name (a card it does not name gets
    name null)."""
    if row.get("status") == rs.QUEUED:
        return None
    devices = [d for d in (row.get("devices") or [row.get("device")]) if isinstance(d, str) and d != "cpu"]
    if not devices:
        return None
    in_run = in_run_names(devices, row.get("worker_id") is not None, row.get("execution_facts"))
    return [{"device": d, "name": names.get(d), "in_run": in_run.get(d)} for d in devices]


class RunCards:
    """Adds `cards` to run views: this server's card names, and a worker's asked of the worker side
    each time (a worker that reconnects with other cards is named as it is now)."""

    def __init__(self, local: Mapping[str, str] | None, worker_names: Callable[[str], Mapping[str, str]]) -> None:
        self.local = dict(local or {})
        self.worker_names = worker_names

    def add(self, view: dict[str, Any]) -> dict[str, Any]:
        worker = view.get("worker_id")
        cards = run_cards(view, self.worker_names(worker) if worker is not None else self.local)
        if cards is not None:
            view["cards"] = cards
        return view


__all__ = ["RunCards", "in_run_names", "inventory_names", "run_cards"]
