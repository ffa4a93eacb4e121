"""Following the server's own node catalog while it runs (seed: node catalog and fingerprint).

A node pack installed or removed while the server runs changes what the server can run, and so
which workers match it: a worker that lacked a pack the server had may match now, and one that
matched may now have types the server lacks. Every `period_s` the installed packs are listed (the
entry-point scan, in a thread: it reads the disk); only when that list differs from what the
registry has loaded is the registry refreshed, on the event loop, so nothing reads it mid-change.
Whenever the catalog's hash differs from the last one seen, `on_change` runs (WorkerService
compares every worker again).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable

from ...engine import NodeRegistry
from ...engine.entry_points import entry_points
from ...engine.errors import RegistryError
from ...engine.registry import ENTRY_POINT_GROUP

log = logging.getLogger("codefy.workers")


def installed_packs(group: str = ENTRY_POINT_GROUP) -> frozenset[str]:
    return frozenset(ep.name for ep in entry_points(group=group))


class CatalogWatch:
    def __init__(self, registry: NodeRegistry, period_s: float, on_change: Callable[[], object],
                 group: str = ENTRY_POINT_GROUP) -> None:
        self.registry = registry
        self.group = group
        self.period_s = float(period_s)
        self.on_change = on_change
        self._task: asyncio.Task[None] | None = None
        self._hash: str | None = None

    def start(self) -> None:
        if self.period_s > 0 and self._task is None:
            self.seen()
            self._task = asyncio.get_running_loop().create_task(self._loop())

    def seen(self) -> None:
        """Take the catalog as it is now as the one workers were compared with."""
        self._hash = self.registry.catalog()["hash"]

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.period_s)
            try:
                await self.check()
            except Exception:  # the next look may do better; the server goes on
                log.exception("codefy: could not check the node catalog")

    async def check(self) -> bool:
        """One look: whether the catalog changed since the last."""
        installed = await asyncio.to_thread(installed_packs, self.group)
        if installed != self.registry.pack_names():
            try:
                self.registry.refresh_entry_points(self.group)
            except RegistryError as err:
                log.warning("codefy: %s", err)
        now = self.registry.catalog()["hash"]
        if now == self._hash:
            return False
        self._hash = now
        log.info("codefy: the node catalog changed (%d types now)", len(self.registry.types()))
        self.on_change()
        return True
