"""What the rest of the control plane asks of the store about leadership: who leads, whether this
process does, and what a start or a stop does with the queue. One answer per backend: an SQLite
store always leads and has no other replica; a PostgreSQL store answers from its lease keeper
(pg_lease.py), whose lease (lease.py) decides.

A mixin of `Store` (database.py), kept apart so the store's module stays about reads and writes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .lease import LEADER

if TYPE_CHECKING:
    from .pg_lease import LeaseKeeper


class LeadershipView:
    lease_keeper: "LeaseKeeper | None"

    @property
    def role(self) -> str:
        """`leader` or `standby` (an SQLite store always leads)."""
        return self.lease_keeper.lease.role if self.lease_keeper is not None else LEADER

    @property
    def taken_over(self) -> bool:
        """This leadership began by taking the lease from another replica (PostgreSQL): the queue
        passes to this process, so it queues the old leader's waiting runs again instead of
        retiring them. False on SQLite and for a replica restarted on its own lease (the seed's
        restart rule: nothing resumes a queue)."""
        return self.lease_keeper is not None and self.lease_keeper.lease.took_from is not None

    @property
    def hands_the_queue_over(self) -> bool:
        """A clean stop leaves waiting runs queued in the database (PostgreSQL): the replica that
        takes the lease next (`taken_over`) queues them again in their order, as at a kill -9 of the
        leader; if this replica itself starts again instead, its restart retires them
        (server_restart). On SQLite there is no other replica: a clean stop retires them itself."""
        return self.lease_keeper is not None

    @property
    def leading(self) -> bool:
        """This process leads now by its own clock (always on SQLite); see LeaseKeeper.holds."""
        return self.lease_keeper.holds() if self.lease_keeper is not None else True

    @property
    def leader_url(self) -> str | None:
        """The URL the leader serves on, as its lease row says (None when unknown)."""
        return self.lease_keeper.lease.leader_url if self.lease_keeper is not None else None
