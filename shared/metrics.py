"""Prometheus registry helpers. One ``CollectorRegistry`` per process, built in ``__main__`` and injected.

Services define their own metrics against the registry they are given (never the global default registry).
HAMi puts the constant label ``zone="vGPU"`` on every series it exports (docs/hami-wire.md §10.4). The Python
client has no constant labels: metrics that mirror HAMi's declare a ``zone`` label and always set it to
:data:`HAMI_ZONE`.
"""

from __future__ import annotations

import platform
from importlib import metadata

from prometheus_client import CollectorRegistry, Gauge
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

HAMI_ZONE = "vGPU"
PACKAGE = "vgpu-scheduler"


def new_registry(*, process_metrics: bool = True) -> CollectorRegistry:
    """A fresh registry, with the process/platform/GC collectors unless ``process_metrics`` is false."""
    registry = CollectorRegistry(auto_describe=True)
    if process_metrics:
        ProcessCollector(registry=registry)
        PlatformCollector(registry=registry)
        GCCollector(registry=registry)
    return registry


def package_version() -> str:
    try:
        return metadata.version(PACKAGE)
    except metadata.PackageNotFoundError:
        return "unknown"


def register_build_info(registry: CollectorRegistry, *, service: str, revision: str = "", build_date: str = "") -> None:
    """Export ``vgpu_scheduler_build_info`` and HAMi's ``hami_build_info`` (value 1) for dashboards.

    HAMi's Go-specific labels carry the Python equivalents: ``go_version`` the Python version,
    ``compiler`` the implementation (``cpython``).
    """
    version = package_version()
    ours = Gauge(
        "vgpu_scheduler_build_info",
        "Build information of this vgpu-scheduler process (value 1).",
        ["version", "revision", "python_version", "service"],
        registry=registry,
    )
    ours.labels(version, revision, platform.python_version(), service).set(1)
    hami = Gauge(
        "hami_build_info",
        "HAMi-compatible build information (value 1).",
        ["version", "revision", "build_date", "go_version", "compiler", "platform", "zone"],
        registry=registry,
    )
    hami.labels(
        version,
        revision,
        build_date,
        f"python{platform.python_version()}",
        platform.python_implementation().lower(),
        f"{platform.system().lower()}/{platform.machine().lower()}",
        HAMI_ZONE,
    ).set(1)
