"""kube-scheduler's own filters as `simulate`'s driver plays them and `defrag` checks a destination with them:
NodeUnschedulable, the ``nodeSelector`` part of NodeAffinity and NodeResourcesFit, with kube-scheduler v1.36's
reason strings, and its ``FitError`` summary.

**NodeResourcesFit** (``pkg/scheduler/framework/plugins/noderesources/fit.go``). A pod's request is computed as
``computePodResourceRequest`` does: each container's ``requests`` (after the API server's defaulting, which copies a
missing request from its limit), summed over the app containers; each init container taken as a maximum (a
restartable init container, a sidecar, is added to the sum and to every later init container); ``spec.overhead``
added. A node fits when its ``status.allocatable`` less what the pods already on it request covers the pod's request,
for every resource the pod asks for (non-zero): ``cpu`` (millicores), ``memory``, ``ephemeral-storage`` and every
scalar resource (extended resources, hugepages), and when it has room for one more pod (``pods``). Reasons, in
kube-scheduler's order: ``Too many pods``, ``Insufficient cpu``, ``Insufficient memory``, ``Insufficient
ephemeral-storage``, ``Insufficient <resource>``.

The extended resources the extender manages (``managedResources`` with ``ignoredByScheduler: true``, as the chart
configures kube-scheduler: every resource name of the enabled vendors) are not checked here: the extender decides
them. Every other extended resource is, against the node's allocatable: a pod asking for ``hygon.com/dcunum`` with
the Hygon vendor not enabled, or for a misspelt ``nvidia.com/gpus``, fits only a node that advertises it.

**Missing allocatable.** A real node always reports ``cpu``, ``memory``, ``ephemeral-storage`` and ``pods``; a
hand-written cluster file often leaves them out. A node whose ``status.allocatable`` (or, for a resource it leaves out,
``status.capacity``) does not give one of these four is not checked for it (as if unlimited). An extended resource a
node does not give is 0, as on a real node without that device plugin. A ``NodePool`` node gets the pool's
``allocatable`` (default ``cpu: 64, memory: 512Gi, pods: 110``) plus what its device plugins advertise.

**FitError** (``pkg/scheduler/framework/types.go``): ``0/<all nodes> nodes are available: <n> <reason>, ...`` with
one ``<count> <reason>`` per distinct reason over every node's statuses, sorted as strings, ending with ``.``. The
extender's refusal of a node is one reason (its whole message). kube-scheduler adds the preemption plugin's
message after it; the driver does not preempt, so it is left out.

Pure: no I/O.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from vgpu_scheduler.shared.codec.quantity import parse_quantity
from vgpu_scheduler.shared.errors import DecodeError
from vgpu_scheduler.shared.k8s.podvalidation import defaulted_requests, is_extended, is_hugepages

TOO_MANY_PODS: Final = "Too many pods"
INSUFFICIENT: Final = "Insufficient "
UNSCHEDULABLE: Final = "node(s) were unschedulable"
SELECTOR_MISMATCH: Final = "node(s) didn't match Pod's node affinity/selector"
REASON_SEPARATOR: Final = ", "
"""Joins a node's several kube-scheduler reasons in the driver's per-node ``reasons`` text."""

CPU, MEMORY, EPHEMERAL, PODS = "cpu", "memory", "ephemeral-storage", "pods"
TERMINAL_PHASES: Final = frozenset({"Succeeded", "Failed"})


def is_scheduler_reason(text: str) -> bool:
    """Whether ``text`` is one of kube-scheduler's own filter reasons (not an extender's message)."""
    return text == TOO_MANY_PODS or text.startswith(INSUFFICIENT) or text in (UNSCHEDULABLE, SELECTOR_MISMATCH)


def _is_scalar(name: str) -> bool:
    """``IsScalarResourceName``: extended, hugepages, ``kubernetes.io/``-prefixed or attachable volumes."""
    return is_extended(name) or is_hugepages(name) or "kubernetes.io/" in name or name.startswith("attachable-volumes-")


@dataclass(slots=True)
class Resources:
    """kube-scheduler's ``framework.Resource``: cpu in millicores, the others in units (rounded up)."""

    milli_cpu: int = 0
    memory: int = 0
    ephemeral: int = 0
    scalar: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, values: Mapping[str, Any]) -> Resources:
        """From a resource list (``requests``, ``allocatable``): unparseable or non-scalar entries ignored."""
        r = cls()
        r.add(values)
        return r

    def add(self, values: Mapping[str, Any] | Resources) -> None:
        if isinstance(values, Resources):
            self.milli_cpu += values.milli_cpu
            self.memory += values.memory
            self.ephemeral += values.ephemeral
            for name, n in values.scalar.items():
                self.scalar[name] = self.scalar.get(name, 0) + n
            return
        for name, n in _units(values).items():
            if name == CPU:
                self.milli_cpu += n
            elif name == MEMORY:
                self.memory += n
            elif name == EPHEMERAL:
                self.ephemeral += n
            elif _is_scalar(name):
                self.scalar[name] = self.scalar.get(name, 0) + n

    def subtract(self, other: Resources) -> None:
        self.milli_cpu -= other.milli_cpu
        self.memory -= other.memory
        self.ephemeral -= other.ephemeral
        for name, n in other.scalar.items():
            self.scalar[name] = self.scalar.get(name, 0) - n

    def set_max(self, other: Resources) -> None:
        self.milli_cpu = max(self.milli_cpu, other.milli_cpu)
        self.memory = max(self.memory, other.memory)
        self.ephemeral = max(self.ephemeral, other.ephemeral)
        for name, n in other.scalar.items():
            self.scalar[name] = max(self.scalar.get(name, 0), n)

    @property
    def empty(self) -> bool:
        return not (self.milli_cpu or self.memory or self.ephemeral or self.scalar)


def _units(values: Mapping[str, Any]) -> dict[str, int]:
    """``{name: Go's MilliValue() for cpu, Value() otherwise}`` (both round up)."""
    out: dict[str, int] = {}
    for name, raw in values.items():
        if isinstance(raw, bool) or not isinstance(raw, str | int | float):
            continue
        try:
            q = parse_quantity(raw, str(name))
        except DecodeError:
            continue
        out[str(name)] = math.ceil(q * 1000) if name == CPU else math.ceil(q)
    return out


def _containers(spec: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    items = spec.get(key)
    return [c for c in items if isinstance(c, Mapping)] if isinstance(items, list) else []


def pod_request(pod: Mapping[str, Any]) -> Resources:
    """``computePodResourceRequest``: app containers summed, init containers as a maximum (sidecars added),
    ``spec.overhead`` added; requests defaulted from limits as the API server stores them."""
    spec = pod.get("spec") if isinstance(pod.get("spec"), Mapping) else {}
    assert isinstance(spec, Mapping)
    total = Resources()
    for c in _containers(spec, "containers"):
        total.add(defaulted_requests(c.get("resources")))
    sidecars, init_max = Resources(), Resources()
    for c in _containers(spec, "initContainers"):
        own = Resources.of(defaulted_requests(c.get("resources")))
        if c.get("restartPolicy") == "Always":
            total.add(own)
            sidecars.add(own)
            use = Resources()
            use.add(sidecars)
        else:
            use = Resources()
            use.add(own)
            use.add(sidecars)
        init_max.set_max(use)
    total.set_max(init_max)
    overhead = spec.get("overhead")
    if isinstance(overhead, Mapping):
        total.add(overhead)
    return total


@dataclass(slots=True)
class NodeCapacity:
    """What kube-scheduler fits against on one node: its allocatable, which of cpu/memory/ephemeral-storage/pods the
    node gives at all (the others are not checked: see the module docstring), and what its pods already use."""

    allocatable: Resources
    given: frozenset[str]
    allowed_pods: int
    requested: Resources = field(default_factory=Resources)
    pods: int = 0


def node_capacity(node: Mapping[str, Any]) -> NodeCapacity:
    status = node.get("status") if isinstance(node.get("status"), Mapping) else {}
    assert isinstance(status, Mapping)
    values: dict[str, Any] = {}
    for section in ("capacity", "allocatable"):  # allocatable wins; capacity fills what it leaves out
        part = status.get(section)
        if isinstance(part, Mapping):
            values.update(part)
    units = _units(values)
    given = frozenset(n for n in (CPU, MEMORY, EPHEMERAL, PODS) if n in units)
    return NodeCapacity(Resources.of(values), given, units.get(PODS, 0))


def insufficient(request: Resources, node: NodeCapacity, ignored: frozenset[str]) -> list[str]:
    """``fitsRequest``: kube-scheduler's reasons why ``node`` cannot take a pod requesting ``request`` (empty: it
    fits). ``ignored`` are the extended resources the extender manages."""
    reasons = []
    if PODS in node.given and node.pods + 1 > node.allowed_pods:
        reasons.append(TOO_MANY_PODS)
    if request.empty:
        return reasons
    alloc, used = node.allocatable, node.requested
    if CPU in node.given and request.milli_cpu > 0 and request.milli_cpu > alloc.milli_cpu - used.milli_cpu:
        reasons.append(INSUFFICIENT + CPU)
    if MEMORY in node.given and request.memory > 0 and request.memory > alloc.memory - used.memory:
        reasons.append(INSUFFICIENT + MEMORY)
    if EPHEMERAL in node.given and request.ephemeral > 0 and request.ephemeral > alloc.ephemeral - used.ephemeral:
        reasons.append(INSUFFICIENT + EPHEMERAL)
    for name in sorted(request.scalar):  # Go walks a map (random order); sorted here
        n = request.scalar[name]
        if n == 0 or (is_extended(name) and name in ignored):
            continue
        if n > alloc.scalar.get(name, 0) - used.scalar.get(name, 0):
            reasons.append(INSUFFICIENT + name)
    return reasons


class Ledger:
    """kube-scheduler's view of what the pods on each node request: the pods already bound (non-terminated), and
    the pods it assumed on a node once their scheduling cycle chose it (forgotten when their bind fails)."""

    def __init__(self, nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]) -> None:
        self.nodes: dict[str, NodeCapacity] = {}
        for node in nodes:
            self.nodes[str((node.get("metadata") or {}).get("name", ""))] = node_capacity(node)
        self._on: dict[str, tuple[str, Resources]] = {}
        for pod in pods:
            phase = (pod.get("status") or {}).get("phase", "")
            node_name = (pod.get("spec") or {}).get("nodeName")
            if node_name and phase not in TERMINAL_PHASES:
                self.assume(pod, str(node_name))

    def assume(self, pod: Mapping[str, Any], node: str) -> None:
        key = pod_key(pod)
        if key in self._on or node not in self.nodes:
            return
        request = pod_request(pod)
        self._on[key] = (node, request)
        cap = self.nodes[node]
        cap.requested.add(request)
        cap.pods += 1

    def forget(self, pod: Mapping[str, Any]) -> None:
        entry = self._on.pop(pod_key(pod), None)
        if entry is None:
            return
        node, request = entry
        cap = self.nodes[node]
        cap.requested.subtract(request)
        cap.pods -= 1

    def filter(
        self, pod: Mapping[str, Any], names: Sequence[str], ignored: frozenset[str]
    ) -> tuple[list[str], dict[str, list[str]]]:
        """NodeResourcesFit over ``names``: (the nodes that fit, in order; {node: reasons} for the others)."""
        request = pod_request(pod)
        fits: list[str] = []
        refused: dict[str, list[str]] = {}
        for name in names:
            cap = self.nodes.get(name)
            reasons = insufficient(request, cap, ignored) if cap is not None else []
            if reasons:
                refused[name] = reasons
            else:
                fits.append(name)
        return fits, refused


def _selector_matches(pod: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    selector = (pod.get("spec") or {}).get("nodeSelector") or {}
    labels = (node.get("metadata") or {}).get("labels") or {}
    return all(labels.get(k) == v for k, v in selector.items())


def candidate_names(pod: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]]) -> list[str]:
    """What kube-scheduler's NodeUnschedulable and NodeAffinity filters leave: schedulable nodes matching the pod's
    ``nodeSelector``."""
    return kube_filters(pod, nodes)[0]


def kube_filters(pod: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]]) -> tuple[list[str], dict[str, str]]:
    """NodeUnschedulable and the ``nodeSelector`` part of NodeAffinity: (the nodes left, in order; {node: reason}
    for the others, in kube-scheduler's words)."""
    left: list[str] = []
    refused: dict[str, str] = {}
    for n in nodes:
        name = str(n["metadata"]["name"])
        reasons = []
        if (n.get("spec") or {}).get("unschedulable"):
            reasons.append(UNSCHEDULABLE)
        if not _selector_matches(pod, n):
            reasons.append(SELECTOR_MISMATCH)
        if reasons:
            refused[name] = REASON_SEPARATOR.join(reasons)
        else:
            left.append(name)
    return left, refused


def pod_key(pod: Mapping[str, Any]) -> str:
    """``namespace/name``, the pod's key in the driver's and the ledger's books."""
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name', '')}"


def node_reasons(text: str) -> list[str]:
    """The reasons of one node's ``reasons`` text: kube-scheduler's own, as joined by the driver, or an extender's
    message (one reason, whatever it contains)."""
    parts = text.split(REASON_SEPARATOR)
    return parts if all(is_scheduler_reason(p) for p in parts) else [text]


def fit_error(reasons: Mapping[str, str], total_nodes: int | None = None) -> str:
    """kube-scheduler's ``FitError`` message for a pod every node refused (``reasons``: node → its reasons, the
    extender's refusal being one): ``0/3 nodes are available: 3 Insufficient hygon.com/dcunum.``"""
    counts: Counter[str] = Counter()
    for text in reasons.values():
        counts.update(node_reasons(text))
    histogram = sorted(f"{n} {reason}" for reason, n in counts.items())
    message = f"0/{total_nodes if total_nodes is not None else len(reasons)} nodes are available:"
    return message + (f" {', '.join(histogram)}." if histogram else "")
