"""Memory admission on a card shared by memory (seed #788). Pure, no I/O.

A worker's CUDA card is *shared by memory* when its agent says so (`codefy agent start
--share-memory cuda:0`, sent as `"share": "memory"` on the device in hello). A card several providers
offer (one physical card, one slot group) is shared only when every online provider shares it; then
the count limit (one run per card) gives way to a ledger:

- A run with a budget (`options.target.memory_gib`) needs `budget + CODEFY_EXECUTION_CUDA_CONTEXT_MIB`
  (the CUDA context the allocator cap cannot govern).
- The card's room is `min(free - pending, total - committed)`: `free`/`total` from the latest
  heartbeat, `committed` the needs of every run running on the card or reserved by an earlier
  waiting head, `pending` those the heartbeat did not list as running yet (their memory is not in
  its `free`). Runs the heartbeat saw use at most their need, so `total - committed` keeps room for
  what they have not allocated yet, and `free` keeps room for anything else on the card.
- A run without a budget takes the card whole: it starts when nothing runs there, and nothing
  starts beside it.

Wait reasons: `memory_wait` (the budget does not fit now), `memory_no_budget` (a run without a
budget waits for the card to empty, or a budgeted run waits for such a run), `budget_raised` (a
memory wait of a run whose accepted estimate the server raised at submit, memory_estimate.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping

from codefy_jupyter.core.scheduling.device_sets import Notice, SubmitError

from codefy_jupyter.wire.run_options import GIB_MIB, MAX_MEMORY_GIB, budget_mib  # noqa: F401  (the one GiB -> MiB)

MIB = 1024 * 1024
DEFAULT_CUDA_CONTEXT_MIB = 500


@dataclass(frozen=True)
class CardMemory:
    """One card as its provider's latest heartbeat (or hello) reported it. `seen_running`: the runs
    that heartbeat listed as executing on the worker, whose memory is therefore in `free_mib`."""

    free_mib: int
    total_mib: int | None = None
    seen_running: frozenset[str] = field(default_factory=frozenset)


@dataclass(frozen=True)
class Holder:
    """A run running on (or reserving) the card: its need in MiB, None for a run without a budget."""

    run_id: str
    need_mib: int | None


def room_mib(card: CardMemory, holders: Iterable[Holder]) -> int:
    """MiB a new run may still take on the card (see the module docstring). Holders without a
    budget are handled by `admit` (they take the card whole)."""
    committed = pending = 0
    for h in holders:
        need = h.need_mib or 0
        committed += need
        if h.run_id not in card.seen_running:
            pending += need
    room = card.free_mib - pending
    if card.total_mib is not None:
        room = min(room, card.total_mib - committed)
    return room


def admit(run_budget_mib: int | None, context_mib: int, card: CardMemory | None,
          holders: Iterable[Holder], *, slot: str) -> Notice | None:
    """None: the run may start on this card now; else why it waits."""
    holders = list(holders)
    if run_budget_mib is None:
        if holders:
            return reason_no_budget(slot, whole=True, running=len(holders))
        return None
    if any(h.need_mib is None for h in holders):
        return reason_no_budget(slot, whole=False, running=len(holders))
    need = run_budget_mib + context_mib
    if card is None:
        return reason_memory_wait(slot, need, None)
    room = room_mib(card, holders)
    if need <= room:
        return None
    return reason_memory_wait(slot, need, max(room, 0))


def shared_group(members: Iterable[tuple[str, bool, bool]]) -> bool:
    """Whether a card is shared by memory: `members` are its slots as (provider, online, shares)
    where provider `local` is this server (which never shares). Every online provider must share;
    with none online, those listed decide (a card with runs of a worker that is away)."""
    members = list(members)
    if not members or any(p == "local" for p, _, _ in members):
        return False
    online = [m for m in members if m[1]] or members
    return all(shares for _, _, shares in online)


# --- reasons and refusals ----------------------------------------------------------------------


def reason_memory_wait(slot: str, need_mib: int, room: int | None) -> Notice:
    # In GiB for people ("6.0 GiB free of 8.5 GiB needed"), the exact MiB in the params.
    params = {"device": slot, "need_mib": need_mib, "free_mib": room}
    return Notice.worded("memory_wait", params)


def reason_no_budget(slot: str, *, whole: bool, running: int) -> Notice:
    return Notice.worded("memory_no_budget", {"device": slot, "whole": whole, "running": running})


def reason_budget_raised(slot: str, estimate_gib: float, raised_gib: float, need_mib: int | None = None,
                         room: int | None = None) -> Notice:
    """A memory wait of a run whose accepted estimate the server raised (memory_estimate.py): the
    raise is why it waits when the estimate it was given would have fitted."""
    return Notice.worded("budget_raised", {"device": slot, "estimate_gib": estimate_gib, "memory_gib": raised_gib,
                                           "need_mib": need_mib, "free_mib": room})


def raised(why: Notice, estimate_gib: float | None, budget_mib_: int) -> Notice:
    """`why` for a run whose budget was raised from an accepted estimate: its memory waits read
    budget_raised (same device and figures); other reasons stand."""
    if estimate_gib is None or why.code != "memory_wait":
        return why
    return reason_budget_raised(why.params["device"], estimate_gib, budget_mib_ / GIB_MIB,
                                why.params.get("need_mib"), why.params.get("free_mib"))


def refuse_local(memory_gib: float) -> SubmitError:
    return SubmitError("memory_budget_local",
                       "options.target.memory_gib: a memory budget applies to a worker's card shared by memory; "
                       "this server's runs are admitted by slot count (name a worker, or any)",
                       {"field": "options.target.memory_gib", "memory_gib": memory_gib})


def refuse_over_card(slot: str, need_mib: int, total_mib: int) -> SubmitError:
    return SubmitError("memory_over_card",
                       f"options.target.memory_gib: {slot} has {total_mib} MiB in all; this run needs {need_mib} MiB "
                       "(budget and CUDA context)",
                       {"field": "options.target.memory_gib", "device": slot, "need_mib": need_mib,
                        "total_mib": total_mib})


def refuse_no_wait(why: Notice) -> SubmitError:
    return SubmitError("memory_unavailable",
                       f"options.target.wait is false and the run cannot start now: {why.message}",
                       {"field": "options.target.wait", "reason": why.to_dict()}, status=409)


def card_memory(device: Mapping[str, object], seen_running: Iterable[str] = ()) -> CardMemory | None:
    """From a hello/heartbeat device dict (`free_memory`, `total_memory` in bytes), or None."""
    free, total = device.get("free_memory"), device.get("total_memory")
    if not isinstance(free, int) or isinstance(free, bool):
        return None
    total_mib = total // MIB if isinstance(total, int) and not isinstance(total, bool) else None
    return CardMemory(free // MIB, total_mib, frozenset(seen_running))
