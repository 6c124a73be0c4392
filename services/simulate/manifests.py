"""Loading the simulator's inputs: a cluster (Nodes, running Pods, ResourceQuotas) and a workload (Pods, in order).

Files hold Kubernetes manifests: multi-document YAML, JSON, a ``v1 List`` (or any ``*List``) or a top-level array.
Every object is checked before anything runs, so a bad input stops the command with one line naming the file, the
document (1-based, plus ``items[i]`` inside a List) and the field::

    cluster.yaml: document 3: metadata.annotations[hami.io/node-nvidia-register]: ... (a ManifestError)

A running Pod of the cluster file that the API server would refuse (:mod:`services.simulate.podvalidation`) stops
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
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TypeGuard

import yaml

from vgpu_scheduler.services.simulate.podvalidation import pod_invalid
from vgpu_scheduler.services.simulate.pools import KIND as NODE_POOL
from vgpu_scheduler.services.simulate.pools import PoolError, expand_pool
from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.codec.podannotations import decode_allocation
from vgpu_scheduler.shared.codec.quantity import parse_quantity
from vgpu_scheduler.shared.codec.register import decode_register
from vgpu_scheduler.shared.codec.topology import decode_topology
from vgpu_scheduler.shared.errors import ConfigError, DecodeError
from vgpu_scheduler.shared.vendors.catalog import enable_flag_of
from vgpu_scheduler.shared.vendors.registration import Invalid, NodeView
from vgpu_scheduler.shared.vendors.registry import Vendors

KubeObject = dict[str, Any]

NVIDIA = "NVIDIA"

CLUSTER_KINDS = frozenset({"Node", NODE_POOL, "Pod", "ResourceQuota", "Namespace"})
WORKLOAD_KINDS = frozenset({"Pod", "PriorityClass", "PodGroup"})

PRIORITY_CLASS_API = "scheduling.k8s.io/v1"
POD_GROUP_API = "scheduling.k8s.io/v1alpha2"
"""Kubernetes v1.36's PodGroup (gang scheduling: ``spec.schedulingPolicy.gang.minCount``)."""
COSCHEDULING_API = "scheduling.x-k8s.io/v1alpha1"
"""scheduler-plugins' PodGroup (coscheduling: ``spec.minMember``), named by the label
``scheduling.x-k8s.io/pod-group``."""
API_VERSIONS: dict[str, tuple[str, ...]] = {
    "PriorityClass": (PRIORITY_CLASS_API,),
    "PodGroup": (POD_GROUP_API, COSCHEDULING_API),
}
"""The apiVersions accepted for the kinds outside the core group (every other kind is ``v1``)."""
NAMESPACED = frozenset({"Pod", "ResourceQuota", "PodGroup"})
HIGHEST_USER_DEFINABLE_PRIORITY = 1_000_000_000
PREEMPTION_POLICIES = ("PreemptLowerPriority", "Never")


class ManifestError(ConfigError):
    """A bad input manifest. The message is one line: ``<file>: document <n>[, items[<i>]]: <field>: <problem>``."""


@dataclass(frozen=True, slots=True)
class Located:
    """One object of an input file and where it came from (for error messages)."""

    obj: KubeObject
    where: str

    @property
    def kind(self) -> str:
        return str(self.obj["kind"])

    @property
    def name(self) -> str:
        return str(self.obj["metadata"]["name"])

    @property
    def namespace(self) -> str:
        return str(self.obj["metadata"].get("namespace") or "default")

    @property
    def api_version(self) -> str:
        return str(self.obj.get("apiVersion") or "v1")


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
    """The pods to schedule, in order; the PriorityClasses their ``priorityClassName`` names (the API server's
    Priority admission resolves them, :mod:`.priority`); the PodGroups of their gangs (created before the pods)."""

    pods: tuple[KubeObject, ...]
    source: str = ""
    priority_classes: tuple[KubeObject, ...] = ()
    pod_groups: tuple[KubeObject, ...] = ()


# --------------------------------------------------------------------------------------------
# Reading documents
# --------------------------------------------------------------------------------------------


def _read_documents(path: Path) -> list[tuple[str, Any]]:
    """``(location, document)`` pairs of a YAML/JSON file; Lists and top-level arrays are expanded."""
    label = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ManifestError(f"{label}: no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ManifestError(f"{label}: cannot read: {getattr(e, 'strerror', None) or e}") from None
    try:
        docs = list(yaml.safe_load_all(text))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ManifestError(f"{label}: not valid YAML or JSON{where}: {problem}") from None
    out: list[tuple[str, Any]] = []
    for i, doc in enumerate(docs, start=1):
        where = f"{label}: document {i}"
        if doc is None:
            continue
        if isinstance(doc, list):
            out += [(f"{where}, [{j}]", item) for j, item in enumerate(doc)]
        elif isinstance(doc, dict) and str(doc.get("kind", "")).endswith("List") and "items" in doc:
            items = doc.get("items")
            if items is None:
                continue
            if not isinstance(items, list):
                raise ManifestError(f"{where}: items: expected a list, got {_type(items)}")
            out += [(f"{where}, items[{j}]", item) for j, item in enumerate(items)]
        else:
            out.append((where, doc))
    return out


def _type(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, int | float):
        return "a number"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, list):
        return "a list"
    if isinstance(v, dict):
        return "a mapping"
    return type(v).__name__


def _fail(where: str, field: str, problem: str) -> ManifestError:
    return ManifestError(f"{where}: {field}: {problem}")


def _mapping(obj: Mapping[str, Any], key: str, where: str, field: str) -> dict[str, Any]:
    value = obj.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _fail(where, field, f"expected a mapping, got {_type(value)}")
    return value


def _string_map(obj: Mapping[str, Any], key: str, where: str, field: str) -> dict[str, str]:
    values = _mapping(obj, key, where, field)
    for k, v in values.items():
        if not isinstance(k, str):
            raise _fail(where, field, f"keys must be strings, got {_type(k)}")
        if not isinstance(v, str):
            raise _fail(where, f"{field}[{k}]", f"expected a string, got {_type(v)} (quote it)")
    return values


def _check_object(where: str, doc: Any, kinds: frozenset[str]) -> KubeObject:
    """Check the envelope every object shares: kind, apiVersion, metadata.name/namespace, labels, annotations."""
    if not isinstance(doc, dict):
        raise ManifestError(f"{where}: expected a Kubernetes object (a mapping), got {_type(doc)}")
    kind = doc.get("kind")
    if not isinstance(kind, str) or not kind:
        raise _fail(where, "kind", "missing")
    if kind not in kinds:
        expected = ", ".join(sorted(kinds))
        raise _fail(where, "kind", f"{kind!r} is not accepted here (expected {expected})")
    api_version = doc.get("apiVersion", "v1")
    accepted = API_VERSIONS.get(kind, ("v1",))
    if api_version not in accepted:
        raise _fail(where, "apiVersion", f"expected {' or '.join(accepted)} for a {kind}, got {api_version!r}")
    meta = _mapping(doc, "metadata", where, "metadata")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise _fail(where, "metadata.name", "missing (a non-empty string is required)")
    ns = meta.get("namespace")
    if ns is not None and (not isinstance(ns, str) or not ns):
        raise _fail(where, "metadata.namespace", f"expected a non-empty string, got {_type(ns)}")
    _string_map(meta, "labels", where, "metadata.labels")
    _string_map(meta, "annotations", where, "metadata.annotations")
    obj = copy.deepcopy(doc)
    obj["apiVersion"] = api_version
    return obj


def _annotation_field(key: str) -> str:
    return f"metadata.annotations[{key}]"


def _decode_failure(where: str, field: str, key: str, error: DecodeError) -> ManifestError:
    """A registration that does not decode: the codec's message without the key it repeats, after the field."""
    text = str(error)
    if text.startswith(key):
        text = text[len(key) :]
    if text.startswith("["):  # an index into the value: part of the field
        field, _, text = (field + text).partition(": ")
    return _fail(where, field, text.removeprefix(": "))


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
    status = _mapping(node, "status", loc.where, "status")
    for section in ("allocatable", "capacity"):
        values = _mapping(status, section, loc.where, f"status.{section}")
        for rname, q in values.items():
            _quantity(q, loc.where, f"status.{section}[{rname}]")
    spec = _mapping(node, "spec", loc.where, "spec")
    if not isinstance(spec.get("unschedulable", False), bool):
        raise _fail(loc.where, "spec.unschedulable", f"expected a boolean, got {_type(spec.get('unschedulable'))}")
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


def _quantity(value: Any, where: str, field: str) -> None:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise _fail(where, field, f'expected a quantity such as 4 or "16Gi", got {_type(value)}')
    try:
        parse_quantity(value, field)
    except DecodeError as e:
        raise _fail(where, field, e.detail) from None


def _check_pod(loc: Located, *, running: bool) -> None:
    pod = loc.obj
    spec = _mapping(pod, "spec", loc.where, "spec")
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        raise _fail(loc.where, "spec.containers", "a pod needs a non-empty list of containers")
    for key in ("initContainers", "containers"):
        items = spec.get(key) or []
        if not isinstance(items, list):
            raise _fail(loc.where, f"spec.{key}", f"expected a list, got {_type(items)}")
        for i, c in enumerate(items):
            field = f"spec.{key}[{i}]"
            if not isinstance(c, dict):
                raise _fail(loc.where, field, f"expected a mapping, got {_type(c)}")
            if not isinstance(c.get("name"), str) or not c.get("name"):
                raise _fail(loc.where, f"{field}.name", "missing")
            resources = _mapping(c, "resources", loc.where, f"{field}.resources")
            for section in ("limits", "requests"):
                values = _mapping(resources, section, loc.where, f"{field}.resources.{section}")
                for rname, q in values.items():
                    _quantity(q, loc.where, f"{field}.resources.{section}[{rname}]")
    if running:  # it exists, so the API server accepted it; a workload pod is validated when the driver creates it
        refused = pod_invalid(pod)
        if refused is not None:
            raise ManifestError(f"{loc.where}: {refused}")
    node_name = spec.get("nodeName")
    if node_name is not None and not isinstance(node_name, str):
        raise _fail(loc.where, "spec.nodeName", f"expected a string, got {_type(node_name)}")
    if not running:
        if node_name:
            raise _fail(loc.where, "spec.nodeName", "a workload pod must not be assigned to a node yet")
        return
    try:
        decode_allocation(pod)
    except DecodeError as e:
        raise _fail(loc.where, "metadata.annotations", str(e)) from None


def _check_quota(loc: Located) -> None:
    spec = _mapping(loc.obj, "spec", loc.where, "spec")
    hard = _mapping(spec, "hard", loc.where, "spec.hard")
    for rname, q in hard.items():
        _quantity(q, loc.where, f"spec.hard[{rname}]")


def _located(path: Path, kinds: frozenset[str]) -> list[Located]:
    return [Located(_check_object(where, doc, kinds), where) for where, doc in _read_documents(path)]


def _check_unique(items: Sequence[Located]) -> None:
    seen: dict[tuple[str, str, str], str] = {}
    for loc in items:
        namespaced = loc.kind in NAMESPACED
        kind = loc.kind if loc.api_version == "v1" else f"{loc.kind} {loc.api_version}"
        key = (kind, loc.namespace if namespaced else "", loc.name)
        if key in seen:
            shown = f"{key[1]}/{key[2]}" if namespaced else key[2]
            raise _fail(loc.where, "metadata.name", f"{kind} {shown} is already defined at {seen[key]}")
        seen[key] = loc.where


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
            raise _fail(loc.where, e.field, e.problem) from None
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
    items, unregistered = _expand_pools(_located(p, CLUSTER_KINDS), vendors)
    _check_unique(items)
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
                raise _fail(loc.where, "spec.nodeName", "a pod in the cluster file must be placed on a node")
            if node_name not in node_names:
                raise _fail(loc.where, "spec.nodeName", f"no Node {node_name!r} in this file")
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
        raise _fail(loc.where, "value", f"Required value: an integer priority, got {_type(value)}")
    if value > HIGHEST_USER_DEFINABLE_PRIORITY:
        raise _fail(
            loc.where, "value", f"maximum allowed value of a user defined priority is {HIGHEST_USER_DEFINABLE_PRIORITY}"
        )
    if loc.name.startswith("system-"):
        raise _fail(
            loc.where, "metadata.name", "priority class names with 'system-' prefix are reserved for system use"
        )
    if not isinstance(obj.get("globalDefault", False), bool):
        raise _fail(loc.where, "globalDefault", f"expected a boolean, got {_type(obj.get('globalDefault'))}")
    policy = obj.get("preemptionPolicy")
    if policy is not None and policy not in PREEMPTION_POLICIES:
        raise _fail(loc.where, "preemptionPolicy", f"expected {' or '.join(PREEMPTION_POLICIES)}, got {policy!r}")


def _check_pod_group(loc: Located) -> None:
    """A native PodGroup (``spec.schedulingPolicy``: ``gang.minCount`` or ``basic``) or a coscheduling one
    (``spec.minMember``)."""
    spec = _mapping(loc.obj, "spec", loc.where, "spec")
    if loc.api_version == COSCHEDULING_API:
        n = spec.get("minMember")
        if not _is_int(n) or n < 1:
            raise _fail(loc.where, "spec.minMember", f"expected an integer of at least 1, got {n!r}")
        return
    policy = _mapping(spec, "schedulingPolicy", loc.where, "spec.schedulingPolicy")
    if ("gang" in policy) == ("basic" in policy):
        raise _fail(loc.where, "spec.schedulingPolicy", "exactly one of gang or basic is required")
    if "gang" in policy:
        gang = _mapping(policy, "gang", loc.where, "spec.schedulingPolicy.gang")
        n = gang.get("minCount")
        if not _is_int(n) or n < 1:
            raise _fail(
                loc.where, "spec.schedulingPolicy.gang.minCount", f"expected an integer of at least 1, got {n!r}"
            )


def _check_scheduling_fields(loc: Located, groups: set[tuple[str, str]]) -> None:
    """A workload pod's priority fields (resolved at admission, :mod:`.priority`) and the PodGroup it names."""
    spec = loc.obj.get("spec") or {}
    if "priority" in spec and not _is_int(spec["priority"]):
        raise _fail(loc.where, "spec.priority", f"expected an integer, got {_type(spec['priority'])}")
    for key in ("priorityClassName", "preemptionPolicy"):
        if key in spec and not isinstance(spec[key], str):
            raise _fail(loc.where, f"spec.{key}", f"expected a string, got {_type(spec[key])}")
    group = spec.get("schedulingGroup")
    if group is None:
        return
    if not isinstance(group, dict) or not isinstance(group.get("podGroupName"), str) or not group["podGroupName"]:
        raise _fail(loc.where, "spec.schedulingGroup.podGroupName", "expected the name of a PodGroup")
    if (loc.namespace, group["podGroupName"]) not in groups:
        raise _fail(
            loc.where,
            "spec.schedulingGroup.podGroupName",
            f"no PodGroup {loc.namespace}/{group['podGroupName']} ({POD_GROUP_API}) in this file",
        )


def load_workload(path: str | Path) -> Workload:
    """Read and check a workload file: Pods, not yet placed, scheduled in file order; the PriorityClasses and
    PodGroups they name."""
    p = Path(path)
    items = _located(p, WORKLOAD_KINDS)
    _check_unique(items)
    classes = [loc for loc in items if loc.kind == "PriorityClass"]
    groups = [loc for loc in items if loc.kind == "PodGroup"]
    for loc in classes:
        _check_priority_class(loc)
    defaults = [loc for loc in classes if loc.obj.get("globalDefault")]
    if len(defaults) > 1:
        raise _fail(
            defaults[1].where,
            "globalDefault",
            f"PriorityClass {defaults[0].name} is already marked as default. Only one default can exist",
        )
    for loc in groups:
        _check_pod_group(loc)
        loc.obj["metadata"].setdefault("namespace", "default")
    native = {(loc.namespace, loc.name) for loc in groups if loc.api_version == POD_GROUP_API}
    pods = [loc for loc in items if loc.kind == "Pod"]
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
    )
