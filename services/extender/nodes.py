"""Full ``Node`` objects (the autoscaler-simulation path of ``/filter``) → inventories, with zero usage.

The rules are the registrar's (differences 1 and 9, §2.3, §2.4): the vendor is registered while the
node's ``hami.io/node-nvidia-register`` decodes and ``status.allocatable[<count resource>] > 0``; a present but
malformed ``hami.io/node-nvidia-score`` unregisters it too; ``hami.io/device-cordon`` lists cordoned UUIDs. A node
that is not registered gets ``node unregistered``, like a NodeNames candidate missing from the snapshot. Other
enabled vendors are read by their own ``observe`` (:func:`vendor_inventory_from_node`); a node's devices of every
vendor make one inventory.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.codec.quantity import parse_quantity
from vgpu_scheduler.shared.codec.register import decode_register
from vgpu_scheduler.shared.codec.selectors import decode_cordon
from vgpu_scheduler.shared.codec.topology import decode_topology
from vgpu_scheduler.shared.domain.model import NVIDIA, NodeInventory, NvidiaConfig
from vgpu_scheduler.shared.errors import DecodeError
from vgpu_scheduler.shared.vendors.nvidia import NvidiaVendor
from vgpu_scheduler.shared.vendors.registration import NodeView, Registered
from vgpu_scheduler.shared.vendors.registry import Vendors

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


def vendor_inventory_from_node(node: Mapping[str, Any], vendors: Vendors, now_unix: float) -> NodeInventory:
    """The node's devices of every enabled vendor, in one inventory: NVIDIA's as :func:`inventory_from_node`
    reads them, every other vendor's through its ``observe`` (registration and liveness at ``now_unix``, local
    time). DecodeError when no vendor is registered on the node (NVIDIA's reason when NVIDIA is enabled)."""
    name = node_name(node)
    found: list[NodeInventory] = []
    nvidia_error: DecodeError | None = None
    view: NodeView | None = None
    for vendor in vendors:
        if vendor.name == NVIDIA and isinstance(vendor, NvidiaVendor):
            try:
                found.append(inventory_from_node(node, vendor.config))
            except DecodeError as e:
                nvidia_error = e
            continue
        view = view or NodeView.of(node)
        seen = vendor.observe(view, datetime.fromtimestamp(now_unix).astimezone())
        if isinstance(seen, Registered):
            found.append(seen.inventory)
    if not found:
        raise nvidia_error or DecodeError(f"node {name}", "no enabled vendor registers devices")
    if len(found) == 1:
        return found[0]
    pair_scores: dict[str, Mapping[str, int]] = {}
    for inv in found:
        pair_scores.update(inv.pair_scores)
    return NodeInventory(
        node=name,
        vendor=found[0].vendor,
        devices=tuple(d for inv in found for d in inv.devices),
        pair_scores=pair_scores,
        cordoned=frozenset().union(*(inv.cordoned for inv in found)),
    )
