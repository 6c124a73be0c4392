"""Prometheus registry helpers. One ``CollectorRegistry`` per process, built in ``__main__`` and injected.

Services define their own metrics against the registry they are given (never the global default registry).
HAMi puts the constant label ``zone="vGPU"`` on every series it exports (docs/hami-wire.md §10.4). The Python
client has no constant labels: metrics that mirror HAMi's declare a ``zone`` label and always set it to
:data:`HAMI_ZONE`.

``/metrics`` is rendered by :func:`render_text`: prometheus_client's text format (0.0.4), except that a
:class:`TextGaugeFamily` (a family whose text a collector rendered itself, e.g. from a cache of unchanged nodes)
is written as it is instead of being formatted sample by sample. :class:`SampleLines` formats lines exactly as
prometheus_client does, so the output is byte for byte what ``generate_latest`` gives for the same samples.
"""

from __future__ import annotations

import platform
from collections.abc import Callable, Iterable, Sequence
from importlib import metadata
from typing import cast

from prometheus_client import CollectorRegistry, Gauge, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.gc_collector import GCCollector
from prometheus_client.metrics_core import Metric
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

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


# ---- /metrics rendering ------------------------------------------------------------------------------------------


_go_float = cast(Callable[[float], str], floatToGoString)
"""A number as prometheus_client writes it (Go's float format)."""


def escape_label_value(value: str) -> str:
    """prometheus_client's escaping of a label value in the text format: backslash, newline, double quote."""
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def gauge_header(name: str, documentation: str) -> str:
    """The ``# HELP`` and ``# TYPE`` lines of a gauge family, as prometheus_client writes them."""
    doc = documentation.replace("\\", r"\\").replace("\n", r"\n")
    return f"# HELP {name} {doc}\n# TYPE {name} gauge\n"


class LabelledGaugeFamily(GaugeMetricFamily):
    """A ``GaugeMetricFamily`` that says which label names it was made with (prometheus_client keeps them
    private), for a collector that formats its lines itself (:class:`SampleLines`)."""

    def __init__(self, name: str, documentation: str, labels: Sequence[str]) -> None:
        super().__init__(name, documentation, labels=list(labels))
        self.labelnames = tuple(labels)


class SampleLines:
    """Sample lines of one family, formatted as prometheus_client's text format does: the label pairs sorted by
    label name, each value escaped, the number as Go prints a float (``2.5769803776e+10``). ``labelnames`` are
    given in the caller's order; :meth:`line` takes the values in that same order (:meth:`escaped_line` values
    already passed through :func:`escape_label_value`, for a caller that reuses them across families)."""

    def __init__(self, name: str, labelnames: Sequence[str]) -> None:
        order = sorted(range(len(labelnames)), key=labelnames.__getitem__)
        pairs = ",".join(f'{labelnames[i]}="{{{i}}}"' for i in order)
        self._template = f"{name}{{{{{pairs}}}}} " if labelnames else f"{name} "

    def line(self, values: Sequence[str], value: float) -> str:
        return self.escaped_line([escape_label_value(v) for v in values], value)

    def escaped_line(self, values: Sequence[str], value: float) -> str:
        return self._template.format(*values) + _go_float(value) + "\n"


class TextGaugeFamily(Metric):
    """A gauge family that carries its rendered text (``# HELP``, ``# TYPE`` and every sample line, UTF-8):
    :func:`render_text` writes ``text`` as it is. ``samples`` is built only when something reads it
    (``registry.get_sample_value``, another exposition format), by ``samples_of``, which must give the same series
    as ``text`` in the same order."""

    def __init__(self, name: str, documentation: str, text: bytes, samples_of: Callable[[], list[Sample]]) -> None:
        self._samples: list[Sample] | None = None
        self._samples_of = samples_of
        Metric.__init__(self, name, documentation, "gauge")
        self._samples = None  # Metric.__init__ assigned an empty list: the samples are still to be built
        self.text = text

    @property
    def samples(self) -> list[Sample]:
        if self._samples is None:
            self._samples = self._samples_of()
        return self._samples

    @samples.setter
    def samples(self, value: list[Sample]) -> None:
        self._samples = value


class _Collected:
    """Metrics already collected, as a collector (what ``generate_latest`` reads)."""

    def __init__(self, metrics: Iterable[Metric]) -> None:
        self._metrics = list(metrics)

    def collect(self) -> Iterable[Metric]:
        return self._metrics


def render_text(registry: Collector) -> bytes:
    """The registry in Prometheus' text format (0.0.4), families in collection order: a :class:`TextGaugeFamily`
    as its own text, every other family by ``generate_latest`` (the same bytes ``generate_latest(registry)`` gives
    when each text family's text matches its samples)."""
    parts: list[bytes] = []
    pending: list[Metric] = []
    for metric in registry.collect():
        if isinstance(metric, TextGaugeFamily):
            if pending:
                parts.append(generate_latest(_Collected(pending)))
                pending = []
            parts.append(metric.text)
        else:
            pending.append(metric)
    if pending:
        parts.append(generate_latest(_Collected(pending)))
    return b"".join(parts)
