"""Kubernetes objects as plain data: the API server's JSON dict, camelCase keys exactly as served.

Pods, nodes and quotas travel through the codebase in this form (``KubeObject``); nothing converts them into
kubernetes-asyncio model classes. List items get ``kind``/``apiVersion`` filled in (the API server omits them
in lists), so every object carries its kind. Treat objects as read-only: informers share them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

KubeObject = dict[str, Any]
ObjectKey = tuple[str, str]  # (namespace, name); namespace "" for cluster-scoped objects


def meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """``obj.metadata`` (empty when absent)."""
    m = obj.get("metadata")
    return m if isinstance(m, Mapping) else {}


def name_of(obj: Mapping[str, Any]) -> str:
    return str(meta(obj).get("name", ""))


def namespace_of(obj: Mapping[str, Any]) -> str:
    """The namespace, ``""`` for cluster-scoped objects."""
    return str(meta(obj).get("namespace") or "")


def uid_of(obj: Mapping[str, Any]) -> str:
    return str(meta(obj).get("uid", ""))


def resource_version_of(obj: Mapping[str, Any]) -> str:
    return str(meta(obj).get("resourceVersion", ""))


def key_of(obj: Mapping[str, Any]) -> ObjectKey:
    """``(namespace, name)``: how informers index objects."""
    return namespace_of(obj), name_of(obj)


def annotations_of(obj: Mapping[str, Any]) -> Mapping[str, str]:
    a = meta(obj).get("annotations")
    return a if isinstance(a, Mapping) else {}


def labels_of(obj: Mapping[str, Any]) -> Mapping[str, str]:
    a = meta(obj).get("labels")
    return a if isinstance(a, Mapping) else {}


def pod_ref(namespace: str, name: str, uid: str = "", resource_version: str = "") -> KubeObject:
    """The minimal pod object an Event needs (``involvedObject``): namespace, name, uid and resourceVersion."""
    m: dict[str, Any] = {"namespace": namespace, "name": name}
    if uid:
        m["uid"] = uid
    if resource_version:
        m["resourceVersion"] = resource_version
    return {"metadata": m}


def controller_of(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The owner reference marked ``controller: true`` (the ReplicaSet, StatefulSet, Job... that recreates the
    object), or None."""
    refs = meta(obj).get("ownerReferences")
    for ref in refs if isinstance(refs, list) else []:
        if isinstance(ref, Mapping) and ref.get("controller") is True:
            return ref
    return None


NOT_ENDED = "status.phase!=Succeeded,status.phase!=Failed"
"""The field selector of the pods that have not ended."""

_SUMMARY_FIELDS = {
    "metadata": ("name", "namespace", "uid", "labels", "creationTimestamp", "deletionTimestamp"),
    "spec": ("nodeName", "priority", "preemptionPolicy", "schedulingGroup"),
    "status": ("phase", "startTime"),
}


def pod_summary(pod: Mapping[str, Any]) -> KubeObject:
    """``pod`` cut down to who it is, where it runs and in which state: its kind and apiVersion, and of
    ``metadata`` name, namespace, uid, labels, creationTimestamp, deletionTimestamp; of ``spec`` nodeName,
    priority, preemptionPolicy, schedulingGroup; of ``status`` phase, startTime. What preemption and gang checks
    read of thousands of pods at once: a whole pod decodes to about 12 KiB (annotations, containers,
    managedFields), its summary to under a sixth of that."""
    out: KubeObject = {k: pod[k] for k in ("kind", "apiVersion") if k in pod}
    for part, keys in _SUMMARY_FIELDS.items():
        src = pod.get(part)
        out[part] = {k: src[k] for k in keys if k in src} if isinstance(src, Mapping) else {}
    return out
