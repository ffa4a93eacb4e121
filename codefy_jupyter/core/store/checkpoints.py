"""When the store's writer checkpoints the WAL: a pure policy, no I/O.

Why the writer checkpoints itself instead of SQLite's auto-checkpoint: the auto-checkpoint runs
inside the COMMIT that crosses `wal_autocheckpoint` pages, so the write waiting on that commit
waits for it too. A reader that holds a snapshot while it runs (a poller of a running study reads
every 50 ms) stops the checkpoint short of the WAL's end, the WAL cannot restart, and then *every*
following commit is past the threshold and checkpoints again: measured, the COMMITs of a study
took 2.7 s alone and 4.5 s with two readers. Here the writer checkpoints (PASSIVE: never waits
for a reader) when it has nothing queued, once enough commits have gone by; a checkpoint cut short
by a reader is tried again a few commits later, not after every one. Under a load that never
leaves the writer idle it checkpoints anyway past `force_after`.

PASSIVE alone does not bound the WAL: readers whose snapshots overlap without a gap (two pollers
back to back) always hold a mark in it, so it never restarts from its start and grows with every
commit (measured: 17 MB after 1,000 small commits). Once a checkpoint finds the WAL past
`restart_frames`, the next one is RESTART: it waits (the writer's busy timeout) for the readers
reading now to finish, while new readers read the database file, and the WAL starts over.
"""

from __future__ import annotations

from dataclasses import dataclass

# Commits in the WAL before an idle writer checkpoints. A commit here writes a few pages, so this
# is about SQLite's default of 1,000 pages.
IDLE_AFTER = 200
# Commits after which the writer checkpoints even with writes queued (the WAL's bound under load).
FORCE_AFTER = 2_000
# After a checkpoint a reader cut short: commits before the next try.
RETRY_AFTER = 25
# WAL frames (pages) past which the next checkpoint waits for readers (RESTART): SQLite's own
# auto-checkpoint threshold, 4 MiB of 4 KiB pages.
RESTART_FRAMES = 1_000


@dataclass
class CheckpointPolicy:
    idle_after: int = IDLE_AFTER
    force_after: int = FORCE_AFTER
    retry_after: int = RETRY_AFTER
    restart_frames: int = RESTART_FRAMES
    restart: bool = False  # the next checkpoint is RESTART
    pending: int = 0   # commits since the WAL was last checkpointed to its end
    wait: int = 0      # commits still to go before the next try after a short one

    def __post_init__(self) -> None:
        if not 1 <= self.idle_after <= self.force_after or self.retry_after < 1 or self.restart_frames < 1:
            raise ValueError("need 1 <= idle_after <= force_after, retry_after >= 1 and restart_frames >= 1")

    def committed(self, commits: int) -> None:
        self.pending += commits
        self.wait = max(0, self.wait - commits)

    def mode(self) -> str:
        """The checkpoint to run when `due`: PASSIVE, or RESTART once the WAL is too long."""
        return "RESTART" if self.restart else "PASSIVE"

    def due(self, idle: bool) -> bool:
        """Whether to checkpoint now; `idle`: no write is queued."""
        if self.pending >= self.force_after:
            return True
        return idle and self.pending >= self.idle_after and self.wait == 0

    def checkpointed(self, wal_frames: int, copied_frames: int) -> None:
        """The outcome of `PRAGMA wal_checkpoint(mode)`: frames in the WAL, frames copied back."""
        # A RESTART that went through leaves the WAL to start over at the next write.
        self.restart = wal_frames >= self.restart_frames and not (self.restart and copied_frames >= wal_frames)
        if copied_frames >= wal_frames:  # the whole WAL is in the database: the next write restarts it
            self.pending = self.wait = 0
        else:
            self.wait = self.retry_after
            # Under FORCE_AFTER's load a reader could keep every try short: count from here again
            # rather than checkpoint on every commit.
            self.pending = min(self.pending, self.force_after - self.retry_after)
