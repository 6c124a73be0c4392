"""Settings: flag > env > file > default, HAMi's flag names and defaults, one-line errors."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

import pytest

from vgpu_scheduler.shared.config import (
    OPTIONS,
    AllInOneSettings,
    BindAddress,
    ExtenderSettings,
    InformerSettings,
    LogFormat,
    LogLevel,
    RegistrarSettings,
    Service,
    SimulateSettings,
    build_parser,
    find_option,
    normalize_argv,
    options_for,
    settings_for,
)
from vgpu_scheduler.shared.domain.model import GpuPolicyToken, NodePolicy, NvidiaConfig
from vgpu_scheduler.shared.errors import ConfigError

REDIS = ["--redis-url", "redis://127.0.0.1:1/0"]
BINPACK_NUMA = (GpuPolicyToken.BINPACK, GpuPolicyToken.NUMA)


def extender(*argv: str, env: dict[str, str] | None = None) -> ExtenderSettings:
    return settings_for(Service.EXTENDER, [*REDIS, *argv], env or {})


def write(tmp_path: Path, text: str, name: str = "config.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


# --- HAMi's flags (hami-wire §10.1) and their defaults ------------------------------------

HAMI_DEFAULTS: list[tuple[str, Callable[[ExtenderSettings], object], object]] = [
    ("--http_bind", lambda s: s.http_bind, BindAddress("127.0.0.1", 8080)),
    ("--cert_file", lambda s: s.cert_file, None),
    ("--key_file", lambda s: s.key_file, None),
    ("--scheduler-name", lambda s: s.scheduler_name, ""),
    ("--node-scheduler-policy", lambda s: s.node_policy, NodePolicy.BINPACK),
    ("--gpu-scheduler-policy", lambda s: s.gpu_policy.tokens, (GpuPolicyToken.SPREAD,)),
    ("--metrics-bind-address", lambda s: s.common.metrics_bind, BindAddress("", 9395)),
    ("--kube-timeout", lambda s: s.common.kube.timeout_s, 0.0),
    ("--profiling", lambda s: s.profiling, False),
    ("--node-lock-timeout", lambda s: s.node_lock_timeout_s, 300.0),
    ("--node-lock-retry-timeout", lambda s: s.node_lock_retry_timeout_s, 28.0),
    ("--force-overwrite-default-scheduler", lambda s: s.force_overwrite_default_scheduler, True),
    ("--leader-elect", lambda s: s.leader_elect, False),
    ("--leader-elect-resource-name", lambda s: s.leader_elect_resource_name, ""),
    ("--leader-elect-resource-namespace", lambda s: s.leader_elect_resource_namespace, ""),
    ("--legacy-metrics", lambda s: s.legacy_metrics, False),
    ("--device-config-file", lambda s: s.common.device_config_file, ""),
    ("--debug", lambda s: s.common.debug, False),
    ("-v", lambda s: s.common.verbosity, 0),
    # ours
    ("--key-prefix", lambda s: s.common.key_prefix, "vgpu"),
    ("--reservation-grace", lambda s: s.reservation_grace_s, 120.0),
    ("--log-format", lambda s: s.common.log_format, LogFormat.AUTO),
    ("--log-level", lambda s: s.common.log_level, LogLevel.INFO),
    ("--kubeconfig", lambda s: s.common.kube.kubeconfig, None),
    ("--kube-server", lambda s: s.common.kube.server, None),
]


OUR_DEFAULTS: list[tuple[str, Callable[[ExtenderSettings], object], object, object]] = [
    # HAMi's flag, our default, HAMi's: a deliberate difference (docs/differences.md, 17)
    ("--kube-qps", lambda s: s.common.kube.qps, 500.0, 5.0),
    ("--kube-burst", lambda s: s.common.kube.burst, 1000, 10),
]


@pytest.mark.parametrize(("flag", "get", "ours", "hamis"), OUR_DEFAULTS, ids=[c[0] for c in OUR_DEFAULTS])
def test_deliberately_different_defaults(
    flag: str, get: Callable[[ExtenderSettings], object], ours: object, hamis: object
) -> None:
    assert find_option(flag) is not None, f"{flag} is not in the option table"
    assert get(extender()) == ours != hamis
    assert get(extender(f"{flag}={hamis}")) == hamis  # HAMi's value still works when given


@pytest.mark.parametrize(("flag", "get", "default"), HAMI_DEFAULTS, ids=[c[0] for c in HAMI_DEFAULTS])
def test_extender_defaults_match_hami(flag: str, get: Callable[[ExtenderSettings], object], default: object) -> None:
    assert find_option(flag) is not None, f"{flag} is not in the option table"
    assert get(extender()) == default


def test_every_hami_flag_is_accepted_by_the_extender_parser() -> None:
    parser = build_parser(Service.EXTENDER)
    strings = {s for action in parser._actions for s in action.option_strings}
    hami = {flag for flag, _, _ in HAMI_DEFAULTS} | {flag for flag, *_ in OUR_DEFAULTS} | {"--v"}
    legacy = {"--default-mem", "--default-cores", "--default-gpu", "--resource-name", "--resource-mem"}
    legacy |= {"--resource-mem-percentage", "--resource-cores", "--resource-priority", "--node-label-selector"}
    assert hami - strings == set()
    # node-label-selector is the registrar's (it registers nodes); the legacy flags are everybody's
    assert (legacy - {"--node-label-selector"}) - strings == set()
    assert "--node-label-selector" in {s for a in build_parser(Service.REGISTRAR)._actions for s in a.option_strings}


HAMI_VALUES: list[tuple[list[str], Callable[[ExtenderSettings], object], object]] = [
    (["--http_bind=0.0.0.0:443"], lambda s: s.http_bind, BindAddress("0.0.0.0", 443)),
    (["--http_bind", "0.0.0.0:80"], lambda s: s.http_bind, BindAddress("0.0.0.0", 80)),
    (["--scheduler-name=hami-scheduler"], lambda s: s.scheduler_name, "hami-scheduler"),
    (["--node-scheduler-policy=spread"], lambda s: s.node_policy, NodePolicy.SPREAD),
    (
        ["--gpu-scheduler-policy=binpack,numa"],
        lambda s: s.gpu_policy.tokens,
        (GpuPolicyToken.BINPACK, GpuPolicyToken.NUMA),
    ),
    (["--gpu-scheduler-policy=topology-aware"], lambda s: s.gpu_policy.tokens, (GpuPolicyToken.TOPOLOGY_AWARE,)),
    (["--metrics-bind-address=:9000"], lambda s: s.common.metrics_bind, BindAddress("", 9000)),
    (["--kube-qps=20.5"], lambda s: s.common.kube.qps, 20.5),
    (["--kube-burst=30"], lambda s: s.common.kube.burst, 30),
    (["--kube-timeout=10s"], lambda s: s.common.kube.timeout_s, 10.0),
    (["--node-lock-timeout=1h2m"], lambda s: s.node_lock_timeout_s, 3720.0),
    (["--node-lock-timeout=300ms"], lambda s: s.node_lock_timeout_s, 0.3),
    (["--node-lock-retry-timeout=0"], lambda s: s.node_lock_retry_timeout_s, 0.0),
    (["--force-overwrite-default-scheduler=false"], lambda s: s.force_overwrite_default_scheduler, False),
    (["--force-overwrite-default-scheduler=F"], lambda s: s.force_overwrite_default_scheduler, False),
    (["--leader-elect"], lambda s: s.leader_elect, True),
    (
        ["--leader-elect=true", "--leader-elect-resource-name=hami-scheduler"],
        lambda s: s.leader_elect_resource_name,
        "hami-scheduler",
    ),
    (["--leader-elect-resource-namespace=kube-system"], lambda s: s.leader_elect_resource_namespace, "kube-system"),
    (["--legacy-metrics"], lambda s: s.legacy_metrics, True),
    (["--profiling=1"], lambda s: s.profiling, True),
    (["--debug", "-v=4"], lambda s: (s.common.debug, s.common.verbosity), (True, 4)),
    (["-v", "5"], lambda s: s.common.verbosity, 5),
    (["--v=2"], lambda s: s.common.verbosity, 2),
    # either separator spelling
    (["--http-bind=:81"], lambda s: s.http_bind, BindAddress("", 81)),
    (["--node_lock_timeout=1m"], lambda s: s.node_lock_timeout_s, 60.0),
    (["--kube_burst", "7"], lambda s: s.common.kube.burst, 7),
]


@pytest.mark.parametrize(("argv", "get", "want"), HAMI_VALUES, ids=[" ".join(c[0]) for c in HAMI_VALUES])
def test_hami_flag_values(argv: list[str], get: Callable[[ExtenderSettings], object], want: object) -> None:
    assert get(extender(*argv)) == want


@pytest.mark.parametrize(
    ("argv", "level"),
    [
        ([], LogLevel.INFO),
        (["--debug"], LogLevel.DEBUG),
        (["-v=4"], LogLevel.DEBUG),
        (["-v=3"], LogLevel.INFO),
        (["--log-level=warning"], LogLevel.WARNING),
        (["--log-level=ERROR", "--debug"], LogLevel.DEBUG),
    ],
)
def test_effective_log_level(argv: list[str], level: LogLevel) -> None:
    assert extender(*argv).common.effective_log_level is level


# --- precedence -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flag", "env", "file", "want"),
    [
        (None, None, None, 1000),
        (None, None, "20", 20),
        (None, "30", "20", 30),
        ("40", "30", "20", 40),
        ("40", None, "20", 40),
        ("40", None, None, 40),
        (None, "", "20", 20),  # an empty variable is unset
    ],
    ids=["default", "file", "env>file", "flag>env>file", "flag>file", "flag", "empty-env"],
)
def test_precedence_flag_env_file_default(
    tmp_path: Path, flag: str | None, env: str | None, file: str | None, want: int
) -> None:
    argv = []
    if file is not None:
        argv += ["--config", write(tmp_path, f"kube-burst: {file}\n")]
    if flag is not None:
        argv += [f"--kube-burst={flag}"]
    environ = {"VGPU_KUBE_BURST": env} if env is not None else {}
    assert extender(*argv, env=environ).common.kube.burst == want


def test_config_file_from_env_and_key_spellings(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "http-bind: ':8443'\nnode_lock_timeout: 90s\nleader-elect: true\nkube_qps: 50\n"
        "gpu-scheduler-policy: binpack\nnode-label-selector: {gpu: 'on'}\nkubeconfig: /k\n",
    )
    s = extender(env={"VGPU_CONFIG": path})
    assert s.http_bind == BindAddress("", 8443)
    assert s.node_lock_timeout_s == 90.0
    assert s.leader_elect is True
    assert s.common.kube.qps == 50.0
    assert s.common.kube.kubeconfig == "/k"
    assert s.common.config_file == path
    # the same file serves the registrar: extender-only keys are ignored there, its own key applies
    r = settings_for(Service.REGISTRAR, [*REDIS, "--config", path], {})
    assert r.node_label_selector == (("gpu", "on"),)


def test_env_vars_for_underscore_and_short_flags() -> None:
    s = extender(env={"VGPU_HTTP_BIND": ":1234", "VGPU_V": "6", "VGPU_CERT_FILE": "", "VGPU_LOG_FORMAT": "json"})
    assert s.http_bind == BindAddress("", 1234)
    assert s.common.verbosity == 6
    assert s.common.log_format is LogFormat.JSON


def test_env_of_an_option_the_service_does_not_take_is_ignored() -> None:
    r = settings_for(Service.REGISTRAR, REDIS, {"VGPU_HTTP_BIND": "garbage", "VGPU_TESTING": "1"})
    assert isinstance(r, RegistrarSettings)


# --- one clear line per bad value ------------------------------------------------------------

BAD: list[tuple[list[str], dict[str, str], str]] = [
    (["--kube-qps=fast"], {}, "--kube-qps: expected a number >= 0, got 'fast'"),
    (["--kube-burst=-1"], {}, "--kube-burst: expected a non-negative integer, got '-1'"),
    (["--node-lock-timeout=5"], {}, "--node-lock-timeout: expected a Go duration such as 30s, 5m or 1h2m, got '5'"),
    (["--node-lock-timeout=0s"], {}, "--node-lock-timeout: expected a positive Go duration"),
    (["--kube-timeout=-1s"], {}, "--kube-timeout: expected a non-negative Go duration"),
    (["--leader-elect=yes"], {}, "--leader-elect: expected a boolean (true or false), got 'yes'"),
    (["--http_bind=8080"], {}, "--http_bind: expected host:port"),
    (["--gpu-scheduler-policy=fastest"], {}, "--gpu-scheduler-policy: expected binpack, spread, topology-aware"),
    (["--node-scheduler-policy=numa"], {}, "--node-scheduler-policy: expected binpack or spread, got 'numa'"),
    (["--log-format=xml"], {}, "--log-format: expected one of auto, json, text, got 'xml'"),
    (["-v=loud"], {}, "-v/--v: expected a non-negative integer, got 'loud'"),
    (["--default-cores=101"], {}, "--default-cores: expected an integer from 0 to 100, got '101'"),
    (["--redis-url=localhost:6379"], {}, "--redis-url: expected a redis://, rediss://, unix://, redis+sentinel://"),
    (["--redis-url=redis+sentinel://s1:26379,s2:26379"], {}, "--redis-url: no service name"),
    (["--redis-url=redis+sentinel://s1:port/mymaster"], {}, "--redis-url: Sentinel address 's1:port': bad port"),
    (["--redis-url=redis+sentinel://s1/mymaster/db"], {}, "--redis-url: bad path '/mymaster/db'"),
    (["--redis-url=redis+sentinel://s1/m?password=x"], {}, "--redis-url: unknown parameter 'password'"),
    (["--redis-wait-replicas=-1"], {}, "--redis-wait-replicas: expected a non-negative integer"),
    (["--redis-wait-timeout=0s"], {}, "--redis-wait-timeout:"),
    ([], {"VGPU_KUBE_BURST": "many"}, "VGPU_KUBE_BURST: expected a non-negative integer, got 'many'"),
    ([], {"VGPU_DEBUG": "on"}, "VGPU_DEBUG: expected a boolean (true or false), got 'on'"),
    (["--cert_file=/nonexistent/cert.pem"], {}, "--cert_file and --key_file go together"),
    (["--cert_file=/nonexistent/c", "--key_file=/nonexistent/k"], {}, "--cert_file: no such file '/nonexistent/c'"),
    (["--kubeconfig=/k", "--kube-server=http://127.0.0.1:1"], {}, "--kubeconfig and --kube-server exclude each other"),
    (["--device-config-file=/nonexistent/dc.yaml"], {}, "device config file /nonexistent/dc.yaml: cannot read"),
    (["--config=/nonexistent/c.yaml"], {}, "config file /nonexistent/c.yaml: cannot read"),
    (["--no-such-flag"], {}, "unrecognized arguments: --no-such-flag"),
    (["--kube-burst"], {}, "argument --kube-burst: expected one argument"),
]


@pytest.mark.parametrize(("argv", "env", "message"), BAD, ids=[" ".join(c[0]) or str(c[1]) for c in BAD])
def test_bad_values_give_one_line_naming_the_flag(argv: list[str], env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        extender(*argv, env=env)
    text = str(info.value)
    assert message in text
    assert "\n" not in text


@pytest.mark.parametrize(
    ("yaml_text", "message"),
    [
        ("kube-burst: many\n", ": kube-burst: expected a non-negative integer, got 'many'"),
        ("kube-burst: true\n", ": kube-burst: expected an integer, got True"),
        ("leader-elect: 1\n", ": leader-elect: expected a boolean (true or false), got 1"),
        ("node-lock-timeout: 300\n", ": node-lock-timeout: expected a Go duration"),
        ("scheduler-name: 5\n", ": scheduler-name: expected a string, got 5"),
        ("kube-brust: 5\n", ": unknown option 'kube-brust' (did you mean 'kube-burst'?)"),
        ("config: other.yaml\n", ": unknown option 'config'"),
        ("kube-burst: 1\nkube_burst: 2\n", ": option 'kube-burst' is given twice"),
        ("- a\n- b\n", ": expected a mapping of option names to values, got list"),
        ("a: [\n", ": not valid YAML"),
        ("kube-qps:\n", ": kube-qps: expected a number, got None"),
    ],
)
def test_bad_config_file_names_the_file_and_key(tmp_path: Path, yaml_text: str, message: str) -> None:
    path = write(tmp_path, yaml_text)
    with pytest.raises(ConfigError) as info:
        extender("--config", path)
    assert str(info.value).startswith(f"config file {path}")
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_empty_config_file_is_all_defaults(tmp_path: Path) -> None:
    assert extender("--config", write(tmp_path, "# nothing\n")).common.kube.burst == 1000


# --- per-service rules -----------------------------------------------------------------------


@pytest.mark.parametrize("service", [Service.REGISTRAR, Service.INFORMER, Service.EXTENDER])
def test_redis_url_is_required_by_the_separate_services(service: Service) -> None:
    with pytest.raises(ConfigError, match=rf"--redis-url is required by {service.value}"):
        settings_for(service, [], {})


def test_all_in_one_and_simulate_default_to_the_embedded_store() -> None:
    a = settings_for(Service.ALL_IN_ONE, [], {})
    s = settings_for("simulate", ["--gpu-scheduler-policy=binpack"], {})
    assert isinstance(a, AllInOneSettings) and isinstance(s, SimulateSettings)
    assert a.common.redis_url is None and s.common.redis_url is None
    assert s.extender.gpu_policy.tokens == (GpuPolicyToken.BINPACK,)


def test_all_in_one_composes_the_components_with_one_common() -> None:
    a = settings_for(
        "all-in-one",
        ["--lease-ttl=20s", "--reconcile-interval=1m", "--node-label-selector=gpu=on", "--reservation-grace=30s"],
        {},
    )
    assert a.registrar.common is a.common and a.informer.common is a.common and a.extender.common is a.common
    assert a.registrar.lease_ttl_s == 20.0 and a.informer.lease_ttl_s == 20.0
    assert a.informer.reconcile_interval_s == 60.0
    assert a.registrar.node_label_selector == (("gpu", "on"),)
    assert a.informer.reservation_grace_s == 30.0 == a.extender.reservation_grace_s


def test_informer_and_registrar_settings() -> None:
    i = settings_for("informer", [*REDIS, "--node-lock-timeout=2m"], {})
    assert isinstance(i, InformerSettings)
    assert (i.lease_ttl_s, i.reconcile_interval_s, i.reservation_grace_s, i.node_lock_timeout_s) == (15, 300, 120, 120)
    r = settings_for("registrar", REDIS, {})
    assert r.node_label_selector == () and r.lease_ttl_s == 15.0


def test_a_flag_of_another_service_is_rejected() -> None:
    with pytest.raises(ConfigError, match="unrecognized arguments: --http_bind"):
        settings_for("registrar", [*REDIS, "--http_bind=:1"], {})


def test_instance_id_defaults_to_host_and_pid() -> None:
    import os

    assert extender().common.instance_id.endswith(f"-{os.getpid()}")
    assert extender("--instance-id=replica-a").common.instance_id == "replica-a"


def test_unknown_service() -> None:
    with pytest.raises(ConfigError, match="unknown service 'scheduler'"):
        settings_for("scheduler", [], {})


def test_tls_files_must_exist_and_pair(tmp_path: Path) -> None:
    cert, key = write(tmp_path, "c", "tls.crt"), write(tmp_path, "k", "tls.key")
    s = extender(f"--cert_file={cert}", f"--key_file={key}")
    assert s.tls and s.cert_file == cert and s.key_file == key


# --- legacy flags (difference 13) override the device config file ------------------------------


def test_legacy_flags_override_the_device_config_file(tmp_path: Path) -> None:
    dc = write(tmp_path, "nvidia:\n  defaultMemory: 1000\n  resourceCountName: example.com/gpu\n", "dc.yaml")
    plain = extender(f"--device-config-file={dc}")
    assert plain.common.nvidia.default_memory == 1000
    assert plain.common.nvidia.resource_count_name == "example.com/gpu"
    s = extender(
        f"--device-config-file={dc}",
        "--default-mem=2048",
        "--default-cores=30",
        "--default-gpu=2",
        "--resource-name=vendor.com/vgpu",
        "--resource-mem=vendor.com/vmem",
        "--resource-mem-percentage=vendor.com/vmem-pct",
        "--resource-cores=vendor.com/vcores",
        "--resource-priority=vgputaskpriority",
        "--overwrite-env",
        env={},
    )
    n = s.common.nvidia
    assert (n.default_memory, n.default_cores, n.default_gpu_num) == (2048, 30, 2)
    assert n.resource_names == frozenset(
        {"vendor.com/vgpu", "vendor.com/vmem", "vendor.com/vmem-pct", "vendor.com/vcores", "vgputaskpriority"}
    )
    assert n.overwrite_env is True


def test_legacy_flag_from_env_without_device_config() -> None:
    s = extender(env={"VGPU_DEFAULT_MEM": "512"})
    assert s.common.nvidia == NvidiaConfig(default_memory=512)


# --- the generated parsers ------------------------------------------------------------------


@pytest.mark.parametrize("service", list(Service), ids=lambda s: s.value)
def test_help_documents_every_option_with_its_env_var(service: Service, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        build_parser(service).parse_args(["--help"])
    assert info.value.code == 0
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    for option in options_for(service):
        assert option.flag in out
        assert option.env_var in out


def test_option_table_is_consistent() -> None:
    names = [o.name for o in OPTIONS]
    assert len(names) == len(set(names))
    normalised = [n.replace("_", "-") for n in names]
    assert len(normalised) == len(set(normalised))
    env = [o.env_var for o in OPTIONS]
    assert len(env) == len(set(env))
    for o in OPTIONS:
        assert o.services, o.name
        assert o.help.endswith((".", ")")), o.name
        if o.default is not None and o.name != "config":
            o.parse(o.default)  # every default is a valid value


def test_normalize_argv_only_touches_known_long_options() -> None:
    assert normalize_argv(["--http-bind=:1", "--kube_qps", "3", "--unknown_x", "-v=4", "--", "--http-bind"]) == [
        "--http_bind=:1",
        "--kube-qps",
        "3",
        "--unknown_x",
        "-v=4",
        "--",
        "--http-bind",
    ]


def test_settings_from_an_externally_built_parser() -> None:
    from vgpu_scheduler.shared.config import add_service_parser, settings_from_args

    top = argparse.ArgumentParser(prog="vgpu-scheduler")
    sub = top.add_subparsers(dest="command")
    add_service_parser(sub, Service.INFORMER).set_defaults(marker=1)
    args = top.parse_args(normalize_argv(["informer", "--reconcile_interval=10m", *REDIS]))
    settings = settings_from_args(Service.INFORMER, args, {"VGPU_LEASE_TTL": "7s"})
    assert settings.reconcile_interval_s == 600.0 and settings.lease_ttl_s == 7.0
