"""Process settings: one frozen object per service, built from flags, environment variables and a config file.

Precedence, per option: ``--flag`` > environment variable ``VGPU_<NAME>`` > ``--config FILE`` (YAML) > default.
Every option is declared once in :data:`OPTIONS`; each subcommand's argparse parser, the environment and
config-file lookups, ``--help`` and ``docs/config.md`` are all generated from that table. HAMi's flag names
and defaults are accepted as written (docs/hami-wire.md §10.1, difference 13): ``--http_bind`` keeps its
underscore, Go durations (``5m``, ``1h2m``, ``300ms``) and Go-style booleans (``--flag``, ``--flag=false``)
are parsed the Go way. Either spelling of a name works (``--http-bind`` = ``--http_bind``).

A bad value stops start-up with one :class:`~shared.errors.ConfigError` line naming the flag, variable or
file key and what was expected. Nothing here reads ``os.environ``: callers pass the environment in.
"""

from vgpu_scheduler.shared.config.options import (
    ENV_PREFIX,
    OPTIONS,
    OPTIONS_BY_NAME,
    Kind,
    Option,
    Service,
    add_options,
    add_service_parser,
    build_parser,
    find_option,
    normalize_argv,
    options_for,
)
from vgpu_scheduler.shared.config.resolve import read_config_file
from vgpu_scheduler.shared.config.settings import (
    AllInOneSettings,
    CommonSettings,
    ExtenderSettings,
    InformerSettings,
    InspectSettings,
    KubeSettings,
    RegistrarSettings,
    Settings,
    SimulateSettings,
    default_instance_id,
    settings_for,
    settings_from_args,
)
from vgpu_scheduler.shared.config.values import (
    BindAddress,
    LogFormat,
    LogLevel,
    format_go_duration,
    parse_bind_address,
    parse_go_bool,
    parse_go_duration,
    parse_gpu_policy,
    parse_label_selector,
    parse_node_policy,
)

__all__ = [
    "ENV_PREFIX",
    "OPTIONS",
    "OPTIONS_BY_NAME",
    "AllInOneSettings",
    "BindAddress",
    "CommonSettings",
    "ExtenderSettings",
    "InformerSettings",
    "InspectSettings",
    "Kind",
    "KubeSettings",
    "LogFormat",
    "LogLevel",
    "Option",
    "RegistrarSettings",
    "Service",
    "Settings",
    "SimulateSettings",
    "add_options",
    "add_service_parser",
    "build_parser",
    "default_instance_id",
    "find_option",
    "format_go_duration",
    "normalize_argv",
    "options_for",
    "parse_bind_address",
    "parse_go_bool",
    "parse_go_duration",
    "parse_gpu_policy",
    "parse_label_selector",
    "parse_node_policy",
    "read_config_file",
    "settings_for",
    "settings_from_args",
]
