"""What a simulation found: per-pod results, the cluster's device state afterwards, the summary figures and an audit.

Everything here is computed from API objects (the nodes' register annotations and the pods' allocated device lists,
collapsed as the informer does), never from Redis: the report checks the scheduler, it does not trust it.

Definitions (docs/simulate.md):

* devices are NVIDIA's (its register annotation) and every other enabled vendor's (read by the vendor's own
  registration decode); each pod's charges come from every vendor's allocated list;
* a device is **usable** when its register entry says healthy, its node's allocatable count resource of its vendor
  (``nvidia.com/gpu`` …) is above 0 and it is not listed in the cordon. Utilisation and fragmentation are over
  usable devices, in all (``gpu``) and per vendor (``by_vendor``);
* **memory / core utilisation** = allocated MiB (cores %) over the usable devices' registered totals, counting every
  pod that holds devices at the end (the cluster's running pods included);
* **fragmentation** = the free memory on usable devices that already hold at least one allocation ("stranded":
  usable only by pods that share a card, never by a whole-card request), over all free memory on usable devices
  (``shared.domain.fragmentation.fragmentation``, which ``vgpu-scheduler usage`` uses too);
* **nodes touched** = distinct nodes that received at least one workload pod.

The text form of these results is :mod:`.render`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.codec.podannotations import NVIDIA_READER, AllocatedReader, decode_allocation
from vgpu_scheduler.shared.codec.quantity import parse_quantity
from vgpu_scheduler.shared.codec.reasons import parse_reason
from vgpu_scheduler.shared.codec.register import decode_register
from vgpu_scheduler.shared.codec.selectors import decode_cordon
from vgpu_scheduler.shared.domain.accounting import collapse
from vgpu_scheduler.shared.domain.fragmentation import fragmentation
from vgpu_scheduler.shared.domain.model import NvidiaConfig
from vgpu_scheduler.shared.errors import DecodeError
from vgpu_scheduler.shared.k8s.nodefit import node_reasons
from vgpu_scheduler.shared.vendors.base import Vendor
from vgpu_scheduler.shared.vendors.registration import NodeView, Registered
from vgpu_scheduler.shared.vendors.registry import Vendors

KubeObject = dict[str, Any]

ADMISSION = "*"
"""The ``reasons`` key used when a pod never reached the nodes (admission denied, or the filter answered Error)."""

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})

NVIDIA = "NVIDIA"


@dataclass(frozen=True, slots=True)
class PodResult:
    """One workload pod's outcome. ``node`` is None when it was not placed; then ``reasons`` says why."""

    namespace: str
    name: str
    node: str | None
    annotations: Mapping[str, str] = field(default_factory=dict)
    reasons: Mapping[str, str] = field(default_factory=dict)
    node_policy: str = ""
    gpu_policy: str = ""
    gpu: bool = True
    """Whether the pod asks for a GPU at all (a CPU-only pod passes through the extender)."""
    other: tuple[str, ...] = ()
    """Extended resources the pod asks for that no enabled vendor manages: kube-scheduler alone placed it, fitting
    them against the node's allocatable."""
    priority: int = 0
    """``spec.priority`` as the Priority admission resolved it."""
    pod_group: str | None = None
    """The PodGroup it names (``spec.schedulingGroup.podGroupName``), if any."""
    evicted: bool = False
    """It was placed, then deleted by a preemption (``reasons`` names its node); it holds nothing at the end."""
    preempted_by: str | None = None
    """``namespace/name`` of the pod it was preempted for, when the extender's ``Preempted`` Event says."""
    via_eviction_api: bool = False
    """``evicted`` through the Eviction API (an operator's drain, a defrag move), not by a preemption."""
    owner: str | None = None
    """Its controller, ``<kind>/<name>`` (None: a bare pod)."""
    replaces: str | None = None
    """A controller's replacement: the ``namespace/name`` of the deleted pod it replaces."""
    replaced_by: str | None = None
    """Deleted, then replaced by its controller: the replacement's ``namespace/name``."""

    @property
    def placed(self) -> bool:
        return self.node is not None

    def to_json(self) -> dict[str, Any]:
        """The interface shape: ``namespace``, ``name``, ``node``, ``annotations``, ``reasons``; added:
        ``priority``, ``pod_group``, ``preempted_by``, then ``evicted``, ``owner``, ``replaces``, ``replaced_by``."""
        return {
            "namespace": self.namespace,
            "name": self.name,
            "node": self.node,
            "annotations": dict(sorted(self.annotations.items())),
            "reasons": dict(sorted(self.reasons.items())),
            "priority": self.priority,
            "pod_group": self.pod_group,
            "preempted_by": self.preempted_by,
            "evicted": self.via_eviction_api,
            "owner": self.owner,
            "replaces": self.replaces,
            "replaced_by": self.replaced_by,
        }


@dataclass(frozen=True, slots=True)
class Preemption:
    """One pod evicted by a preemption: who, where, for whom, and when (seconds after the run began)."""

    pod: str
    node: str
    by: str | None
    priority: int
    at_s: float
    workload: bool
    """A pod of the workload (else one of the cluster file's running pods)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "pod": self.pod,
            "node": self.node,
            "by": self.by,
            "priority": self.priority,
            "at_s": self.at_s,
            "workload": self.workload,
        }


@dataclass(slots=True)
class DeviceState:
    """One registered GPU at the end of a run: capacity and what the holding pods' annotations charge to it."""

    node: str
    uuid: str
    type: str
    count: int
    devmem_mib: int
    devcore: int
    usable: bool
    used: int = 0
    used_mem_mib: int = 0
    used_cores: int = 0
    vendor: str = NVIDIA
    """The device's vendor (HAMi's common word: ``NVIDIA``, ``DCU``, ``MLU``, ``AMD``, ``Ascend910B3`` …)."""

    @property
    def free_mem_mib(self) -> int:
        return max(self.devmem_mib - self.used_mem_mib, 0)


def _annotations(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata") or {}
    annos = meta.get("annotations") if isinstance(meta, Mapping) else None
    return annos if isinstance(annos, Mapping) else {}


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def _allocatable_count(node: Mapping[str, Any], resource: str) -> int:
    status = node.get("status") or {}
    raw = (status.get("allocatable") or {}).get(resource) if isinstance(status, Mapping) else None
    if raw is None:
        return 0
    try:
        return int(parse_quantity(raw, resource))
    except DecodeError:
        return 0


def holds_devices(pod: Mapping[str, Any]) -> bool:
    """A pod holds devices while it carries ``hami.io/vgpu-node`` and has not terminated (hami-wire §5.4)."""
    phase = (pod.get("status") or {}).get("phase", "")
    return keys.VGPU_NODE in _annotations(pod) and phase not in TERMINAL_PHASES


def _nvidia_devices(node: Mapping[str, Any], count_resource: str) -> list[DeviceState]:
    """The node's NVIDIA GPUs from ``hami.io/node-nvidia-register`` (none when absent or malformed)."""
    name = _name(node)
    annos = _annotations(node)
    register = annos.get(keys.NODE_NVIDIA_REGISTER)
    if not isinstance(register, str):
        return []
    try:
        devices = decode_register(register)
    except DecodeError:
        return []
    cordoned = decode_cordon(str(annos.get(keys.DEVICE_CORDON, "")))
    alive = _allocatable_count(node, count_resource) > 0
    return [
        DeviceState(
            node=name,
            uuid=d.id,
            type=d.type,
            count=d.count,
            devmem_mib=d.devmem_mib,
            devcore=d.devcore,
            usable=d.health and alive and d.id not in cordoned,
        )
        for d in devices
    ]


def _vendor_devices(node: Mapping[str, Any], vendor: Vendor, now: datetime) -> list[DeviceState]:
    """``vendor``'s devices on the node as its registration reads them (:meth:`Vendor.observe`, the registrar's
    own decode); usable when healthy, not cordoned and the vendor's count resource is allocatable."""
    observed = vendor.observe(NodeView.of(node), now)
    if not isinstance(observed, Registered):
        return []
    inventory = observed.inventory
    alive = _allocatable_count(node, vendor.resources.count) > 0
    return [
        DeviceState(
            node=_name(node),
            uuid=d.id,
            type=d.type,
            count=d.count,
            devmem_mib=d.devmem_mib,
            devcore=d.devcore,
            usable=d.health and alive and d.id not in inventory.cordoned,
            vendor=vendor.name,
        )
        for d in inventory.devices
    ]


def device_states(
    nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    cfg: NvidiaConfig | None = None,
    vendors: Vendors | None = None,
) -> dict[tuple[str, str], DeviceState]:
    """Every registered device keyed by (node, uuid), with the usage of every pod holding devices.

    NVIDIA GPUs come from their register annotation; every other enabled vendor's devices (``vendors``; None:
    NVIDIA only) from that vendor's own registration decode, and each pod's charges from every vendor's
    allocated annotation. A device ID a vendor listed earlier already has on the node is skipped, as the
    registrar skips it. A pod's charge on a device its node does not list (or on an unknown node) is kept under a
    placeholder with zero capacity, so the audit reports it instead of losing it.
    """
    count_resource = (cfg or NvidiaConfig()).resource_count_name
    others = [v for v in vendors or () if v.name != NVIDIA]
    now = datetime.now()  # naive local time, as the handshake codec expects
    states: dict[tuple[str, str], DeviceState] = {}
    for node in nodes:
        found = _nvidia_devices(node, count_resource)
        for vendor in others:
            found += _vendor_devices(node, vendor, now)
        for dev in found:
            states.setdefault((dev.node, dev.uuid), dev)
    readers: tuple[AllocatedReader, ...] = tuple(vendors) if vendors is not None else (NVIDIA_READER,)
    for pod in pods:
        if not holds_devices(pod):
            continue
        node_name = str(_annotations(pod).get(keys.VGPU_NODE))
        decoded = decode_allocation(pod, readers)
        if decoded is None:
            continue
        devices_, mig = decoded
        init_count = len((pod.get("spec") or {}).get("initContainers") or [])
        for charge in collapse(devices_, init_count, mig):
            state = states.get((node_name, charge.uuid))
            if state is None:
                state = DeviceState(node_name, charge.uuid, "?", 0, 0, 0, usable=False)
                states[(node_name, charge.uuid)] = state
            state.used += charge.slots
            state.used_mem_mib += charge.mem_mib
            state.used_cores += charge.cores_pct
    return states


def audit(states: Mapping[tuple[str, str], DeviceState]) -> list[str]:
    """Every device whose charged slots, memory or cores exceed its registered capacity (empty: all is well)."""
    problems = []
    for (node, uuid), s in sorted(states.items()):
        over = []
        if s.used > s.count:
            over.append(f"slots {s.used}/{s.count}")
        if s.used_mem_mib > s.devmem_mib:
            over.append(f"memory {s.used_mem_mib}/{s.devmem_mib} MiB")
        if s.used_cores > s.devcore:
            over.append(f"cores {s.used_cores}/{s.devcore}%")
        if over:
            problems.append(f"{node} {uuid}: " + ", ".join(over))
    return problems


def _ratio(num: int, den: int) -> float:
    return round(num / den, 4) if den else 0.0


def policy_label(node_policy: str, gpu_policy: str) -> str:
    """``<node>/<gpu>``, e.g. ``binpack/topology-aware``."""
    return f"{node_policy}/{gpu_policy}"


def summarize(
    results: Sequence[PodResult],
    states: Mapping[tuple[str, str], DeviceState],
    *,
    node_policy: str,
    gpu_policy: str,
    preemptions: Sequence[Preemption] = (),
    gangs: Mapping[tuple[str, str], int] | None = None,
    controllers: Mapping[str, Any] | None = None,
    evictions: Sequence[Mapping[str, Any]] = (),
    replacements: Sequence[PodResult] = (),
) -> dict[str, Any]:
    """The ``summary`` object of the JSON output (see the module docstring for the definitions). ``preemptions``:
    every pod a preemption evicted; ``gangs``: each native gang's ``minCount``; ``controllers``: what the
    controllers recreated (:func:`controllers_json`); ``evictions``: the Eviction API requests; ``replacements``: the
    pods the controllers created (a preemptor may be one)."""
    placed = [r for r in results if r.placed]
    evicted = [r for r in results if r.evicted]
    by_api = [r for r in evicted if r.via_eviction_api]
    by_policy: dict[str, dict[str, int]] = {}
    for r in results:
        row = by_policy.setdefault(policy_label(r.node_policy, r.gpu_policy), {"pods": 0, "placed": 0, "pending": 0})
        row["pods"] += 1
        row["placed" if r.placed else "pending"] += 1
    usable = [s for s in states.values() if s.usable]
    vendor_names = list(dict.fromkeys(s.vendor for s in sorted(states.values(), key=_vendor_order)))
    reasons: Counter[str] = Counter()
    for r in results:
        if not r.placed and not r.evicted:
            reasons.update(reason_types(r.reasons))
    return {
        "pods": len(results),
        "placed": len(placed),
        "pending": len(results) - len(placed) - len(evicted),
        "preempted": len(evicted) - len(by_api),
        "evicted": len(by_api),
        "policies": {"node": node_policy, "gpu": gpu_policy},
        "by_policy": {k: by_policy[k] for k in sorted(by_policy)},
        "gpu": _device_figures(usable),
        "by_vendor": {name: _vendor_figures([s for s in usable if s.vendor == name]) for name in vendor_names},
        "fragmentation": fragmentation(usable).to_json(),
        "nodes_touched": len({r.node for r in placed if r.gpu}),
        "nodes_in_use": len({s.node for s in states.values() if s.used > 0}),
        "pending_reasons": dict(sorted(reasons.items())),
        "over_capacity": audit(states),
        "preemption": _preemption_json([*results, *replacements], preemptions),
        "gangs": _gangs_json(results, gangs or {}),
        "controllers": dict(controllers) if controllers is not None else controllers_json(results, (), ()),
        "evictions": {
            "requested": len(evictions),
            "evicted": sum(1 for e in evictions if e["evicted"]),
            "refused": sum(1 for e in evictions if not e["evicted"]),
            "requests": list(evictions),
        },
    }


def controllers_json(
    results: Sequence[PodResult], replacements: Sequence[PodResult], recreations: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """What the controllers did: the workload pods they own, the owned pods deleted (by a preemption or an
    eviction), the replacements created and where they ended (``placed``, ``pending``, ``preempted``,
    ``evicted``: each replacement once, by its final state), and every deletion with its replacement or why none
    (``recreations``)."""
    ended = Counter(
        "evicted" if r.via_eviction_api else "preempted" if r.evicted else "placed" if r.placed else "pending"
        for r in replacements
    )
    return {
        "owned_pods": sum(1 for r in results if r.owner is not None),
        "deleted": len(recreations),
        "recreated": sum(1 for r in recreations if r["replacement"] is not None),
        "replacements": {k: ended.get(k, 0) for k in ("placed", "pending", "preempted", "evicted")},
        "recreations": list(recreations),
    }


def _vendor_figures(usable: Sequence[DeviceState]) -> dict[str, Any]:
    """:func:`_device_figures` and the vendor's own fragmentation."""
    return {**_device_figures(usable), "fragmentation": fragmentation(usable).to_json()}


def _preemption_json(results: Sequence[PodResult], preemptions: Sequence[Preemption]) -> dict[str, Any]:
    """``evictions`` in order; ``preemptors``: each pod that evicted others, its priority, node and victims."""
    by_key = {f"{r.namespace}/{r.name}": r for r in results}
    preemptors: dict[str, dict[str, Any]] = {}
    for e in preemptions:
        if e.by is None:
            continue
        r = by_key.get(e.by)
        row = preemptors.setdefault(
            e.by,
            {"priority": r.priority if r else None, "node": r.node if r else None, "victims": []},
        )
        row["victims"] = sorted([*row["victims"], e.pod])
    return {"evictions": [e.to_json() for e in preemptions], "preemptors": preemptors}


def _gangs_json(results: Sequence[PodResult], gangs: Mapping[tuple[str, str], int]) -> dict[str, Any]:
    """Per native gang (``namespace/name``): ``min_count``, ``members`` in the workload, ``bound`` at the end."""
    out: dict[str, Any] = {}
    for (ns, name), min_count in sorted(gangs.items()):
        members = [r for r in results if r.namespace == ns and r.pod_group == name]
        out[f"{ns}/{name}"] = {
            "min_count": min_count,
            "members": len(members),
            "bound": sum(1 for r in members if r.placed),
        }
    return out


def _vendor_order(state: DeviceState) -> tuple[bool, str]:
    """NVIDIA first, then the other vendors by name."""
    return state.vendor != NVIDIA, state.vendor


def _device_figures(usable: Sequence[DeviceState]) -> dict[str, Any]:
    """Devices, memory and cores of ``usable`` devices: totals, allocated and utilisation."""
    mem_total = sum(s.devmem_mib for s in usable)
    mem_used = sum(min(s.used_mem_mib, s.devmem_mib) for s in usable)
    cores_total = sum(s.devcore for s in usable)
    cores_used = sum(min(s.used_cores, s.devcore) for s in usable)
    return {
        "devices": len(usable),
        "devices_used": sum(1 for s in usable if s.used > 0),
        "memory_mib": mem_total,
        "memory_allocated_mib": mem_used,
        "memory_utilisation": _ratio(mem_used, mem_total),
        "cores": cores_total,
        "cores_allocated": cores_used,
        "core_utilisation": _ratio(cores_used, cores_total),
    }


def reason_types(reasons: Mapping[str, str]) -> set[str]:
    """The reason words of a pod's ``reasons`` (``CardInsufficientMemory``, ``node unregistered``, ``admission``)."""
    out: set[str] = set()
    for key, text in reasons.items():
        if key == ADMISSION:
            out.add(text)
            continue
        try:
            entries = parse_reason(text)
        except DecodeError:
            # a plain message such as "node unregistered", or kube-scheduler's own ("Insufficient cpu, ...")
            out.update(node_reasons(text))
            continue
        out.update(rc.reason for rc in entries)
    return out
