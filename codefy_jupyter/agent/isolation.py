"""Pure decisions about one run's process: which assigns the agent honours, which cards the run sees
and under which names, and the environment its process starts with.

Device visibility (seed: isolation). The run's process gets `CUDA_DEVICE_ORDER=PCI_BUS_ID` (so the
numbers NVML gives the agent are the numbers CUDA uses) and `CUDA_VISIBLE_DEVICES` = the run's cards
in the order the assign lists them: for `["cuda:2", "cuda:0"]` the run's `cuda:0` is the agent's
`cuda:2`. A cpu or mps run gets an empty `CUDA_VISIBLE_DEVICES`. Node device params are never
rewritten; the environment renumbers.

Removed from the run's environment (`removed_variable`): the control plane's and the agent's secrets
and paths, which a node has no business reading:
- `CODEFY_TOKEN`, `CODEFY_HEADLESS_TOKEN`, `CODEFY_AGENT_TOKEN`, `CODEFY_ENROLL_TOKEN`,
  `CODEFY_S3_CREDENTIALS`, and any `CODEFY_*` / `JUPYTER*` / `JPY_*` name containing TOKEN,
  SECRET, PASSWORD, CREDENTIAL or KEY;
- `JUPYTER_TOKEN`, `JUPYTERHUB_API_TOKEN`, `JPY_API_TOKEN` (a notebook server's own tokens);
- `CODEFY_DB*` (the control plane's database) and `CODEFY_DATA_DIR` (its data folder);
- `CODEFY_URL` and `CODEFY_AGENT_DIR` (the run talks to nobody; the agent's folder holds its token);
- ROCm's visibility filters `ROCR_VISIBLE_DEVICES`, `HIP_VISIBLE_DEVICES`, `GPU_DEVICE_ORDINAL`,
  which would filter the cards a second time under other numbers.
Everything else (PATH, PYTHONPATH, `CODEFY_PRESETS_DIR`, a node's own cloud credentials) passes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from ..wire.devices import DeviceError, canonical_device

REMOVED_VARIABLES: frozenset[str] = frozenset({
    "CODEFY_TOKEN", "CODEFY_HEADLESS_TOKEN", "CODEFY_AGENT_TOKEN", "CODEFY_ENROLL_TOKEN", "CODEFY_S3_CREDENTIALS",
    "CODEFY_DATA_DIR", "CODEFY_URL", "CODEFY_AGENT_DIR",
    "JUPYTER_TOKEN", "JUPYTERHUB_API_TOKEN", "JPY_API_TOKEN",
    "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL",
})
REMOVED_PREFIXES: tuple[str, ...] = ("CODEFY_DB",)
_OWN_PREFIXES = ("CODEFY_", "JUPYTER", "JPY_")
_SECRET_WORDS = ("TOKEN", "SECRET", "PASSWORD", "CREDENTIAL", "KEY")


def removed_variable(name: str) -> bool:
    """Whether `name` is kept out of a run's environment (see the module docstring)."""
    upper = name.upper()
    if upper in REMOVED_VARIABLES or upper.startswith(REMOVED_PREFIXES):
        return True
    return upper.startswith(_OWN_PREFIXES) and any(word in upper for word in _SECRET_WORDS)


@dataclass(frozen=True)
class OfferedDevice:
    """A device the agent offers, under the agent's name (`cuda:0`). `visible_id` is what stands for
    it in a run's CUDA_VISIBLE_DEVICES: its NVML index, or the entry of the agent's own
    CUDA_VISIBLE_DEVICES it came from (an index, a `GPU-...` UUID or a MIG id)."""

    device: str
    visible_id: str = ""
    name: str | None = None
    uuid: str | None = None
    total_memory: int | None = None  # bytes

    def hello(self) -> dict[str, Any]:
        out: dict[str, Any] = {"device": self.device}
        for key in ("name", "uuid", "total_memory"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        return out


CPU = OfferedDevice("cpu")


@dataclass(frozen=True)
class Visibility:
    """What one run sees. `engine_device`: the device the engine runs on, renumbered as the process
    sees it. `visible_devices`: the agent's names of the cards the run sees, in order.
    `aliases`: the run's name of each card -> the agent's (`{"cuda:0": "cuda:2"}`)."""

    engine_device: str
    cuda_visible_devices: str
    visible_devices: list[str] = field(default_factory=list)
    aliases: dict[str, str] = field(default_factory=dict)


def visibility(device: str, devices: Iterable[str], offered: Mapping[str, OfferedDevice]) -> Visibility:
    """How a run on `devices` (the assign's card list; `device` the run's own, one of them or a kind)
    sees its cards. Call only after `assign_refusal` found nothing wrong."""
    cards = [canonical_device(d) for d in devices] or [canonical_device(device)]
    wanted = _named(device) or cards[0]
    if not cards[0].startswith("cuda:"):
        # mps and cpu are not renumbered; CUDA must see nothing at all.
        return Visibility(wanted, "", [c for c in cards if c != "cpu"], {})
    position = cards.index(wanted) if wanted in cards else 0
    aliases = {f"cuda:{i}": card for i, card in enumerate(cards)}
    visible_ids = [offered[c].visible_id or c.split(":")[1] for c in cards]
    return Visibility(f"cuda:{position}", ",".join(visible_ids), cards, aliases)


def child_environment(base: Mapping[str, str], view: Visibility, *,
                      extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The run process's environment: `base` less the removed variables, plus the device variables."""
    env = {k: v for k, v in base.items() if not removed_variable(k)}
    env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    env["CUDA_VISIBLE_DEVICES"] = view.cuda_visible_devices
    env["PYTHONUNBUFFERED"] = "1"  # output.log shows a node's prints as they happen
    if extra:
        env.update(extra)
    return env


@dataclass(frozen=True)
class Refusal:
    """Why the agent will not run an assign: `code` and an English `message`, for run_finished."""

    code: str
    message: str
    params: dict[str, Any] = field(default_factory=dict)

    def error(self) -> dict[str, Any]:
        return {"type": "AssignRefused", "code": self.code, "message": self.message, "params": dict(self.params)}


def assign_refusal(*, run_id: str, device: str, devices: Iterable[str], offered: Iterable[str],
                   known_runs: Iterable[str], draining: bool, one_shot_used: bool = False) -> Refusal | None:
    """Whether the agent must refuse an assign at once (seed: isolation): while draining, a second
    copy of a run it has, a one-shot agent's second run, or a device it does not offer."""
    if draining:
        return Refusal("agent_draining", f"worker is draining: run {run_id} was not started", {"run_id": run_id})
    if run_id in set(known_runs):
        return Refusal("duplicate_assign", f"run {run_id} is already on this worker", {"run_id": run_id})
    if one_shot_used:
        return Refusal("one_shot_taken", f"this one-shot worker has already taken its run; run {run_id} was not "
                       "started", {"run_id": run_id})
    offered_set = {canonical_device(d) for d in offered} | {"cpu"}
    cards = list(devices)
    try:
        canon = [canonical_device(d) for d in cards] or [canonical_device(device)]
        own = _named(device)
    except DeviceError as err:
        return Refusal("bad_device", str(err), {"run_id": run_id})
    kinds = {c.split(":")[0] for c in canon}
    if len(kinds) > 1:
        return Refusal("bad_device", f"devices {cards} mix kinds {sorted(kinds)}", {"devices": cards})
    if len(set(canon)) != len(canon):
        return Refusal("bad_device", f"devices {cards} list a device twice", {"devices": cards})
    if _kind(device) != canon[0].split(":")[0] or (own is not None and own not in canon):
        return Refusal("bad_device", f"device {device!r} is not one of the run's devices {cards}",
                       {"device": device, "devices": cards})
    missing = [c for c in canon if c not in offered_set]
    if missing:
        return Refusal("device_not_offered", f"this worker does not offer {', '.join(missing)} "
                       f"(it offers {', '.join(sorted(offered_set))})",
                       {"missing": missing, "offered": sorted(offered_set)})
    return None


def _kind(device: str) -> str:
    return device.strip().lower().split(":")[0]


def _named(device: str) -> str | None:
    """The device `device` names (canonical), or None when it is only a kind (`cuda`, `mps`): a kind
    means the first of the run's devices (seed: target.devices)."""
    text = device.strip().lower()
    if text == "cpu":
        return "cpu"
    return canonical_device(text) if ":" in text else None
