"""``vgpu-scheduler all-in-one``: the registrar, informer and extender in one process (the composition root).

Settings → logging → Redis (``--redis-url``, or an embedded in-process store when it is unset) → one kube client
(``--kube-server``, ``--kubeconfig``, ``KUBECONFIG``, ``~/.kube/config`` or in-cluster) → one metrics registry →
the extender on ``--http_bind`` and the ops server (``/healthz``, ``/readyz`` of all three, ``/metrics``) on
``--metrics-bind-address``, supervised by :func:`shared.runtime.run_service`. SIGTERM: the extender drains, the
registrar and informer give their leases up, the process exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os

from vgpu_scheduler.services.allinone.service import STOP_DEADLINE_S, AllInOneDeps, AllInOneService
from vgpu_scheduler.shared.config import AllInOneSettings, Service, settings_from_args
from vgpu_scheduler.shared.k8s import kube_settings_from, open_client
from vgpu_scheduler.shared.logs import configure_from_settings
from vgpu_scheduler.shared.metrics import new_registry, register_build_info
from vgpu_scheduler.shared.ops import create_ops_app, serve
from vgpu_scheduler.shared.runtime import RootTask, fast_loop_factory, run_service, supervise
from vgpu_scheduler.shared.store import Store

logger = logging.getLogger(__name__)

EMBEDDED_STORE_WARNING = (
    "no --redis-url: using an embedded in-process store. It lives and dies with this process: run exactly one "
    "all-in-one replica and no separate registrar/informer/extender; give --redis-url for anything else"
)


async def serve_all_in_one(
    settings: AllInOneSettings, stop: asyncio.Event, *, started: asyncio.Future[AllInOneService] | None = None
) -> None:
    """Build the shared dependencies and run the three services and the ops server until ``stop``.

    ``started`` (tests) receives the service once it is built.
    """
    common = settings.common
    if common.redis_url is None:
        logger.warning(EMBEDDED_STORE_WARNING)
    store = Store.for_service(common)
    try:
        async with open_client(kube_settings_from(common)) as kube:
            registry = new_registry()
            register_build_info(registry, service=Service.ALL_IN_ONE.value)
            service = AllInOneService(
                settings, AllInOneDeps(store=store, kube=kube, registry=registry, instance_id=common.instance_id)
            )
            if started is not None:
                started.set_result(service)
            ops = create_ops_app(
                readiness=service.readiness, registry=registry, before_scrape=service.extender.refresh_quota_metrics
            )
            # The supervisor's own stop event is never set: on ``stop`` the services return by themselves (the
            # extender drains first), which then ends the ops server.
            await supervise(
                asyncio.Event(),
                [
                    RootTask("ops-server", lambda: serve(ops, common.metrics_bind)),
                    RootTask("all-in-one", lambda: service.run(stop)),
                ],
                shutdown_deadline_s=STOP_DEADLINE_S + 5.0,
            )
    finally:
        await store.aclose()


def run(args: argparse.Namespace) -> int:
    """Run all-in-one until SIGTERM/SIGINT. Exit code 0 clean, 1 failure, 2 configuration error."""
    settings = settings_from_args(Service.ALL_IN_ONE, args, os.environ)
    configure_from_settings(settings.common)
    return run_service(lambda stop: serve_all_in_one(settings, stop), loop_factory=fast_loop_factory())
