"""``vgpu-scheduler registrar``: the composition root.

Settings → logging → Redis → kube client → metrics registry → ops server (``/healthz``, ``/readyz``,
``/metrics`` on ``--metrics-bind-address``) → :class:`RegistrarService`, supervised by
:func:`shared.runtime.run_service` (SIGTERM/SIGINT: the lease is given up and the process exits 0).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os

from vgpu_scheduler.services.registrar.service import RegistrarDeps, RegistrarService
from vgpu_scheduler.shared.config import Service, settings_from_args
from vgpu_scheduler.shared.k8s import kube_settings_from, open_client
from vgpu_scheduler.shared.logs import configure_from_settings
from vgpu_scheduler.shared.metrics import new_registry, register_build_info
from vgpu_scheduler.shared.ops import create_ops_app, serve
from vgpu_scheduler.shared.runtime import RootTask, fast_loop_factory, run_service, supervise
from vgpu_scheduler.shared.store import Store

DEFAULT_KUBE_TIMEOUT_S = 30.0
"""The per-call deadline used when ``--kube-timeout`` is 0 (HAMi: no timeout; we always keep a deadline)."""


def run(args: argparse.Namespace) -> int:
    """Run the registrar until SIGTERM/SIGINT. Exit code 0 clean, 1 failure, 2 configuration error."""
    settings = settings_from_args(Service.REGISTRAR, args, os.environ)
    configure_from_settings(settings.common)
    # Everything imported so far (about 90,000 objects, kubernetes_asyncio's models above all) lives as long as
    # the process: out of the collector's sight, a full collection (rare, and the one at exit) walks only what the
    # watches keep, in microseconds instead of about 60 ms (docs/performance.md)
    gc.freeze()

    async def main(stop: asyncio.Event) -> None:
        common = settings.common
        store = Store.for_service(common)
        try:
            async with open_client(kube_settings_from(common, default_timeout_s=DEFAULT_KUBE_TIMEOUT_S)) as kube:
                registry = new_registry()
                register_build_info(registry, service=Service.REGISTRAR.value)
                service = RegistrarService(
                    settings,
                    RegistrarDeps(store=store, kube=kube, registry=registry, instance_id=common.instance_id),
                )
                app = create_ops_app(readiness=service.readiness, registry=registry)
                await supervise(
                    stop,
                    [
                        RootTask("ops-server", lambda: serve(app, common.metrics_bind)),
                        RootTask("registrar", lambda: service.run(stop)),
                    ],
                )
        finally:
            await store.aclose()

    return run_service(main, loop_factory=fast_loop_factory())
