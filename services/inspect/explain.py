"""``vgpu-scheduler explain NAMESPACE/POD``: where a pod would go now, or why it fits nowhere; for a placed pod,
its devices and their current usage. Reserves nothing, writes nothing.

A pending pod is evaluated exactly as ``/filter`` evaluates it: the same request parsing, the same store snapshot
(every registered node's inventory and usage counters), the namespace quota when it has limits, the same default
policies (give ``explain`` the extender's ``--node-scheduler-policy``, ``--gpu-scheduler-policy`` and device
config) and the pure core's ``plan``. Every node is then planned on its own for its verdict, and each refusal is
put in plain words by :func:`shared.domain.diagnosis.nearest_miss`.

This module finds the :class:`Explanation`; its text form is :mod:`.explaintext`, its JSON form
:meth:`Explanation.to_json`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vgpu_scheduler.services.inspect.connect import InspectError, one_line, store_warning
from vgpu_scheduler.services.inspect.devices import DeviceRow, device_rows, shares_by_device
from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.codec.gang import pod_group_name
from vgpu_scheduler.shared.codec.podannotations import decode_allocation
from vgpu_scheduler.shared.codec.resources import pod_containers
from vgpu_scheduler.shared.config import InspectSettings
from vgpu_scheduler.shared.domain.context import normalize_request
from vgpu_scheduler.shared.domain.diagnosis import nearest_miss, quota_left
from vgpu_scheduler.shared.domain.model import MEM_PCT_UNSET, NvidiaConfig, PodConstraints, PodDevices, PodRequest
from vgpu_scheduler.shared.domain.plan import Decision, Failure, plan
from vgpu_scheduler.shared.domain.quota import QuotaState
from vgpu_scheduler.shared.domain.scoring import Policies, effective_policy
from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot
from vgpu_scheduler.shared.domain.vendor import RuleSet
from vgpu_scheduler.shared.errors import DecodeError, NotFoundError
from vgpu_scheduler.shared.k8s import Api
from vgpu_scheduler.shared.preemption import may_preempt, plan_preemption, pod_priority
from vgpu_scheduler.shared.protocol.constraints import pod_constraints
from vgpu_scheduler.shared.store import AllocationRecord, Store
from vgpu_scheduler.shared.vendors.catalog import enabled_vendors
from vgpu_scheduler.shared.vendors.pods import vendors_pod_request

TERMINAL = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True, slots=True)
class NodeVerdict:
    node: str
    fits: bool
    reason: str = ""
    """The ``FailedNodes`` text the extender would give (empty when the pod fits)."""
    miss: dict[str, Any] | None = None
    devices: PodDevices = ()
    """Where the pod's containers would go on this node (when it fits)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "verdict": "fits" if self.fits else "no-fit",
            "reason": self.reason,
            "nearest_miss": self.miss,
            "devices": devices_json(self.devices),
        }


@dataclass(slots=True)
class Explanation:
    """Everything ``explain`` found; ``to_json`` is the ``--output json`` shape."""

    namespace: str
    name: str
    uid: str
    phase: str
    state: str
    """``ended``, ``no-gpu``, ``pending``, ``reserved``, ``bound`` or ``foreign`` (bound without our annotations)."""
    node: str | None
    containers: list[dict[str, Any]] = field(default_factory=list)
    policies: dict[str, str] = field(default_factory=dict)
    quota: dict[str, Any] | None = None
    nodes: list[NodeVerdict] = field(default_factory=list)
    would_get: dict[str, Any] | None = None
    allocation: dict[str, Any] | None = None
    devices: list[DeviceRow] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    gang: dict[str, Any] | None = None
    """The PodGroup the pod belongs to and, when its group cannot be placed whole now, why (docs/gangs.md)."""
    preemption: dict[str, Any] | None = None
    """What device-aware preemption holds or would do for the pod (docs/preemption.md)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "pod": {
                "namespace": self.namespace,
                "name": self.name,
                "uid": self.uid,
                "phase": self.phase,
                "state": self.state,
                "node": self.node,
            },
            "containers": self.containers,
            "policies": self.policies,
            "quota": self.quota,
            "nodes": [v.to_json() for v in self.nodes],
            "would_get": self.would_get,
            "allocation": self.allocation,
            "devices": [d.to_json() for d in self.devices],
            "warnings": self.warnings,
            "gang": self.gang,
            "preemption": self.preemption,
        }


def parse_target(target: str, namespace: str | None) -> tuple[str, str]:
    """``NAMESPACE/POD``, or ``POD`` with ``-n NAMESPACE`` (default ``default``)."""
    ns, sep, name = target.partition("/")
    if not sep:
        ns, name = namespace or "default", target
    elif namespace is not None and namespace != ns:
        raise InspectError(f"{target!r} names namespace {ns!r} but -n says {namespace!r}")
    if not ns or not name or "/" in name:
        raise InspectError(f"expected NAMESPACE/POD or POD, got {target!r}")
    return ns, name


def devices_json(devices: PodDevices) -> list[list[dict[str, Any]]]:
    """A pod's devices as the JSON output and the text list them: one list per container."""
    return [[{"uuid": d.uuid, "mem_mib": d.used_mem_mib, "cores_pct": d.used_cores} for d in c] for c in devices]


def _meta(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = pod.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _container_names(pod: Mapping[str, Any]) -> list[tuple[str, bool]]:
    init, app = pod_containers(pod)
    names = [
        (str(c.get("name", f"init-{i}")) if isinstance(c, Mapping) else f"init-{i}", True) for i, c in enumerate(init)
    ]
    names += [
        (str(c.get("name", f"container-{i}")) if isinstance(c, Mapping) else f"container-{i}", False)
        for i, c in enumerate(app)
    ]
    return names


async def explain(settings: InspectSettings, store: Store, api: Api, namespace: str, name: str) -> Explanation:
    """Read the pod, the store and plan (see the module docstring)."""
    nvidia = settings.common.nvidia
    try:
        pod = await api.get_pod(namespace, name)
    except NotFoundError:
        raise InspectError(f"pod {namespace}/{name} not found") from None
    meta = _meta(pod)
    status = pod.get("status") if isinstance(pod.get("status"), Mapping) else {}
    spec = pod.get("spec") if isinstance(pod.get("spec"), Mapping) else {}
    assert isinstance(status, Mapping) and isinstance(spec, Mapping)
    phase = str(status.get("phase") or "")
    annotations = meta.get("annotations") if isinstance(meta.get("annotations"), Mapping) else {}
    assert isinstance(annotations, Mapping)
    bound_to = spec.get("nodeName") or None
    out = Explanation(
        namespace=namespace,
        name=name,
        uid=str(meta.get("uid") or ""),
        phase=phase,
        state="pending",
        node=str(bound_to) if bound_to else None,
    )
    warning = store_warning(await store.meta.status())
    if warning:
        out.warnings.append(warning)
    try:
        vendors = enabled_vendors(nvidia, settings.common.device_sections, settings.common.enable_flags)
        request = vendors_pod_request(pod, vendors)
        constraints = pod_constraints({str(k): str(v) for k, v in annotations.items()}, vendors)
    except DecodeError as e:
        raise InspectError(f"pod {namespace}/{name}: {one_line(e)} (the extender would refuse it the same way)") from e
    policy = effective_policy(Policies(node=settings.node_policy, gpu=settings.gpu_policy), constraints)
    out.policies = {"node": policy.node.value, "gpu": str(policy.gpu)}
    out.containers = _containers(pod, request, nvidia, vendors.rules)
    if phase in TERMINAL:
        out.state = "ended"
        return out
    if not request.any:
        out.state = "no-gpu"
        return out
    quota = await store.quota.get(namespace)
    out.quota = _quota_json(namespace, quota, nvidia)
    group = pod_group_name(pod)
    if group is not None:
        why = await store.reservations.gang_failed(namespace, group)
        out.gang = {"pod_group": group, "placed_whole_now": why is None, "why_not": why}
    record = await store.reservations.get(out.uid) if out.uid else None
    if record is not None:
        await _placed(out, store, record)
        waiting = await store.reservations.preemption_waiting(out.uid, record.allocation.node, cleanup=False)
        if waiting:
            out.preemption = {"state": "holding", "node": record.allocation.node, "waiting_for_victims": waiting}
        return out
    if keys.VGPU_NODE in annotations:
        out.state = "bound"
        out.node = str(annotations[keys.VGPU_NODE])
        decoded = decode_allocation(pod)
        devices: PodDevices = decoded[0] if decoded else ()
        out.allocation = {"node": out.node, "state": "annotated", "devices": devices_json(devices)}
        out.warnings.append("the pod carries allocation annotations the store has not recorded (yet)")
        await _device_usage(out, store, out.node, {d.uuid for c in devices for d in c})
        return out
    if bound_to:
        out.state = "foreign"
        return out
    snaps = await _evaluate(out, settings=settings, store=store, request=request, constraints=constraints, quota=quota)
    if out.would_get is None and snaps and pod_priority(pod) > 0 and may_preempt(pod):
        await _preemption(
            out,
            settings=settings,
            store=store,
            api=api,
            pod=pod,
            request=request,
            constraints=constraints,
            snaps=snaps,
        )
    return out


def _containers(
    pod: Mapping[str, Any], request: PodRequest, nvidia: NvidiaConfig, rules: RuleSet
) -> list[dict[str, Any]]:
    """One row per container and vendor it asks for (``type``: the vendor's common word)."""
    out = []
    names = _container_names(pod)
    for entry, req in enumerate(request.containers):
        if req.empty:
            continue
        cname, init = names[request.owner(entry)]
        r = normalize_request(req, nvidia, rules)
        out.append(
            {
                "name": cname,
                "init": init,
                "gpus": r.nums,
                "mem_mib": r.mem_mib if r.mem_mib > 0 else None,
                "mem_pct": r.mem_pct if r.mem_mib <= 0 and r.mem_pct != MEM_PCT_UNSET else None,
                "cores_pct": r.cores_pct,
                "type": r.type,
            }
        )
    return out


def _quota_json(namespace: str, quota: QuotaState, nvidia: NvidiaConfig) -> dict[str, Any] | None:
    if not quota.limited:
        return None
    left = quota_left(quota, nvidia.memory_factor)
    factor = max(nvidia.memory_factor, 1)
    return {
        "namespace": namespace,
        "memory_resource": f"limits.{nvidia.resource_memory_name}",
        "cores_resource": f"limits.{nvidia.resource_core_name}",
        "mem_limit_mib": None if quota.limits.mem_mib is None else quota.limits.mem_mib * factor,
        "mem_used_mib": quota.used_mem_mib,
        "mem_left_mib": left.mem_mib,
        "cores_limit_pct": quota.limits.cores_pct,
        "cores_used_pct": quota.used_cores_pct,
        "cores_left_pct": left.cores_pct,
    }


async def _placed(out: Explanation, store: Store, record: AllocationRecord) -> None:
    a = record.allocation
    out.state = "bound" if out.node else "reserved"
    out.node = a.node
    out.allocation = {"node": a.node, "state": record.state.value, "devices": devices_json(a.devices)}
    await _device_usage(out, store, a.node, {c.uuid for c in a.charges})


async def _device_usage(out: Explanation, store: Store, node: str, uuids: set[str]) -> None:
    states = await store.snapshots.load([node])
    snap = states[node].snapshot() if node in states else None
    if snap is None:
        out.warnings.append(f"node {node} is not registered in the store: no usage figures")
        return
    shares = shares_by_device(await store.reservations.list_by_node(node, errors=[]))
    out.devices = [row for row in device_rows(snap, shares) if row.uuid in uuids]


async def _evaluate(
    out: Explanation,
    *,
    settings: InspectSettings,
    store: Store,
    request: Any,
    constraints: Any,
    quota: QuotaState,
) -> list[NodeSnapshot]:
    nvidia = settings.common.nvidia
    names = await store.inventory.list_nodes()
    states = await store.snapshots.load(sorted(names))
    snaps: list[NodeSnapshot] = []
    for n in sorted(states):
        st = states[n]
        if st.error is not None:
            out.warnings.append(f"node {n}: stored data unreadable ({one_line(st.error)}); left out")
            continue
        snap = st.snapshot()
        if snap is not None:
            snaps.append(snap)
    if not snaps:
        out.warnings.append("no GPU node is registered in the store")
        return snaps
    policies = Policies(node=settings.node_policy, gpu=settings.gpu_policy)
    q = quota if quota.limited else None
    rules = enabled_vendors(nvidia, settings.common.device_sections, settings.common.enable_flags).rules
    overall = plan(request, constraints, snaps, policies=policies, quota=q, config=nvidia, rules=rules)
    if isinstance(overall, Decision):
        out.would_get = {"node": overall.node, "devices": devices_json(overall.devices)}
    for snap in snaps:
        alone = plan(request, constraints, [snap], policies=policies, quota=q, config=nvidia, rules=rules)
        if isinstance(alone, Decision):
            out.nodes.append(NodeVerdict(snap.name, True, devices=alone.devices))
            continue
        assert isinstance(alone, Failure)
        rejection = alone.rejections[snap.name]
        miss = nearest_miss(
            request,
            constraints,
            snap,
            rejection,
            policies=policies,
            quota=q,
            config=nvidia,
            namespace=out.namespace,
            rules=rules,
        )
        out.nodes.append(NodeVerdict(snap.name, False, reason=rejection.text, miss=miss.to_json()))
    return snaps


async def _preemption(
    out: Explanation,
    *,
    settings: InspectSettings,
    store: Store,
    api: Api,
    pod: Mapping[str, Any],
    request: PodRequest,
    constraints: PodConstraints,
    snaps: Sequence[NodeSnapshot],
) -> None:
    """What device-aware preemption would evict for a pending pod of positive priority that fits nowhere."""
    nvidia = settings.common.nvidia
    found = await plan_preemption(
        store,
        api,
        request,
        constraints,
        {s.name: s for s in snaps},
        priority=pod_priority(pod),
        policies=Policies(node=settings.node_policy, gpu=settings.gpu_policy),
        config=nvidia,
        rules=enabled_vendors(nvidia, settings.common.device_sections).rules,
    )
    if found.best is None:
        out.preemption = {"state": "no victim set", "reasons": dict(sorted(found.reasons.items()))}
        return
    best = found.best
    out.preemption = {
        "state": "would preempt",
        "node": best.node,
        "victims": [{"pod": v.key, "priority": v.priority} for v in best.victims],
        "pdb_violations": best.pdb_violations,
        "devices": devices_json(best.decision.devices),
    }
