"""The frozen per-service settings objects, and how each is built from the resolved option values
(``settings_from_args``, ``settings_for``); the resolution itself (flag > env > config file > default) is
``resolve``."""

from __future__ import annotations

import argparse
import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, NoReturn, overload

from vgpu_scheduler.shared.config.options import (
    ENABLE_FLAG_OPTIONS,
    OPTIONS_BY_NAME,
    Service,
    add_options,
    normalize_argv,
)
from vgpu_scheduler.shared.config.resolve import Resolved, resolve
from vgpu_scheduler.shared.config.values import BindAddress, LogFormat, LogLevel, is_loopback_host, redis_url_password
from vgpu_scheduler.shared.devconfig import LegacyOverrides, apply_legacy_overrides, load_device_config
from vgpu_scheduler.shared.domain.model import GpuPolicy, GpuPolicyToken, NodePolicy, NvidiaConfig
from vgpu_scheduler.shared.errors import ConfigError

# --------------------------------------------------------------------------------------------
# Settings.
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class KubeSettings:
    """How to reach the API server. ``server`` (the emulator) and ``kubeconfig`` exclude each other."""

    kubeconfig: str | None = None
    server: str | None = None
    qps: float = 500.0
    burst: int = 1000
    timeout_s: float = 0.0


@dataclass(frozen=True, slots=True)
class CommonSettings:
    """What every service shares: identity, logging, Redis, Kubernetes, ops server and the device config."""

    service: Service
    instance_id: str
    log_format: LogFormat = LogFormat.AUTO
    log_level: LogLevel = LogLevel.INFO
    debug: bool = False
    verbosity: int = 0
    redis_url: str | None = None
    redis_password_file: str | None = None
    redis_wait_replicas: int | None = None
    """None: 1 with a Sentinel URL, else 0 (``Store.create``)."""
    redis_wait_timeout_s: float = 0.25
    key_prefix: str = "vgpu"
    kube: KubeSettings = KubeSettings()
    metrics_bind: BindAddress = field(default_factory=lambda: BindAddress("", 9395))
    device_config_file: str = ""
    nvidia: NvidiaConfig = field(default_factory=NvidiaConfig)
    device_config_notes: tuple[str, ...] = ()
    device_sections: Mapping[str, object] = field(default_factory=dict)
    """The device config's other vendor sections (``hygon:`` …), for ``shared.vendors.catalog.enabled_vendors``."""
    enable_flags: frozenset[str] = frozenset()
    """HAMi's flags that enable an opt-in family, when given true (``{"enable-ascend"}``), for ``enabled_vendors``."""
    config_file: str | None = None

    @property
    def effective_log_level(self) -> LogLevel:
        """``--log-level``, lowered to debug by ``--debug`` or ``-v`` >= 4 (HAMi's chart runs ``--debug -v=4``)."""
        if self.debug or self.verbosity >= 4:
            return LogLevel.DEBUG
        return self.log_level


@dataclass(frozen=True, slots=True)
class RegistrarSettings:
    common: CommonSettings
    node_label_selector: tuple[tuple[str, str], ...] = ()
    lease_ttl_s: float = 15.0


@dataclass(frozen=True, slots=True)
class InformerSettings:
    common: CommonSettings
    lease_ttl_s: float = 15.0
    reconcile_interval_s: float = 300.0
    reservation_grace_s: float = 120.0
    node_lock_timeout_s: float = 300.0
    legacy_metrics: bool = False


@dataclass(frozen=True, slots=True)
class ExtenderSettings:
    """The extender's settings. ``profiling`` and ``leader_elect*`` are accepted HAMi flags with no effect."""

    common: CommonSettings
    http_bind: BindAddress = field(default_factory=lambda: BindAddress("127.0.0.1", 8080))
    cert_file: str | None = None
    key_file: str | None = None
    client_ca_file: str | None = None
    insecure_allow_unauthenticated_scheduler: bool = False
    webhook_bind: BindAddress | None = None
    scheduler_name: str = ""
    node_policy: NodePolicy = NodePolicy.BINPACK
    gpu_policy: GpuPolicy = field(default_factory=lambda: GpuPolicy((GpuPolicyToken.SPREAD,)))
    force_overwrite_default_scheduler: bool = True
    node_lock_timeout_s: float = 300.0
    node_lock_retry_timeout_s: float = 28.0
    bind_timeout_s: float = 4.0
    bind_aware_placement: bool = True
    max_binds_per_node: int = 4
    auto_defrag: bool = False
    defrag_moves_per_minute: int = 10
    defrag_moves_per_node_per_minute: int = 4
    success_event_rate: float = 10.0
    reservation_grace_s: float = 120.0
    legacy_metrics: bool = False
    profiling: bool = False
    leader_elect: bool = False
    leader_elect_resource_name: str = ""
    leader_elect_resource_namespace: str = ""

    @property
    def tls(self) -> bool:
        return self.cert_file is not None

    def unauthenticated_scheduler_refusal(self) -> str | None:
        """Why this extender must not serve: ``/filter`` and ``/bind`` would answer any client that can reach a
        non-loopback ``--http_bind``, and nobody said so on purpose (``None``: fine to serve)."""
        if self.client_ca_file is not None or self.insecure_allow_unauthenticated_scheduler:
            return None
        if is_loopback_host(self.http_bind.host):
            return None  # reachable from this host (or pod) only, as HAMi's extender beside its kube-scheduler
        return (
            f"/filter and /bind on --http_bind={self.http_bind} would accept any client: give --client-ca-file "
            "(with --cert_file/--key_file) so only kube-scheduler's client certificate is accepted, or "
            "--insecure-allow-unauthenticated-scheduler to serve them unauthenticated on purpose"
        )


@dataclass(frozen=True, slots=True)
class AllInOneSettings:
    """Settings of ``all-in-one`` (and ``simulate``): each component's own settings, sharing one ``common``."""

    common: CommonSettings
    registrar: RegistrarSettings
    informer: InformerSettings
    extender: ExtenderSettings


@dataclass(frozen=True, slots=True)
class SimulateSettings:
    """Settings of ``simulate``: the extender's policies and the device config, no servers."""

    common: CommonSettings
    registrar: RegistrarSettings
    informer: InformerSettings
    extender: ExtenderSettings


@dataclass(frozen=True, slots=True)
class InspectSettings:
    """Settings of the operator commands ``explain``, ``usage`` and ``defrag``: how to reach Redis (and, for
    ``explain`` and ``defrag``, the API server) and the extender's default policies, so that they plan as
    ``/filter`` does. ``defrag`` needs no Redis when it plans on a simulated cluster."""

    common: CommonSettings
    node_policy: NodePolicy = NodePolicy.BINPACK
    gpu_policy: GpuPolicy = field(default_factory=lambda: GpuPolicy((GpuPolicyToken.SPREAD,)))


Settings = (
    RegistrarSettings | InformerSettings | ExtenderSettings | AllInOneSettings | SimulateSettings | InspectSettings
)

_REDIS_REQUIRED = frozenset({Service.REGISTRAR, Service.INFORMER, Service.EXTENDER, Service.EXPLAIN, Service.USAGE})


def default_instance_id() -> str:
    """``<hostname>-<pid>``: unique per process, readable in lease holders and logs."""
    return f"{socket.gethostname()}-{os.getpid()}"


def _common(service: Service, r: Resolved) -> CommonSettings:
    redis_url = r.opt_text("redis-url")
    if redis_url is None and service in _REDIS_REQUIRED:
        raise ConfigError(
            f"--redis-url is required by {service.value} (flag, {OPTIONS_BY_NAME['redis-url'].env_var} "
            "or config file key redis-url)"
        )
    redis_password_file = r.opt_text("redis-password-file")
    if redis_password_file is not None:
        if redis_url is not None and redis_url_password(redis_url):
            raise ConfigError("--redis-url carries a password and --redis-password-file is set: give one")
        if not Path(redis_password_file).is_file():
            raise ConfigError(f"--redis-password-file: no such file {redis_password_file!r}")
    if redis_url is None and r.opt_integer("redis-wait-replicas"):
        raise ConfigError("--redis-wait-replicas needs --redis-url: the embedded store has no replicas")
    kubeconfig, server = r.opt_text("kubeconfig"), r.opt_text("kube-server")
    if kubeconfig and server:
        raise ConfigError("--kubeconfig and --kube-server exclude each other: give one")
    device_config_file = r.text("device-config-file")
    loaded = load_device_config(device_config_file) if device_config_file else None
    legacy = LegacyOverrides(
        default_memory=r.opt_integer("default-mem"),
        default_cores=r.opt_integer("default-cores"),
        default_gpu_num=r.opt_integer("default-gpu"),
        resource_count_name=r.opt_text("resource-name"),
        resource_memory_name=r.opt_text("resource-mem"),
        resource_memory_percentage_name=r.opt_text("resource-mem-percentage"),
        resource_core_name=r.opt_text("resource-cores"),
        resource_priority_name=r.opt_text("resource-priority"),
        overwrite_env=r.opt_flag("overwrite-env"),
    )
    nvidia = apply_legacy_overrides(loaded.nvidia if loaded else NvidiaConfig(), legacy)
    log_format = r.get("log-format")
    log_level = r.get("log-level")
    metrics_bind = r.get("metrics-bind-address")
    assert isinstance(log_format, LogFormat) and isinstance(log_level, LogLevel)
    assert isinstance(metrics_bind, BindAddress)
    return CommonSettings(
        service=service,
        instance_id=r.opt_text("instance-id") or default_instance_id(),
        log_format=log_format,
        log_level=log_level,
        debug=r.flag("debug"),
        verbosity=r.integer("v"),
        redis_url=redis_url,
        redis_password_file=redis_password_file,
        redis_wait_replicas=r.opt_integer("redis-wait-replicas"),
        redis_wait_timeout_s=r.number("redis-wait-timeout"),
        key_prefix=r.text("key-prefix"),
        kube=KubeSettings(
            kubeconfig=kubeconfig,
            server=server,
            qps=r.number("kube-qps"),
            burst=r.integer("kube-burst"),
            timeout_s=r.number("kube-timeout"),
        ),
        metrics_bind=metrics_bind,
        device_config_file=device_config_file,
        nvidia=nvidia,
        device_config_notes=loaded.notes if loaded else (),
        device_sections=loaded.vendor_sections if loaded else {},
        enable_flags=frozenset(f for f in ENABLE_FLAG_OPTIONS if r.flag(f)),
        config_file=r.opt_text("config"),
    )


def _registrar(common: CommonSettings, r: Resolved) -> RegistrarSettings:
    selector = r.get("node-label-selector")
    assert isinstance(selector, tuple)
    return RegistrarSettings(common=common, node_label_selector=selector, lease_ttl_s=r.number("lease-ttl"))


def _informer(common: CommonSettings, r: Resolved) -> InformerSettings:
    return InformerSettings(
        common=common,
        lease_ttl_s=r.number("lease-ttl"),
        reconcile_interval_s=r.number("reconcile-interval"),
        reservation_grace_s=r.number("reservation-grace"),
        node_lock_timeout_s=r.number("node-lock-timeout"),
        legacy_metrics=r.flag("legacy-metrics"),
    )


def _extender(common: CommonSettings, r: Resolved) -> ExtenderSettings:
    cert_file, key_file = r.opt_text("cert_file") or None, r.opt_text("key_file") or None
    if (cert_file is None) != (key_file is None):
        raise ConfigError("--cert_file and --key_file go together: give both or neither")
    for flag, path in (("--cert_file", cert_file), ("--key_file", key_file)):
        if path is not None and not Path(path).is_file():
            raise ConfigError(f"{flag}: no such file {path!r}")
    client_ca_file = r.opt_text("client-ca-file")
    if client_ca_file is not None:
        if cert_file is None:
            raise ConfigError("--client-ca-file needs --cert_file and --key_file (client certificates need TLS)")
        if not Path(client_ca_file).is_file():
            raise ConfigError(f"--client-ca-file: no such file {client_ca_file!r}")
    webhook_bind = r.get("webhook-bind")
    assert webhook_bind is None or isinstance(webhook_bind, BindAddress)
    http_bind = r.get("http_bind")
    node_policy, gpu_policy = r.get("node-scheduler-policy"), r.get("gpu-scheduler-policy")
    assert isinstance(http_bind, BindAddress) and isinstance(node_policy, NodePolicy)
    assert isinstance(gpu_policy, GpuPolicy)
    return ExtenderSettings(
        common=common,
        http_bind=http_bind,
        cert_file=cert_file,
        key_file=key_file,
        client_ca_file=client_ca_file,
        insecure_allow_unauthenticated_scheduler=r.flag("insecure-allow-unauthenticated-scheduler"),
        webhook_bind=webhook_bind,
        scheduler_name=r.text("scheduler-name"),
        node_policy=node_policy,
        gpu_policy=gpu_policy,
        force_overwrite_default_scheduler=r.flag("force-overwrite-default-scheduler"),
        node_lock_timeout_s=r.number("node-lock-timeout"),
        node_lock_retry_timeout_s=r.number("node-lock-retry-timeout"),
        bind_timeout_s=r.number("bind-timeout"),
        bind_aware_placement=r.flag("bind-aware-placement"),
        max_binds_per_node=r.integer("max-binds-per-node"),
        auto_defrag=r.flag("auto-defrag"),
        defrag_moves_per_minute=r.integer("defrag-moves-per-minute"),
        defrag_moves_per_node_per_minute=r.integer("defrag-moves-per-node-per-minute"),
        success_event_rate=r.number("success-event-rate"),
        reservation_grace_s=r.number("reservation-grace"),
        legacy_metrics=r.flag("legacy-metrics"),
        profiling=r.flag("profiling"),
        leader_elect=r.flag("leader-elect"),
        leader_elect_resource_name=r.text("leader-elect-resource-name"),
        leader_elect_resource_namespace=r.text("leader-elect-resource-namespace"),
    )


def _inspect(common: CommonSettings, r: Resolved) -> InspectSettings:
    if common.service is Service.USAGE:
        return InspectSettings(common=common)
    node_policy, gpu_policy = r.get("node-scheduler-policy"), r.get("gpu-scheduler-policy")
    assert isinstance(node_policy, NodePolicy) and isinstance(gpu_policy, GpuPolicy)
    return InspectSettings(common=common, node_policy=node_policy, gpu_policy=gpu_policy)


def _as_service(service: Service | str) -> Service:
    if isinstance(service, Service):
        return service
    try:
        return Service(service)
    except ValueError:
        valid = ", ".join(s.value for s in Service)
        raise ConfigError(f"unknown service {service!r}: expected one of {valid}") from None


@overload
def settings_from_args(
    service: Literal[Service.REGISTRAR, "registrar"], args: argparse.Namespace, env: Mapping[str, str]
) -> RegistrarSettings: ...
@overload
def settings_from_args(
    service: Literal[Service.INFORMER, "informer"], args: argparse.Namespace, env: Mapping[str, str]
) -> InformerSettings: ...
@overload
def settings_from_args(
    service: Literal[Service.EXTENDER, "extender"], args: argparse.Namespace, env: Mapping[str, str]
) -> ExtenderSettings: ...
@overload
def settings_from_args(
    service: Literal[Service.ALL_IN_ONE, "all-in-one"], args: argparse.Namespace, env: Mapping[str, str]
) -> AllInOneSettings: ...
@overload
def settings_from_args(
    service: Literal[Service.SIMULATE, "simulate"], args: argparse.Namespace, env: Mapping[str, str]
) -> SimulateSettings: ...
@overload
def settings_from_args(
    service: Literal[Service.EXPLAIN, Service.USAGE, Service.DEFRAG, "explain", "usage", "defrag"],
    args: argparse.Namespace,
    env: Mapping[str, str],
) -> InspectSettings: ...
@overload
def settings_from_args(service: Service | str, args: argparse.Namespace, env: Mapping[str, str]) -> Settings: ...
def settings_from_args(service: Service | str, args: argparse.Namespace, env: Mapping[str, str]) -> Settings:
    """Build ``service``'s settings from a namespace parsed by :func:`add_options` and an environment mapping.

    Raises :class:`ConfigError` (one line) on any bad value. Reads the config and device config files.
    """
    svc = _as_service(service)
    r, _ = resolve(svc, args, env)
    common = _common(svc, r)
    if svc is Service.REGISTRAR:
        return _registrar(common, r)
    if svc is Service.INFORMER:
        return _informer(common, r)
    if svc is Service.EXTENDER:
        return _extender(common, r)
    if svc in (Service.EXPLAIN, Service.USAGE, Service.DEFRAG):
        return _inspect(common, r)
    parts = (common, _registrar(common, r), _informer(common, r), _extender(common, r))
    if svc is Service.ALL_IN_ONE:
        return AllInOneSettings(*parts)
    return SimulateSettings(*parts)


class _RaisingParser(argparse.ArgumentParser):
    """An argparse parser that raises ConfigError instead of printing usage and exiting."""

    def error(self, message: str) -> NoReturn:
        raise ConfigError(message)


@overload
def settings_for(
    service: Literal[Service.REGISTRAR, "registrar"], argv: Sequence[str], env: Mapping[str, str]
) -> RegistrarSettings: ...
@overload
def settings_for(
    service: Literal[Service.INFORMER, "informer"], argv: Sequence[str], env: Mapping[str, str]
) -> InformerSettings: ...
@overload
def settings_for(
    service: Literal[Service.EXTENDER, "extender"], argv: Sequence[str], env: Mapping[str, str]
) -> ExtenderSettings: ...
@overload
def settings_for(
    service: Literal[Service.ALL_IN_ONE, "all-in-one"], argv: Sequence[str], env: Mapping[str, str]
) -> AllInOneSettings: ...
@overload
def settings_for(
    service: Literal[Service.SIMULATE, "simulate"], argv: Sequence[str], env: Mapping[str, str]
) -> SimulateSettings: ...
@overload
def settings_for(
    service: Literal[Service.EXPLAIN, Service.USAGE, Service.DEFRAG, "explain", "usage", "defrag"],
    argv: Sequence[str],
    env: Mapping[str, str],
) -> InspectSettings: ...
@overload
def settings_for(service: Service | str, argv: Sequence[str], env: Mapping[str, str]) -> Settings: ...
def settings_for(service: Service | str, argv: Sequence[str], env: Mapping[str, str]) -> Settings:
    """Parse a subcommand's arguments (without the subcommand name) and build its settings.

    ``env`` is the environment to read ``VGPU_*`` variables from (pass ``os.environ`` in ``__main__``).
    Every problem, argument syntax included, raises one-line :class:`ConfigError`.
    """
    svc = _as_service(service)
    parser = _RaisingParser(prog=f"vgpu-scheduler {svc.value}", allow_abbrev=False)
    add_options(parser, svc)
    args = parser.parse_args(normalize_argv(argv))
    return settings_from_args(svc, args, env)
