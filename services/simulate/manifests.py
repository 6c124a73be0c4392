"""Loading the simulator's inputs: a cluster (Nodes, running Pods, ResourceQuotas) and a workload (Pods, in order).

Files hold Kubernetes manifests: multi-document YAML, JSON, a ``v1 List`` (or any ``*List``) or a top-level array.
Every object is checked before anything runs, so a bad input stops the command with one line naming the file, the
document (1-based, plus ``items[i]`` inside a List) and the field::

    cluster.yaml: document 3: metadata.annotations[hami.io/node-nvidia-register]: ... (a ManifestError)

A running Pod of the cluster file that the API server would refuse (:mod:`shared.k8s.podvalidation`) stops
the command the same way, with the API server's message after the location::

    cluster.yaml: document 9: Pod "x" is invalid: spec.containers[0].resources.limits: Required value: ...

(A workload Pod is validated when the driver creates it, after admission, as the API server does.)

The HAMi annotations are decoded with the real codecs here (register, topology score, allocated device list,
MIG allocations). A Node whose HAMi registration does not decode (the register or score annotation of NVIDIA or of
any enabled vendor) is a bad manifest too: in production the registrar would drop that node, but a simulation of
it would compare policies on a cluster other than the one meant, so the command stops, naming the file, the document
and the field. A node the registrar leaves unregistered for a reason a real cluster has (its device plugin
registered no ``status.allocatable[nvidia.com/gpu]``, or its devices are of a vendor the device config does not
enable) is kept, and named in a warning (``Cluster.warnings``: one line per reason, listing its nodes).

Reading the files, the envelope every object shares and :class:`ManifestError` are :mod:`.documents`; this module
checks what each kind holds and loads a cluster or a workload.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TypeGuard

from vgpu_scheduler.services.simulate.controllers import (
    ControllerSpec,
    check_controller,
    check_owner_references,
    expand,
)
from vgpu_scheduler.services.simulate.disruption import ScheduledEviction, check_budget, scheduled_eviction
from vgpu_scheduler.services.simulate.documents import (
    CONTROLLER_KINDS,
    COSCHEDULING_API,
    POD_GROUP_APIS,
    KubeObject,
    Located,
    ManifestError,
    check_quantity,
    check_unique,
    either,
    field_error,
    located,
    mapping_at,
    type_name,
)
from vgpu_scheduler.services.simulate.pools import KIND as NODE_POOL
from vgpu_scheduler.services.simulate.pools import PoolError, expand_pool
from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.codec.podannotations import decode_allocation
from vgpu_scheduler.shared.codec.quantity import parse_quantity
from vgpu_scheduler.shared.codec.register import decode_register
from vgpu_scheduler.shared.codec.topology import decode_topology
from vgpu_scheduler.shared.errors import DecodeError
from vgpu_scheduler.shared.k8s.podvalidation import pod_invalid
from vgpu_scheduler.shared.vendors.catalog import enable_flag_of
from vgpu_scheduler.shared.vendors.registration import Invalid, NodeView
from vgpu_scheduler.shared.vendors.registry import Vendors

NVIDIA = "NVIDIA"

CLUSTER_KINDS = frozenset({"Node", NODE_POOL, "Pod", "ResourceQuota", "Namespace"})
WORKLOAD_KINDS = frozenset({"Pod", "PriorityClass", "PodGroup", "PodDisruptionBudget", "Eviction", *CONTROLLER_KINDS})

HIGHEST_USER_DEFINABLE_PRIORITY = 1_000_000_000
PREEMPTION_POLICIES = ("PreemptLowerPriority", "Never")


@dataclass(frozen=True, slots=True)
class Cluster:
    """The starting state: nodes, pods already running (with their allocation annotations), quotas, namespaces."""

    nodes: tuple[KubeObject, ...]
    pods: tuple[KubeObject, ...]
    quotas: tuple[KubeObject, ...]
    namespaces: tuple[KubeObject, ...] = ()
    source: str = ""
    unregistered: tuple[tuple[str, str], ...] = ()
    """(node, why) for every node with a HAMi register annotation that the registrar will not register."""

    @property
    def warnings(self) -> list[str]:
        """One line per reason nodes are left unregistered, naming the nodes, for stderr."""
        by_why: dict[str, list[str]] = {}
        for node, why in self.unregistered:
            by_why.setdefault(why, []).append(node)
        return [
            f"{self.source}: {why}: {'node' if len(nodes) == 1 else 'nodes'} {', '.join(nodes)} "
            f"left unregistered, {'its' if len(nodes) == 1 else 'their'} devices not schedulable"
            for why, nodes in by_why.items()
        ]

    def objects(self) -> Iterator[KubeObject]:
        """Every object in seeding order: namespaces, nodes, quotas, then pods (deep copies)."""
        for group in (self.namespaces, self.nodes, self.quotas, self.pods):
            for obj in group:
                yield copy.deepcopy(obj)


@dataclass(frozen=True, slots=True)
class Workload:
    """The pods to schedule, in order (a controller document's pods at its place); the PriorityClasses their
    ``priorityClassName`` names (the API server's Priority admission resolves them, :mod:`.priority`); the PodGroups
    of their gangs (created before the pods); PodDisruptionBudgets and the evictions to request."""

    pods: tuple[KubeObject, ...]
    source: str = ""
    priority_classes: tuple[KubeObject, ...] = ()
    pod_groups: tuple[KubeObject, ...] = ()
    controllers: tuple[ControllerSpec, ...] = ()
    """The controller documents (their pods are in ``pods``, :mod:`.controllers`)."""
    budgets: tuple[KubeObject, ...] = ()
    """PodDisruptionBudgets (created before the first pod, :mod:`.disruption`)."""
    evictions: tuple[ScheduledEviction, ...] = ()
    """Evictions to request during the run, from ``Eviction`` documents."""


def _annotation_field(key: str) -> str:
    return f"metadata.annotations[{key}]"


def _decode_failure(where: str, field: str, key: str, error: DecodeError) -> ManifestError:
    """A registration that does not decode: the codec's message without the key it repeats, after the field."""
    text = str(error)
    if text.startswith(key):
        text = text[len(key) :]
    if text.startswith("["):  # an index into the value: part of the field
        field, _, text = (field + text).partition(": ")
    return field_error(where, field, text.removeprefix(": "))


def _check_node(loc: Located, count_resource: str) -> str | None:
    """Fail on a bad Node (structure, or a HAMi annotation that does not decode); return why the registrar will
    not register it (None: it will, or it has no GPU annotation at all, a CPU node)."""
    node = loc.obj
    annos = node.get("metadata", {}).get("annotations") or {}
    register = annos.get(keys.NODE_NVIDIA_REGISTER)
    why: str | None = None
    for key, decode in ((keys.NODE_NVIDIA_REGISTER, decode_register), (keys.NODE_NVIDIA_SCORE, decode_topology)):
        value = annos.get(key)
        if value is None:
            continue
        try:
            decode(value)
        except DecodeError as e:
            raise _decode_failure(loc.where, _annotation_field(key), key, e) from None
    status = mapping_at(node, "status", loc.where, "status")
    for section in ("allocatable", "capacity"):
        values = mapping_at(status, section, loc.where, f"status.{section}")
        for rname, q in values.items():
            check_quantity(q, loc.where, f"status.{section}[{rname}]")
    spec = mapping_at(node, "spec", loc.where, "spec")
    if not isinstance(spec.get("unschedulable", False), bool):
        raise field_error(
            loc.where, "spec.unschedulable", f"expected a boolean, got {type_name(spec.get('unschedulable'))}"
        )
    if why is None and register is not None and _allocatable_count(status, count_resource) <= 0:
        why = f"no allocatable {count_resource}: device plugin not registered"
    return why


def _allocatable_count(status: Mapping[str, Any], resource: str) -> float:
    raw = (status.get("allocatable") or {}).get(resource)
    if raw is None:
        return 0
    try:
        return float(parse_quantity(raw, resource))
    except DecodeError:
        return 0


def _check_pod(loc: Located, *, running: bool) -> None:
    pod = loc.obj
    spec = mapping_at(pod, "spec", loc.where, "spec")
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        raise field_error(loc.where, "spec.containers", "a pod needs a non-empty list of containers")
    for key in ("initContainers", "containers"):
        items = spec.get(key) or []
        if not isinstance(items, list):
            raise field_error(loc.where, f"spec.{key}", f"expected a list, got {type_name(items)}")
        for i, c in enumerate(items):
            field = f"spec.{key}[{i}]"
            if not isinstance(c, dict):
                raise field_error(loc.where, field, f"expected a mapping, got {type_name(c)}")
            if not isinstance(c.get("name"), str) or not c.get("name"):
                raise field_error(loc.where, f"{field}.name", "missing")
            resources = mapping_at(c, "resources", loc.where, f"{field}.resources")
            for section in ("limits", "requests"):
                values = mapping_at(resources, section, loc.where, f"{field}.resources.{section}")
                for rname, q in values.items():
                    check_quantity(q, loc.where, f"{field}.resources.{section}[{rname}]")
    if running:  # it exists, so the API server accepted it; a workload pod is validated when the driver creates it
        refused = pod_invalid(pod)
        if refused is not None:
            raise ManifestError(f"{loc.where}: {refused}")
    node_name = spec.get("nodeName")
    if node_name is not None and not isinstance(node_name, str):
        raise field_error(loc.where, "spec.nodeName", f"expected a string, got {type_name(node_name)}")
    if not running:
        if node_name:
            raise field_error(loc.where, "spec.nodeName", "a workload pod must not be assigned to a node yet")
        return
    try:
        decode_allocation(pod)
    except DecodeError as e:
        raise field_error(loc.where, "metadata.annotations", str(e)) from None


def _check_quota(loc: Located) -> None:
    spec = mapping_at(loc.obj, "spec", loc.where, "spec")
    hard = mapping_at(spec, "hard", loc.where, "spec.hard")
    for rname, q in hard.items():
        check_quantity(q, loc.where, f"spec.hard[{rname}]")


def _expand_pools(items: list[Located], vendors: Vendors | None) -> tuple[list[Located], list[tuple[str, str]]]:
    """``NodePool`` documents replaced by their Nodes (:mod:`services.simulate.pools`); (node, why) for every node
    with devices of a vendor the device config does not enable."""
    out: list[Located] = []
    disabled: list[tuple[str, str]] = []
    for loc in items:
        if loc.kind != NODE_POOL:
            out.append(loc)
            continue
        try:
            expanded = expand_pool(loc.obj, vendors if vendors is not None else Vendors(()))
        except PoolError as e:
            raise field_error(loc.where, e.field, e.problem) from None
        for node in expanded.nodes:
            out.append(Located(node, f"{loc.where} (node {node['metadata']['name']})"))
            for vendor in expanded.disabled:
                flag = enable_flag_of(vendor)
                how = f"opt-in, as in HAMi: give --{flag}" if flag else "not in the device config's vendors"
                why = f"{vendor} devices: {vendor} is not enabled ({how}); kube-scheduler places their pods natively"
                disabled.append((str(node["metadata"]["name"]), why))
    return out, disabled


def _check_vendors(loc: Located, vendors: Vendors) -> None:
    """Fail when some enabled vendor other than NVIDIA cannot decode the node's registration of its devices."""
    view = NodeView.of(loc.obj)
    now = datetime.now()  # naive local time, as the handshake codec expects
    for vendor in vendors:
        if vendor.name == NVIDIA:
            continue
        observed = vendor.observe(view, now)
        if isinstance(observed, Invalid):
            source = observed.source
            field = source if source.startswith("status.") else _annotation_field(source)
            raise _decode_failure(loc.where, field, source, observed.error)


def load_cluster(
    path: str | Path, *, count_resource: str = "nvidia.com/gpu", vendors: Vendors | None = None
) -> Cluster:
    """Read and check a cluster file. Pods in it are already placed: they need ``spec.nodeName`` of a listed node.
    ``NodePool`` documents become their Nodes, with the registration of the enabled ``vendors`` (None: NVIDIA
    only; a pool of another vendor still gets HAMi's default names). A HAMi registration that does not decode is a
    :class:`ManifestError`. A node the registrar will not register for a reason a real cluster has (no allocatable
    ``count_resource``, devices of a vendor not enabled) is kept, as it would be in a cluster, and listed in
    ``Cluster.unregistered``."""
    p = Path(path)
    items, unregistered = _expand_pools(located(p, CLUSTER_KINDS), vendors)
    check_unique(items)
    node_names = {loc.name for loc in items if loc.kind == "Node"}
    for loc in items:
        if loc.kind == "Node":
            why = _check_node(loc, count_resource)
            if vendors is not None:
                _check_vendors(loc, vendors)
            if why is not None:
                unregistered.append((loc.name, why))
        elif loc.kind == "Pod":
            _check_pod(loc, running=True)
            node_name = loc.obj["spec"].get("nodeName")
            if not node_name:
                raise field_error(loc.where, "spec.nodeName", "a pod in the cluster file must be placed on a node")
            if node_name not in node_names:
                raise field_error(loc.where, "spec.nodeName", f"no Node {node_name!r} in this file")
        elif loc.kind == "ResourceQuota":
            _check_quota(loc)
    if not node_names:
        raise ManifestError(f"{p}: no Node in the cluster file")
    for loc in items:
        if loc.kind in ("Pod", "ResourceQuota"):
            loc.obj["metadata"].setdefault("namespace", "default")
        if loc.kind == "Pod":
            status = loc.obj.setdefault("status", {})
            if isinstance(status, dict):
                status.setdefault("phase", "Running")
    return Cluster(
        nodes=tuple(loc.obj for loc in items if loc.kind == "Node"),
        pods=tuple(loc.obj for loc in items if loc.kind == "Pod"),
        quotas=tuple(loc.obj for loc in items if loc.kind == "ResourceQuota"),
        namespaces=tuple(loc.obj for loc in items if loc.kind == "Namespace"),
        source=str(p),
        unregistered=tuple(unregistered),
    )


def _is_int(v: Any) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool)


def _check_priority_class(loc: Located) -> None:
    """A PriorityClass as the API server's validation and Priority admission accept it."""
    obj = loc.obj
    value = obj.get("value")
    if not _is_int(value):
        raise field_error(loc.where, "value", f"Required value: an integer priority, got {type_name(value)}")
    if value > HIGHEST_USER_DEFINABLE_PRIORITY:
        raise field_error(
            loc.where, "value", f"maximum allowed value of a user defined priority is {HIGHEST_USER_DEFINABLE_PRIORITY}"
        )
    if loc.name.startswith("system-"):
        raise field_error(
            loc.where, "metadata.name", "priority class names with 'system-' prefix are reserved for system use"
        )
    if not isinstance(obj.get("globalDefault", False), bool):
        raise field_error(loc.where, "globalDefault", f"expected a boolean, got {type_name(obj.get('globalDefault'))}")
    policy = obj.get("preemptionPolicy")
    if policy is not None and policy not in PREEMPTION_POLICIES:
        raise field_error(loc.where, "preemptionPolicy", f"expected {' or '.join(PREEMPTION_POLICIES)}, got {policy!r}")


def _check_pod_group(loc: Located) -> None:
    """A native PodGroup (``spec.schedulingPolicy``: ``gang.minCount`` or ``basic``) or a coscheduling one
    (``spec.minMember``)."""
    spec = mapping_at(loc.obj, "spec", loc.where, "spec")
    if loc.api_version == COSCHEDULING_API:
        n = spec.get("minMember")
        if not _is_int(n) or n < 1:
            raise field_error(loc.where, "spec.minMember", f"expected an integer of at least 1, got {n!r}")
        return
    policy = mapping_at(spec, "schedulingPolicy", loc.where, "spec.schedulingPolicy")
    if ("gang" in policy) == ("basic" in policy):
        raise field_error(loc.where, "spec.schedulingPolicy", "exactly one of gang or basic is required")
    if "gang" in policy:
        gang = mapping_at(policy, "gang", loc.where, "spec.schedulingPolicy.gang")
        n = gang.get("minCount")
        if not _is_int(n) or n < 1:
            raise field_error(
                loc.where, "spec.schedulingPolicy.gang.minCount", f"expected an integer of at least 1, got {n!r}"
            )


def _check_scheduling_fields(loc: Located, groups: set[tuple[str, str]]) -> None:
    """A workload pod's priority fields (resolved at admission, :mod:`.priority`) and the PodGroup it names."""
    spec = loc.obj.get("spec") or {}
    if "priority" in spec and not _is_int(spec["priority"]):
        raise field_error(loc.where, "spec.priority", f"expected an integer, got {type_name(spec['priority'])}")
    for key in ("priorityClassName", "preemptionPolicy"):
        if key in spec and not isinstance(spec[key], str):
            raise field_error(loc.where, f"spec.{key}", f"expected a string, got {type_name(spec[key])}")
    group = spec.get("schedulingGroup")
    if group is None:
        return
    if not isinstance(group, dict) or not isinstance(group.get("podGroupName"), str) or not group["podGroupName"]:
        raise field_error(loc.where, "spec.schedulingGroup.podGroupName", "expected the name of a PodGroup")
    if (loc.namespace, group["podGroupName"]) not in groups:
        raise field_error(
            loc.where,
            "spec.schedulingGroup.podGroupName",
            f"no PodGroup {loc.namespace}/{group['podGroupName']} ({either(POD_GROUP_APIS)}) in this file",
        )


def load_workload(path: str | Path) -> Workload:
    """Read and check a workload file: Pods, not yet placed, scheduled in file order (controller documents stand for
    their pods); the PriorityClasses and PodGroups they name; PodDisruptionBudgets; Evictions to request."""
    p = Path(path)
    items = located(p, WORKLOAD_KINDS)
    check_unique(items)
    classes = [loc for loc in items if loc.kind == "PriorityClass"]
    groups = [loc for loc in items if loc.kind == "PodGroup"]
    for loc in classes:
        _check_priority_class(loc)
    defaults = [loc for loc in classes if loc.obj.get("globalDefault")]
    if len(defaults) > 1:
        raise field_error(
            defaults[1].where,
            "globalDefault",
            f"PriorityClass {defaults[0].name} is already marked as default. Only one default can exist",
        )
    for loc in groups:
        _check_pod_group(loc)
        loc.obj["metadata"].setdefault("namespace", "default")
    native = {(loc.namespace, loc.name) for loc in groups if loc.api_version in POD_GROUP_APIS}
    controllers: list[ControllerSpec] = []
    pods: list[Located] = []
    for loc in items:
        if loc.kind == "Pod":
            check_owner_references(loc)
            pods.append(loc)
        elif loc.kind in CONTROLLER_KINDS:
            check_controller(loc)
            spec, made = expand(loc.obj)
            controllers.append(spec)
            pods += [Located(pod, f"{loc.where} (pod {pod['metadata']['name']})") for pod in made]
    check_unique(pods)
    budgets = [loc for loc in items if loc.kind == "PodDisruptionBudget"]
    for loc in budgets:
        check_budget(loc)
        loc.obj["metadata"].setdefault("namespace", "default")
    for loc in pods:
        _check_pod(loc, running=False)
        _check_scheduling_fields(loc, native)
        loc.obj["metadata"].setdefault("namespace", "default")
        for key in ("uid", "resourceVersion", "creationTimestamp"):
            loc.obj["metadata"].pop(key, None)
        loc.obj.pop("status", None)
    if not pods:
        raise ManifestError(f"{p}: no Pod in the workload file")
    return Workload(
        pods=tuple(loc.obj for loc in pods),
        source=str(p),
        priority_classes=tuple(loc.obj for loc in classes),
        pod_groups=tuple(loc.obj for loc in groups),
        controllers=tuple(controllers),
        budgets=tuple(loc.obj for loc in budgets),
        evictions=tuple(scheduled_eviction(loc) for loc in items if loc.kind == "Eviction"),
    )
