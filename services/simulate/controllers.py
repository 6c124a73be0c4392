"""kube-controller-manager's workload controllers, as ``simulate`` plays them: which pods a controller owns, the pods
a controller document of the workload file stands for, and the replacement a controller creates for a pod that is
deleted (evicted, preempted, moved).

A pod is **owned** when one of its ``metadata.ownerReferences`` says ``controller: true``; a bare pod has none and
nothing recreates it. A workload file states ownership in one of two ways (docs/simulate.md, "Controllers"):

* a ``Deployment``, ``ReplicaSet``, ``StatefulSet`` (``apps/v1``) or ``Job`` (``batch/v1``) document: it stands
  for its ``spec.replicas`` pods (a Job's ``spec.parallelism``; default 1) made from ``spec.template``, at its
  place in the file, named and labelled as the controller names them (``<rs>-<5 chars>``, a Deployment's through
  its ReplicaSet ``<deployment>-<10 chars>``; ``<statefulset>-<ordinal>``; ``<job>-<5 chars>``), each with its
  controller reference (:func:`expand`);
* a Pod carrying a controller ``ownerReference`` itself (as ``kubectl get pods -o yaml`` shows one): its own spec
  is its controller's template.

When an owned pod is deleted the controller creates a replacement (:func:`replacement`): a new pod, a new UID, the
same template, ``delay_s`` later. A ReplicaSet (so a Deployment), a Job and any other controller kind do not wait
for the old pod to end (a terminating pod no longer counts as theirs); a StatefulSet waits until the old pod is gone
and reuses its name. A Job stops replacing pods once more than ``spec.backoffLimit`` (default 6) of them failed.
Names are derived from a hash, so runs are reproducible. The checks of a controller document and of a pod's
``ownerReferences`` are here too. Pure: no I/O.
"""

from __future__ import annotations

import copy
import enum
import hashlib
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vgpu_scheduler.services.simulate.documents import (
    API_VERSIONS,
    CONTROLLER_KINDS,
    Located,
    field_error,
    mapping_at,
    type_name,
)
from vgpu_scheduler.shared.emulator.selectors import structured_selector
from vgpu_scheduler.shared.emulator.status import ApiError

KubeObject = dict[str, Any]

APPS = "apps/v1"
CONTROLLER_APIS: dict[str, str] = {kind: API_VERSIONS[kind][0] for kind in CONTROLLER_KINDS}
"""The controller kinds a workload file may hold, with their apiVersion."""
DEFAULT_BACKOFF_LIMIT = 6
"""A Job's ``spec.backoffLimit`` when absent."""
_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
"""The characters of the random suffixes Kubernetes generates (``utilrand.String``)."""
_USER_HAMI_ANNOTATIONS = frozenset(
    {"hami.io/node-scheduler-policy", "hami.io/gpu-scheduler-policy", "hami.io/device-scoring-weights"}
)


class Replace(enum.Enum):
    """When a controller creates the replacement of a deleted pod."""

    ON_DELETION = "on deletion"
    """As soon as the pod is marked for deletion (ReplicaSet, Job, other kinds)."""
    WHEN_GONE = "when gone"
    """Once the pod is gone, under the same name (StatefulSet)."""


@dataclass(frozen=True, slots=True)
class Owner:
    """A pod's controller reference."""

    kind: str
    name: str
    uid: str
    api_version: str

    @property
    def label(self) -> str:
        return f"{self.kind}/{self.name}"

    @property
    def replace(self) -> Replace:
        return Replace.WHEN_GONE if self.kind == "StatefulSet" else Replace.ON_DELETION

    def reference(self) -> dict[str, Any]:
        return {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }


def owner_of(pod: Mapping[str, Any]) -> Owner | None:
    """The pod's controller (the ``ownerReferences`` entry with ``controller: true``), or None for a bare pod."""
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("controller") is True:
            return Owner(
                kind=str(ref.get("kind") or ""),
                name=str(ref.get("name") or ""),
                uid=str(ref.get("uid") or ""),
                api_version=str(ref.get("apiVersion") or ""),
            )
    return None


def _digest(*parts: str) -> bytes:
    return hashlib.sha256("\x00".join(parts).encode()).digest()


def suffix(*parts: str, length: int = 5) -> str:
    """A Kubernetes-style random suffix, derived from ``parts`` (the same parts, the same suffix)."""
    return "".join(_ALPHABET[b % len(_ALPHABET)] for b in _digest(*parts)[:length])


def _uid(*parts: str) -> str:
    return str(uuid.UUID(bytes=_digest(*parts)[:16], version=4))


@dataclass(frozen=True, slots=True)
class ControllerSpec:
    """What a controller document says about the pods it owns (beyond their template)."""

    owner: Owner
    namespace: str
    backoff_limit: int | None = None
    """A Job's ``spec.backoffLimit`` (None: not a Job)."""


def replicas_of(obj: Mapping[str, Any]) -> int:
    """How many pods a controller document stands for: ``spec.replicas`` (a Job's ``spec.parallelism``), default 1."""
    spec = obj.get("spec") or {}
    n = spec.get("parallelism" if obj.get("kind") == "Job" else "replicas", 1)
    return n if isinstance(n, int) and not isinstance(n, bool) else 1


def expand(obj: Mapping[str, Any]) -> tuple[ControllerSpec, list[KubeObject]]:
    """The pods a controller document stands for (module docstring), in ordinal order, and its spec. The document
    is checked already (:mod:`.manifests`)."""
    kind, meta = str(obj["kind"]), obj["metadata"]
    name, ns = str(meta["name"]), str(meta.get("namespace") or "default")
    spec = obj.get("spec") or {}
    template = spec["template"]
    labels = dict((template.get("metadata") or {}).get("labels") or {})
    owner = Owner(kind, name, _uid(kind, ns, name), CONTROLLER_APIS[kind])
    if kind == "Deployment":
        pod_hash = suffix("template", repr(sorted(template.items())), length=10)
        rs = f"{name}-{pod_hash}"
        owner = Owner("ReplicaSet", rs, _uid("ReplicaSet", ns, rs), APPS)
        labels["pod-template-hash"] = pod_hash
    backoff = spec.get("backoffLimit", DEFAULT_BACKOFF_LIMIT) if kind == "Job" else None
    if kind == "Job":
        labels.setdefault("batch.kubernetes.io/job-name", name)
        labels.setdefault("job-name", name)
    pods = []
    for i in range(replicas_of(obj)):
        pod_labels = dict(labels)
        if kind == "StatefulSet":
            pod_name = f"{name}-{i}"
            pod_labels["statefulset.kubernetes.io/pod-name"] = pod_name
            pod_labels["apps.kubernetes.io/pod-index"] = str(i)
        else:
            pod_name = f"{owner.name}-{suffix(ns, owner.name, str(i))}"
        pods.append(_pod_from(template, ns, pod_name, pod_labels, owner))
    return ControllerSpec(owner, ns, backoff if isinstance(backoff, int) else None), pods


def _pod_from(
    template: Mapping[str, Any], namespace: str, name: str, labels: Mapping[str, str], owner: Owner
) -> KubeObject:
    tmeta = template.get("metadata") or {}
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "ownerReferences": [owner.reference()]}
    if labels:
        meta["labels"] = dict(labels)
    if tmeta.get("annotations"):
        meta["annotations"] = dict(tmeta["annotations"])
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": copy.deepcopy(template.get("spec") or {})}


def template_of(pod: Mapping[str, Any]) -> KubeObject:
    """A pod as its controller's template makes it again: its labels, annotations (less what the scheduler and the
    device plugin wrote: every ``hami.io/*`` annotation but the user's policy ones) and spec (less ``nodeName`` and
    what admission set, ``priority``); no status, UID or timestamps."""
    meta = pod.get("metadata") or {}
    spec = {k: copy.deepcopy(v) for k, v in (pod.get("spec") or {}).items() if k not in ("nodeName", "priority")}
    annotations = {
        k: v
        for k, v in (meta.get("annotations") or {}).items()
        if not k.startswith("hami.io/") or k in _USER_HAMI_ANNOTATIONS
    }
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if not k.startswith("hami.io/")}
    out_meta: dict[str, Any] = {"name": meta.get("name"), "namespace": meta.get("namespace") or "default"}
    for key, value in (("labels", labels), ("annotations", annotations)):
        if value:
            out_meta[key] = value
    if meta.get("ownerReferences"):
        out_meta["ownerReferences"] = copy.deepcopy(meta["ownerReferences"])
    return {"apiVersion": "v1", "kind": "Pod", "metadata": out_meta, "spec": spec}


def replacement(template: Mapping[str, Any], owner: Owner, serial: int) -> KubeObject:
    """The pod ``owner`` creates in place of one made from ``template`` (:func:`template_of` or a workload pod):
    the same template, a new name (a StatefulSet's: the same), ``serial`` numbering its replacements."""
    pod = template_of(template)
    meta = pod["metadata"]
    if owner.replace is Replace.ON_DELETION:
        meta["name"] = f"{owner.name}-{suffix(str(meta['namespace']), owner.name, 'replacement', str(serial))}"
    return pod


def check_controller(loc: Located) -> None:
    """A controller document as the API server validates what ``simulate`` reads of it: ``spec.replicas`` (a Job's
    ``parallelism``, ``backoffLimit``) a non-negative integer, a ``spec.template`` with a pod spec, and (apps/v1) a
    ``spec.selector`` that matches the template's labels. The pods it stands for are checked as Pods afterwards."""
    spec = mapping_at(loc.obj, "spec", loc.where, "spec")
    for key in ("parallelism", "backoffLimit") if loc.kind == "Job" else ("replicas",):
        n = spec.get(key, 1)
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise field_error(loc.where, f"spec.{key}", f"expected a non-negative integer, got {type_name(n)}")
    template = mapping_at(spec, "template", loc.where, "spec.template")
    mapping_at(template, "spec", loc.where, "spec.template.spec")
    if not template.get("spec"):
        raise field_error(loc.where, "spec.template.spec", "Required value: a pod template")
    tmeta = mapping_at(template, "metadata", loc.where, "spec.template.metadata")
    if loc.kind == "Job":
        return
    try:
        selector = structured_selector(mapping_at(spec, "selector", loc.where, "spec.selector"))
    except ApiError as e:
        raise field_error(loc.where, "spec.selector", e.message) from None
    if not selector.requirements:
        raise field_error(loc.where, "spec.selector", "Required value: a non-empty selector")
    if not selector.matches(tmeta.get("labels")):
        raise field_error(
            loc.where, "spec.template.metadata.labels", "Invalid value: `selector` does not match template `labels`"
        )


def check_owner_references(loc: Located) -> None:
    """A workload pod's ``metadata.ownerReferences``: a list of references with ``kind`` and ``name``, at most one
    with ``controller: true``. A controller reference without a ``uid`` gets one derived from its kind and name
    (the pods naming the same controller share it)."""
    refs = loc.obj["metadata"].get("ownerReferences")
    if refs is None:
        return
    if not isinstance(refs, list):
        raise field_error(loc.where, "metadata.ownerReferences", f"expected a list, got {type_name(refs)}")
    controllers = 0
    for i, ref in enumerate(refs):
        field = f"metadata.ownerReferences[{i}]"
        if not isinstance(ref, dict):
            raise field_error(loc.where, field, f"expected a mapping, got {type_name(ref)}")
        for key in ("apiVersion", "kind", "name"):
            if not isinstance(ref.get(key), str) or not ref[key]:
                raise field_error(loc.where, f"{field}.{key}", "Required value")
        if not isinstance(ref.get("controller", False), bool):
            raise field_error(
                loc.where, f"{field}.controller", f"expected a boolean, got {type_name(ref['controller'])}"
            )
        if ref.get("controller"):
            controllers += 1
            ref.setdefault("uid", _uid(str(ref["kind"]), loc.namespace, str(ref["name"])))
    if controllers > 1:
        raise field_error(
            loc.where, "metadata.ownerReferences", "Invalid value: only one reference can have Controller set to true"
        )
