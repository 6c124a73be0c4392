"""Node pools: many Nodes of any vendor described in a few lines of a cluster file.

A ``NodePool`` document stands for ``spec.nodes`` identical Nodes named ``<metadata.name>-01``, ``-02`` …; each
entry of ``spec.devices`` puts ``count`` devices of one vendor on every node, so a node may mix vendors::

    apiVersion: v1
    kind: NodePool
    metadata:
      name: npu-910b            # the nodes are npu-910b-01, npu-910b-02
      labels: {accelerator: ascend}
    spec:
      nodes: 2
      devices:
      - vendor: Ascend910B3     # HAMi's common word: NVIDIA, DCU, MLU, AMD, Ascend910A, Ascend910B3, Ascend310P …
        count: 8                # devices per node
        memory: 65536           # per device: MiB, or a quantity such as 64Gi
        cores: 100              # per device (default 100)
        type: Ascend910B3       # the device type the plugin reports (default: the vendor's word)
        split: 10               # slots per device (HAMi's deviceSplitCount; default 10)
      allocatable: {cpu: "64", memory: 512Gi, pods: "110"}   # the node's other resources (these are the defaults)

Every node gets exactly what each vendor's device plugin writes on a Node — the register annotations, the
``status.capacity``/``allocatable`` count resources and labels of the vendor modules' ``registration_annotations``
/ ``node_capacity`` / ``node_labels`` helpers (NVIDIA: ``hami.io/node-nvidia-register`` in HAMi's JSON, mode
``hami-core``) — so the registrar decodes them on the same path as a real node's. Cambricon cards register from
node capacity: 100 cores and 100 slots per card, memory a whole number of 256 MiB units, one type per node.

Resource names are those of the enabled vendors (the device config); a pool of a vendor the device config does
not enable is still built (with HAMi's default names) but the registrar will leave its devices out, and the loader
says so. Device IDs are made up and stable: ``GPU-``/``DCU-``/``AMD-``/``NPU-`` + a UUID derived from the node,
vendor and index (Cambricon's are HAMi's own ``<node>-cambricon-mlu-<index>``).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from vgpu_scheduler.services.simulate.documents import type_name
from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.codec.quantity import parse_quantity
from vgpu_scheduler.shared.codec.register import encode_register_json
from vgpu_scheduler.shared.domain.model import DeviceInfo
from vgpu_scheduler.shared.errors import DecodeError
from vgpu_scheduler.shared.vendors import amd, ascend, awsneuron, cambricon, hygon
from vgpu_scheduler.shared.vendors.base import Vendor
from vgpu_scheduler.shared.vendors.catalog import all_vendors
from vgpu_scheduler.shared.vendors.nvidia import NvidiaVendor
from vgpu_scheduler.shared.vendors.registry import Vendors

KubeObject = dict[str, Any]

KIND = "NodePool"
DEFAULT_ALLOCATABLE: Mapping[str, str] = {"cpu": "64", "memory": "512Gi", "pods": "110"}
DEFAULT_SPLIT = 10
DEFAULT_CORES = 100
MAX_NODES = 10_000
MAX_DEVICES = 1_024
NEURON_INSTANCE_TYPE = "inf2.48xlarge"
"""The instance type (``node.kubernetes.io/instance-type``) of a Neuron group that names none: Inferentia2."""
NEURON_CORES = 2
"""NeuronCores per device of a Neuron group that gives no ``cores`` (Inferentia2, Trainium; Inferentia1 has 4)."""

_SPEC_KEYS = frozenset({"nodes", "devices", "allocatable"})
_DEVICE_KEYS = frozenset({"vendor", "count", "memory", "cores", "type", "split"})
_ID_NAMESPACE = uuid.UUID("6f1d3c52-8f8e-4c1e-9d43-0b7c6c1f5a10")
_ID_PREFIX: Mapping[str, str] = {"NVIDIA": "GPU", hygon.NAME: "DCU", amd.NAME: "AMD"}

ALL_VENDORS: Vendors = all_vendors()
"""Every vendor this build knows, with HAMi's default names (every Ascend chip of the chart's defaults)."""


@runtime_checkable
class SimulatedPlugin(Protocol):
    """A vendor whose module says what its device plugin writes on a Node (the vendors added after the first
    five register through this one hook): (annotations, capacity, labels)."""

    def node_registration(
        self, devices: Sequence[DeviceInfo]
    ) -> tuple[dict[str, str], dict[str, str], dict[str, str]]: ...


class PoolError(ValueError):
    """A bad NodePool: ``field`` (relative to the document) and the problem."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


@dataclass(frozen=True, slots=True)
class DeviceGroup:
    """One ``spec.devices`` entry: ``count`` devices of ``vendor`` on every node of the pool."""

    vendor: str
    count: int
    memory_mib: int
    cores: int
    type: str
    split: int


@dataclass(frozen=True, slots=True)
class Expanded:
    """A pool's Nodes, and the vendors of its devices the device config does not enable."""

    nodes: tuple[KubeObject, ...]
    disabled: tuple[str, ...] = ()


def _int(m: Mapping[str, Any], key: str, field: str, default: int | None, *, lo: int, hi: int) -> int:
    value = m.get(key, default)
    if value is None:
        raise PoolError(field, "missing (a whole number is required)")
    if isinstance(value, bool) or not isinstance(value, int):
        raise PoolError(field, f"expected a whole number, got {type_name(value)}")
    if not lo <= value <= hi:
        raise PoolError(field, f"expected {lo} to {hi}, got {value}")
    return value


def _memory_mib(value: object, field: str) -> int:
    """An integer is MiB; a string is a quantity in bytes (``64Gi``), which must be a whole number of MiB."""
    if value is None:
        raise PoolError(field, "missing (MiB per device, or a quantity such as 64Gi)")
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise PoolError(field, f"expected MiB or a quantity such as 64Gi, got {type_name(value)}")
    if isinstance(value, int):
        mib = value
    else:
        try:
            q = parse_quantity(value, field)
        except DecodeError as e:
            raise PoolError(field, e.detail) from None
        if q % 2**20:
            raise PoolError(field, f"{value!r} is not a whole number of MiB")
        mib = int(q // 2**20)
    if not 1 <= mib <= 2**31 - 1:
        raise PoolError(field, f"expected 1 MiB to {2**31 - 1} MiB per device, got {mib}")
    return mib


def _vendor_of(name: object, field: str, vendors: Vendors) -> Vendor:
    if not isinstance(name, str) or not name:
        raise PoolError(field, "missing (a vendor's common word such as NVIDIA, DCU, MLU, AMD, Ascend910B3)")
    for pool in (vendors, ALL_VENDORS):
        for v in pool:
            if v.name.lower() == name.lower():
                return v
    known = ", ".join(v.name for v in ALL_VENDORS)
    raise PoolError(field, f"unknown vendor {name!r} (known: {known})")


def _group(item: object, field: str, vendors: Vendors) -> DeviceGroup:
    if not isinstance(item, dict):
        raise PoolError(field, f"expected a mapping, got {type_name(item)}")
    unknown = sorted(str(k) for k in item if k not in _DEVICE_KEYS)
    if unknown:
        raise PoolError(f"{field}.{unknown[0]}", f"unknown key (expected {', '.join(sorted(_DEVICE_KEYS))})")
    vendor = _vendor_of(item.get("vendor"), f"{field}.vendor", vendors)
    count = _int(item, "count", f"{field}.count", None, lo=1, hi=MAX_DEVICES)
    if vendor.name == awsneuron.NAME:
        return _neuron_group(item, field, count)
    memory = _memory_mib(item.get("memory"), f"{field}.memory")
    kind = item.get("type", vendor.name)
    if not isinstance(kind, str) or not kind.strip() or any(c in kind for c in ",:;"):
        raise PoolError(f"{field}.type", f"expected a device type without ',', ':' or ';', got {kind!r}")
    if vendor.name == cambricon.MLU:
        if item.get("cores", cambricon.CARD_CORES) != cambricon.CARD_CORES:
            raise PoolError(f"{field}.cores", f"a Cambricon card registers {cambricon.CARD_CORES} cores")
        if "split" in item:
            raise PoolError(f"{field}.split", "Cambricon cards register from node capacity: no split to set")
        if memory % cambricon.MEMORY_UNIT_MIB:
            raise PoolError(f"{field}.memory", f"{memory} MiB is not a whole number of 256 MiB units (Cambricon)")
        if cambricon.MLU not in kind.upper():
            raise PoolError(f"{field}.type", f"a Cambricon type names the MLU (e.g. MLU370-X8), got {kind!r}")
        return DeviceGroup(vendor.name, count, memory, cambricon.CARD_CORES, kind.strip(), cambricon.CARD_CORES)
    cores = _int(item, "cores", f"{field}.cores", DEFAULT_CORES, lo=0, hi=100)
    split = _int(item, "split", f"{field}.split", DEFAULT_SPLIT, lo=1, hi=1_000)
    return DeviceGroup(vendor.name, count, memory, cores, kind.strip(), split)


def _neuron_group(item: Mapping[str, Any], field: str, count: int) -> DeviceGroup:
    """An AWS Neuron group: ``cores`` NeuronCores per device (default 2; each core is a slot) and ``type``, the
    node's instance type (default Inferentia2's ``inf2.48xlarge``); a Neuron device registers no memory."""
    for key in ("memory", "split"):
        if key in item:
            raise PoolError(f"{field}.{key}", "AWS Neuron devices register from node capacity: no memory or split")
    cores = _int(item, "cores", f"{field}.cores", NEURON_CORES, lo=1, hi=64)
    kind = item.get("type", NEURON_INSTANCE_TYPE)
    if not isinstance(kind, str) or not kind.strip() or any(c in kind for c in ",:;"):
        raise PoolError(f"{field}.type", f"expected an instance type such as inf2.48xlarge, got {kind!r}")
    return DeviceGroup(awsneuron.NAME, count, 0, cores, kind.strip(), cores)


def parse_pool(doc: Mapping[str, Any], vendors: Vendors) -> tuple[int, tuple[DeviceGroup, ...], dict[str, Any]]:
    """``spec``: (node count, device groups, allocatable). PoolError names the field."""
    spec = doc.get("spec")
    if not isinstance(spec, dict):
        raise PoolError("spec", f"expected a mapping, got {type_name(spec)}")
    unknown = sorted(str(k) for k in spec if k not in _SPEC_KEYS)
    if unknown:
        raise PoolError(f"spec.{unknown[0]}", f"unknown key (expected {', '.join(sorted(_SPEC_KEYS))})")
    nodes = _int(spec, "nodes", "spec.nodes", 1, lo=1, hi=MAX_NODES)
    items = spec.get("devices")
    if not isinstance(items, list) or not items:
        raise PoolError("spec.devices", "a pool needs a non-empty list of device groups")
    groups = tuple(_group(item, f"spec.devices[{i}]", vendors) for i, item in enumerate(items))
    mlu = [g for g in groups if g.vendor == cambricon.MLU]
    if len(mlu) > 1 and len({(g.type, g.memory_mib) for g in mlu}) > 1:
        raise PoolError("spec.devices", "the Cambricon cards of a node share one type and one memory size")
    neuron = [g for g in groups if g.vendor == awsneuron.NAME]
    if len(neuron) > 1 and len({(g.type, g.cores) for g in neuron}) > 1:
        raise PoolError("spec.devices", "the Neuron devices of a node share one instance type and one core count")
    allocatable = spec.get("allocatable", DEFAULT_ALLOCATABLE)
    if not isinstance(allocatable, dict):
        raise PoolError("spec.allocatable", f"expected a mapping, got {type_name(allocatable)}")
    for name, q in allocatable.items():
        if isinstance(q, bool) or not isinstance(q, str | int):
            raise PoolError(f"spec.allocatable[{name}]", f"expected a quantity, got {type_name(q)}")
        try:
            parse_quantity(q, str(name))
        except DecodeError as e:
            raise PoolError(f"spec.allocatable[{name}]", e.detail) from None
    return nodes, groups, {str(k): str(v) for k, v in allocatable.items()}


def _device_id(node: str, vendor: str, index: int) -> str:
    prefix = _ID_PREFIX.get(vendor, "NPU")
    return f"{prefix}-{uuid.uuid5(_ID_NAMESPACE, f'{node}/{vendor}/{index}')}"


def node_devices(node: str, groups: Sequence[DeviceGroup]) -> dict[str, list[DeviceInfo]]:
    """Every vendor's devices of one node of the pool (indexes count per vendor, in group order)."""
    out: dict[str, list[DeviceInfo]] = {}
    for g in groups:
        devices = out.setdefault(g.vendor, [])
        for _ in range(g.count):
            i = len(devices)
            mlu = g.vendor == cambricon.MLU
            if g.vendor == awsneuron.NAME:  # HAMi's own ids; the instance type is the devices' mode
                mask = awsneuron.core_mask(g.cores)
                devices.append(
                    DeviceInfo(
                        f"{node}-{g.vendor}-{i}", i, g.cores, 0, mask, g.vendor, 0, g.type, True, vendor=g.vendor
                    )
                )
                continue
            dev_id = f"{node}-cambricon-mlu-{i}" if mlu else _device_id(node, g.vendor, i)
            mode = "hami-core" if g.vendor == "NVIDIA" else ""
            devices.append(
                DeviceInfo(dev_id, i, g.split, g.memory_mib, g.cores, g.type, 0, mode, True, vendor=g.vendor)
            )
    return out


def registration(
    vendor: Vendor, devices: Sequence[DeviceInfo]
) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """What ``vendor``'s device plugin writes on a Node for ``devices``: (annotations, capacity, labels)."""
    devs = tuple(devices)
    if isinstance(vendor, NvidiaVendor):
        return (
            {keys.NODE_NVIDIA_REGISTER: encode_register_json(devs)},
            {vendor.resources.count: str(sum(d.count for d in devs))},
            {},
        )
    if isinstance(vendor, hygon.HygonVendor):
        return hygon.registration_annotations(devs), hygon.node_capacity(devs, vendor.config), {}
    if isinstance(vendor, amd.AmdVendor):
        return amd.registration_annotations(devs), amd.node_capacity(devs, vendor.config), {}
    if isinstance(vendor, cambricon.CambriconVendor):
        return (
            cambricon.registration_annotations(devs),
            cambricon.node_capacity(devs, vendor),
            cambricon.node_labels(devs),
        )
    if isinstance(vendor, ascend.AscendVendor):
        names = {vendor.name: vendor.resources.count}
        return ascend.registration_annotations(devs), ascend.node_capacity(devs, names), {}
    if isinstance(vendor, SimulatedPlugin):
        return vendor.node_registration(devs)
    raise PoolError("spec.devices", f"vendor {vendor.name} has no simulated device plugin")


def expand_pool(doc: Mapping[str, Any], vendors: Vendors) -> Expanded:
    """The Nodes of a checked NodePool document (its envelope checked by the loader). PoolError names the field."""
    nodes, groups, allocatable = parse_pool(doc, vendors)
    meta = doc.get("metadata") or {}
    pool = str(meta["name"])
    labels = dict(meta.get("labels") or {})
    annotations = dict(meta.get("annotations") or {})
    width = max(2, len(str(nodes)))
    enabled = {v.name for v in vendors}
    out: list[KubeObject] = []
    for n in range(1, nodes + 1):
        name = f"{pool}-{n:0{width}d}"
        node_annos = dict(annotations)
        node_labels = {**labels, "kubernetes.io/hostname": name}
        capacity = dict(allocatable)
        for vendor_name, devices in node_devices(name, groups).items():
            vendor = _vendor_of(vendor_name, "spec.devices", vendors)
            try:
                annos, cap, vendor_labels = registration(vendor, devices)
            except (ValueError, DecodeError) as e:
                raise PoolError("spec.devices", f"{vendor_name}: {e}") from None
            node_annos.update(annos)
            capacity.update(cap)
            node_labels.update(vendor_labels)
        out.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": node_labels, "annotations": node_annos},
                "status": {"capacity": dict(capacity), "allocatable": dict(capacity)},
            }
        )
    disabled = tuple(dict.fromkeys(g.vendor for g in groups if g.vendor not in enabled))
    return Expanded(tuple(out), disabled)
