"""The end-of-scenario audit, from the API server's objects only (pods, nodes, resource quotas), plus the device
plugin's failure count and the project processes' exit codes.

Two kinds of finding, raised as two exception types so a scenario can expect one and never hide the other:

* :class:`CorrectnessError` — a device over capacity (slots, memory, cores, recomputed from the pods'
  allocation annotations of every vendor), an AWS Neuron core held twice (the core masks of the pods on one
  device, and of one pod's app containers, overlap), a bound pod without a decodable allocation on its node, a vendor's
  keys missing or not in HAMi's format (the allocated list of every vendor the pod asks for, re-encoding to the
  same text, serving each container its count, naming only that vendor's devices registered on the node; the
  to-allocate list emptied by the plugin), devices of a vendor the pod did not ask for, a pending pod left with
  an allocation, a device-plugin failure, a crashed process. Always a test failure.
* :class:`Collapse` — liveness: a pod left pending although something could fit it (checked with the
  scheduling core, exhaustively, on the final state, with every enabled vendor's rules; the pending members of a
  PodGroup together, one after another, as kube-scheduler binds a gang whole or not at all), a bound pod never
  settled (an ended pod's bind phase is not looked at: a kubelet that refuses a pod at admission ends it still
  ``allocating``), a node lock left behind (HAMi's or Cambricon's).

Nodes are read with every enabled vendor's registration (:func:`shared.vendors.catalog.observe_node`), as the
registrar reads them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tests.audit import quota_usage_from_pods
from vgpu_scheduler.services.informer.quotas import combine, read_quota
from vgpu_scheduler.services.simulate.devplugin import allocation_problems
from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.codec.gang import pod_group_name
from vgpu_scheduler.shared.codec.podannotations import decode_allocation, is_valid_label_value, split_by_vendor
from vgpu_scheduler.shared.codec.poddevices import align_to_containers
from vgpu_scheduler.shared.codec.resources import pod_containers
from vgpu_scheduler.shared.domain.accounting import collapse
from vgpu_scheduler.shared.domain.model import (
    DEFAULT_NVIDIA_CONFIG,
    DeviceInfo,
    DeviceUsage,
    NodeInventory,
    NvidiaConfig,
    PodConstraints,
    PodDevices,
    PodRequest,
)
from vgpu_scheduler.shared.domain.plan import Decision, apply_decision, plan
from vgpu_scheduler.shared.domain.quota import QuotaState
from vgpu_scheduler.shared.domain.scoring import Policies
from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot
from vgpu_scheduler.shared.errors import DecodeError, VgpuError
from vgpu_scheduler.shared.vendors import awsneuron, cambricon
from vgpu_scheduler.shared.vendors.base import NodeLockKind, Vendor
from vgpu_scheduler.shared.vendors.catalog import NVIDIA_ONLY_VENDORS, observe_node
from vgpu_scheduler.shared.vendors.pods import (
    BindPodAnnotations,
    ExtraPodAnnotations,
    decode_vendor_constraints,
    vendors_manage_pod,
    vendors_pod_request,
)
from vgpu_scheduler.shared.vendors.registration import NodeView
from vgpu_scheduler.shared.vendors.registry import Vendors

NVIDIA = "NVIDIA"
_LOCKS = (keys.NODE_LOCK, NodeLockKind.CAMBRICON.value)
_TERMINAL = ("Succeeded", "Failed")


class CorrectnessError(AssertionError):
    """The system did something wrong: never expected, never xfailed."""


class Collapse(AssertionError):
    """The system did not finish: pods left pending that could fit, binds never settled, locks left behind."""


@dataclass
class AuditReport:
    pods: int = 0
    bound: int = 0
    unschedulable: int = 0
    correctness: list[str] = field(default_factory=list)
    liveness: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    fits: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """The liveness findings of pending work as data: a pending pod (``<ns>/<name>``) or gang (``<ns>/<group>``)
    something fits → the nodes the scheduling core placed it on."""
    by_vendor: dict[str, int] = field(default_factory=dict)
    """Bound pods per vendor they asked for (a pod asking two vendors counts for both)."""

    def summary(self) -> str:
        return (
            f"{self.bound}/{self.pods} bound, {self.unschedulable} rightly unschedulable, "
            f"{len(self.correctness)} correctness and {len(self.liveness)} liveness findings"
        )

    def check(self) -> None:
        """Raise CorrectnessError on any correctness finding, then Collapse on any liveness finding."""
        if self.correctness:
            raise CorrectnessError(self.summary() + ":\n" + "\n".join(self.correctness[:30]))
        if self.liveness:
            raise Collapse(self.summary() + ":\n" + "\n".join(self.liveness[:30]))


def _inventory(node: Mapping[str, Any], vendors: Vendors, report: AuditReport) -> NodeInventory | None:
    """The node's merged inventory, every enabled vendor's registration read as the registrar reads it."""
    observed = observe_node(vendors, NodeView.of(node), datetime.now())
    name = observed.node
    for vendor, obs in observed.observations.items():
        error = getattr(obs, "error", None)
        if error is not None:
            report.correctness.append(f"node {name}: unreadable {vendor} registration: {error}")
    for clash in observed.merged.collisions:
        report.correctness.append(f"node {name}: {clash.message}")
    return observed.merged.inventory


def _asked(pod: Mapping[str, Any], vendors: Vendors) -> tuple[Vendor, ...]:
    try:
        containers = [c for group in pod_containers(pod) for c in group]
    except DecodeError:
        return ()
    return tuple(v for v in vendors if any(v.manages(c) for c in containers))


def _ours(pod: Mapping[str, Any], vendors: Vendors) -> bool:
    try:
        return vendors_manage_pod(pod, vendors)
    except DecodeError:
        return False


def usage_by_node(
    pods: Iterable[Mapping[str, Any]], vendors: Vendors, report: AuditReport
) -> dict[str, dict[str, DeviceUsage]]:
    """Per node and device, what the holding pods' allocated lists of every vendor charge (init and app
    containers collapsed); an unreadable allocation is a correctness finding and left out."""
    acc: dict[str, dict[str, list[int]]] = {}
    for pod in pods:
        if (pod.get("status") or {}).get("phase") in _TERMINAL:
            continue
        try:
            decoded = decode_allocation(pod, vendors.all)
            init, _ = pod_containers(pod)
        except DecodeError as e:
            report.correctness.append(f"{_key(pod)}: an allocation does not decode: {e}")
            continue
        if decoded is None:
            continue
        node = pod["metadata"]["annotations"][keys.VGPU_NODE]
        for ch in collapse(decoded[0], len(init), decoded[1]):
            a = acc.setdefault(node, {}).setdefault(ch.uuid, [0, 0, 0])
            a[0] += ch.slots
            a[1] += ch.mem_mib
            a[2] += ch.cores_pct
    return {
        node: {u: DeviceUsage(used=a[0], used_mem_mib=a[1], used_cores=a[2]) for u, a in devs.items() if any(a)}
        for node, devs in acc.items()
    }


def neuron_core_overlaps(pods: Iterable[Mapping[str, Any]], vendors: Vendors, report: AuditReport) -> None:
    """AWS Neuron devices record core **masks**: the over-capacity check sums them, which lets two pods on core 0
    (mask 1 + 1 = 2 of 3) through. A correctness finding for every core held by two pods at once (an init
    container's cores count for its pod: it runs beside the other pods), or by two app containers of one pod."""
    holders: dict[tuple[str, str], list[tuple[str, int]]] = {}
    for pod in pods:
        if (pod.get("status") or {}).get("phase") in _TERMINAL:
            continue
        try:
            decoded = decode_allocation(pod, vendors.all)
            init, _ = pod_containers(pod)
        except DecodeError:
            continue  # usage_by_node reports it
        if decoded is None:
            continue
        node = pod["metadata"]["annotations"][keys.VGPU_NODE]
        held: dict[str, int] = {}
        for ci, container in enumerate(decoded[0]):
            for d in container:
                if d.type != awsneuron.NAME:
                    continue
                if ci >= len(init) and d.used_cores & _app_cores(decoded[0], len(init), ci, d.uuid):
                    report.correctness.append(f"{_key(pod)}: two containers hold the same core of {node}/{d.uuid}")
                held[d.uuid] = held.get(d.uuid, 0) | d.used_cores
        for uuid, mask in held.items():
            holders.setdefault((node, uuid), []).append((_key(pod), mask))
    for (node, uuid), masks in sorted(holders.items()):
        for i, (a, ma) in enumerate(masks):
            for b, mb in masks[i + 1 :]:
                if ma & mb:
                    report.correctness.append(
                        f"{node}/{uuid} (AWSNeuron): core mask {ma & mb:#b} held by both {a} and {b}"
                    )


def _app_cores(devices: PodDevices, init_count: int, before: int, uuid: str) -> int:
    """The cores the app containers before container ``before`` hold on ``uuid``."""
    mask = 0
    for container in devices[init_count:before]:
        for d in container:
            if d.uuid == uuid:
                mask |= d.used_cores
    return mask


def audit(
    pods: Sequence[Mapping[str, Any]],
    nodes: Sequence[Mapping[str, Any]],
    quotas: Iterable[Mapping[str, Any]] = (),
    *,
    plugin_failures: Sequence[str] = (),
    crashed: Sequence[str] = (),
    policies: Policies | None = None,
    config: NvidiaConfig | None = None,
    vendors: Vendors | None = None,
) -> AuditReport:
    """Audit the final state of a scenario's ``pods`` on its ``nodes`` (see the module docstring); ``vendors``:
    the enabled vendors (None: NVIDIA alone with ``config``)."""
    cfg = config or DEFAULT_NVIDIA_CONFIG
    vendors = vendors or NVIDIA_ONLY_VENDORS
    report = AuditReport(pods=len(pods))
    report.correctness.extend(f"device plugin: {f}" for f in plugin_failures)
    report.correctness.extend(f"process: {c}" for c in crashed)

    inventories: dict[str, NodeInventory] = {}
    devices: dict[str, DeviceInfo] = {}
    for node in nodes:
        name = node["metadata"]["name"]
        for lock_key in _LOCKS:
            lock = (node["metadata"].get("annotations") or {}).get(lock_key)
            if lock is not None:
                report.liveness.append(f"node {name}: {lock_key} left behind: {lock}")
        inv = _inventory(node, vendors, report)
        if inv is not None:
            inventories[name] = inv
            devices.update((d.id, d) for d in inv.devices)

    for pod in pods:
        _audit_pod(pod, inventories, vendors, report)

    usage = usage_by_node(pods, vendors, report)
    for node_name, per_device in usage.items():
        for uuid, u in per_device.items():
            dev = devices.get(uuid)
            if dev is None:
                report.correctness.append(f"{node_name}: pods charge unknown device {uuid}")
            elif u.used > dev.count or u.used_mem_mib > dev.devmem_mib or u.used_cores > dev.devcore:
                report.correctness.append(
                    f"{node_name}/{uuid} ({dev.vendor}) over capacity: slots {u.used}/{dev.count}, "
                    f"memory {u.used_mem_mib}/{dev.devmem_mib} MiB, cores {u.used_cores}/{dev.devcore}%"
                )

    neuron_core_overlaps(pods, vendors, report)

    snapshots = [NodeSnapshot(inv, usage.get(name, {})) for name, inv in sorted(inventories.items())]
    limits: dict[str, list[Any]] = {}
    for q in quotas:
        limits.setdefault(q["metadata"]["namespace"], []).append(read_quota(q, cfg).limits)
    used = quota_usage_from_pods(pods, skip_unreadable=True)
    pending_gangs = _pending_gangs(pods, vendors)
    gang_fits: dict[str, int | tuple[str, ...]] = {}  # gangs of one shape on one state get one answer: place them once
    for members in pending_gangs.values():
        _audit_gang(members, snapshots, policies or Policies(), cfg, vendors, report, gang_fits)
    planned: dict[str, Any] = {}  # pending pods of one shape on one state get one answer: plan it once
    for pod in pods:
        if (pod.get("spec") or {}).get("nodeName") or not _ours(pod, vendors):
            continue
        if pod_group_name(pod) in pending_gangs:
            continue
        ns = pod["metadata"]["namespace"]
        quota = None
        if ns in limits:
            mem, cores = used.get(ns, (0, 0))
            quota = QuotaState(combine(limits[ns]), used_mem_mib=mem, used_cores_pct=cores)
        annos = pod["metadata"].get("annotations") or {}
        try:
            request = vendors_pod_request(pod, vendors)
            constraints = decode_vendor_constraints(annos, vendors)
            shape = repr((request, constraints, quota))  # their dataclass fields, all of them (a dict among them)
            if shape not in planned:
                planned[shape] = plan(
                    request,
                    constraints,
                    snapshots,
                    policies=policies or Policies(),
                    quota=quota,
                    config=cfg,
                    exhaustive=True,
                    rules=vendors.rules,
                )
            result = planned[shape]
        except VgpuError as e:
            report.unschedulable += 1  # a pod the scheduler rightly refuses: its request is invalid
            report.notes.append(f"{_key(pod)}: invalid request: {e}")
            continue
        if isinstance(result, Decision):
            report.liveness.append(f"{_key(pod)} pending, but fits on {result.node}")
            report.fits[_key(pod)] = (result.node,)
        else:
            report.unschedulable += 1
            reasons = sorted(set(result.reasons.values()))
            report.notes.append(f"{_key(pod)}: unschedulable: {'; '.join(reasons[:3]) or 'no candidate node'}")
    return report


def _pending_gangs(pods: Sequence[Mapping[str, Any]], vendors: Vendors) -> dict[str, list[Mapping[str, Any]]]:
    """Pending pods of ours by the PodGroup they name (``spec.schedulingGroup.podGroupName``)."""
    out: dict[str, list[Mapping[str, Any]]] = {}
    for pod in pods:
        group = pod_group_name(pod)
        if group and not (pod.get("spec") or {}).get("nodeName") and _ours(pod, vendors):
            out.setdefault(group, []).append(pod)
    return out


def _audit_gang(
    members: Sequence[Mapping[str, Any]],
    snapshots: Sequence[NodeSnapshot],
    policies: Policies,
    cfg: NvidiaConfig,
    vendors: Vendors,
    report: AuditReport,
    answers: dict[str, int | tuple[str, ...]],
) -> None:
    """Pending members of one PodGroup: a liveness finding only if they fit together (placed one after another on
    the final state), since kube-scheduler binds a gang whole or not at all. ``answers`` keeps, per gang shape (its
    members' requests and constraints, in order), the index of the first member that does not fit, or the nodes they
    were placed on when all do."""
    asks = [
        (
            vendors_pod_request(pod, vendors),
            decode_vendor_constraints(pod["metadata"].get("annotations") or {}, vendors),
        )
        for pod in members
    ]
    shape = repr(asks)
    if shape not in answers:
        answers[shape] = _first_misfit(asks, snapshots, policies, cfg, vendors)
    answer = answers[shape]
    if isinstance(answer, int):
        report.unschedulable += len(members)
        report.notes.append(
            f"gang of {len(members)} pending: {_key(members[answer])} does not fit with the others placed"
        )
        return
    key = f"{members[0]['metadata']['namespace']}/{pod_group_name(members[0])}"
    report.liveness.append(f"gang {key} of {len(members)} pending, but its members fit together")
    report.fits[key] = answer


def _first_misfit(
    asks: Sequence[tuple[PodRequest, PodConstraints]],
    snapshots: Sequence[NodeSnapshot],
    policies: Policies,
    cfg: NvidiaConfig,
    vendors: Vendors,
) -> int | tuple[str, ...]:
    """Place the members one after another: the index of the first that fits nowhere, or, when all fit, the nodes
    they were placed on (in order)."""
    nodes = list(snapshots)
    placed: list[str] = []
    for i, (request, constraints) in enumerate(asks):
        result = plan(request, constraints, nodes, policies=policies, config=cfg, exhaustive=True, rules=vendors.rules)
        if not isinstance(result, Decision):
            return i
        placed.append(result.node)
        nodes = [apply_decision(n, result) if n.name == result.node else n for n in nodes]
    return tuple(placed)


def _key(pod: Mapping[str, Any]) -> str:
    return f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"


def _audit_pod(
    pod: Mapping[str, Any], inventories: Mapping[str, NodeInventory], vendors: Vendors, report: AuditReport
) -> None:
    node = (pod.get("spec") or {}).get("nodeName")
    annos = pod["metadata"].get("annotations") or {}
    if not node:
        held = [k for k in (keys.VGPU_NODE, *(v.allocated_key for v in vendors)) if k in annos]
        if held:
            report.correctness.append(f"{_key(pod)} pending but carries an allocation ({', '.join(held)})")
        return
    report.bound += 1
    if not _ours(pod, vendors):
        return
    inv = inventories.get(node)
    if inv is None:
        report.correctness.append(f"{_key(pod)} bound to {node}, which has no registered device")
        return
    if annos.get(keys.VGPU_NODE) != node:
        report.correctness.append(f"{_key(pod)} bound to {node} but hami.io/vgpu-node is {annos.get(keys.VGPU_NODE)}")
        return
    labels = pod["metadata"].get("labels") or {}
    if is_valid_label_value(node) and labels.get(keys.VGPU_NODE_LABEL) != node:
        # HAMi's node monitor lists a node's pods by this label: the Binding carries it (copied from v1.35), the
        # informer adds it on older API servers
        report.correctness.append(
            f"{_key(pod)} on {node}: label hami.io/vgpu-node is {labels.get(keys.VGPU_NODE_LABEL)}"
        )
    asked = _asked(pod, vendors)
    for vendor in asked:
        report.by_vendor[vendor.name] = report.by_vendor.get(vendor.name, 0) + 1
        _audit_vendor_keys(pod, vendor, inv, report)
    for vendor in vendors:
        if vendor not in asked and vendor.allocated_key in annos:
            report.correctness.append(
                f"{_key(pod)} on {node}: {vendor.allocated_key} written, but the pod asks for no {vendor.name}"
            )
    phase = annos.get(keys.BIND_PHASE)
    if (pod.get("status") or {}).get("phase") in _TERMINAL:
        return  # ended (a kubelet that refused it at admission ends it still allocating): its bind phase is moot
    if phase == "failed":
        report.correctness.append(f"{_key(pod)} on {node}: bind-phase failed")
    elif phase != "success":
        report.liveness.append(f"{_key(pod)} on {node}: bind-phase {phase!r}, never settled")


def _audit_vendor_keys(pod: Mapping[str, Any], vendor: Vendor, inv: NodeInventory, report: AuditReport) -> None:
    """The keys ``vendor`` writes for a bound pod that asks for its devices, in HAMi's format."""
    annos = pod["metadata"].get("annotations") or {}
    where = f"{_key(pod)} on {inv.node}"
    key = vendor.allocated_key
    value = annos.get(key)
    if value is None:
        report.correctness.append(f"{where}: asks for {vendor.name} but has no {key}")
        return
    try:
        entries = vendor.decode_devices(value)
    except DecodeError as e:
        report.correctness.append(f"{where}: {key} does not decode: {e}")
        return
    init, app = pod_containers(pod)
    try:
        aligned = align_to_containers(entries, len(init) + len(app), key)
    except DecodeError as e:
        report.correctness.append(f"{where}: {key} does not fit the pod's containers: {e}")
        return
    if vendor.encode_devices(aligned) != value:
        report.correctness.append(
            f"{where}: {key} {value!r} is not in HAMi's format ({vendor.encode_devices(aligned)!r})"
        )
    count_of = getattr(vendor, "plugin_device_count", None)  # Enflame DRS: one instance, whatever the slices
    problems = allocation_problems(pod, vendor.resources.count, key, vendor.decode_devices, count_of)
    report.correctness.extend(f"{where}: {key}: {p}" for p in problems)
    own = {d.id for d in inv.devices if d.vendor == vendor.name}
    listed = [d for ctr in entries for d in ctr]
    foreign = sorted({d.uuid for d in listed} - own)
    if foreign:
        report.correctness.append(
            f"{where}: {key} names devices that are not {vendor.name} devices of the node {foreign}"
        )
    wrong_type = sorted({d.type for d in listed} - {vendor.name})
    if wrong_type:
        report.correctness.append(f"{where}: {key} lists device types {wrong_type}, not {vendor.name}")
    to_allocate = vendor.to_allocate_key
    if to_allocate is not None:
        left = annos.get(to_allocate)
        if left is None:
            report.correctness.append(f"{where}: no {to_allocate}")
        elif annos.get(keys.BIND_PHASE) == "success" and left.strip(";"):
            report.correctness.append(f"{where}: {to_allocate} not consumed by the plugin: {left!r}")
    stamp = annos.get("hami.io/bind-time", "")
    now_unix = int(stamp) if stamp.isdigit() else -1  # the bind writes its extras at its own bind-time
    # from the list aligned to the pod's containers, as the bind writes them (Kunlunxin's per-container index list;
    # the device list's trailing empty piece is not a container)
    own_devices = split_by_vendor(aligned, vendor.name)
    for extra_key, extra in _expected_extras(vendor, own_devices, now_unix, pod, inv).items():
        if annos.get(extra_key) != extra:
            report.correctness.append(f"{where}: {extra_key} is {annos.get(extra_key)!r}, expected {extra!r}")


def _expected_extras(
    vendor: Vendor, devices: PodDevices, now_unix: int, pod: Mapping[str, Any], inv: NodeInventory
) -> Mapping[str, str]:
    """The pod annotations besides the device lists that HAMi's ``PatchAnnotations`` of ``vendor`` writes:
    the vendor's own hook (Ascend's runtime list and predicate-time, Cambricon's CAMBRICON_DSMLU_*), as the
    vendor's bind hook rewrites them for this pod (Ascend: a hami-core pod's runtime list has no template)."""
    if isinstance(vendor, ExtraPodAnnotations):
        extras = dict(vendor.extra_pod_annotations(devices, now_unix))
        if isinstance(vendor, BindPodAnnotations):
            rewritten = vendor.bind_pod_annotations(pod, inv, devices, now_unix)
            extras.update((k, v) for k, v in rewritten.items() if k in extras)
        return extras
    if vendor.name == cambricon.MLU:
        return cambricon.extra_annotations(devices)
    return {}
