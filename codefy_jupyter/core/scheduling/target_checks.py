"""Submit-time questions about where a run may go, before it joins the queue (core/scheduling/
queue.py `resolve_target`, `check_placeable`): which device and set it asks for, and whether it
could ever run as asked (SubmitError 400, params name the field; the refusals are listed in the
queue's module docstring). Pure: they read the topology, the workers' offers and card reports."""

from __future__ import annotations

from typing import Iterable, Mapping

from codefy_jupyter.core.scheduling import memory_ledger as ml
from codefy_jupyter.core.scheduling import placement as wp
from codefy_jupyter.core.scheduling.device_sets import ResolvedDevice, resolve_run_device, resolve_worker_device
from codefy_jupyter.core.scheduling.placement import ANY
from codefy_jupyter.core.scheduling.scheduler_values import INTERACTIVE, Run
from codefy_jupyter.core.scheduling.slot_groups import LOCAL, Topology, WorkerOffer, slot_name


def resolve_target(topology: Topology, offers: Mapping[str, WorkerOffer], worker: str | None,
                   option_device: str | None, graph_device: str | None, target_devices: Iterable[str] | None,
                   pool: str | None = None) -> ResolvedDevice:
    """The device and set a run asks for, or SubmitError. Local (`worker` None or `local`, no
    pool): `resolve_run_device` against this server's slots, exactly as without workers. Else
    `resolve_worker_device`, with `auto` resolved against the named worker's last report (`any`:
    this server's and every seen worker's devices; a pool: its workers'). An unknown worker name
    is refused here already (`worker_unknown`)."""
    local = topology.local_slots
    if pool is None and worker in (None, LOCAL):
        return resolve_run_device(option_device, graph_device, target_devices, local)
    by_name = [offers[k] for k in sorted(offers)]
    offered: Iterable[str] | None
    name = worker if worker not in (None, LOCAL) else ANY
    if pool is not None:
        found = [d for o in by_name if o.one_shot and o.devices is not None for d in o.device_names()]
        offered = found or None
    elif name == ANY:
        offered = [*local, *(d for o in by_name if not o.one_shot for d in o.device_names())]
    else:
        offer = offers.get(name)
        if offer is None:
            raise wp.refuse_unknown_worker(name)
        offered = offer.device_names() if offer.devices is not None else None
    return resolve_worker_device(option_device, graph_device, target_devices, offered, worker=name)


def check_placeable(run: Run, topology: Topology, offers: Mapping[str, WorkerOffer],
                    memory: Mapping[str, ml.CardMemory], *, node_types: Iterable[str] | None, device_field: str,
                    mount_label: str, context_mib: int) -> None:
    """SubmitError (400) for a worker run that could never run as asked; nothing for a run that
    may wait (a known worker that is away, a device only an away worker offers). `node_types`:
    the graph's (worker_handshake.graph_node_types), checked against a named degraded worker.
    `device_field` names where a single device came from (a set is `options.target.devices`).
    Local runs pass (their checks are `resolve_run_device`'s)."""
    if run.is_local:
        if run.memory_mib is not None:
            raise ml.refuse_local(run.memory_mib / ml.GIB_MIB)
        return
    if run.lane == INTERACTIVE:
        raise wp.refuse_interactive(run.worker, run.pool)
    field_name = "options.target.devices" if len(run.devices) > 1 else device_field
    need = wp.wanted(run.device, run.devices)
    if run.pool is not None:
        if run.worker != ANY:
            raise wp.refuse_pool_with_worker(run.worker, run.pool)
        return  # it waits for a one-shot worker that offers the device (RunService times it out)
    local = topology.local_slots
    if run.worker == ANY:
        if wp.local_choice(run.device, run.devices, local) is not None:
            return
        if any(not o.one_shot and o.devices is not None and wp.device_choices(run.device, run.devices,
                                                                                 o.device_names())
               for o in offers.values()):
            return
        raise wp.refuse_not_offered(field_name, ANY, need, None, wp.renumbered(run.device, run.devices, local))
    offer = offers.get(run.worker)
    if offer is None:
        raise wp.refuse_unknown_worker(run.worker)
    if offer.devices is not None and not wp.device_choices(run.device, run.devices, offer.device_names()):
        raise wp.refuse_not_offered(field_name, offer.name, need, offer.device_names())
    if node_types is not None:
        err = wp.refuse_missing_types(offer.name, node_types, offer.missing_types)
        if err is not None:
            raise err
    # Only a file outside the data folder is known never to reach another machine (mounts and
    # the transfer capability may change with the agent's next start).
    if run.files == "same_machine" and offer.machine_id is not None and not topology.same_machine(offer):
        raise wp.refuse_storage(offer.name, run.files, mount_label)
    _check_fits_card(run, offer, memory, context_mib)


def _check_fits_card(run: Run, offer: WorkerOffer, memory: Mapping[str, ml.CardMemory], context_mib: int) -> None:
    """A budget larger than a named worker's shared card can ever hold is refused (400)."""
    if run.memory_mib is None or offer.devices is None:
        return
    need = run.memory_mib + context_mib
    for devs in wp.device_choices(run.device, run.devices, offer.device_names())[:1]:
        for dev in devs:
            card = memory.get(slot_name(offer.name, dev))
            if dev in offer.shared_memory and card is not None and card.total_mib is not None \
                    and need > card.total_mib:
                raise ml.refuse_over_card(slot_name(offer.name, dev), need, card.total_mib)
