"""``vgpu-scheduler extender``: the composition root.

Settings → logging → Redis → kube client → metrics registry → event sink → :class:`ExtenderService` (HTTP on
``--http_bind``) and the ops server (``/healthz``, ``/readyz``, ``/metrics`` on ``--metrics-bind-address``),
supervised by :func:`shared.runtime.run_service`. SIGTERM drains: the extender stops accepting, finishes
in-flight requests within the drain deadline, then the ops server stops and the process exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os

from vgpu_scheduler.services.extender.deps import ExtenderDeps
from vgpu_scheduler.services.extender.events import EventSink, api_poster
from vgpu_scheduler.services.extender.service import ExtenderService
from vgpu_scheduler.shared.config import ExtenderSettings, Service, settings_from_args
from vgpu_scheduler.shared.k8s import Api, kube_settings_from, open_client
from vgpu_scheduler.shared.logs import configure_from_settings
from vgpu_scheduler.shared.metrics import new_registry, register_build_info
from vgpu_scheduler.shared.ops import create_ops_app, serve
from vgpu_scheduler.shared.runtime import RootTask, fast_loop_factory, run_service, supervise
from vgpu_scheduler.shared.store import Store
from vgpu_scheduler.shared.vendors.catalog import enabled_vendors

logger = logging.getLogger(__name__)

API_CALLS_PER_BIND = 4
"""What one successful /bind costs the API client: GET pod, PATCH node (lock), PATCH pod, POST binding."""
LOW_BIND_RATE = 10.0

DEFAULT_COMPONENT = "vgpu-scheduler"
"""The Events' ``source.component`` when ``--scheduler-name`` is empty."""
DRAIN_TIMEOUT_S = 10.0


def bind_rate_ceiling(kube_qps: float) -> float | None:
    """Binds per second the API client's rate limit allows (``None``: no limit)."""
    return kube_qps / API_CALLS_PER_BIND if kube_qps > 0 else None


async def serve_extender(settings: ExtenderSettings, stop: asyncio.Event) -> None:
    """Build the dependencies, then run the extender and its ops server until ``stop`` (then drain)."""
    common = settings.common
    ceiling = bind_rate_ceiling(common.kube.qps)
    if ceiling is not None and ceiling < LOW_BIND_RATE:
        logger.warning(
            "the API rate limit caps this replica's binds",
            extra={"kube_qps": common.kube.qps, "binds_per_s": round(ceiling, 2), "hint": "raise --kube-qps"},
        )
    store = Store.for_service(common)
    try:
        async with open_client(kube_settings_from(common)) as kube:
            api = Api(kube, component=settings.scheduler_name or DEFAULT_COMPONENT, instance=common.instance_id)
            registry = new_registry()
            register_build_info(registry, service=Service.EXTENDER.value)
            deps = ExtenderDeps(
                store=store,
                api=api,
                registry=registry,
                instance_id=common.instance_id,
                nvidia=common.nvidia,
                vendors=enabled_vendors(common.nvidia, common.device_sections, common.enable_flags),
                event_sink=EventSink(api_poster(api), normal_per_s=settings.success_event_rate),
            )
            service = ExtenderService(settings, deps, drain_timeout_s=DRAIN_TIMEOUT_S, freeze_gc_when_ready=True)
            ops = create_ops_app(
                readiness=service.readiness, registry=registry, before_scrape=service.refresh_quota_metrics
            )
            # The supervisor's own stop event is never set: on SIGTERM the extender drains and returns by itself,
            # which then stops the ops server (cancelling the extender first would cut in-flight requests).
            await supervise(
                asyncio.Event(),
                [
                    RootTask("ops-server", lambda: serve(ops, common.metrics_bind)),
                    RootTask("extender", lambda: service.run(stop)),
                ],
                shutdown_deadline_s=DRAIN_TIMEOUT_S + 5.0,
            )
    finally:
        await store.aclose()


def run(args: argparse.Namespace) -> int:
    """Run the extender until SIGTERM/SIGINT. Exit code 0 clean, 1 failure, 2 configuration error."""
    settings = settings_from_args(Service.EXTENDER, args, os.environ)
    configure_from_settings(settings.common)
    return run_service(lambda stop: serve_extender(settings, stop), loop_factory=fast_loop_factory())
