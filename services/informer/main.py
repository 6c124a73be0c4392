"""``vgpu-scheduler informer``: the composition root (settings → logs → Redis → Kubernetes → ops → service)."""

from __future__ import annotations

import argparse
import asyncio
import os

from services.informer.service import InformerDeps, InformerService
from shared.config import InformerSettings, Service, add_service_parser, settings_from_args
from shared.config.settings import KubeSettings as KubeConfigSettings
from shared.k8s import Api, KubeSettings, open_client
from shared.logs import configure_from_settings
from shared.metrics import new_registry, register_build_info
from shared.ops import create_ops_app, serve
from shared.runtime import RootTask, run_service, supervise
from shared.store import Store, connect

DEFAULT_KUBE_TIMEOUT_S = 10.0
"""Deadline of one API call when ``--kube-timeout`` is 0 (HAMi's "no timeout"): every I/O call has one."""

EVENT_COMPONENT = "vgpu-scheduler"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``informer`` subcommand (flags generated from ``shared.config``'s option table)."""
    add_service_parser(subparsers, Service.INFORMER).set_defaults(run=run)


def kube_settings(cfg: KubeConfigSettings) -> KubeSettings:
    """The client settings for the configured API server (``--kube-timeout 0`` → a 10 s deadline)."""
    return KubeSettings(
        kubeconfig=cfg.kubeconfig,
        server=cfg.server,
        qps=cfg.qps,
        burst=max(cfg.burst, 1),
        timeout_s=cfg.timeout_s if cfg.timeout_s > 0 else DEFAULT_KUBE_TIMEOUT_S,
    )


async def serve_informer(settings: InformerSettings, stop: asyncio.Event) -> None:
    """Build every dependency, serve ops and run the informer until ``stop``; close everything after."""
    common = settings.common
    store = Store.create(connect(common.redis_url), prefix=common.key_prefix)
    try:
        async with open_client(kube_settings(common.kube)) as kube:
            registry = new_registry()
            register_build_info(registry, service=Service.INFORMER.value)
            deps = InformerDeps(
                store=store,
                kube=kube,
                api=Api(kube, component=EVENT_COMPONENT, instance=common.instance_id),
                registry=registry,
                instance_id=common.instance_id,
            )
            service = InformerService(settings, deps)
            ops = create_ops_app(readiness=service.readiness, registry=registry)
            await supervise(
                stop,
                [
                    RootTask("ops-server", lambda: serve(ops, common.metrics_bind)),
                    RootTask("informer", lambda: service.run(stop)),
                ],
            )
    finally:
        await store.aclose()


def run(args: argparse.Namespace) -> int:
    """Run the informer process; returns the exit code (0 after a clean SIGTERM)."""
    settings = settings_from_args(Service.INFORMER, args, os.environ)
    configure_from_settings(settings.common)
    return run_service(lambda stop: serve_informer(settings, stop))
