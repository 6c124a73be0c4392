"""HAMi's device config file (``device-config.yaml``, ConfigMap ``hami-scheduler-device``) → :class:`NvidiaConfig`.

The scheduler and HAMi's device plugin read the same file (docs/hami-wire.md §11). We take the ``nvidia:``
section's scheduler keys, validate them, and note (not fail on) everything else: device-plugin-only keys
such as ``deviceSplitCount``, other vendors' sections, and keys we do not know. Errors name the file and the
key path: ``device config file /device-config.yaml: nvidia.memoryFactor: expected a positive integer, got 'x'``.

The old command-line flags of difference 13 (``--default-mem`` …) override the file's keys:
:func:`apply_legacy_overrides`.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from vgpu_scheduler.shared.domain.model import MigAllowlistEntry, MigGeometryEntry, MigTemplate, NvidiaConfig
from vgpu_scheduler.shared.errors import ConfigError

GPU_CORE_POLICIES = ("default", "force", "disable")
"""Valid ``nvidia.gpuCorePolicy`` values (hami-wire §1.1)."""

VENDOR_SECTIONS = frozenset(
    {"cambricon", "hygon", "metax", "mthreads", "iluvatars", "enflame", "kunlun", "awsneuron", "amd", "vastai"}
    | {"biren", "vnpus"}
)
"""Top-level sections of other vendors: accepted and ignored (NVIDIA only, for now)."""

DEVICE_PLUGIN_KEYS = frozenset(
    {
        "deviceSplitCount",
        "deviceMemoryScaling",
        "deviceCoreScaling",
        "preConfiguredDeviceMemory",
        "libCudaLogLevel",
        "enableNumaTopology",
        "migStrategy",
        "migstrategy",
    }
)
"""``nvidia:`` keys only the device plugin reads (hami-wire §11): accepted and ignored."""

_PROFILE_RE = re.compile(r"[1-9][0-9]*g\..+")


@dataclass(frozen=True, slots=True)
class DeviceConfig:
    """A loaded device config: the NVIDIA settings and notes on what was ignored (log them at start-up)."""

    nvidia: NvidiaConfig
    notes: tuple[str, ...] = ()
    source: str = ""
    vendor_sections: Mapping[str, object] = dataclasses.field(default_factory=dict)
    """Other vendors' sections as parsed YAML, by section name: ``shared.vendors.catalog`` validates them and
    enables those vendors (this module stays free of the codecs)."""


@dataclass(frozen=True, slots=True)
class LegacyOverrides:
    """Difference 13's old flags; ``None`` = not given (the file's key or HAMi's default stands)."""

    default_memory: int | None = None
    default_cores: int | None = None
    default_gpu_num: int | None = None
    resource_count_name: str | None = None
    resource_memory_name: str | None = None
    resource_memory_percentage_name: str | None = None
    resource_core_name: str | None = None
    resource_priority_name: str | None = None
    overwrite_env: bool | None = None


def apply_legacy_overrides(config: NvidiaConfig, overrides: LegacyOverrides) -> NvidiaConfig:
    """Return ``config`` with every given legacy flag overriding the matching device-config key."""
    changes = {f.name: getattr(overrides, f.name) for f in dataclasses.fields(overrides)}
    given = {name: value for name, value in changes.items() if value is not None}
    return dataclasses.replace(config, **given) if given else config


def read_yaml_file(path: str, label: str) -> object:
    """The parsed YAML document of ``path`` (None if empty). ConfigError ``<label>: cannot read: …`` or
    ``<label>: not valid YAML: …`` (first line of the parser's message) otherwise: one file reader for the
    device config and ``--config``."""
    import yaml  # here, not at the top: ``vgpu-scheduler --help`` loads this module and never reads YAML

    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"{label}: cannot read: {e.strerror or e}") from e
    try:
        data: object = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(f"{label}: not valid YAML: {str(e).splitlines()[0]}") from e
    return data


def load_device_config(path: str) -> DeviceConfig:
    """Read and validate a device config file. Raises :class:`ConfigError` naming the file and the key."""
    return parse_device_config(read_yaml_file(path, f"device config file {path}"), source=path)


def parse_device_config(data: object, *, source: str = "<memory>") -> DeviceConfig:
    """Validate an already-parsed device config document (see :func:`load_device_config`)."""
    label = f"device config file {source}"
    try:
        return _parse(data, source)
    except _KeyError as e:
        raise ConfigError(f"{label}: {e.path}: {e.detail}") from None


class _KeyError(Exception):
    def __init__(self, path: str, detail: str) -> None:
        super().__init__(f"{path}: {detail}")
        self.path = path
        self.detail = detail


def _parse(data: object, source: str) -> DeviceConfig:
    if not isinstance(data, dict) or not any(v for v in data.values()):
        raise _KeyError("(top level)", "expected a mapping with at least one non-empty vendor section such as nvidia:")
    notes: list[str] = []
    nvidia = NvidiaConfig()
    sections: dict[str, object] = {}
    for key, value in data.items():
        if key == "nvidia":
            if value is not None:
                nvidia = _parse_nvidia(value, notes)
        elif key in VENDOR_SECTIONS:
            sections[key] = value
        else:
            notes.append(f"{key}: unknown top-level section ignored")
    return DeviceConfig(nvidia=nvidia, notes=tuple(notes), source=source, vendor_sections=sections)


# key in YAML -> (NvidiaConfig field, validator)
_Validator = Callable[[str, object], object]


def _string(path: str, value: object) -> object:
    if not isinstance(value, str) or not value.strip():
        raise _KeyError(path, f"expected a non-empty string, got {value!r}")
    return value


def _optional_string(path: str, value: object) -> object:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise _KeyError(path, f"expected a string, got {value!r}")
    return value


def _int_range(minimum: int, maximum: int | None, expected: str) -> _Validator:
    def check(path: str, value: object) -> object:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise _KeyError(path, f"expected {expected}, got {value!r}")
        if maximum is not None and value > maximum:
            raise _KeyError(path, f"expected {expected}, got {value!r}")
        return value

    return check


def _boolean(path: str, value: object) -> object:
    # HAMi's docs spell some booleans as strings ("false"); accept exactly those two spellings too.
    if isinstance(value, bool):
        return value
    if value in ("true", "false"):
        return value == "true"
    raise _KeyError(path, f"expected true or false, got {value!r}")


def _core_policy(path: str, value: object) -> object:
    if value is None or value == "":
        return "default"
    if value not in GPU_CORE_POLICIES:
        raise _KeyError(path, f"expected one of {', '.join(GPU_CORE_POLICIES)}, got {value!r}")
    return value


_SCALAR_KEYS: Mapping[str, tuple[str, _Validator]] = {
    "resourceCountName": ("resource_count_name", _string),
    "resourceMemoryName": ("resource_memory_name", _string),
    "resourceMemoryPercentageName": ("resource_memory_percentage_name", _string),
    "resourceCoreName": ("resource_core_name", _string),
    "resourcePriorityName": ("resource_priority_name", _string),
    "defaultMemory": ("default_memory", _int_range(0, None, "a non-negative integer (MiB)")),
    "defaultCores": ("default_cores", _int_range(0, 100, "an integer from 0 to 100")),
    "defaultGPUNum": ("default_gpu_num", _int_range(0, None, "a non-negative integer")),
    "memoryFactor": ("memory_factor", _int_range(1, None, "a positive integer")),
    "overwriteEnv": ("overwrite_env", _boolean),
    "gpuCorePolicy": ("gpu_core_policy", _core_policy),
    "runtimeClassName": ("runtime_class_name", _optional_string),
    "disableCoreLimit": ("disable_core_limit", _boolean),
}


def _parse_nvidia(section: object, notes: list[str]) -> NvidiaConfig:
    if not isinstance(section, dict):
        raise _KeyError("nvidia", f"expected a mapping, got {type(section).__name__}")
    changes: dict[str, object] = {}
    for key, value in section.items():
        path = f"nvidia.{key}"
        if key in _SCALAR_KEYS:
            field_name, validate = _SCALAR_KEYS[key]
            if value is None and validate is not _optional_string and validate is not _core_policy:
                notes.append(f"{path}: empty, HAMi's default kept")
                continue
            changes[field_name] = validate(path, value)
        elif key == "migProfileAllowlist":
            changes["mig_profile_allowlist"] = _parse_allowlist(path, value)
        elif key == "knownMigGeometries":
            changes["known_mig_geometries"] = _parse_geometries(path, value)
        elif key in DEVICE_PLUGIN_KEYS:
            notes.append(f"{path}: device-plugin key, ignored by the scheduler")
        else:
            notes.append(f"{path}: unknown key ignored")
    return dataclasses.replace(NvidiaConfig(), **changes)  # type: ignore[arg-type]


def _list(path: str, value: object) -> list[object]:
    if not isinstance(value, list):
        raise _KeyError(path, f"expected a list, got {value!r}")
    return value


def _string_list(path: str, value: object) -> tuple[str, ...]:
    items = _list(path, value)
    if not items:
        raise _KeyError(path, "expected a non-empty list")
    return tuple(str(_string(f"{path}[{i}]", item)) for i, item in enumerate(items))


def _mapping(path: str, value: object) -> dict[object, object]:
    if not isinstance(value, dict):
        raise _KeyError(path, f"expected a mapping, got {value!r}")
    return value


def _parse_allowlist(path: str, value: object) -> tuple[MigAllowlistEntry, ...]:
    if value is None:
        return ()
    entries: list[MigAllowlistEntry] = []
    for i, raw in enumerate(_list(path, value)):
        entry = _mapping(f"{path}[{i}]", raw)
        models = _string_list(f"{path}[{i}].models", entry.get("models"))
        profiles = _string_list(f"{path}[{i}].profiles", entry.get("profiles"))
        for j, profile in enumerate(profiles):
            if not _PROFILE_RE.fullmatch(profile):
                raise _KeyError(f"{path}[{i}].profiles[{j}]", f"expected a MIG profile like 1g.5gb, got {profile!r}")
        entries.append(MigAllowlistEntry(models=models, profiles=profiles))
    return tuple(entries)


def _parse_geometries(path: str, value: object) -> tuple[MigGeometryEntry, ...]:
    if value is None:
        return ()
    entries: list[MigGeometryEntry] = []
    for i, raw in enumerate(_list(path, value)):
        here = f"{path}[{i}]"
        entry = _mapping(here, raw)
        models = _string_list(f"{here}.models", entry.get("models"))
        geometries_raw = _list(f"{here}.allowedGeometries", entry.get("allowedGeometries"))
        if not geometries_raw:
            raise _KeyError(f"{here}.allowedGeometries", "expected a non-empty list of geometries")
        geometries: list[tuple[MigTemplate, ...]] = []
        for g, geometry_raw in enumerate(geometries_raw):
            gpath = f"{here}.allowedGeometries[{g}]"
            templates_raw = _list(gpath, geometry_raw)
            if not templates_raw:
                raise _KeyError(gpath, "expected a non-empty list of templates")
            geometries.append(tuple(_parse_template(f"{gpath}[{t}]", tr) for t, tr in enumerate(templates_raw)))
        entries.append(MigGeometryEntry(models=models, geometries=tuple(geometries)))
    return tuple(entries)


def _parse_template(path: str, value: object) -> MigTemplate:
    """``{name, core, memory, count}``; ``core`` may be absent (Go's zero value, as in HAMi's docs)."""
    raw = _mapping(path, value)
    name = str(_string(f"{path}.name", raw.get("name")))
    if not _PROFILE_RE.fullmatch(name):
        raise _KeyError(f"{path}.name", f"expected a MIG profile like 1g.5gb, got {name!r}")
    memory = _int_range(1, None, "a positive integer (MiB)")(f"{path}.memory", raw.get("memory"))
    core = _int_range(0, 100, "an integer from 0 to 100")(f"{path}.core", raw.get("core", 0))
    count = _int_range(1, None, "a positive integer")(f"{path}.count", raw.get("count"))
    assert isinstance(memory, int) and isinstance(core, int) and isinstance(count, int)
    return MigTemplate(name=name, memory_mib=memory, core_pct=core, count=count)
