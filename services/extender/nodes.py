"""Full ``Node`` objects (the autoscaler-simulation path of ``/filter``) → NVIDIA inventories, with zero usage.

The rules are the registrar's (differences 1 and 9, §2.3, §2.4): the vendor is registered while the
node's ``hami.io/node-nvidia-register`` decodes and ``status.allocatable[<count resource>] > 0``; a present but
malformed ``hami.io/node-nvidia-score`` unregisters it too; ``hami.io/device-cordon`` lists cordoned UUIDs. A node
that is not registered gets ``node unregistered``, like a NodeNames candidate missing from the snapshot.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shared.codec import annotations as keys
from shared.codec.quantity import parse_quantity
from shared.codec.register import decode_register
from shared.codec.selectors import decode_cordon
from shared.codec.topology import decode_topology
from shared.domain.model import NVIDIA, NodeInventory, NvidiaConfig
from shared.errors import DecodeError

NODE_UNREGISTERED = "node unregistered"
"""HAMi's ``FailedNodes`` text for a candidate without a (healthy) registration."""


def _str_map(obj: Mapping[str, Any], key: str, what: str) -> Mapping[str, Any]:
    value = obj.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise DecodeError(what, f"{key} must be an object, got {type(value).__name__}")
    return value


def node_name(node: Mapping[str, Any]) -> str:
    """``metadata.name`` (the protocol layer already checked it is a non-empty string)."""
    name = _str_map(node, "metadata", "node").get("name")
    if not isinstance(name, str):
        raise DecodeError("node", "metadata.name must be a string")
    return name


def inventory_from_node(node: Mapping[str, Any], cfg: NvidiaConfig) -> NodeInventory:
    """The node's NVIDIA inventory from its annotations; DecodeError (naming the problem) if unregistered."""
    name = node_name(node)
    what = f"node {name}"
    meta = _str_map(node, "metadata", what)
    annotations = _str_map(meta, "annotations", f"{what} metadata")
    register = annotations.get(keys.NODE_NVIDIA_REGISTER)
    if not isinstance(register, str) or not register.strip():
        raise DecodeError(what, f"no {keys.NODE_NVIDIA_REGISTER} annotation")
    allocatable = _str_map(_str_map(node, "status", what), "allocatable", f"{what} status")
    raw_count = allocatable.get(cfg.resource_count_name)
    count = parse_quantity(raw_count, f"{what} allocatable[{cfg.resource_count_name}]") if raw_count is not None else 0
    if count <= 0:
        raise DecodeError(what, f"allocatable {cfg.resource_count_name} is not positive")
    devices = decode_register(register)
    if not devices:
        raise DecodeError(what, "registers no devices")
    scores = annotations.get(keys.NODE_NVIDIA_SCORE)
    pair_scores = decode_topology(scores) if isinstance(scores, str) and scores.strip() else {}
    cordon = annotations.get(keys.DEVICE_CORDON)
    cordoned = decode_cordon(cordon) if isinstance(cordon, str) else frozenset()
    return NodeInventory(node=name, vendor=NVIDIA, devices=devices, pair_scores=pair_scores, cordoned=cordoned)
