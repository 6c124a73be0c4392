"""Ascend's configuration: the ``vnpus`` device-config section, its chip entries, vNPU templates and HAMi's
default chips. Pure."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Final, TypeVar

from vgpu_scheduler.shared.codec._go import INT64_MAX
from vgpu_scheduler.shared.errors import ConfigError

SECTION: Final = "vnpus"
"""The device-config section of the Ascend chips (HAMi: ``vnpus:``); ``--enable-ascend`` enables them."""


ASCEND910_PREFIX = "Ascend910"
"""Common words starting with this get the network-aware multi-NPU choice (HAMi's ``Ascend910Prefix``)."""
ASCEND910C = "Ascend910C"
"""The 910C: two NPUs per module, multi-NPU requests take whole modules."""
NETWORK_ID = "NetworkID"
"""The ``custominfo`` key of an NPU's HCCS network in the registration."""
NPUS_PER_910C_MODULE = 2
VNPU_MODE_ANNOTATION = "huawei.com/vnpu-mode"
"""HAMi's pod annotation choosing the soft split: ``huawei.com/vnpu-mode: hami-core``."""
VNPU_MODE_HAMI_CORE = "hami-core"
"""The value of :data:`VNPU_MODE_ANNOTATION` (and the devices' ``mode`` on a soft-split node)."""
VNPU_NODE_ANNOTATION = "hami-vnpu-core"
"""The node annotation HAMi's Ascend device plugin writes: ``"true"`` on a node running the hami-core soft split,
``"false"`` on a template node. Absent: the ``vnpus`` section's ``hamiVnpuCore`` (or ``hamiVnpuMode``) decides."""
SOFT_CORE_TOTAL = 100
"""A whole NPU is 100 % of its AI cores in the soft split (HAMi's ``effectiveTotalCore``)."""
PREDICATE_TIME = "predicate-time"
"""Pod annotation HAMi writes at bind for Ascend pods (Unix seconds): Huawei's device plugins find the pod by it."""
VISIBLE_DEVICES_ENV = "ASCEND_VISIBLE_DEVICES"

_COMMON_WORD_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\Z")
_BINARY_SUFFIX = re.compile(r"(?P<mantissa>.*?)(?P<suffix>[KMGTPE]i)\Z")
_MIB = 2**20


# ------------------------------------------------------------------------------------------------------------
# Configuration (one ``vnpus`` entry)
# ------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Template:
    """A vNPU template: ``name`` (what the device plugin creates), its memory in MiB and its AI cores / CPUs."""

    name: str
    memory_mib: int
    ai_core: int = 0
    ai_cpu: int = 0


@dataclass(frozen=True, slots=True)
class ChipConfig:
    """One ``vnpus`` entry. ``templates`` are sorted by memory, ascending (HAMi sorts them at start-up)."""

    common_word: str
    chip_name: str
    resource_name: str
    resource_memory_name: str
    resource_core_name: str
    memory_allocatable: int
    memory_capacity: int
    memory_factor: int = 1
    ai_core: int = 0
    ai_cpu: int = 0
    templates: tuple[Template, ...] = ()
    super_pod: bool = False
    overwrite_env: bool = False
    runtime_class_name: str = ""
    ascend_resource_names: tuple[str, ...] = ()
    """The count resources of every chip of the section (HAMi's ``allAscendResourceNames``): a container asking
    for a sibling chip is not given ``ASCEND_VISIBLE_DEVICES=""`` by this one."""
    hami_core: bool = False
    """The section's default node mode (``hamiVnpuCore: true`` or ``hamiVnpuMode: hami-core``): a node without
    the ``hami-vnpu-core`` annotation runs the soft split."""

    def trim_memory(self, mib: int) -> tuple[int, str]:
        """HAMi's ``trimMemory``: (memory taken, template name). The smallest template holding ``mib``; else the
        whole card (``memoryAllocatable``, no template) when ``mib ≤ memoryCapacity``; else ``(0, "")``."""
        for t in self.templates:
            if mib <= t.memory_mib:
                return t.memory_mib, t.name
        if mib <= self.memory_capacity:
            return self.memory_allocatable, ""
        return 0, ""

    @property
    def is_910(self) -> bool:
        return self.common_word.startswith(ASCEND910_PREFIX)


def _chip(
    cw: str,
    chip: str,
    memory: tuple[int, int],
    ai: tuple[int, int],
    templates: tuple[Template, ...],
    *,
    super_pod: bool = False,
) -> ChipConfig:
    """A chart default: ``memory`` is (allocatable, capacity), ``ai`` is (aiCore, aiCPU)."""
    res = f"huawei.com/{cw}"
    (alloc, cap), (ai_core, ai_cpu) = memory, ai
    return ChipConfig(
        common_word=cw,
        chip_name=chip,
        resource_name=res,
        resource_memory_name=f"{res}-memory",
        resource_core_name=f"{res}-core",
        memory_allocatable=alloc,
        memory_capacity=cap,
        ai_core=ai_core,
        ai_cpu=ai_cpu,
        templates=templates,
        super_pod=super_pod,
    )


_T16_5 = Template("vir05_1c_16g", 16384, 5, 1)
_T32_10 = Template("vir10_3c_32g", 32768, 10, 3)

DEFAULT_CHIPS: tuple[ChipConfig, ...] = (
    _chip(
        "Ascend910A",
        "910A",
        (32768, 32768),
        (30, 0),
        (
            Template("vir02", 2184, 2),
            Template("vir04", 4369, 4),
            Template("vir08", 8738, 8),
            Template("vir16", 17476, 16),
        ),
    ),
    _chip(
        "Ascend910B2",
        "910B2",
        (65536, 65536),
        (24, 6),
        (
            Template("vir03_1c_8g", 8192, 3, 1),
            Template("vir06_1c_16g", 16384, 6, 1),
            Template("vir12_3c_32g", 32768, 12, 3),
        ),
    ),
    _chip("Ascend910B3", "910B3", (65536, 65536), (20, 7), (_T16_5, _T32_10)),
    _chip("Ascend910B4-1", "910B4-1", (65536, 65536), (20, 7), (_T16_5, _T32_10)),
    _chip(
        "Ascend910B4",
        "910B4",
        (32768, 32768),
        (20, 7),
        (Template("vir05_1c_8g", 8192, 5, 1), Template("vir10_3c_16g", 16384, 10, 3)),
    ),
    _chip(
        "Ascend310P",
        "310P3",
        (21527, 24576),
        (8, 7),
        (Template("vir01", 3072, 1, 1), Template("vir02", 6144, 2, 2), Template("vir04", 12288, 4, 4)),
    ),
    _chip("Ascend910C", "Ascend910", (65536, 65536), (20, 7), (_T16_5, _T32_10), super_pod=True),
)
"""The chart's default ``vnpus.configs`` (``charts/hami/templates/scheduler/device-configmap.yaml``)."""


# ------------------------------------------------------------------------------------------------------------
# The device-config section
# ------------------------------------------------------------------------------------------------------------

_GLOBAL_KEYS = frozenset(
    {
        "hamiVnpuMode",
        "hamiVnpuCore",
        "enpuPolicy",
        "overwriteEnv",
        "runtimeClassName",
        "vnpuDeviceSplitCount",
        "configs",
    }
)
_CHIP_KEYS = frozenset(
    {
        "chipName",
        "commonWord",
        "resourceName",
        "resourceMemoryName",
        "resourceCoreName",
        "memoryAllocatable",
        "memoryCapacity",
        "memoryFactor",
        "aiCore",
        "aiCPU",
        "templates",
        "superPod",
        "runtimeClassName",
        "overwriteEnv",
    }
)
_TEMPLATE_KEYS = frozenset({"name", "memory", "aiCore", "aiCPU"})


_Scalar = TypeVar("_Scalar", str, bool)


def _kind(v: object) -> str:
    return "null" if v is None else type(v).__name__


def _mapping(v: object, path: str, allowed: frozenset[str]) -> Mapping[str, Any]:
    if not isinstance(v, Mapping):
        raise ConfigError(f"{path}: expected a mapping, got {_kind(v)}")
    for k in v:
        if k not in allowed:
            raise ConfigError(f"{path}.{k}: unknown key (known: {', '.join(sorted(allowed))})")
    return v


def _scalar(m: Mapping[str, Any], key: str, path: str, default: _Scalar, expected: str) -> _Scalar:
    """``m[key]`` when it has the type of ``default`` (``default`` when absent or null); else a ConfigError saying
    what was ``expected``."""
    v = m.get(key, default)
    if v is None:
        return default
    if not isinstance(v, type(default)):
        raise ConfigError(f"{path}.{key}: expected {expected}, got {v!r}")
    return v


def _str(m: Mapping[str, Any], key: str, path: str, default: str) -> str:
    return _scalar(m, key, path, default, "a string")


def _int(m: Mapping[str, Any], key: str, path: str, default: int, *, lo: int = 0) -> int:
    v = m.get(key, default)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int):
        raise ConfigError(f"{path}.{key}: expected a whole number, got {v!r}")
    if not lo <= v <= INT64_MAX:
        raise ConfigError(f"{path}.{key}: must be at least {lo}, got {v}")
    return v


def _bool(m: Mapping[str, Any], key: str, path: str, default: bool) -> bool:
    return _scalar(m, key, path, default, "true or false")


def _templates(v: object, path: str) -> tuple[Template, ...]:
    if v is None:
        return ()
    if not isinstance(v, list):
        raise ConfigError(f"{path}: expected a list, got {_kind(v)}")
    out: list[Template] = []
    for i, item in enumerate(v):
        p = f"{path}[{i}]"
        m = _mapping(item, p, _TEMPLATE_KEYS)
        name = _str(m, "name", p, "")
        if not name:
            raise ConfigError(f"{p}.name: a template needs a name")
        if any(t.name == name for t in out):
            raise ConfigError(f"{p}.name: template {name!r} is listed twice")
        out.append(Template(name, _int(m, "memory", p, 0, lo=1), _int(m, "aiCore", p, 0), _int(m, "aiCPU", p, 0)))
    return tuple(sorted(out, key=lambda t: t.memory_mib))


def _chip_config(item: object, path: str, overwrite_env: bool, runtime_class: str, hami_core: bool) -> ChipConfig:
    m = _mapping(item, path, _CHIP_KEYS)
    cw = _str(m, "commonWord", path, "")
    if not _COMMON_WORD_RE.match(cw):
        raise ConfigError(
            f"{path}.commonWord: expected a name of letters, digits, '.', '_' or '-' (it is part of annotation "
            f"keys), got {cw!r}"
        )
    res = _str(m, "resourceName", path, f"huawei.com/{cw}") or f"huawei.com/{cw}"
    alloc = _int(m, "memoryAllocatable", path, 0, lo=1) if "memoryAllocatable" in m else 0
    if alloc <= 0:
        raise ConfigError(f"{path}.memoryAllocatable: expected the MiB of a whole NPU (a number > 0), got {alloc}")
    cap = _int(m, "memoryCapacity", path, alloc, lo=1)
    if cap < alloc:
        raise ConfigError(f"{path}.memoryCapacity: {cap} is less than memoryAllocatable {alloc}")
    templates = _templates(m.get("templates"), f"{path}.templates")
    for t in templates:
        if t.memory_mib > cap:
            raise ConfigError(f"{path}.templates: {t.name!r} has {t.memory_mib} MiB, more than memoryCapacity {cap}")
    return ChipConfig(
        common_word=cw,
        chip_name=_str(m, "chipName", path, ""),
        resource_name=res,
        resource_memory_name=_str(m, "resourceMemoryName", path, f"{res}-memory") or f"{res}-memory",
        resource_core_name=_str(m, "resourceCoreName", path, f"{res}-core") or f"{res}-core",
        memory_allocatable=alloc,
        memory_capacity=cap,
        memory_factor=_int(m, "memoryFactor", path, 1),
        ai_core=_int(m, "aiCore", path, 0),
        ai_cpu=_int(m, "aiCPU", path, 0),
        templates=templates,
        super_pod=_bool(m, "superPod", path, False),
        overwrite_env=_bool(m, "overwriteEnv", path, overwrite_env),
        runtime_class_name=_str(m, "runtimeClassName", path, runtime_class),
        hami_core=hami_core,
    )


def _check_mode(m: Mapping[str, Any]) -> bool:
    """The section's default node mode: True for the hami-core soft split. HAMi v2.10's chart writes
    ``hamiVnpuCore: <bool>``; later charts write ``hamiVnpuMode`` (``template``, ``hami-core`` or ``hamiCore``,
    ``enpu``), which wins when set. eNPU is refused: this scheduler does not implement it."""
    mode = _str(m, "hamiVnpuMode", SECTION, "").strip().lower()
    if mode == "enpu":
        raise ConfigError(
            f"{SECTION}.hamiVnpuMode: 'enpu' is not supported by this scheduler (template vNPUs and the hami-core "
            "soft split are); use 'template', 'hami-core' or leave it empty"
        )
    if mode not in ("", "template", "hami-core", "hamicore"):
        raise ConfigError(f"{SECTION}.hamiVnpuMode: must be template, hami-core (or hamiCore), or enpu, got {mode!r}")
    core = _bool(m, "hamiVnpuCore", SECTION, False)
    return mode in ("hami-core", "hamicore") or (mode == "" and core)


def parse_chips(section: object) -> tuple[ChipConfig, ...]:
    """The chip entries of the ``vnpus`` section, in order.

    Accepts HAMi's two shapes: a list of chip entries (≤ v2.8 charts) or a mapping with ``configs:`` and the
    global keys ``hamiVnpuMode``, ``hamiVnpuCore``, ``enpuPolicy``, ``overwriteEnv``, ``runtimeClassName``,
    ``vnpuDeviceSplitCount`` (the last two also per chip). ``None``, ``{}`` or a mapping without ``configs``
    give the chart's default chips. Raises ConfigError naming the key path.
    """
    overwrite_env, runtime_class, hami_core = False, "", False
    if section is None:
        entries: object = None
    elif isinstance(section, list):
        entries = section
    else:
        m = _mapping(section, SECTION, _GLOBAL_KEYS)
        hami_core = _check_mode(m)
        _str(m, "enpuPolicy", SECTION, "")
        _int(m, "vnpuDeviceSplitCount", SECTION, 0)
        overwrite_env = _bool(m, "overwriteEnv", SECTION, False)
        runtime_class = _str(m, "runtimeClassName", SECTION, "")
        entries = m.get("configs")
    path = SECTION if isinstance(section, list) else f"{SECTION}.configs"
    if entries is None:
        chips = tuple(_with_globals(c, overwrite_env, runtime_class, hami_core) for c in DEFAULT_CHIPS)
    else:
        if not isinstance(entries, list):
            raise ConfigError(f"{path}: expected a list of chip entries, got {_kind(entries)}")
        chips = tuple(
            _chip_config(item, f"{path}[{i}]", overwrite_env, runtime_class, hami_core)
            for i, item in enumerate(entries)
        )
    names = tuple(c.resource_name for c in chips)
    chips = tuple(replace(c, ascend_resource_names=names) for c in chips)
    seen: dict[str, int] = {}
    for i, c in enumerate(chips):
        if c.common_word in seen:
            raise ConfigError(
                f"{path}[{i}].commonWord: {c.common_word!r} is already configured by {path}[{seen[c.common_word]}]"
            )
        seen[c.common_word] = i
    return chips


def _with_globals(c: ChipConfig, overwrite_env: bool, runtime_class: str, hami_core: bool) -> ChipConfig:
    return replace(c, overwrite_env=overwrite_env, runtime_class_name=runtime_class, hami_core=hami_core)
