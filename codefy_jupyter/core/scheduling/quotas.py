"""Per-owner quotas on the run queue: how many queued-lane runs one owner may have executing at once
(`max_running`) and waiting at once (`max_queued`). Pure decisions; the queue keeps the counts.

Rules (queue.py and offer_pass.py apply them):
- Only queued-lane runs count and are capped; the interactive lane has its own limits.
- Runs without an owner (a single-person server's token identifies nobody) count together as one
  owner, so a quota set on such a server still caps its runs.
- A run whose owner already has `max_running` executing waits with reason `owner_quota`, holding
  nothing: no reservation, no gate claim. The runs behind it in its FIFO are offered as if it were
  not there, so one owner's waiting runs never hold up another owner's (no head-of-line blocking);
  it keeps its submit order and is the first offered once its owner's count drops.
- A submit that would leave its owner more than `max_queued` runs waiting is refused at once
  (429 `owner_queue_full`, nothing written). Counting and admitting are one synchronous step
  (`Admission`), so no await can fall between a check and the enqueue it allows: concurrent
  submits never leave an owner past the cap.
- Room a submitter needs across awaits is *reserved*: a sweep reserves all its variants up front
  (refused whole, 429), a study its first `max_parallel_runs` children, a study's later child one
  place before its stamp is written. A reserved place counts as waiting for everyone else's check
  until the child it was taken for is queued (it becomes that child's place) or the reservation is
  released (the places not used go back). A study child that finds no room is not queued: the
  study holds it back, pending, until its owner is under the cap (studies/coordinator.py).
- `exempt` owners have neither cap. 0 means unlimited.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from codefy_jupyter.core.scheduling.device_sets import Notice, SubmitError

OWNER_QUOTA = "owner_quota"  # wait reason
OWNER_QUEUE_FULL = "owner_queue_full"  # submit refusal (429)
QUEUE_FULL_STATUS = 429


@dataclass(frozen=True)
class Quotas:
    max_running: int = 0  # run_quota_max_running
    max_queued: int = 0  # run_quota_max_queued
    exempt: frozenset[str] = field(default_factory=frozenset)  # run_quota_exempt_users

    def __post_init__(self) -> None:
        for name, value in (("max_running", self.max_running), ("max_queued", self.max_queued)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name} must be an integer of at least 0 (0: unlimited), got {value!r}")

    @property
    def caps_running(self) -> bool:
        """Whether any owner's executing runs are capped (the pass skips all quota work otherwise)."""
        return self.max_running > 0

    def running_limit(self, owner: str | None) -> int | None:
        if not self.max_running or (owner is not None and owner in self.exempt):
            return None
        return self.max_running

    def queued_limit(self, owner: str | None) -> int | None:
        if not self.max_queued or (owner is not None and owner in self.exempt):
            return None
        return self.max_queued


def parse_exempt(text: str | None) -> frozenset[str]:
    """`"alice, bob"` → {"alice", "bob"}; blanks are ignored."""
    return frozenset(name.strip() for name in (text or "").split(",") if name.strip())


def build_quotas(max_running: int, max_queued: int, exempt: str | None) -> tuple[Quotas, tuple[Notice, ...]]:
    """Quotas from the three settings; a negative cap counts as 0 (unlimited) with a warning."""
    warnings = []
    values = {}
    for setting, value in (("run_quota_max_running", max_running), ("run_quota_max_queued", max_queued)):
        if value < 0:
            warnings.append(Notice("quota_below_zero", f"{setting}={value} is below 0; using 0 (unlimited)",
                                   {"setting": setting, "value": value}))
            value = 0
        values[setting] = value
    quotas = Quotas(values["run_quota_max_running"], values["run_quota_max_queued"], parse_exempt(exempt))
    return quotas, tuple(warnings)


@dataclass(eq=False)
class Reservation:
    """Places held in one owner's queued budget, from the check to the enqueues it covers."""
    owner: str | None
    left: int


class Admission:
    """Per-owner waiting runs and reserved places: the one place the queued cap is counted and
    admitted. Every method is synchronous, so a check and the admit it allows are one step."""

    def __init__(self) -> None:
        self.waiting: dict[str | None, int] = {}
        self.reserved: dict[str | None, int] = {}

    def counted(self, owner: str | None) -> int:
        """What the cap is checked against: waiting runs and places reserved for runs to come."""
        return self.waiting.get(owner, 0) + self.reserved.get(owner, 0)

    def has_room(self, quotas: Quotas, owner: str | None, adding: int = 1) -> bool:
        limit = quotas.queued_limit(owner)
        return limit is None or self.counted(owner) + adding <= limit

    def reserve(self, quotas: Quotas, owner: str | None, adding: int) -> Reservation:
        """Hold `adding` places (SubmitError 429 when they do not fit)."""
        check_room(quotas, owner, self.counted(owner), adding)
        _add(self.reserved, owner, adding)
        return Reservation(owner, adding)

    def admit(self, quotas: Quotas, owner: str | None, reservation: Reservation | None = None) -> None:
        """One more waiting run of `owner`: it takes a place of `reservation` when that holds one
        for this owner, else it is checked (SubmitError 429 past the cap)."""
        if reservation is not None and reservation.owner == owner and reservation.left > 0:
            reservation.left -= 1
            _add(self.reserved, owner, -1)
        else:
            check_room(quotas, owner, self.counted(owner), 1)
        _add(self.waiting, owner, 1)

    def left_queue(self, owner: str | None) -> None:
        """A waiting run started, or left the queue without starting."""
        _add(self.waiting, owner, -1)

    def release(self, reservation: Reservation) -> int:
        """Give back the places `reservation` still holds; how many (0 once all were used)."""
        freed, reservation.left = reservation.left, 0
        if freed:
            _add(self.reserved, reservation.owner, -freed)
        return freed


def _add(counts: dict[str | None, int], owner: str | None, change: int) -> None:
    value = counts.get(owner, 0) + change
    if value:
        counts[owner] = value
    else:
        counts.pop(owner, None)


def reason_owner_quota(owner: str | None, running: int, limit: int) -> Notice:
    """A waiting run whose owner already has `limit` runs executing."""
    return Notice.worded(OWNER_QUOTA, {"owner": owner, "running": running, "limit": limit})


def refuse_queue_full(owner: str | None, queued: int, adding: int, limit: int) -> SubmitError:
    """A submit (or a sweep/study's children) that would leave `owner` more than `limit` runs waiting."""
    who = owner or "this server's ownerless queue"
    waiting = f"{queued} run{'s' if queued != 1 else ''} waiting, at most {limit} per user (run_quota_max_queued)"
    message = (f"{who} already has {waiting}: submit again once one has started" if adding == 1
               else f"{who} has {waiting}: {adding} more would exceed it")
    return SubmitError(OWNER_QUEUE_FULL, message,
                       {"setting": "run_quota_max_queued", "owner": owner, "limit": limit, "queued": queued,
                        "adding": adding}, status=QUEUE_FULL_STATUS)


def check_room(quotas: Quotas, owner: str | None, queued: int, adding: int = 1) -> None:
    """SubmitError 429 when `adding` more waiting runs would put `owner` over `max_queued`."""
    limit = quotas.queued_limit(owner)
    if limit is not None and queued + adding > limit:
        raise refuse_queue_full(owner, queued, adding, limit)


def capped(quotas: Quotas, owner: str | None, running: int) -> int | None:
    """The limit an owner with `running` executing runs has reached, or None: may start one more."""
    limit = quotas.running_limit(owner)
    return limit if limit is not None and running >= limit else None
