"""Which device a run gets, and which devices it holds: pure, no I/O.

The rules are the run queue's (run-queue seed, "One queue per device" and its notes):

- The device comes from the run's own `options.device`, then the graph's `settings.device`, then
  `cpu`. Nothing picks an accelerator on the user's behalf except an explicit `auto`, which takes
  the best accelerator this server has (CUDA, lowest index first, then MPS) and otherwise falls
  back to `cpu` with a warning.
- A device set (`options.target.devices`) lists concrete devices of one kind: `cpu`, `cuda:N`,
  `mps:N` (a bare `mps` means `mps:0`). A bare `cuda` is refused (on a multi-GPU box it would
  follow the process's current device, so the set would not say which card), and so are `auto`,
  duplicates and mixed kinds. The set's first entry is the run's device (and so its queue) when
  the device is omitted, `auto` or only the kind (`cuda`, `mps`); any other device must equal it.
  `settings.device` is not consulted for a set run.
- Decision (the seed leaves it open for explicit names): an accelerator named explicitly, by the
  run, by the graph's settings or in a set, that this server does not have is refused with 400
  (`device_unavailable`) rather than silently run on the CPU. A submit that can never run as asked
  answers 400; only `auto` falls back.

A worker run (`resolve_worker_device`) is resolved the same way except that nothing is checked
against this server's devices (the scheduler checks the worker's), a bare `cuda` stays the kind
(the first free card on the worker: queue `<worker>/cuda`), and `auto` resolves against what the
worker last reported.

Refusals are `SubmitError`s (code, message, params; HTTP 400 unless said otherwise). Warnings are
`Notice`s with the same three fields, so the API reports both in one shape.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

from codefy_jupyter.core.errors import SubmitError  # noqa: F401  (re-exported: the scheduler's refusal)
from codefy_jupyter.wire import messages as words
from codefy_jupyter.wire.devices import DeviceError, canonical_device

KINDS = ("cpu", "cuda", "mps")
# A worker run may ask for a kind: the first free device of it on the worker (`<worker>/cuda`).
KIND_REQUESTS = ("cuda",)


@dataclass(frozen=True)
class Notice:
    """A warning or a wait reason: a stable `code`, an English `message`, and `params` a UI can
    render in its own language."""

    code: str
    message: str
    params: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "params": dict(self.params)}

    @classmethod
    def worded(cls, code: str, params: dict[str, Any]) -> "Notice":
        """A notice whose English words are the message catalog's (wire/messages.json), the words
        the CLI, the widgets and Lab render from the same code and params. Params the catalog has
        no words for (a bug; tests/unit/test_message_catalog.py holds every reason to words) still
        give a notice, never a failed scheduling pass."""
        return cls(code, words.render(code, params) or f"{code} {sorted(params)}", params)



@dataclass(frozen=True)
class ResolvedDevice:
    """`device` is the run's canonical device and queue key; `devices` the set it holds a slot on
    (just `(device,)` without a set); `requested` what was asked for before resolution (None when
    nothing was: the cpu default or a set's first device); `warnings` are `Notice`s."""

    device: str
    devices: tuple[str, ...]
    requested: str | None = None
    warnings: tuple[Notice, ...] = ()

    @property
    def is_set(self) -> bool:
        return len(self.devices) > 1


def device_kind(device: str) -> str:
    """`cuda:1` → `cuda`; works on canonical names and on bare kinds alike."""
    return device.split(":", 1)[0]


def _is_auto(name: Any) -> bool:
    return isinstance(name, str) and name.strip().lower() == "auto"


def _canonical(name: Any, field_name: str) -> str:
    try:
        return canonical_device(name)
    except DeviceError as exc:
        raise SubmitError("device_invalid", f"{field_name}: {exc}", {"field": field_name, "device": name}) from None


def parse_device_set(devices: Iterable[Any], field_name: str = "options.target.devices") -> tuple[str, ...]:
    """Canonical device set, or SubmitError: one kind, concrete, no duplicates, no `auto`,
    no bare `cuda`. An empty set is returned as `()` (no set)."""
    out: list[str] = []
    for i, raw in enumerate(devices):
        where = f"{field_name}[{i}]"
        if _is_auto(raw):
            raise SubmitError("device_set_auto", f"{where}: a device set lists concrete devices, not 'auto'",
                              {"field": where, "device": raw})
        if isinstance(raw, str) and raw.strip().lower() == "cuda":
            raise SubmitError("device_set_bare_cuda",
                              f"{where}: name the card (cuda:0, cuda:1, ...); a bare 'cuda' in a device set is refused",
                              {"field": where, "device": raw})
        dev = _canonical(raw, where)
        if dev in out:
            raise SubmitError("device_set_duplicate", f"{where}: {dev} is listed twice",
                              {"field": where, "device": dev})
        if out and device_kind(dev) != device_kind(out[0]):
            raise SubmitError("device_set_mixed_kinds",
                              f"{where}: a device set lists devices of one kind; {out[0]} and {dev} differ",
                              {"field": where, "devices": [out[0], dev]})
        out.append(dev)
    return tuple(out)


def best_accelerator(available: Iterable[str]) -> str | None:
    """The accelerator `auto` picks: the lowest-numbered CUDA card, else the lowest MPS device."""
    found = {dev for dev in available if device_kind(dev) in ("cuda", "mps")}
    for kind in ("cuda", "mps"):
        cards = sorted((int(d.split(":", 1)[1]), d) for d in found if device_kind(d) == kind)
        if cards:
            return cards[0][1]
    return None


def _available(available: Iterable[str]) -> set[str]:
    # The CPU is always here; accept aliases in the inventory for robustness.
    return {canonical_device(d) for d in available} | {"cpu"}


def _require_present(device: str, here: set[str], field_name: str) -> None:
    if device not in here:
        raise SubmitError(
            "device_unavailable", f"{field_name}: {device} is not available on this server "
            f"(it has {', '.join(sorted(here))})",
            {"field": field_name, "device": device, "available": sorted(here)})


def _requested_device(option_device: Any, graph_device: Any) -> tuple[Any, str] | None:
    """The device a run without a set asks for and the field it came from: options.device, then
    the graph's settings.device; None when neither names one (the run goes to the CPU)."""
    if option_device is not None:
        return option_device, "options.device"
    if graph_device is not None:
        return graph_device, "graph.settings.device"
    return None


def _resolve_set(option_device: str | None, devices: tuple[str, ...]) -> ResolvedDevice:
    """A device-set run: the set's first device is the run's; options.device may only repeat it,
    name its kind, or be auto."""
    first = devices[0]
    if option_device is None or _is_auto(option_device):
        return ResolvedDevice(first, devices, option_device)
    text = option_device.strip().lower() if isinstance(option_device, str) else option_device
    if text in ("cuda", "mps") and device_kind(first) == text:
        return ResolvedDevice(first, devices, option_device)
    if _canonical(option_device, "options.device") != first:
        raise SubmitError(
            "device_not_in_set", f"options.device: {option_device!r} must be the device set's first device "
            f"({first}), its kind, auto, or omitted",
            {"field": "options.device", "device": option_device, "devices": list(devices)})
    return ResolvedDevice(first, devices, option_device)


def resolve_run_device(option_device: str | None, graph_device: str | None,
                       target_devices: Iterable[str] | None, available: Iterable[str]) -> ResolvedDevice:
    """The device and device set a local run queues on, or SubmitError.

    `available` lists this server's devices (canonical; `cpu` is added if missing).
    """
    here = _available(available)
    devices = parse_device_set(target_devices or ())
    if devices:
        for i, dev in enumerate(devices):
            _require_present(dev, here, f"options.target.devices[{i}]")
        return _resolve_set(option_device, devices)

    request = _requested_device(option_device, graph_device)
    if request is None:
        return ResolvedDevice("cpu", ("cpu",), None)
    requested, field_name = request
    if _is_auto(requested):
        best = best_accelerator(here)
        if best is None:
            warning = Notice("auto_no_accelerator",
                             "device auto: no CUDA or MPS device on this server, running on the CPU",
                             {"field": field_name, "device": "cpu"})
            return ResolvedDevice("cpu", ("cpu",), requested, (warning,))
        return ResolvedDevice(best, (best,), requested)
    dev = _canonical(requested, field_name)
    _require_present(dev, here, field_name)
    return ResolvedDevice(dev, (dev,), requested)


# --- worker targets ------------------------------------------------------------------------------


def best_kind(offered: Iterable[str]) -> str:
    """What `auto` asks a worker for: any CUDA card, else the Apple GPU, else the CPU."""
    kinds = {device_kind(d) for d in offered}
    return "cuda" if "cuda" in kinds else "mps:0" if "mps" in kinds else "cpu"


def resolve_worker_device(option_device: str | None, graph_device: str | None,
                          target_devices: Iterable[str] | None, offered: Iterable[str] | None,
                          worker: str = "any") -> ResolvedDevice:
    """The device (or kind) and set a worker run asks for, or SubmitError. Nothing is checked
    against `offered` here except to resolve `auto` (`offered` None: the worker never reported its
    devices, so `auto` cannot be resolved and is refused). A bare `cuda` stays the kind; `mps` is
    `mps:0` (a machine has one). A set's rules are a local run's (`resolve_run_device`)."""
    devices = parse_device_set(target_devices or ())
    if devices:
        return _resolve_set(option_device, devices)
    request = _requested_device(option_device, graph_device)
    if request is None:
        return ResolvedDevice("cpu", ("cpu",), None)
    requested, field_name = request
    if _is_auto(requested):
        if offered is None:
            raise SubmitError(
                "device_auto_unknown", f"{field_name}: worker {worker} has not reported its devices yet, so "
                "'auto' cannot be resolved; name a device", {"field": field_name, "worker": worker})
        kind = best_kind(offered)
        return ResolvedDevice(kind, () if kind in KIND_REQUESTS else (kind,), requested)
    if isinstance(requested, str) and requested.strip().lower() == "cuda":
        return ResolvedDevice("cuda", (), requested)
    dev = _canonical(requested, field_name)
    return ResolvedDevice(dev, (dev,), requested)
