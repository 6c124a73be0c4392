"""Versioned msgpack envelopes for every blob the store keeps: ``{"k": kind, "v": version, "d": {named fields}}``.

Pure encode/decode, no I/O. Encoding is deterministic (fixed field order, sorted maps and sets) so the store can
compare blobs byte for byte to decide whether something changed.

Decoding goes through an :class:`EnvelopeRegistry`: each kind has a current version, a decoder of the current
field map and upgraders that lift an older field map one version at a time. A version newer than the reader
knows raises :class:`~shared.errors.SchemaVersionError`; anything else malformed raises
:class:`~shared.errors.DecodeError` naming the kind and the field.

What each kind's field map holds, version by version, is ``kinds``; ``STANDARD_REGISTRY`` puts them together.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import msgpack  # type: ignore[import-untyped]

from vgpu_scheduler.shared.codec.kinds import (
    INVENTORY_VERSION,
    QUOTA_VERSION,
    Fields,
    allocation_fields,
    allocation_from,
    inventory_fields,
    inventory_from,
    inventory_v1_to_v2,
    inventory_version,
    quota_fields,
    quota_from,
    quota_v1_to_v2,
    quota_version,
)
from vgpu_scheduler.shared.domain.allocation import Allocation
from vgpu_scheduler.shared.domain.model import (
    NodeInventory,
)
from vgpu_scheduler.shared.domain.quota import QuotaLimits
from vgpu_scheduler.shared.errors import DecodeError, SchemaVersionError


class Kind(enum.Enum):
    """What an envelope holds: the ``"k"`` field."""

    NODE_INVENTORY = "node-inventory"
    ALLOCATION = "allocation"
    QUOTA_LIMITS = "quota-limits"


@dataclass(frozen=True, slots=True)
class KindCodec:
    """How one kind is encoded at its current ``version`` and how older field maps are upgraded.

    ``upgraders[n]`` turns a version-``n`` field map into a version-``n+1`` one.
    """

    kind: Kind
    version: int
    encode: Callable[[Any], Fields]
    decode: Callable[[Fields], Any]
    upgraders: Mapping[int, Callable[[Fields], Fields]] = field(default_factory=dict)
    version_of: Callable[[Any], int] | None = None
    """The version ``obj`` is written at when that is not always ``version``: the oldest format that can hold it,
    so that readers of that format keep reading what they can represent (and refuse, with
    :class:`~shared.errors.SchemaVersionError`, what they cannot). ``encode`` must produce that version's fields."""


@dataclass(frozen=True, slots=True)
class EnvelopeRegistry:
    """The codecs a reader knows, by kind. Immutable: build a new one to add a kind or a version."""

    codecs: Mapping[Kind, KindCodec]

    def encode(self, kind: Kind, obj: Any) -> bytes:
        """Wrap ``obj`` in an envelope of the current version of ``kind``."""
        codec = self.codecs[kind]
        version = codec.version if codec.version_of is None else codec.version_of(obj)
        body = {"k": kind.value, "v": version, "d": codec.encode(obj)}
        packed: bytes = msgpack.packb(body, use_bin_type=True)
        return packed

    def decode(self, kind: Kind, data: bytes) -> Any:
        """Unwrap an envelope that must hold ``kind``, upgrading older versions to the current one."""
        what = f"envelope {kind.value}"
        codec = self.codecs.get(kind)
        if codec is None:
            raise DecodeError(what, "no codec registered for this kind")
        try:
            raw = msgpack.unpackb(data, raw=False, strict_map_key=True)
        except (ValueError, TypeError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as e:
            raise DecodeError(what, f"not msgpack ({type(e).__name__}: {e})") from e
        if not isinstance(raw, dict):
            raise DecodeError(what, f"expected a map, got {type(raw).__name__}")
        got_kind = raw.get("k")
        if got_kind != kind.value:
            raise DecodeError(what, f"wrong kind {got_kind!r}")
        version = raw.get("v")
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise DecodeError(what, f"bad version {version!r}")
        if version > codec.version:
            raise SchemaVersionError(what, f"version {version} is newer than the newest known ({codec.version})")
        fields = raw.get("d")
        if not isinstance(fields, dict):
            raise DecodeError(what, "missing field map 'd'")
        while version < codec.version:
            upgrade = codec.upgraders.get(version)
            if upgrade is None:
                raise DecodeError(what, f"no upgrade from version {version}")
            fields = upgrade(fields)
            version += 1
        try:
            return codec.decode(fields)
        except DecodeError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise DecodeError(what, f"malformed fields: {e!r}") from e


STANDARD_REGISTRY = EnvelopeRegistry(
    MappingProxyType(
        {
            Kind.NODE_INVENTORY: KindCodec(
                Kind.NODE_INVENTORY,
                INVENTORY_VERSION,
                inventory_fields,
                inventory_from,
                upgraders={1: inventory_v1_to_v2},
                version_of=inventory_version,
            ),
            Kind.ALLOCATION: KindCodec(Kind.ALLOCATION, 1, allocation_fields, allocation_from),
            Kind.QUOTA_LIMITS: KindCodec(
                Kind.QUOTA_LIMITS,
                QUOTA_VERSION,
                quota_fields,
                quota_from,
                upgraders={1: quota_v1_to_v2},
                version_of=quota_version,
            ),
        }
    )
)
"""The codecs of this release. An immutable constant: nothing registers into it at run time."""


def encode_inventory(inv: NodeInventory) -> bytes:
    """A node's inventory as a deterministic envelope (identical inventories give identical bytes)."""
    return STANDARD_REGISTRY.encode(Kind.NODE_INVENTORY, inv)


def decode_inventory(data: bytes) -> NodeInventory:
    """The inverse of :func:`encode_inventory`; raises DecodeError / SchemaVersionError."""
    inv: NodeInventory = STANDARD_REGISTRY.decode(Kind.NODE_INVENTORY, data)
    return inv


def encode_allocation(alloc: Allocation) -> bytes:
    """A pod's allocation record as a deterministic envelope."""
    return STANDARD_REGISTRY.encode(Kind.ALLOCATION, alloc)


def decode_allocation(data: bytes) -> Allocation:
    """The inverse of :func:`encode_allocation`; raises DecodeError / SchemaVersionError."""
    alloc: Allocation = STANDARD_REGISTRY.decode(Kind.ALLOCATION, data)
    return alloc


def encode_quota_limits(limits: QuotaLimits) -> bytes:
    """A namespace's quota limits as an envelope."""
    return STANDARD_REGISTRY.encode(Kind.QUOTA_LIMITS, limits)


def decode_quota_limits(data: bytes) -> QuotaLimits:
    """The inverse of :func:`encode_quota_limits`; raises DecodeError / SchemaVersionError."""
    limits: QuotaLimits = STANDARD_REGISTRY.decode(Kind.QUOTA_LIMITS, data)
    return limits
