"""The extender service: its dependencies, its background tasks and its HTTP server.

``ExtenderService(settings, deps).run(stop)`` follows the store's change feed into the snapshot cache, posts
events, and serves ``/filter``, ``/bind``, ``/webhook``, ``/healthz``, ``/readyz`` and ``/metrics`` on
``--http_bind`` (TLS with ``--cert_file``/``--key_file``; ``/filter`` and ``/bind`` only to a client certificate
signed by ``--client-ca-file``), and ``/webhook`` there or on its own ``--webhook-bind`` listener, until ``stop`` is
set. It refuses to start when ``/filter`` and ``/bind`` would answer anyone on a non-loopback address without
``--insecure-allow-unauthenticated-scheduler`` (:meth:`ExtenderSettings.unauthenticated_scheduler_refusal`).
Then it drains: it stops accepting connections, lets in-flight requests finish within ``drain_timeout_s``, flushes
queued events and returns. Any number of replicas may run at once: they share only Redis and the API server.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import ssl
from typing import TYPE_CHECKING

from vgpu_scheduler.services.extender.app import Handler, create_app, create_webhook_app
from vgpu_scheduler.services.extender.bindhttp import BindHandler
from vgpu_scheduler.services.extender.bindlimit import BindLimit
from vgpu_scheduler.services.extender.bindlock import lock_wait_budget
from vgpu_scheduler.services.extender.deps import ExtenderDeps
from vgpu_scheduler.services.extender.filter import FilterHandler
from vgpu_scheduler.services.extender.fragmetrics import FragmentationCollector
from vgpu_scheduler.services.extender.gang import GangKeeper
from vgpu_scheduler.services.extender.metrics import AllocationCollector, ExtenderMetrics, QuotaView
from vgpu_scheduler.services.extender.preempt import Preemptor
from vgpu_scheduler.services.extender.snapshot import SnapshotCache, loop_time
from vgpu_scheduler.services.extender.tls import build_ssl_context
from vgpu_scheduler.services.extender.wakeups import NodeWakeups
from vgpu_scheduler.services.extender.webhook import WebhookHandler
from vgpu_scheduler.shared.config import ExtenderSettings
from vgpu_scheduler.shared.errors import ConfigError, TransientError
from vgpu_scheduler.shared.ops import RunningServer, start_server
from vgpu_scheduler.shared.runtime import cancel_until_done

if TYPE_CHECKING:
    from vgpu_scheduler.services.extender.autodefrag import AutoDefrag

__all__ = ["ExtenderDeps", "ExtenderService"]
"""``ExtenderDeps`` is defined in :mod:`.deps` (so that the handlers can name it without importing this module);
it stays importable from here for the composition roots."""

logger = logging.getLogger(__name__)


class ExtenderService:
    """One extender replica. Build it, then ``await run(stop)``; ``ready`` is set once it can place pods."""

    def __init__(
        self,
        settings: ExtenderSettings,
        deps: ExtenderDeps,
        *,
        drain_timeout_s: float = 10.0,
        ssl_context: ssl.SSLContext | None = None,
        lock_wakeups: bool = True,
        freeze_gc_when_ready: bool = False,
    ) -> None:
        """``lock_wakeups``: binds waiting for a busy node lock are woken by the node's change on the feed (False:
        they retry on their backoff only, as ``simulate`` wants: the feed arrives in real time, its clock is not).
        ``freeze_gc_when_ready``: the process is the extender's own (``vgpu-scheduler extender``): once the first
        snapshot is loaded, collect and freeze what start-up made (see :meth:`_watch_ready`)."""
        self._freeze_gc = freeze_gc_when_ready
        self.settings = settings
        self.deps = deps
        self.drain_timeout_s = drain_timeout_s
        self.metrics = ExtenderMetrics(deps.registry)
        self.metrics.policy_info.labels(settings.node_policy.value, str(settings.gpu_policy)).set(1)
        self.wakeups = NodeWakeups() if lock_wakeups else None
        """Binds waiting for a node's lock, woken by the node's changes on the feed the cache follows."""
        wait_s = lock_wait_budget(settings.bind_timeout_s)
        self.bind_limit = BindLimit(settings.max_binds_per_node, wait_s, self._set_bind_limit)
        self.metrics.binds_per_node_limit.set(self.bind_limit.value)
        self.cache = SnapshotCache(
            deps.store,
            deps.cache_settings,
            on_reload=lambda reason: self.metrics.snapshot_reloads.labels(reason).inc(),
            on_node_reads=self.metrics.snapshot_node_reads.inc,
            binds_per_node=settings.max_binds_per_node,
            wakeups=self.wakeups,
            on_lock_cycle=self.bind_limit.observe_cycle,
        )
        self.metrics.snapshot_nodes.set_function(lambda: float(len(self.cache)))
        self._quota_view = QuotaView({})
        deps.registry.register(
            AllocationCollector(
                self.cache.snapshots,
                lambda: self._quota_view,
                (deps.nvidia.resource_memory_name, deps.nvidia.resource_core_name),
                legacy=settings.legacy_metrics,
            )
        )
        deps.registry.register(FragmentationCollector(self.cache.snapshots))
        deps.event_sink.set_hooks(
            on_posted=self.metrics.events_posted.inc,
            on_dropped=self.metrics.events_dropped.inc,
            on_sampled_out=self.metrics.events_sampled_out.inc,
        )
        self.preemptor = Preemptor(settings, deps, self.cache)
        self.autodefrag: AutoDefrag | None = None
        """``--auto-defrag``: pods that fit nowhere get a defragmentation plan before preemption is considered."""
        if settings.auto_defrag:  # the planner and executor are loaded only when asked for
            from vgpu_scheduler.services.extender.autodefrag import AutoDefrag

            self.autodefrag = AutoDefrag(settings, deps, self.preemptor)
        self.gangs = GangKeeper(deps, self.cache)
        self.filter = FilterHandler(
            settings,
            deps,
            self.metrics,
            self.cache,
            preemptor=self.preemptor,
            defrag=self.autodefrag,
            gangs=self.gangs,
            on_reserved=lambda uid: self.bind_limit.reserved(uid, loop_time()),
        )
        self._binds = BindHandler(
            settings,
            deps,
            self.metrics,
            lock_wait_s=wait_s,
            on_lock_wait=lambda waited, timed_out: self.bind_limit.observe(waited, timed_out=timed_out),
            on_lock_queue=lambda uid: self.bind_limit.queued(uid, loop_time()),
            wakeups=self.wakeups,
        )
        self.bind: Handler = self._binds
        self.webhook: Handler = WebhookHandler(settings, deps, self.metrics)
        self._ssl_context = ssl_context
        self.ready = asyncio.Event()
        self.server: RunningServer | None = None
        self.webhook_server: RunningServer | None = None
        self.listening = asyncio.Event()

    def _set_bind_limit(self, limit: int) -> None:
        self.cache.set_binds_per_node(limit)
        self.metrics.binds_per_node_limit.set(limit)

    async def run(self, stop: asyncio.Event) -> None:
        """Serve until ``stop`` is set, then drain and return. :class:`ConfigError` if it must not serve."""
        refusal = self.settings.unauthenticated_scheduler_refusal()
        if refusal is not None:
            raise ConfigError(refusal)
        if self.settings.insecure_allow_unauthenticated_scheduler and self.settings.client_ca_file is None:
            logger.warning(
                "/filter and /bind accept any client (--insecure-allow-unauthenticated-scheduler)",
                extra={"http_bind": str(self.settings.http_bind)},
            )
        ssl_context = self._ssl_context or self._tls_context(client_ca_file=self.settings.client_ca_file)
        webhook_bind = self.settings.webhook_bind
        webhook_ssl = None if webhook_bind is None else self._tls_context(client_ca_file=None)
        async with asyncio.TaskGroup() as tg:
            follower = tg.create_task(self.cache.run(), name="extender:snapshot-follower")
            sink = tg.create_task(self.deps.event_sink.run(), name="extender:event-sink")
            readiness = tg.create_task(self._watch_ready(), name="extender:ready-watch")
            try:
                self.server = await start_server(
                    create_app(self, webhook=webhook_bind is None),
                    self.settings.http_bind,
                    ssl_context=ssl_context,
                    shutdown_timeout_s=self.drain_timeout_s,
                )
                if webhook_bind is not None:
                    self.webhook_server = await start_server(
                        create_webhook_app(self),
                        webhook_bind,
                        ssl_context=webhook_ssl,
                        shutdown_timeout_s=self.drain_timeout_s,
                    )
                self.listening.set()
                await stop.wait()
                logger.info("extender draining", extra={"deadline_s": self.drain_timeout_s})
            finally:
                servers = [srv for srv in (self.server, self.webhook_server) if srv is not None]
                # stop accepting; in-flight requests finish within the deadline
                await asyncio.gather(*(srv.stop() for srv in servers))
                await self._binds.binder.locker.drain(min(2.0, self.drain_timeout_s))
                if not await self.deps.event_sink.flush(min(2.0, self.drain_timeout_s)):
                    logger.warning("events still queued at shutdown", extra={"pending": self.deps.event_sink.pending})
                self.cache.close()
                closing = [self.preemptor.aclose(), self.gangs.aclose()]
                if self.autodefrag is not None:  # the runs stop at their next step, their holds settled
                    closing.append(self.autodefrag.aclose(self.drain_timeout_s))
                await asyncio.gather(*closing)
                await cancel_until_done([readiness, sink, follower])  # one cancel() can be lost on 3.11

    async def readiness(self) -> tuple[bool, str]:
        """Ready = Redis answers, the snapshot is loaded and the registrar's and informer's sync markers are
        present in the current store epoch (a live check, for ``/readyz``)."""
        try:
            reason = await self.cache.verify()
        except TransientError as e:
            return False, f"redis unavailable: {e}"
        if reason is not None:
            return False, reason
        return True, f"ok: {len(self.cache)} nodes"

    async def refresh_quota_metrics(self) -> None:
        """Read every namespace's quota for the scrape-time quota gauges (the ``/metrics`` before-scrape hook)."""
        quota = self.deps.store.quota
        namespaces = await quota.namespaces()
        states = await asyncio.gather(*(quota.get(ns) for ns in namespaces))
        self._quota_view = QuotaView(dict(zip(namespaces, states, strict=True)))

    async def _watch_ready(self) -> None:
        await self.cache.wait_until(lambda: self.cache.not_ready_reason() is None, timeout_s=None)
        if self._freeze_gc:
            # What start-up made (imported modules, the first snapshot of every node) lives long: out of the cyclic
            # collector's sight, its full collections walk only what requests and later snapshots made. One took
            # ~0.4 s at 300 nodes in the middle of a benchmark run (docs/performance.md). Garbage frozen would
            # never be collected: collect first, once.
            gc.collect()
            gc.freeze()
        self.ready.set()
        logger.info("extender ready", extra={"nodes": len(self.cache)})

    def _tls_context(self, *, client_ca_file: str | None) -> ssl.SSLContext | None:
        """The serving TLS context for ``--cert_file``/``--key_file`` (reloaded when the files are rotated), asking
        for client certificates signed by ``client_ca_file`` when given."""
        s = self.settings
        if s.cert_file is None or s.key_file is None:
            return None
        return build_ssl_context(s.cert_file, s.key_file, client_ca_file=client_ca_file)
