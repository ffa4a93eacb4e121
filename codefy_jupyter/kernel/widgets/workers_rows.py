"""The Workers table's rows from `GET …/codefy/api/workers`, pure.

The listing is {"workers": [...], "local": [...]} (a bare list of workers, or `local` as
{"devices": [...]}, are taken too): each worker with a name, a state (connected, draining,
disconnected, offline), a catalog status (online, or degraded with the node types it lacks), its devices each with its slots {limit, taken} (and shared_with "local"
for one of this server's devices), and the ids of the runs it executes; `local` lists this server's
devices the same way. Fields this view does not know are ignored, and missing ones read "-", so a
newer server's listing still renders.
"""

from __future__ import annotations

from typing import Any, Mapping

NO_WORKERS = "no workers connected"

# The state pill's colour (a tone the CSS colours) for every worker state the API lists
# (core/workers/registry.py STATES) and every catalog status (core/workers/handshake.py
# CatalogDiff.status); tests/unit/test_widget_rows.py holds this table to those lists, so a state
# added there cannot reach the browser uncoloured. `online` is also what older servers sent as
# the state. A state this table does not know still gets a pill, in UNKNOWN_TONE.
STATE_TONES = {
    "connected": "ok",
    "online": "ok",
    "draining": "warn",
    "degraded": "warn",
    "disconnected": "bad",
    "offline": "off",
}
UNKNOWN_TONE = "unknown"


def state_tone(state: str) -> str:
    return STATE_TONES.get(state, UNKNOWN_TONE)


def device_name(device: Any) -> str:
    if isinstance(device, Mapping):
        for key in ("device", "id", "name"):
            if device.get(key):
                return str(device[key])
        return "?"
    return str(device)


def _slots(device: Any) -> tuple[int, int] | None:
    slots = device.get("slots") if isinstance(device, Mapping) else None
    if not isinstance(slots, Mapping):
        return None
    limit, taken = slots.get("limit"), slots.get("taken", 0)
    if not isinstance(limit, int) or not isinstance(taken, int):
        return None
    return taken, limit


def devices_cell(devices: Any) -> tuple[str, str]:
    """(devices, slots) cells: "cuda:0, cuda:1" and "1/2" (taken/limit, over every device with
    slots). A device that is also this server's (shared_with "local") is marked, since its slot is
    this server's slot for the card."""
    names, taken, limit, counted = [], 0, 0, False
    for device in devices if isinstance(devices, list) else []:
        name = device_name(device)
        if isinstance(device, Mapping) and device.get("shared_with") == "local":
            name += " (shared with this server)"
        names.append(name)
        slots = _slots(device)
        if slots is not None:
            taken, limit, counted = taken + slots[0], limit + slots[1], True
    return (", ".join(names) or "-"), (f"{taken}/{limit}" if counted else "-")


def _running(worker: Mapping[str, Any]) -> list[str]:
    for key in ("running_runs", "runs", "running"):
        value = worker.get(key)
        if isinstance(value, list):
            return [str(r.get("id", "?")) if isinstance(r, Mapping) else str(r) for r in value]
        if isinstance(value, int) and not isinstance(value, bool):
            return ["?"] * value
    return []


def worker_row(worker: Mapping[str, Any]) -> dict[str, Any]:
    devices, slots = devices_cell(worker.get("devices"))
    running = _running(worker)
    state = str(worker.get("state") or worker.get("status") or "-")
    # A connected worker whose node catalog differs from the server's takes only runs whose node
    # types it has (`any` never picks it): a second pill says so, naming what it lacks.
    missing = worker.get("missing_types")
    degraded = worker.get("status") == "degraded" and state != "degraded"
    return {
        "name": str(worker.get("name") or worker.get("id") or "?"),
        "state": state,
        "tone": state_tone(state),
        "degraded": degraded,
        "missing_types": [str(m) for m in missing] if degraded and isinstance(missing, list) else [],
        "devices": devices,
        "slots": slots,
        "running": len(running),
        "running_ids": [r for r in running if r != "?"],
        "same_host": bool(worker.get("same_host")),
    }


def worker_rows(listing: Any) -> tuple[list[dict[str, Any]], dict[str, str] | None]:
    """(rows, this server's devices as {devices, slots} or None) of a workers listing."""
    if isinstance(listing, list):
        workers, local = listing, None
    elif isinstance(listing, Mapping):
        workers, local = listing.get("workers") or [], listing.get("local")
    else:
        workers, local = [], None
    rows = [worker_row(w) for w in workers if isinstance(w, Mapping)]
    rows.sort(key=lambda r: r["name"])
    local_cells = None
    if isinstance(local, Mapping):
        devices, slots = devices_cell(local.get("devices"))
        local_cells = {"devices": devices, "slots": slots}
    elif isinstance(local, list):
        devices, slots = devices_cell(local)
        local_cells = {"devices": devices, "slots": slots}
    return rows, local_cells


def worker_names(listing: Any) -> list[str]:
    """Names a run can target (the Queue on… dialog's worker choices)."""
    rows, _ = worker_rows(listing)
    return [r["name"] for r in rows]
