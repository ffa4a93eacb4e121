"""The Queue on… dialog's form, pure: its target choices, and the form's values turned into the
client's submit arguments, refused with the field at fault before anything is sent. What only the
server can judge (an unknown device, a worker that lacks the device) comes back from the submit as
the server's own message and field."""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from ...wire.run_options import SEED_MAX
from .workers_rows import device_name

LOCAL, ANY = "local", "any"
DEFAULT_DEVICES = ["cpu", "auto", "cuda", "cuda:0", "mps"]


class FormError(ValueError):
    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


def target_options(worker_names: Iterable[str]) -> list[list[str]]:
    """[value, label] pairs: This server, each worker the server lists, Any available."""
    workers = [[name, f"Worker {name}"] for name in worker_names if name not in (LOCAL, ANY)]
    return [[LOCAL, "This server"], *workers, [ANY, "Any available"]]


def device_choices(listing: Any) -> list[str]:
    """Suggestions for the device field: the usual names, then every device the workers listing
    names (this server's and the workers'), each once."""
    seen = list(DEFAULT_DEVICES)
    groups: list[Any] = []
    if isinstance(listing, Mapping):
        local = listing.get("local")
        groups.append(local.get("devices") if isinstance(local, Mapping) else local)
        groups += [w.get("devices") for w in listing.get("workers") or [] if isinstance(w, Mapping)]
    for devices in groups:
        for device in devices if isinstance(devices, list) else []:
            name = device_name(device)
            if name not in ("", "?") and name not in seen:
                seen.append(name)
    return seen


def submit_args(form: Mapping[str, Any]) -> dict[str, Any]:
    """Keyword arguments of `Client.submit` from the dialog's fields: target, device, devices
    (comma-separated), seed (blank: the graph's settings.seed), no_seed, name."""
    args: dict[str, Any] = {}
    target = str(form.get("target") or LOCAL).strip()
    if target != LOCAL:
        args["worker"] = target
    device = str(form.get("device") or "").strip()
    if device:
        args["device"] = device
    devices_text = str(form.get("devices") or "").strip()
    if devices_text:
        devices = [d.strip() for d in devices_text.split(",")]
        if any(not d for d in devices):
            raise FormError(f"devices must be a comma-separated list such as cuda:0,cuda:1, got {devices_text!r}",
                            "devices")
        args["devices"] = devices
    seed_text = str(form.get("seed") if form.get("seed") is not None else "").strip()
    if form.get("no_seed"):
        if seed_text:
            raise FormError("give a seed or tick No seed, not both", "seed")
        args["seed"] = None
    elif seed_text:
        try:
            seed = int(seed_text)
        except ValueError:
            raise FormError(f"seed must be a whole number from 0 to {SEED_MAX}, got {seed_text!r}", "seed") from None
        if not 0 <= seed <= SEED_MAX:
            raise FormError(f"seed must be from 0 to {SEED_MAX}, got {seed}", "seed")
        args["seed"] = seed
    name = str(form.get("name") or "").strip()
    if name:
        args["name"] = name
    return args
