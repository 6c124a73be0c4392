"""Small pieces several vendor modules share: selector annotations, the opening of a container's request reading
(its resource lists and the strict quantity reader), device-config sections of names, and register-codec error
keys. Pure."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Final, TypeVar

from vgpu_scheduler.shared.codec._go import fail, trim_space
from vgpu_scheduler.shared.codec.register import WHAT as NVIDIA_REGISTER
from vgpu_scheduler.shared.codec.resources import RequestReader, container_label, container_lists
from vgpu_scheduler.shared.codec.selectors import decode_type_list, decode_uuid_list
from vgpu_scheduler.shared.domain.model import NvidiaConfig, Selectors
from vgpu_scheduler.shared.errors import ConfigError, DecodeError

_T = TypeVar("_T")


def _use_guard(value: str, found: bool, key: str) -> None:
    if trim_space(value) != "" and not found:
        fail(key, "list holds no token, so no device could ever match", value)


def decode_selectors(
    annotations: Mapping[str, str], use_type: str, nouse_type: str, use_uuid: str, nouse_uuid: str
) -> Selectors:
    """The four selector annotations → Selectors (trimmed, upper-cased types; blank means no constraint).

    A use list that is not blank but names nothing (``","``) matches no device in HAMi: a DecodeError here.
    """

    def text(key: str) -> str:
        value = annotations.get(key, "")
        if not isinstance(value, str):
            fail(key, f"annotation value must be a string, got {type(value).__name__}")
        return value

    use_types = decode_type_list(text(use_type))
    _use_guard(text(use_type), bool(use_types), use_type)
    use_uuids = decode_uuid_list(text(use_uuid))
    _use_guard(text(use_uuid), bool(use_uuids), use_uuid)
    return Selectors(
        use_types=use_types,
        nouse_types=decode_type_list(text(nouse_type)),
        use_uuids=use_uuids,
        nouse_uuids=decode_uuid_list(text(nouse_uuid)),
    )


def rekey(e: DecodeError, key: str) -> DecodeError:
    """The shared register codec names NVIDIA's key: name ours instead."""
    what = key + e.what[len(NVIDIA_REGISTER) :] if e.what.startswith(NVIDIA_REGISTER) else e.what
    return DecodeError(what, e.detail, e.part)


def read_container(
    container: Mapping[str, Any], what: str, count: str, memory: str = "", cores: str = "", *, memory_factor: int = 1
) -> tuple[Mapping[str, Any], Mapping[str, Any], RequestReader]:
    """How a family's request reading begins: the container's limits and requests, and the strict quantity reader
    of its ``count``, ``memory`` and ``cores`` resources (a blank name: the family has none; one memory unit is
    ``memory_factor`` MiB) labelled with the container (``what``: ``container``, ``initContainer``)."""
    limits, requests = container_lists(container, what)
    cfg = reader_config(count, memory, cores, memory_factor)
    return limits, requests, RequestReader(cfg, container_label(container, what))


def reader_config(count: str, memory: str, cores: str, memory_factor: int = 1) -> NvidiaConfig:
    """The resource names and memory unit the strict quantity reader of ``shared.codec.resources`` needs."""
    return NvidiaConfig(
        resource_count_name=count,
        resource_memory_name=memory,
        resource_memory_percentage_name=cores or memory,
        resource_core_name=cores,
        resource_priority_name="",
        memory_factor=memory_factor,
    )


_SECTION_KEY: Final = "section_key"


def section_key(key: str, default: _T) -> _T:
    """A field of a vendor's config dataclass that its device-config section sets under ``key`` (HAMi's YAML
    name), ``default`` when absent: :func:`section_keys` reads the keys back."""
    value: _T = dataclasses.field(default=default, metadata={_SECTION_KEY: key})
    return value


def section_keys(config: type[Any]) -> dict[str, str]:
    """The section's keys of a config dataclass whose fields say theirs (:func:`section_key`): YAML key → field."""
    return {f.metadata[_SECTION_KEY]: f.name for f in dataclasses.fields(config) if _SECTION_KEY in f.metadata}


def names_section(
    section: object,
    name: str,
    keys: Mapping[str, str],
    *,
    ints: Mapping[str, int] | None = None,
    unit: str,
    required: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A vendor's device-config section of resource names, validated: ``keys`` maps each YAML key to its config
    field; ``ints`` names the fields that are whole numbers (value: the largest allowed), every other field is a
    string, and ``resourceCountName`` must not be blank (it is how a container asks for ``unit``), nor any key of
    ``required`` (key → why, said in the error). Unknown keys are errors. ``None`` gives ``{}`` (the defaults).
    ConfigError names the key path."""
    if section is None:
        return {}
    if not isinstance(section, Mapping):
        raise ConfigError(f"{name}: expected a mapping, got {type(section).__name__}")
    numbers = ints or {}
    needed = {"resourceCountName": f"it is how a container asks for {unit}", **(required or {})}
    values: dict[str, Any] = {}
    for key, value in section.items():
        field = keys.get(key) if isinstance(key, str) else None
        path = f"{name}.{key}"
        if field is None:
            raise ConfigError(f"{path}: unknown key (known: {', '.join(keys)})")
        if field in numbers:
            top = numbers[field]
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= top:
                raise ConfigError(f"{path}: expected a whole number from 0 to {top}, got {value!r}")
            values[field] = value
            continue
        if not isinstance(value, str):
            raise ConfigError(f"{path}: expected a string, got {value!r}")
        if key in needed and trim_space(value) == "":
            raise ConfigError(f"{path}: must not be empty ({needed[key]})")
        values[field] = value
    return values
