"""Where a worker-targeted run may go: device choices, submit refusals, wait reasons. Pure.

`RunQueue` (core/scheduling/queue.py) owns the state and calls these; they take plain values, so each
rule can be read and tested alone. The rules are the seed's (run-queue "Workers"; execution
architecture "Scheduling" and "Why some refusals are immediate"):

- A worker run asks for a device set (`devices`), one concrete device, or the kind `cuda` (the
  first free card on the worker); see `device_sets.resolve_worker_device`.
- This server can take an `any` run only when it has every device asked for and the CUDA set would
  not be renumbered: a worker's run subprocess sees its cards from cuda:0 (CUDA_VISIBLE_DEVICES),
  this server's process does not, so a CUDA set of more than one card, or one card other than
  cuda:0, never runs here. A bare `cuda` is cuda:0 here (as for a local run).
"""

from __future__ import annotations

from typing import Iterable, Sequence

from codefy_jupyter.core.scheduling.device_sets import KIND_REQUESTS, Notice, SubmitError, device_kind

ANY = "any"
ONE_SHOT = "one-shot"
POOLS = (ONE_SHOT,)


def wanted(device: str, devices: Sequence[str]) -> tuple[str, ...]:
    """What the run asks for, as listed in reasons and refusals."""
    return tuple(devices) or (device,)


def device_choices(device: str, devices: Sequence[str], offered: Sequence[str]) -> list[tuple[str, ...]]:
    """The device tuples a provider offering `offered` (in its order) could run this on, best first:
    the whole set, the device itself, or each offered device of the asked kind."""
    if device in KIND_REQUESTS and not devices:
        return [(d,) for d in offered if device_kind(d) == device]
    need = wanted(device, devices)
    return [need] if all(d in offered for d in need) else []


def local_choice(device: str, devices: Sequence[str], local: Iterable[str]) -> tuple[str, ...] | None:
    """The devices an `any` run would hold on this server, or None when it may not run here."""
    need = ("cuda:0",) if device == "cuda" and not devices else wanted(device, devices)
    cuda = [d for d in need if device_kind(d) == "cuda"]
    if cuda and need != ("cuda:0",):
        return None  # renumbering: a worker would see these from cuda:0, this process would not
    here = set(local) | {"cpu"}
    return need if all(d in here for d in need) else None


def renumbered(device: str, devices: Sequence[str], local: Iterable[str]) -> bool:
    """This server has every device asked for, but may not take it: a renumbered CUDA set."""
    need = wanted(device, devices)
    here = set(local) | {"cpu"}
    return device != "cuda" and all(d in here for d in need) and local_choice(device, devices, local) is None


# --- refusals (400 at submit) ------------------------------------------------------------------


def refuse_interactive(worker: str, pool: str | None) -> SubmitError:
    where = f"pool {pool}" if pool else f"worker {worker}"
    return SubmitError("worker_interactive",
                       f"options.lane: a run on {where} cannot use the interactive lane; "
                       "interactive runs execute on this server", {"field": "options.lane", "worker": worker})


def refuse_unknown_worker(worker: str) -> SubmitError:
    return SubmitError("worker_unknown",
                       f"options.target.worker: worker {worker} is not enrolled and has not connected to "
                       "this server since it started", {"field": "options.target.worker", "worker": worker})


def refuse_pool_with_worker(worker: str, pool: str) -> SubmitError:
    return SubmitError("pool_with_worker",
                       f"options.target.pool: pool {pool} places a run on any one-shot worker; "
                       f"it cannot be combined with worker {worker}",
                       {"field": "options.target.pool", "worker": worker, "pool": pool})


def refuse_not_offered(field_name: str, worker: str, need: Sequence[str], offered: Sequence[str] | None,
                       renumbered: bool = False) -> SubmitError:
    listed = ", ".join(need)
    params = {"field": field_name, "worker": worker, "devices": list(need)}
    if worker == ANY:
        text = f"{field_name}: neither this server nor any worker it has seen offers {listed}"
        if renumbered:
            text = (f"{field_name}: no worker this server has seen offers {listed} (this server runs a CUDA set "
                    "only as [cuda:0]: a worker renumbers the set from cuda:0, this server would not)")
        return SubmitError("device_not_offered", text, params)
    params["offered"] = list(offered or ())
    return SubmitError("device_not_offered",
                       f"{field_name}: worker {worker} does not offer {listed} "
                       f"(it last reported {', '.join(offered or ()) or 'no devices'})", params)


def refuse_missing_types(worker: str, needed: Iterable[str], missing: Iterable[str] | None) -> SubmitError | None:
    """A degraded worker lacking some of the graph's node types (None: unknown, nothing to refuse)."""
    lacking = sorted(set(needed) & set(missing or ()))
    if not lacking:
        return None
    return SubmitError("worker_missing_node_types",
                       f"options.target.worker: worker {worker} lacks node types this graph uses: "
                       f"{', '.join(lacking)}",
                       {"field": "options.target.worker", "worker": worker, "missing_types": lacking})


# --- wait reasons ------------------------------------------------------------------------------


def reason_disconnected(worker: str) -> Notice:
    return Notice.worded("worker_disconnected", {"worker": worker})


def reason_draining(worker: str) -> Notice:
    return Notice.worded("worker_draining", {"worker": worker})


def reason_no_offer(need: Sequence[str], worker: str = ANY, draining: Sequence[str] = ()) -> Notice:
    """`any`: nobody that takes runs offers the devices now (`draining`: those that would, draining).
    A named worker: it is connected but no longer reports them."""
    params: dict = {"devices": list(need), "worker": worker}
    if worker == ANY and draining:
        params["draining"] = list(draining)
    return Notice.worded("waiting_for_offer", params)


def reason_one_shot_pool(need: Sequence[str]) -> Notice:
    return Notice.worded("one_shot_pool", {"devices": list(need), "pool": ONE_SHOT})


def reason_one_shot_start(worker: str) -> Notice:
    """A one-shot worker that is not connected: it leaves after its run, so it is not "reconnecting";
    the run waits for an agent of that name to be started."""
    return Notice.worded("one_shot_start", {"worker": worker})


def reason_one_shot_taken(worker: str) -> Notice:
    return Notice.worded("one_shot_taken", {"worker": worker})


def reason_one_shot_run_id(worker: str, run_id: str, name: str | None = None) -> Notice:
    """The named one-shot worker was started for another run (`name`: that run's, for the words)."""
    return Notice.worded("one_shot_run_id", {"worker": worker, "run_id": run_id, "name": name})


# --- files (seed: storage) ---------------------------------------------------------------------

_STORAGE_TEXT = {
    "transfer": "the mount label {label}, or the transfer backend",
    "mount": "the mount label {label} (the data folder, mounted)",
    "same_machine": "this server's machine (it reads a file outside the data folder)",
}


def storage_backend(need: str, *, same_machine: bool, has_label: bool, transfer: bool) -> str | None:
    """How a worker gets a run's files (core/storage/run_needs.py levels), or None when it cannot:
    `none` (no files), `local` (same machine: it borrows this server's folder), `mount` (the label),
    `transfer` (inputs downloaded, outputs uploaded). A worker with the label beats transfer."""
    if need == "none":
        return "none"
    if same_machine:
        return "local"
    if need == "same_machine":
        return None
    if has_label:
        return "mount"
    if need == "transfer" and transfer:
        return "transfer"
    return None


def reason_storage(need: str, worker: str, label: str, why: tuple[str, str] | None = None) -> Notice:
    """The run uses files that no worker it may go to can reach now. `why`: (code, text) of why the
    transfer backend cannot serve it (not uploads, over the size limit, outside the data folder)."""
    params: dict = {"worker": worker, "need": need, "label": label}
    if why is not None:
        params.update(why=why[0], detail=why[1])
    return Notice.worded("waiting_for_storage", params)


def refuse_storage(worker: str, need: str, label: str) -> SubmitError:
    what = _STORAGE_TEXT.get(need, need).format(label=label)
    return SubmitError("worker_storage_unavailable",
                       f"options.target.worker: this run uses files only {what} has; worker {worker} is on "
                       "another machine", {"field": "options.target.worker", "worker": worker, "need": need,
                                           "label": label})
