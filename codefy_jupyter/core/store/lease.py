"""The leader lease, as pure decisions (no I/O, the clock passed in): several control planes on one
PostgreSQL database, exactly one of which leads.

The database holds one lease row: who holds it, the URL it serves on, its fencing epoch and when
it expires. Every control plane reads that row (locked) once per renew interval and `decide`s what
to write back:
- the holder that still holds it locally renews it (same epoch, a later expiry);
- anyone finds it free (never taken, or expired) and takes it with the next epoch;
- otherwise it follows the holder named in the row (a standby).

Why an epoch besides the expiry: a leader paused past its lease (GC, SIGSTOP, a VM freeze) wakes
up believing it still leads. Its writes check the epoch in their own transaction (fencing), and a
takeover has moved it on, so none of them commits; the expiry alone cannot tell it, since its
clock reading is from before the pause.

Why a leader gives up once its own deadline passes even if nobody took over: "lost after TTL
without renewal" must hold by this process's clock alone (an unreachable database says nothing),
and re-taking afresh with a new epoch makes every leadership start with the same recovery.
"""

from __future__ import annotations

from dataclasses import dataclass

# Why 4 s and 1 s: a failover takes about the TTL less the time since the last renewal (0-1 s),
# plus the standby's wait to see the expiry, plus its recovery (about 1 s). At 5 s that came to
# 5.4-5.7 s; the target is 5 s at the median. Polling faster would save at most the wait (the
# standby now wakes at the row's expiry anyway, `Lease.next_round_in`), so the TTL had to come
# down. 4 s still loses a lease only after three renewals in a row went missing (each bounded by a
# 1 s statement timeout), which a loaded 2-core machine does not do, and keeps the promise "lost
# after at most 5 s without renewal". A renewal every 1 s costs one small UPDATE a second.
TTL_S = 4.0          # a lease not renewed for this long is lost (and free for a standby to take)
RENEW_EVERY_S = 1.0  # how often the holder renews it (and a standby looks at it)
# A standby looks again this long after the row says the lease expires: past it by its own clock.
EXPIRY_MARGIN_S = 0.01

LEADER, STANDBY = "leader", "standby"
TAKE, RENEW, FOLLOW = "take", "renew", "follow"
WON, LOST = "won", "lost"


@dataclass(frozen=True)
class LeaseRow:
    """The lease row as read from the database (epoch 0, holder None: never taken)."""

    holder: str | None
    epoch: int
    expires_at: float
    url: str | None = None


@dataclass(frozen=True)
class Claim:
    """What one tick writes: TAKE or RENEW (the row becomes holder/epoch/expires_at/url), or
    FOLLOW (nothing written; `holder`/`url` say who leads)."""

    action: str
    holder: str | None
    epoch: int
    expires_at: float
    url: str | None


def check_timing(ttl_s: float, renew_every_s: float) -> None:
    """At least two renewals fit in a lease, so one slow round trip does not lose it."""
    if not ttl_s > 0:
        raise ValueError(f"lease_ttl_s must be positive, got {ttl_s}")
    if not 0 < renew_every_s <= ttl_s / 2:
        raise ValueError(f"lease_renew_s must be positive and at most half of lease_ttl_s ({ttl_s}), "
                         f"got {renew_every_s}")


def decide(row: LeaseRow, me: str, my_epoch: int, my_url: str | None, now: float, ttl_s: float) -> Claim:
    """What `me` (holding `my_epoch` locally, 0 when not leading) writes, having read `row` at `now`."""
    if my_epoch and row.holder == me and row.epoch == my_epoch:
        return Claim(RENEW, me, my_epoch, now + ttl_s, my_url)
    if row.holder is None or row.holder == me or row.expires_at <= now:
        # row.holder == me with another epoch: our earlier leadership, given up locally; start afresh.
        return Claim(TAKE, me, row.epoch + 1, now + ttl_s, my_url)
    return Claim(FOLLOW, row.holder, row.epoch, row.expires_at, row.url)


class Lease:
    """One control plane's view of the lease, driven by its keeper: at every tick `expire(now)`,
    then `claim(row, now)` before the write and `committed(claim, started_at)` after it, or
    `failed(now)` when the round trip did not complete. Each but `claim` returns WON, LOST or None
    (no change)."""

    def __init__(self, me: str, url: str | None = None, *, ttl_s: float = TTL_S,
                 renew_every_s: float = RENEW_EVERY_S, stepped_down: bool = False) -> None:
        check_timing(ttl_s, renew_every_s)
        self.me = me
        # This process led before and lost the lease while it kept running (it was not restarted):
        # its own earlier leadership passes the queue on as another replica's would.
        self.stepped_down = stepped_down
        self.url = url
        self.ttl_s = ttl_s
        self.renew_every_s = renew_every_s
        self.role = STANDBY
        self.epoch = 0             # the epoch held while leading; 0 as a standby
        self.deadline = 0.0        # while leading: when the lease is lost without a renewal
        self.leader: str | None = None      # who leads, as last seen (us included)
        self.leader_url: str | None = None
        self.last_epoch = 0        # the highest epoch seen in the row
        # Who held the lease before this leadership took it: another replica (a takeover), or None
        # (a fresh database, or this replica's own earlier leadership ended by a restart).
        self.took_from: str | None = None
        self.leader_expires_at = 0.0  # as a standby: when the leader's lease expires, as last read

    def claim(self, row: LeaseRow, now: float) -> Claim:
        """What to write, having read `row` at `now` (call `expire(now)` first: its LOST is news)."""
        return decide(row, self.me, self.epoch if self.held(now) else 0, self.url, now, self.ttl_s)

    def committed(self, claim: Claim, started_at: float, previous: str | None = None) -> str | None:
        """The claim's transaction committed. `started_at`: the clock when the tick began, before
        the round trip, so the local deadline is never later than the one written; `previous`: the
        row's holder the claim was decided on."""
        self.last_epoch = max(self.last_epoch, claim.epoch)
        if claim.action == TAKE:
            self.took_from = previous if previous != self.me or self.stepped_down else None
        self.leader, self.leader_url = claim.holder, claim.url
        if claim.action == FOLLOW:
            self.leader_expires_at = claim.expires_at
            return self._step_down()
        self.leader_expires_at = 0.0
        was = self.role
        self.role, self.epoch, self.deadline = LEADER, claim.epoch, started_at + self.ttl_s
        return WON if was != LEADER or claim.action == TAKE else None

    def failed(self, now: float) -> str | None:
        """The tick could not read or write the row (the database is unreachable)."""
        return self.expire(now)

    def expire(self, now: float) -> str | None:
        if self.role == LEADER and now >= self.deadline:
            self.leader = self.leader_url = None
            return self._step_down()
        return None

    def next_round_in(self, now: float) -> float:
        """Seconds until the keeper's next round: the renew interval, or for a standby that saw the
        lease expire sooner, just past that expiry, so it takes a dead leader's lease at once
        rather than up to a renew interval later."""
        if self.role != LEADER and self.leader_expires_at > 0:
            return max(0.0, min(self.renew_every_s, self.leader_expires_at - now + EXPIRY_MARGIN_S))
        return self.renew_every_s

    def held(self, now: float) -> bool:
        """Whether this process may write now, by its own clock (the database checks the epoch)."""
        return self.role == LEADER and now < self.deadline

    def _step_down(self) -> str | None:
        was = self.role
        self.role, self.epoch, self.deadline = STANDBY, 0, 0.0
        return LOST if was == LEADER else None
