"""The end-of-scenario audit, from the API server's objects only (pods, nodes, resource quotas), plus the device
plugin's failure count and the project processes' exit codes.

Two kinds of finding, raised as two exception types so a scenario can expect one and never hide the other:

* :class:`CorrectnessError` — a device over capacity (slots, memory, cores, recomputed from the pods'
  allocation annotations), a bound GPU pod without a decodable allocation on its node, a pending pod left with
  an allocation, a device-plugin failure, a crashed process. Always a test failure.
* :class:`Collapse` — liveness: a pod left pending although something could fit it (checked with the
  scheduling core, exhaustively, on the final state), a bound pod never settled, a node lock left behind.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from services.informer.quotas import combine, read_quota
from shared.codec import annotations as keys
from shared.codec.podannotations import decode_allocation
from shared.codec.register import decode_register
from shared.codec.resources import pod_request
from shared.codec.selectors import decode_pod_constraints
from shared.domain.model import DEFAULT_NVIDIA_CONFIG, DeviceInfo, NodeInventory, NvidiaConfig, QuotaState
from shared.domain.plan import Decision, plan
from shared.domain.scoring import Policies
from shared.domain.snapshot import NodeSnapshot
from shared.errors import DecodeError, VgpuError
from tests.audit import quota_usage_from_pods, usage_from_pods

NVIDIA = "NVIDIA"


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


def _inventory(node: Mapping[str, Any]) -> NodeInventory | None:
    register = (node["metadata"].get("annotations") or {}).get(keys.NODE_NVIDIA_REGISTER)
    if register is None:
        return None
    return NodeInventory(node=node["metadata"]["name"], vendor=NVIDIA, devices=decode_register(register))


def _gpu_pod(pod: Mapping[str, Any], cfg: NvidiaConfig) -> bool:
    try:
        return bool(pod_request(pod, cfg).any)
    except DecodeError:
        return False


def audit(
    pods: Sequence[Mapping[str, Any]],
    nodes: Sequence[Mapping[str, Any]],
    quotas: Iterable[Mapping[str, Any]] = (),
    *,
    plugin_failures: Sequence[str] = (),
    crashed: Sequence[str] = (),
    policies: Policies | None = None,
    config: NvidiaConfig | None = None,
) -> AuditReport:
    """Audit the final state of a scenario's ``pods`` on its ``nodes`` (see the module docstring)."""
    cfg = config or DEFAULT_NVIDIA_CONFIG
    report = AuditReport(pods=len(pods))
    report.correctness.extend(f"device plugin: {f}" for f in plugin_failures)
    report.correctness.extend(f"process: {c}" for c in crashed)

    inventories: dict[str, NodeInventory] = {}
    devices: dict[str, DeviceInfo] = {}
    for node in nodes:
        name = node["metadata"]["name"]
        lock = (node["metadata"].get("annotations") or {}).get(keys.NODE_LOCK)
        if lock is not None:
            report.liveness.append(f"node {name}: lock left behind: {lock}")
        try:
            inv = _inventory(node)
        except DecodeError as e:
            report.correctness.append(f"node {name}: unreadable register annotation: {e}")
            continue
        if inv is not None:
            inventories[name] = inv
            devices.update((d.id, d) for d in inv.devices)

    for pod in pods:
        _audit_pod(pod, inventories, cfg, report)

    try:
        usage = usage_from_pods(pods)
    except DecodeError as e:
        report.correctness.append(f"an allocation does not decode: {e}")
        usage = usage_from_pods(pods, skip_unreadable=True)
    for node_name, per_device in usage.items():
        for uuid, u in per_device.items():
            dev = devices.get(uuid)
            if dev is None:
                report.correctness.append(f"{node_name}: pods charge unknown device {uuid}")
            elif u.used > dev.count or u.used_mem_mib > dev.devmem_mib or u.used_cores > dev.devcore:
                report.correctness.append(
                    f"{node_name}/{uuid} over capacity: slots {u.used}/{dev.count}, "
                    f"memory {u.used_mem_mib}/{dev.devmem_mib} MiB, cores {u.used_cores}/{dev.devcore}%"
                )

    snapshots = [NodeSnapshot(inv, usage.get(name, {})) for name, inv in sorted(inventories.items())]
    limits: dict[str, list[Any]] = {}
    for q in quotas:
        limits.setdefault(q["metadata"]["namespace"], []).append(read_quota(q, cfg).limits)
    used = quota_usage_from_pods(pods, skip_unreadable=True)
    for pod in pods:
        if (pod.get("spec") or {}).get("nodeName") or not _gpu_pod(pod, cfg):
            continue
        ns = pod["metadata"]["namespace"]
        quota = None
        if ns in limits:
            mem, cores = used.get(ns, (0, 0))
            quota = QuotaState(combine(limits[ns]), used_mem_mib=mem, used_cores_pct=cores)
        annos = pod["metadata"].get("annotations") or {}
        try:
            request, constraints = pod_request(pod, cfg), decode_pod_constraints(annos)
            result = plan(
                request,
                constraints,
                snapshots,
                policies=policies or Policies(),
                quota=quota,
                config=cfg,
                exhaustive=True,
            )
        except VgpuError as e:
            report.unschedulable += 1  # a pod the scheduler rightly refuses: its request is invalid
            report.notes.append(f"{_key(pod)}: invalid request: {e}")
            continue
        if isinstance(result, Decision):
            report.liveness.append(f"{_key(pod)} pending, but fits on {result.node}")
        else:
            report.unschedulable += 1
    return report


def _key(pod: Mapping[str, Any]) -> str:
    return f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"


def _audit_pod(
    pod: Mapping[str, Any], inventories: Mapping[str, NodeInventory], cfg: NvidiaConfig, report: AuditReport
) -> None:
    node = (pod.get("spec") or {}).get("nodeName")
    annos = pod["metadata"].get("annotations") or {}
    if not node:
        if keys.VGPU_NODE in annos or keys.DEVICES_ALLOCATED in annos:
            report.correctness.append(f"{_key(pod)} pending but carries an allocation for {annos.get(keys.VGPU_NODE)}")
        return
    report.bound += 1
    if not _gpu_pod(pod, cfg):
        return
    inv = inventories.get(node)
    if inv is None:
        report.correctness.append(f"{_key(pod)} bound to {node}, which has no GPU inventory")
        return
    if annos.get(keys.VGPU_NODE) != node:
        report.correctness.append(f"{_key(pod)} bound to {node} but hami.io/vgpu-node is {annos.get(keys.VGPU_NODE)}")
        return
    try:
        decoded = decode_allocation(pod)
    except DecodeError as e:
        report.correctness.append(f"{_key(pod)} on {node}: allocation does not decode: {e}")
        return
    if decoded is None:
        report.correctness.append(f"{_key(pod)} on {node}: no allocation annotation")
        return
    uuids = {d.id for d in inv.devices}
    foreign = sorted({d.uuid for ctr in decoded[0] for d in ctr} - uuids)
    if foreign:
        report.correctness.append(f"{_key(pod)} on {node}: devices of another node {foreign}")
    phase = annos.get(keys.BIND_PHASE)
    if phase == "failed":
        report.correctness.append(f"{_key(pod)} on {node}: bind-phase failed")
    elif phase != "success":
        report.liveness.append(f"{_key(pod)} on {node}: bind-phase {phase!r}, never settled")
