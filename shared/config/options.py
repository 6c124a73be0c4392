"""The option table: every setting declared once, and the argparse parsers generated from it.

Each :class:`Option` names its flag (spelled as HAMi spells it), type, default, help text and the services
that take it. ``--help``, the ``VGPU_*`` environment lookups, the config-file keys and ``docs/config.md``
(``scripts/gen_config_doc.py``) all come from :data:`OPTIONS`.
"""

from __future__ import annotations

import argparse
import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from vgpu_scheduler.shared.config.values import (
    LogFormat,
    LogLevel,
    choice_parser,
    parse_bind_address,
    parse_float,
    parse_go_bool,
    parse_gpu_policy,
    parse_int,
    parse_label_selector,
    parse_node_policy,
    parse_nonempty,
    parse_nonneg_duration,
    parse_positive_duration,
    parse_redis_url,
)

ENV_PREFIX = "VGPU_"


class Service(enum.Enum):
    """The subcommands of ``vgpu-scheduler`` that take settings."""

    REGISTRAR = "registrar"
    INFORMER = "informer"
    EXTENDER = "extender"
    ALL_IN_ONE = "all-in-one"
    SIMULATE = "simulate"
    EXPLAIN = "explain"
    USAGE = "usage"
    DEFRAG = "defrag"


# --------------------------------------------------------------------------------------------
# The option table.
# --------------------------------------------------------------------------------------------


class Kind(enum.Enum):
    """How an option is spelled on the command line and in YAML."""

    STRING = "string"
    INT = "int"
    NUMBER = "number"
    BOOL = "bool"
    DURATION = "duration"


_ALL = frozenset(Service)
_SERVERS = frozenset({Service.REGISTRAR, Service.INFORMER, Service.EXTENDER, Service.ALL_IN_ONE})
_KUBE = _SERVERS | {Service.EXPLAIN, Service.DEFRAG}
_EXT = frozenset({Service.EXTENDER, Service.ALL_IN_ONE})
_EXT_SIM = frozenset({Service.EXTENDER, Service.ALL_IN_ONE, Service.SIMULATE})
_PLANNERS = _EXT_SIM | {Service.EXPLAIN, Service.DEFRAG}
_LEASED = frozenset({Service.REGISTRAR, Service.INFORMER, Service.ALL_IN_ONE})


@dataclass(frozen=True, slots=True)
class Option:
    """One setting. ``name`` is the canonical flag name without dashes, spelled as HAMi spells it."""

    name: str
    kind: Kind
    default: str | None
    help: str
    services: frozenset[Service]
    parse: Callable[[str], object] = str
    short: str | None = None
    metavar: str | None = None
    group: str = "general"

    @property
    def flag(self) -> str:
        return f"--{self.name}"

    @property
    def env_var(self) -> str:
        return ENV_PREFIX + self.name.upper().replace("-", "_")

    @property
    def dest(self) -> str:
        return "opt_" + self.name.replace("-", "_")

    @property
    def default_text(self) -> str:
        return "(none)" if self.default is None else repr(self.default) if self.default == "" else self.default


def _int_min(minimum: int, maximum: int | None = None) -> Callable[[str], object]:
    return lambda t: parse_int(t, minimum=minimum, maximum=maximum)


# fmt: off
OPTIONS: tuple[Option, ...] = (
    # -- process, logging ----------------------------------------------------------------------
    Option("config", Kind.STRING, None, "YAML config file: a mapping of option names (without dashes) to values.",
         _ALL, metavar="FILE"),
    Option("log-format", Kind.STRING, "auto", "Log format: json (one object per line), text, or auto (text on a "
         "terminal, json otherwise).", _ALL, choice_parser(LogFormat), metavar="auto|json|text"),
    Option("log-level", Kind.STRING, "info", "Log level: debug, info, warning or error.", _ALL, choice_parser(LogLevel),
         metavar="LEVEL"),
    Option("debug", Kind.BOOL, "false", "Debug mode (HAMi flag): log at debug level.", _ALL, parse_go_bool),
    Option("v", Kind.INT, "0", "klog verbosity (HAMi flag); 4 or more logs at debug level.", _ALL, _int_min(0),
         short="-v", metavar="LEVEL"),
    Option("instance-id", Kind.STRING, None, "This process' identity in leases and locks (default: <hostname>-<pid>).",
         _ALL, parse_nonempty, metavar="ID"),
    # -- redis ----------------------------------------------------------------------------------
    Option("redis-url", Kind.STRING, None, "Redis URL (redis://, rediss://, unix://). Required for registrar, "
         "informer and extender; all-in-one and simulate use an embedded in-process store when unset.",
         _ALL, parse_redis_url, metavar="URL", group="redis"),
    Option("redis-password-file", Kind.STRING, None, "File holding the Redis password (AUTH; the user, if any, "
         "comes from the URL: redis://USER@host). Read again for every new connection, so a rotated Secret "
         "applies without a restart. Excludes a password in --redis-url.", _ALL, parse_nonempty, metavar="FILE",
         group="redis"),
    Option("redis-wait-replicas", Kind.INT, None, "Redis replicas that must hold a reservation before /filter "
         "answers it, and a bind's claim before the bind writes the pod (Redis WAIT; a shortfall gives the "
         "reservation back, or stops the bind, with an error kube-scheduler retries), so that a failover loses no "
         "acknowledged decision; above 0, a new primary also starts a new store epoch (rebuilt from the API "
         "server). Default: 1 with a redis+sentinel:// URL, 0 otherwise.", _ALL, _int_min(0), metavar="N",
         group="redis"),
    Option("redis-wait-timeout", Kind.DURATION, "250ms", "How long /filter and /bind wait for "
         "--redis-wait-replicas replicas to acknowledge a write.", _ALL, parse_positive_duration,
         metavar="DURATION", group="redis"),
    Option("key-prefix", Kind.STRING, "vgpu", "Prefix of every Redis key.", _ALL, parse_nonempty, metavar="PREFIX",
         group="redis"),
    # -- kubernetes -----------------------------------------------------------------------------
    Option("kubeconfig", Kind.STRING, None, "kubeconfig file. Without it, as kubectl: $KUBECONFIG (a "
         "':'-separated list, merged), then ~/.kube/config, then the in-cluster service account.", _KUBE,
         metavar="FILE", group="kubernetes"),
    Option("kube-server", Kind.STRING, None, "API server URL to use directly, without credentials (the test "
         "emulator); excludes --kubeconfig.", _KUBE, metavar="URL", group="kubernetes"),
    Option("kube-qps", Kind.NUMBER, "500", "API client queries per second (HAMi flag; HAMi's default 5 caps a "
         "replica at about one bind per second, so ours is 500).", _KUBE, parse_float,
         metavar="QPS", group="kubernetes"),
    Option("kube-burst", Kind.INT, "1000", "API client burst (HAMi flag; HAMi's default is 10).", _KUBE,
         _int_min(0), metavar="N",
         group="kubernetes"),
    Option("kube-timeout", Kind.DURATION, "0s", "API client request timeout; 0 = no timeout (HAMi flag).",
         _KUBE, parse_nonneg_duration, metavar="DURATION", group="kubernetes"),
    Option("node-label-selector", Kind.STRING, "", "Only nodes with these labels are registered: k=v,k2=v2 "
         "(HAMi flag).", frozenset({Service.REGISTRAR, Service.ALL_IN_ONE}), parse_label_selector,
         metavar="K=V,...", group="kubernetes"),
    # -- servers --------------------------------------------------------------------------------
    Option("metrics-bind-address", Kind.STRING, ":9395", "Listen address of /metrics, /healthz and /readyz "
         "(HAMi flag).", _SERVERS, parse_bind_address, metavar="HOST:PORT", group="servers"),
    Option("http_bind", Kind.STRING, "127.0.0.1:8080", "Listen address of /filter, /bind, /webhook, /healthz and "
         "/readyz (HAMi flag).", _EXT, parse_bind_address, metavar="HOST:PORT", group="servers"),
    Option("cert_file", Kind.STRING, None, "TLS certificate for --http_bind (HAMi flag); needs --key_file.", _EXT,
         metavar="FILE", group="servers"),
    Option("key_file", Kind.STRING, None, "TLS private key for --http_bind (HAMi flag); needs --cert_file.", _EXT,
         metavar="FILE", group="servers"),
    # -- scheduler authentication (mTLS on /filter and /bind; docs/deploy.md) ---------------------
    Option("client-ca-file", Kind.STRING, None, "CA bundle (PEM) of the client certificates allowed to call "
         "/filter and /bind on --http_bind (kube-scheduler's); a request without one is refused (403) before any "
         "work. Reloaded when the file changes. Needs --cert_file.", _EXT, parse_nonempty, metavar="FILE",
         group="servers"),
    Option("insecure-allow-unauthenticated-scheduler", Kind.BOOL, "false", "Serve /filter and /bind to any "
         "client on a non-loopback --http_bind without --client-ca-file (refused at start-up otherwise).", _EXT,
         parse_go_bool, group="servers"),
    Option("webhook-bind", Kind.STRING, None, "Separate listen address for /webhook (and /healthz, /readyz), "
         "TLS without client certificates, for the API server; /webhook then leaves --http_bind.", _EXT,
         parse_bind_address, metavar="HOST:PORT", group="servers"),
    Option("profiling", Kind.BOOL, "false", "HAMi flag, accepted for compatibility (no pprof in Python).", _EXT,
         parse_go_bool, group="servers"),
    # -- scheduling ------------------------------------------------------------------------------
    Option("scheduler-name", Kind.STRING, "", "schedulerName the webhook sets on GPU pods; event source "
         "(HAMi flag; HAMi's chart: hami-scheduler).", _EXT_SIM, metavar="NAME", group="scheduling"),
    Option("node-scheduler-policy", Kind.STRING, "binpack", "Node policy: binpack or spread (HAMi flag).", _PLANNERS,
         parse_node_policy, metavar="POLICY", group="scheduling"),
    Option("gpu-scheduler-policy", Kind.STRING, "spread", "GPU policy: binpack, spread, topology-aware, mutex, "
         "numa, or a comma chain such as binpack,numa (HAMi flag).", _PLANNERS, parse_gpu_policy,
         metavar="POLICY", group="scheduling"),
    Option("force-overwrite-default-scheduler", Kind.BOOL, "true", "The webhook also redirects pods that name "
         "the default scheduler (HAMi flag).", _EXT_SIM, parse_go_bool, group="scheduling"),
    Option("node-lock-timeout", Kind.DURATION, "5m", "A node lock older than this is expired (HAMi flag).",
         frozenset({Service.INFORMER, Service.EXTENDER, Service.ALL_IN_ONE, Service.SIMULATE}), parse_positive_duration,
         metavar="DURATION", group="scheduling"),
    Option("node-lock-retry-timeout", Kind.DURATION, "28s", "How long a PodGroup member retries a contended node "
         "lock; 0 disables (HAMi flag).", _EXT, parse_nonneg_duration, metavar="DURATION", group="scheduling"),
    Option("bind-timeout", Kind.DURATION, "4s", "How long one /bind may take, waiting for a busy node lock included; "
         "keep it below kube-scheduler's extender httpTimeout (default 5s; the chart sets 30s and 25s here).", _EXT_SIM,
         parse_positive_duration, metavar="DURATION", group="scheduling"),
    Option("max-binds-per-node", Kind.INT, "4", "With --bind-aware-placement, a node with this many binds in "
         "flight (the one being allocated and those queued behind its lock) is passed over while another node "
         "fits; 1 spreads binds the most, larger values pack tighter during bursts and wait longer.", _EXT_SIM,
         _int_min(1), metavar="N", group="scheduling"),
    Option("auto-defrag", Kind.BOOL, "false", "For a pod that fits nowhere only because free GPU shares are "
         "fragmented, move pods that their controllers recreate (a defragmentation plan, carried out in the "
         "background) before preempting anyone (docs/defrag.md, \"Automatic mode\").", _EXT_SIM, parse_go_bool,
         group="scheduling"),
    Option("defrag-moves-per-minute", Kind.INT, "10", "With --auto-defrag, pods one replica may move in any "
         "minute; a plan needing more waits.", _EXT_SIM, _int_min(1), metavar="N", group="scheduling"),
    Option("defrag-moves-per-node-per-minute", Kind.INT, "4", "With --auto-defrag, pods one replica may move off "
         "one node in any minute.", _EXT_SIM, _int_min(1), metavar="N", group="scheduling"),
    Option("success-event-rate", Kind.NUMBER, "1", "Normal Events (FilteringSucceed, BindingSucceed) posted per "
         "second per replica at most; the rest are skipped and counted (0: no limit). Warnings are never skipped.",
         _EXT, parse_float, metavar="PER_S", group="scheduling"),
    Option("bind-aware-placement", Kind.BOOL, "true", "Prefer nodes with no bind in flight: HAMi's device plugin "
         "takes one bind per node at a time, so consecutive pods go to other nodes while one binds; false places by "
         "the node policy alone, as HAMi.", _EXT_SIM, parse_go_bool, group="scheduling"),
    Option("reservation-grace", Kind.DURATION, "2m", "A reservation not confirmed by the pod's annotations within "
         "this time expires.", frozenset({Service.INFORMER, Service.EXTENDER, Service.ALL_IN_ONE, Service.SIMULATE}),
         parse_positive_duration, metavar="DURATION", group="scheduling"),
    Option("legacy-metrics", Kind.BOOL, "false", "Also emit HAMi's legacy metric names (HAMi flag).",
         frozenset({Service.INFORMER, Service.EXTENDER, Service.ALL_IN_ONE}),
         parse_go_bool, group="scheduling"),
    # -- leases, reconcile ----------------------------------------------------------------------
    Option("lease-ttl", Kind.DURATION, "15s", "Lease TTL of the registrar and informer; a standby takes over "
         "within one TTL.", _LEASED, parse_positive_duration, metavar="DURATION", group="leases"),
    Option("reconcile-interval", Kind.DURATION, "5m", "How often the informer reconciles Redis against the API.",
         frozenset({Service.INFORMER, Service.ALL_IN_ONE}), parse_positive_duration, metavar="DURATION",
         group="leases"),
    Option("leader-elect", Kind.BOOL, "false", "HAMi flag, accepted for compatibility: extenders are all active, "
         "no leader.", _EXT, parse_go_bool, group="leases"),
    Option("leader-elect-resource-name", Kind.STRING, "", "HAMi flag, accepted for compatibility (no effect).",
         _EXT, metavar="NAME", group="leases"),
    Option("leader-elect-resource-namespace", Kind.STRING, "", "HAMi flag, accepted for compatibility (no effect).",
         _EXT, metavar="NAMESPACE", group="leases"),
    # -- device config ---------------------------------------------------------------------------
    Option("device-config-file", Kind.STRING, "", "HAMi device config YAML (nvidia: and one section per other "
         "family; HAMi's chart mounts /device-config.yaml). Empty or a section left out = HAMi's defaults.", _ALL,
         metavar="FILE", group="device"),
    Option("enable-ascend", Kind.BOOL, "false", "Schedule Huawei Ascend NPUs: the device config's vnpus chips, or "
         "HAMi's default chips (HAMi flag; off by default, as in HAMi).", _ALL, parse_go_bool, group="device"),
    Option("enable-iluvatar", Kind.BOOL, "false", "Schedule Iluvatar GPUs (HAMi flag; off by default, as in HAMi).",
         _ALL, parse_go_bool, group="device"),
    Option("default-mem", Kind.INT, None, "Old HAMi flag: overrides nvidia.defaultMemory (MiB).", _ALL,
         _int_min(0), metavar="MIB", group="device"),
    Option("default-cores", Kind.INT, None, "Old HAMi flag: overrides nvidia.defaultCores (percent).", _ALL,
         _int_min(0, 100), metavar="PCT", group="device"),
    Option("default-gpu", Kind.INT, None, "Old HAMi flag: overrides nvidia.defaultGPUNum.", _ALL, _int_min(0),
         metavar="N", group="device"),
    Option("resource-name", Kind.STRING, None, "Old HAMi flag: overrides nvidia.resourceCountName.", _ALL,
         parse_nonempty, metavar="NAME", group="device"),
    Option("resource-mem", Kind.STRING, None, "Old HAMi flag: overrides nvidia.resourceMemoryName.", _ALL,
         parse_nonempty, metavar="NAME", group="device"),
    Option("resource-mem-percentage", Kind.STRING, None, "Old HAMi flag: overrides "
         "nvidia.resourceMemoryPercentageName.", _ALL, parse_nonempty, metavar="NAME", group="device"),
    Option("resource-cores", Kind.STRING, None, "Old HAMi flag: overrides nvidia.resourceCoreName.", _ALL,
         parse_nonempty, metavar="NAME", group="device"),
    Option("resource-priority", Kind.STRING, None, "Old HAMi flag: overrides nvidia.resourcePriorityName.", _ALL,
         parse_nonempty, metavar="NAME", group="device"),
    Option("overwrite-env", Kind.BOOL, None, "Old HAMi flag: overrides nvidia.overwriteEnv.", _ALL, parse_go_bool,
         group="device"),
)
# fmt: on

OPTIONS_BY_NAME: Mapping[str, Option] = {o.name: o for o in OPTIONS}

ENABLE_FLAG_OPTIONS: tuple[str, ...] = ("enable-ascend", "enable-iluvatar")
"""HAMi's flags that enable an opt-in device family (``shared.vendors.catalog.ENABLE_FLAGS``, kept in step by a
test)."""
_BY_NORMALISED: Mapping[str, Option] = {o.name.replace("_", "-"): o for o in OPTIONS}


def options_for(service: Service) -> tuple[Option, ...]:
    """The options a service accepts, in table order."""
    return tuple(o for o in OPTIONS if service in o.services)


def find_option(name: str) -> Option | None:
    """Look an option up by any spelling: ``http_bind``, ``http-bind``, ``--http-bind``."""
    return _BY_NORMALISED.get(name.lstrip("-").replace("_", "-"))


# --------------------------------------------------------------------------------------------
# Parsers generated from the table.
# --------------------------------------------------------------------------------------------


def _help_text(option: Option) -> str:
    text = f"{option.help} [default: {option.default_text}; env {option.env_var}]"
    return text.replace("%", "%%")


def add_options(parser: argparse.ArgumentParser, service: Service) -> None:
    """Add every option of ``service`` to ``parser``. Values stay text; :func:`settings_from_args` parses them.

    Absent options are left out of the namespace (``SUPPRESS``) so the environment and the config file can
    supply them. Boolean options take an optional value, Go-style: ``--debug``, ``--debug=false``.
    """
    groups: dict[str, argparse._ArgumentGroup] = {}
    for option in options_for(service):
        group = groups.get(option.group)
        if group is None:
            group = groups[option.group] = parser.add_argument_group(f"{option.group} options")
        names = [option.flag] if option.short is None else [option.short, option.flag]
        if option.kind is Kind.BOOL:
            group.add_argument(
                *names,
                dest=option.dest,
                nargs="?",
                const="true",
                default=argparse.SUPPRESS,
                metavar="BOOL",
                help=_help_text(option),
            )
        else:
            group.add_argument(
                *names,
                dest=option.dest,
                default=argparse.SUPPRESS,
                metavar=option.metavar or "VALUE",
                help=_help_text(option),
            )


_DESCRIPTIONS: Mapping[Service, str] = {
    Service.REGISTRAR: "Watch Nodes and keep the device inventory in Redis (one active instance, leased).",
    Service.INFORMER: "Watch Pods and ResourceQuotas; keep allocations, usage, quotas and node locks in Redis.",
    Service.EXTENDER: "The kube-scheduler extender (/filter, /bind), admission webhook and metrics.",
    Service.ALL_IN_ONE: "Registrar, informer and extender in one process.",
    Service.SIMULATE: "Run the real services against an in-process API emulator; compare policies.",
    Service.EXPLAIN: "Where a pod would go now, or why it fits nowhere, as the extender sees it (reserves nothing).",
    Service.USAGE: "GPU usage per node and device: memory, cores, slots, pods, locks, cordons, stranded memory.",
    Service.DEFRAG: "Which pods to move so that a waiting pod fits, or so that whole cards or nodes become idle.",
}


def build_parser(service: Service, *, prog: str | None = None) -> argparse.ArgumentParser:
    """A standalone parser for one service (the subcommand's arguments only)."""
    parser = argparse.ArgumentParser(
        prog=prog or f"vgpu-scheduler {service.value}",
        description=_DESCRIPTIONS[service],
        allow_abbrev=False,
    )
    add_options(parser, service)
    return parser


def add_service_parser(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser], service: Service, *, help: str | None = None
) -> argparse.ArgumentParser:
    """Add ``service``'s subcommand parser, generated from the table, to the console script's subparsers."""
    parser = subparsers.add_parser(
        service.value, help=help or _DESCRIPTIONS[service], description=_DESCRIPTIONS[service], allow_abbrev=False
    )
    add_options(parser, service)
    return parser


def normalize_argv(argv: Sequence[str]) -> list[str]:
    """Rewrite ``--foo_bar``/``--foo-bar`` to the option's canonical spelling (``--http-bind`` -> ``--http_bind``)."""
    out: list[str] = []
    for i, token in enumerate(argv):
        if token == "--":
            out.extend(argv[i:])
            break
        option = find_option(token.partition("=")[0]) if token.startswith("--") else None
        if option is None:
            out.append(token)
        else:
            _, sep, value = token.partition("=")
            out.append(f"{option.flag}{sep}{value}")
    return out
