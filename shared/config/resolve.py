"""Option resolution: for each option of a service, the text its flag, environment variable, ``--config`` file
key or default gives (in that order of precedence), parsed by the option's kind (``resolve``), and the config
file's reading and checking (``read_config_file``). ``settings`` builds the frozen settings from the result.
"""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar

from vgpu_scheduler.shared.config.options import OPTIONS, OPTIONS_BY_NAME, Kind, Option, Service, find_option
from vgpu_scheduler.shared.devconfig import read_yaml_file
from vgpu_scheduler.shared.errors import ConfigError

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class _Raw:
    """An option's text before parsing (None: no value) and where it came from, for error messages."""

    text: str | None
    label: str


def _yaml_scalar_text(option: Option, value: object, label: str) -> str:
    """Render a config-file value as the text its flag would carry; refuse types that do not fit the option."""
    if option.kind is Kind.BOOL and isinstance(value, bool):
        return "true" if value else "false"
    if option.kind in (Kind.INT, Kind.NUMBER) and isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    if option.kind is Kind.DURATION and isinstance(value, int) and not isinstance(value, bool) and value == 0:
        return "0"
    if option.name == "node-label-selector" and isinstance(value, Mapping):
        return ",".join(f"{k}={v}" for k, v in value.items())
    if isinstance(value, str):
        return value
    raise ConfigError(f"{label}: expected {_YAML_EXPECTED[option.kind]}, got {value!r}")


_YAML_EXPECTED: Mapping[Kind, str] = {
    Kind.STRING: "a string",
    Kind.INT: "an integer",
    Kind.NUMBER: "a number",
    Kind.BOOL: "a boolean (true or false)",
    Kind.DURATION: "a Go duration string such as 30s, 5m or 1h2m",
}


def read_config_file(path: str) -> dict[str, object]:
    """Load a ``--config`` YAML file: a mapping of option names (``-`` or ``_``) to values, keyed canonically."""
    label = f"config file {path}"
    data = read_yaml_file(path, label)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{label}: expected a mapping of option names to values, got {type(data).__name__}")
    out: dict[str, object] = {}
    for key, value in data.items():
        option = find_option(str(key))
        if option is None or option.name == "config":
            names = [o.name for o in OPTIONS if o.name != "config"]
            close = difflib.get_close_matches(str(key), names, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"{label}: unknown option {key!r}{hint}")
        if option.name in out:
            raise ConfigError(f"{label}: option {option.name!r} is given twice")
        out[option.name] = value
    return out


class Resolved:
    """The parsed value of every option for one service, with typed accessors."""

    def __init__(self, values: Mapping[str, object]) -> None:
        self._values = values

    def get(self, name: str) -> object:
        return self._values[name]

    def _typed(self, name: str, typ: type[_T]) -> _T:
        value = self._values[name]
        assert isinstance(value, typ), name
        return value

    def _opt_typed(self, name: str, typ: type[_T]) -> _T | None:
        value = self._values[name]
        assert value is None or isinstance(value, typ), name
        return value

    def text(self, name: str) -> str:
        return self._typed(name, str)

    def opt_text(self, name: str) -> str | None:
        return self._opt_typed(name, str)

    def integer(self, name: str) -> int:
        return self._typed(name, int)

    def opt_integer(self, name: str) -> int | None:
        return self._opt_typed(name, int)

    def number(self, name: str) -> float:
        return self._typed(name, float)

    def flag(self, name: str) -> bool:
        return self._typed(name, bool)

    def opt_flag(self, name: str) -> bool | None:
        return self._opt_typed(name, bool)


def resolve(service: Service, args: argparse.Namespace, env: Mapping[str, str]) -> tuple[Resolved, str | None]:
    """Pick each option's text by precedence and parse it; return the values and the config file used."""
    config_option = OPTIONS_BY_NAME["config"]
    config_path: str | None = getattr(args, config_option.dest, None) or env.get(config_option.env_var) or None
    file_values = read_config_file(config_path) if config_path else {}
    values: dict[str, object] = {}
    for option in OPTIONS:
        if option.name == "config":
            values["config"] = config_path
            continue
        raw = _raw_value(option, service, args=args, env=env, file_values=file_values, config_path=config_path)
        if raw.text is None:
            values[option.name] = None
            continue
        try:
            values[option.name] = option.parse(raw.text)
        except ValueError as e:
            raise ConfigError(f"{raw.label}: {e}, got {raw.text!r}") from None
    return Resolved(values), config_path


def _raw_value(
    option: Option,
    service: Service,
    *,
    args: argparse.Namespace,
    env: Mapping[str, str],
    file_values: Mapping[str, object],
    config_path: str | None,
) -> _Raw:
    if service in option.services:
        flag_text = getattr(args, option.dest, None)
        if flag_text is not None:
            label = option.flag if option.short is None else f"{option.short}/{option.flag}"
            return _Raw(str(flag_text), label)
        env_text = env.get(option.env_var)
        if env_text:  # an empty variable counts as unset, as Kubernetes manifests often render them
            return _Raw(env_text, option.env_var)
        if option.name in file_values:
            label = f"config file {config_path}: {option.name}"
            return _Raw(_yaml_scalar_text(option, file_values[option.name], label), label)
    return _Raw(option.default, f"default of {option.flag}")
