"""`CodefyApp`: the control plane as a jupyter-server extension (inside `jupyter lab`, or headless
via `codefy start`). Every setting of `core.config.SETTINGS` is a trait here, with its
`CODEFY_*` environment twin winning over configuration."""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path
from typing import Any

from jupyter_server._tz import utcnow
from jupyter_server.extension.application import ExtensionApp
from tornado.ioloop import PeriodicCallback
from traitlets import Bool, Float, Int, List, Unicode

from .._version import __version__
from ..core.config import SETTINGS, Settings
from ..core.devices import probe_inventory
from ..core.runs.cards import inventory_names
from ..wire.machine_identity import machine_id_digest
from ..core.scheduling.slot_groups import LocalMachine, OfferedDevice
from ..core.experiments.experiments_service import Experiments
from ..core.runs.run_service import RunService
from ..core.errors import Unavailable
from ..core.store.database import Store
from ..core.store.lease import LEADER, LOST, Lease
from ..core.store.lock import DATABASE_FILE, DatabaseLock, DatabaseLocked
from ..core.store.queries import StoreError
from ..core.workers.worker_service import WorkerService
from . import metrics
from .forward import forward_routes
from .routes import route_table
from .sharing import Sharing, decide_sharing

ACTIVITY_INTERVAL_S = 30
# A tornado setting (ServerApp.tornado_settings) that shortens ACTIVITY_INTERVAL_S, for tests.
ACTIVITY_INTERVAL_SETTING = "codefy_activity_interval_s"
# The Retry-After of a 503 `recovering` (how long a request waits first: the ready_wait_s setting).
RETRY_AFTER_S = 2
_DEFAULT_WAIT = object()
# After stepping down, a start that cannot reach the database tries again after this, doubling.
START_RETRY_FIRST_S = 0.5
START_RETRY_MAX_S = 5.0


def _setting_traits() -> dict[str, Any]:
    traits = {}
    for s in SETTINGS:
        kind = {int: Int, float: Float}.get(s.kind, Unicode)
        traits[s.name] = kind(s.default, help=f"{s.help} (env: {s.env}, which wins)").tag(config=True)
    return traits


class CodefyApp(ExtensionApp):
    name = "codefy"
    description = "codefy-jupyter: a run queue for ML node graphs"
    version = __version__
    load_other_extensions = True

    locals().update(_setting_traits())

    shared_server = Bool(None, allow_none=True, help="Several people use this server: each may stop or "
                         "delete only their own runs, and drain, undrain, remove or re-issue a token only "
                         "for the workers they enrolled, unless listed in admin_users; everyone may read. "
                         "Unset (the default): detected, true on a JupyterHub single-user server (whose "
                         "owner, the Hub admins and admin_groups members are then admins) or with a "
                         "multi-user identity provider.").tag(config=True)
    admin_users = List(Unicode(), help="Usernames who may stop or delete anyone's runs and manage every "
                       "worker on a shared server.").tag(config=True)
    admin_groups = List(Unicode(), help="JupyterHub groups whose members are admins like admin_users on a "
                        "shared JupyterHub server (Hub admins always are).").tag(config=True)

    service: RunService | None = None
    experiments: Experiments | None = None
    store: Store | None = None
    _starting: asyncio.Future[RunService] | None = None
    # PostgreSQL: the store while this server is a standby (it leads once `store` is set).
    _standby_store: Store | None = None
    _standby_known: asyncio.Event | None = None
    _waiting_for_store = False  # a start after stepping down waits for the database to come back
    _stepped_down = False  # this process lost the lease once: its next leadership is a takeover

    def initialize_settings(self) -> None:
        configured = {s.name: getattr(self, s.name) for s in SETTINGS}
        self.codefy_settings = Settings.load(configured)

    @property
    def sharing(self) -> Sharing:
        if getattr(self, "_sharing", None) is None:
            provider = type(self.serverapp.identity_provider)
            self._sharing = decide_sharing(self.shared_server, self.admin_users, os.environ,
                                           f"{provider.__module__}.{provider.__qualname__}", self.admin_groups)
            self.log.info("codefy: %s server (%s)", "shared" if self._sharing.shared else "single-user",
                          self._sharing.reason)
        return self._sharing

    @property
    def forwarding(self) -> bool:
        """A single-user server of a team whose queue is a Hub service: no database of its own."""
        return bool(self.codefy_settings.service_url)

    def initialize_handlers(self) -> None:
        # ExtensionApp prefixes each pattern with the server's base_url itself.
        routes = forward_routes("/") if self.forwarding else route_table("/")
        self.handlers.extend((pattern, handler) for pattern, handler, _ in routes)
        if self.forwarding:
            self.log.info("codefy: runs go to the team control plane at %s (service_url); no local queue",
                          self.codefy_settings.service_url)

    async def _start_service(self) -> RunService:
        """Open the store, recover what the previous process left, and only then hand the service
        out: a request served before recovery would see a dead run as running, and a worker that
        reconnected first would have its adopted runs taken for strays (and their frames dropped)."""
        settings = self.codefy_settings
        data_dir = settings.resolved_data_dir()
        data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        database = data_dir / DATABASE_FILE
        # The lock stays on the data dir's file with either backend: one server per data dir. Several
        # servers on one PostgreSQL database take turns by the leader lease (core/store/lease.py).
        lock = await self._lock_database(database)
        try:
            # A lease name kept in the data dir only where there is a lease to hold (PostgreSQL).
            holder = replica_id(data_dir) if settings.store_url else uuid.uuid4().hex
            store = await Store.open(settings.store_url or database, lease=self._lease(holder))
        except BaseException:
            lock.release()  # the next request tries again, and must not meet our own lock
            raise
        store.on_lease_change = self._lease_changed
        try:
            if store.role != LEADER:
                # A standby recovers nothing and writes nothing until it wins the lease; then it
                # recovers as a restart after kill -9 would (the leader's process is gone, or fenced).
                self._standby_store = store
                self._standby_event().set()
                self.log.info("codefy: a standby; the leader is %s", store.leader_url or "(unknown)")
                await store.leadership()
                self.log.warning("codefy: this server won the leader lease: recovering, then serving")
            self._standby_store = None
            self._standby_event().clear()
            inventory = probe_inventory(settings.device_inventory)
            devices = [d["key"] for d in inventory]
            # This machine's id and cards (with NVML UUIDs): a worker on this machine shares them.
            local = LocalMachine(machine_id_digest(), tuple(OfferedDevice(d["key"], d.get("uuid") or None)
                                                            for d in inventory))
            # The run service is handed the worker side here: runs/ never imports workers/.
            service = RunService(store, settings, devices=devices, data_dir=data_dir, local_machine=local,
                                 workers=WorkerService, card_names=inventory_names(inventory))
            experiments = Experiments(service)  # before start: it follows recovery and retention too
            await service.start()
            await experiments.start()
            await service.reschedule()  # runs queued again at a takeover, once sweeps and studies follow them
        except BaseException:
            self._standby_store = None
            self._standby_event().clear()
            await store.close()
            lock.release()
            raise
        self._database_lock, self.store, self.service, self.experiments = lock, store, service, experiments
        metrics.watch(self, service)  # on jupyter-server's /metrics (server/metrics.py)
        interval = float(self.serverapp.web_app.settings.get(ACTIVITY_INTERVAL_SETTING, ACTIVITY_INTERVAL_S))
        self._was_active = False
        self._activity = PeriodicCallback(self._report_activity, interval * 1000)
        self._activity.start()
        self.log.info("codefy: run queue ready (database %s, devices: %s)", database,
                      ", ".join(["cpu", *devices]))
        return service

    def _lease(self, holder: str) -> Lease:
        settings = self.codefy_settings
        return Lease(holder, settings.leader_url or self.serverapp.connection_url,
                     ttl_s=settings.lease_ttl_s, renew_every_s=settings.lease_renew_s,
                     stepped_down=self._stepped_down)

    def _standby_event(self) -> asyncio.Event:
        if self._standby_known is None:
            self._standby_known = asyncio.Event()
        return self._standby_known

    def _lease_changed(self, change: str) -> None:
        if change == LOST:
            self.log.error("codefy: this server lost the leader lease: stepping down to a standby")
            self._stepped_down = True
            # The step-down is the start in progress: a request meanwhile waits for it (503
            # `recovering`, then `standby`) instead of starting a second service that would meet
            # this one's own database lock (503 `store_locked`).
            self._starting = asyncio.ensure_future(self._step_down(self._starting))

    async def _step_down(self, previous: asyncio.Future[RunService] | None) -> RunService:
        """Drop the run service (its writes are fenced now) and start again as a standby: a later
        win of the lease recovers from the database, as any new leader does."""
        if previous is not None and not previous.done():
            await asyncio.gather(previous, return_exceptions=True)
        service, store, lock = self.service, self.store or self._standby_store, getattr(self, "_database_lock", None)
        self.service = self.experiments = self.store = self._standby_store = None
        self._database_lock = None
        if getattr(self, "_activity", None) is not None:
            self._activity.stop()
        metrics.unwatch(self)
        for close in ((service.shutdown,) if service else ()) + ((store.close,) if store else ()):
            try:
                await close()
            except Exception as exc:  # fenced writes of the shutdown: the new leader recovers them
                self.log.warning("codefy: while stepping down: %s", exc)
        if lock is not None:
            lock.release()
        return await self._start_again()

    async def _start_again(self) -> RunService:
        """`_start_service`, tried again with backoff while the database cannot be reached (it
        may be restarting): a replica that stepped down must come back as a standby by itself, to
        contend for the lease, not wait for a request to start it."""
        delay = START_RETRY_FIRST_S
        while True:
            try:
                return await self._start_service()
            except StoreError as err:
                if delay == START_RETRY_FIRST_S:  # once per outage, not per retry
                    self.log.error("codefy: cannot start again as a standby yet (%s); retrying with backoff", err)
            self._waiting_for_store = True
            try:
                await asyncio.sleep(delay)
            finally:
                self._waiting_for_store = False
            delay = min(delay * 2, START_RETRY_MAX_S)

    def health(self) -> tuple[str, str | None]:
        """(`leader`, `standby` or `recovering`; the leader's URL when known), for load balancers."""
        if self.service is not None:
            return LEADER, (self.store.leader_url if self.store is not None else None) or self.serverapp.connection_url
        standby = self._standby_store
        if standby is not None and standby.role != LEADER:
            return "standby", standby.leader_url
        return "recovering", None

    def _standby_error(self, standby: Store) -> Unavailable:
        leader = standby.leader_url
        where = f"; the leader is {leader}" if leader else ""
        return Unavailable(f"this codefy server is a standby: it serves no requests{where}", code="standby",
                           params={"leader": leader})

    async def _lock_database(self, database: Path) -> DatabaseLock:
        """This process's hold on the database, before migrations or recovery touch it: a second
        server on the same file (a `codefy start` beside this Lab, a second Lab) answers 503
        `store_locked` on every route instead of sharing it."""
        try:
            return await asyncio.to_thread(DatabaseLock.acquire, database, url=self.serverapp.connection_url)
        except DatabaseLocked as err:
            if getattr(self, "_reported_holder", None) != err.holder:  # once, not on every request
                self._reported_holder = err.holder
                self.log.error("codefy: the run queue is unavailable: %s", err)
            raise Unavailable(str(err), code="store_locked",
                              params={"path": str(database), **err.holder.params()}) from None

    async def ready(self, wait_s: Any = _DEFAULT_WAIT) -> RunService:
        """The run service once it has started and recovered; started on first use.

        While it starts (a restart's recovery can take seconds on a large database), callers wait
        up to `wait_s` (default: the ready_wait_s setting; None: as long as it takes), then get a
        503 `recovering` that says when to try again. A database that cannot be opened (not SQLite,
        a newer schema) or that another server holds is reported on every request as a 503 naming
        the file; the file is never touched."""
        if self.service is not None:
            return self.service
        standby = self._standby_store
        if standby is not None and standby.role != LEADER:
            raise self._standby_error(standby)
        if self._starting is None or self._starting.done():
            self._starting = asyncio.ensure_future(self._start_service())
        starting = self._starting
        if wait_s is _DEFAULT_WAIT:
            wait_s = max(0, self.codefy_settings.ready_wait_s)
        try:
            return await asyncio.wait_for(self._started_or_standby(starting), wait_s)
        except asyncio.TimeoutError:
            raise Unavailable("the run queue is recovering the previous server's runs; try again shortly",
                              code="recovering", params={"retry_after_s": RETRY_AFTER_S},
                              retry_after_s=RETRY_AFTER_S) from None
        except StoreError as err:
            self.log.error("codefy: the run queue is unavailable: %s", err)
            raise Unavailable(f"the run queue is unavailable: {err}", code="store_unavailable",
                              params={"path": str(err.path) if err.path else None}) from None

    async def _started_or_standby(self, starting: asyncio.Future[RunService]) -> RunService:
        """The service once started; the standby refusal once the store turns out a standby's
        (whose start waits for the lease, maybe for ever)."""
        while True:
            standby = asyncio.ensure_future(self._standby_event().wait())
            try:
                await asyncio.wait({starting, standby}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                standby.cancel()
            if starting.done():
                return starting.result()
            store = self._standby_store
            if store is not None and store.role != LEADER:
                raise self._standby_error(store)
            await asyncio.sleep(0)  # it won the lease meanwhile: the event is being cleared

    async def _start_jupyter_server_extension(self, serverapp: Any) -> None:
        # A real server starts the queue with the server, so a restart's recovery does not wait
        # for the first request.
        if not self.forwarding:
            try:
                await self.ready(wait_s=None)
            except Unavailable as err:
                if err.code != "standby":  # a standby serves its 503s and waits for the lease
                    raise

    def _report_activity(self) -> None:
        """While runs are queued or executing, the server is busy: tell idle culling so (JupyterHub's
        single-user server reports the server's last activity to the Hub, where the culler reads
        it), or it would stop the server under a long run. Once more on the tick the queue empties,
        so the idle time counts from about the last run's end; then nothing, and the server may be
        culled."""
        active = self.service is not None and self.service.active_count > 0
        if active or self._was_active:
            self.serverapp.web_app.settings["api_last_activity"] = utcnow()
        self._was_active = active

    async def stop_extension(self) -> None:
        if self._starting is not None and not self._starting.done():
            if (self._standby_store is not None and self._standby_store.role != LEADER) or self._waiting_for_store:
                # A standby waiting for the lease, or a start waiting for the database: nothing of it to finish.
                self._starting.cancel()
            # Stopped while recovering: let recovery finish (its writes are what make the next
            # start consistent) before closing what it opened.
            await asyncio.gather(self._starting, return_exceptions=True)
        if getattr(self, "_activity", None) is not None:
            self._activity.stop()
        metrics.unwatch(self)
        if self.service is not None:
            await self.service.shutdown()
        if self.store is not None:
            await self.store.close()
        if getattr(self, "_database_lock", None) is not None:
            self._database_lock.release()


def replica_id(data_dir: Path) -> str:
    """This replica's name in the leader lease: kept in its data dir, so the same server started
    again after a kill -9 knows the lease its dead predecessor held and takes it at once (with the
    next epoch) instead of waiting out the TTL. The data dir's lock proves that predecessor gone:
    no two live processes ever share the name."""
    path = data_dir / "replica.id"
    try:
        found = path.read_text(encoding="ascii").strip()
        if found:
            return found
    except OSError:
        pass
    name = uuid.uuid4().hex
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as f:
        f.write(name + "\n")
    return name
