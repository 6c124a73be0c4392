"""Thin typed calls our services make: get/list pods and nodes, list resourcequotas, metadata merge patches
(optionally guarded by a resourceVersion), the pod ``binding`` and ``eviction`` subresources, and Events. Objects
in and out are plain JSON dicts.

Errors (``shared.k8s.errors``): 404 NotFoundError, 409 ConflictError (AlreadyBoundError from ``bind_pod``),
network/429/5xx/deadline TransientError (DisruptionBudgetError: ``evict_pod`` refused by a PodDisruptionBudget),
other 4xx KubeRequestError. Every call has a deadline.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote

from vgpu_scheduler.shared.codec.gang import POD_GROUP_VERSIONS
from vgpu_scheduler.shared.errors import NotFoundError, TransientError
from vgpu_scheduler.shared.k8s.client import Budget, KubeClient
from vgpu_scheduler.shared.k8s.errors import ExpiredError, KubeRequestError
from vgpu_scheduler.shared.k8s.objects import (
    KubeObject,
    name_of,
    namespace_of,
    pod_summary,
    resource_version_of,
    uid_of,
)
from vgpu_scheduler.shared.protocol.events import EventType

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
LIST_PAGE = 500
"""Pods per page of :meth:`Api.list_pod_summaries` (kubectl's default chunk size)."""
EVENT_MESSAGE_MAX = 1024  # events.k8s.io's note limit; core/v1 messages are cut the same way


def metadata_patch(
    annotations: Mapping[str, str | None] | None = None,
    labels: Mapping[str, str | None] | None = None,
    resource_version: str | None = None,
) -> dict[str, Any]:
    """The JSON merge patch ``{"metadata":{"annotations":{…},"labels":{…},"resourceVersion":"rv"}}``.
    A None value deletes that key; ``resource_version`` makes the server refuse (409) a stale write."""
    metadata: dict[str, Any] = {}
    if annotations:
        metadata["annotations"] = dict(annotations)
    if labels:
        metadata["labels"] = dict(labels)
    if resource_version is not None:
        metadata["resourceVersion"] = resource_version
    return {"metadata": metadata}


def _seg(name: str) -> str:
    """One path segment (object names are DNS labels; quoted all the same)."""
    return quote(name, safe="")


def _pod_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{_seg(namespace)}/pods/{_seg(name)}"


def _node_path(name: str) -> str:
    return f"/api/v1/nodes/{_seg(name)}"


def _dumps(body: Any) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode()


def _rfc3339(epoch_s: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch_s))


def _with_kind(items: list[KubeObject], kind: str) -> list[KubeObject]:
    for item in items:
        item.setdefault("kind", kind)
        item.setdefault("apiVersion", "v1")
    return items


def event_body(
    kind: str,
    obj: Mapping[str, Any],
    *,
    reason: str,
    message: str,
    event_type: EventType,
    component: str,
    instance: str,
    now_s: float,
) -> KubeObject:
    """A core/v1 Event about ``obj`` (of ``kind``), named ``<name>.<unix nanoseconds hex>`` as client-go names
    them; events about cluster-scoped objects (nodes) go to the ``default`` namespace."""
    name = name_of(obj)
    namespace = namespace_of(obj)
    involved: dict[str, str] = {"apiVersion": "v1", "kind": kind, "name": name}
    if namespace:
        involved["namespace"] = namespace
    if uid_of(obj):
        involved["uid"] = uid_of(obj)
    if resource_version_of(obj):
        involved["resourceVersion"] = resource_version_of(obj)
    stamp = _rfc3339(now_s)
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{name}.{int(now_s * 1e9):x}", "namespace": namespace or "default"},
        "involvedObject": involved,
        "reason": reason,
        "message": message[:EVENT_MESSAGE_MAX],
        "type": event_type.value,
        "source": {"component": component},
        "reportingComponent": component,
        "reportingInstance": instance,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


class Api:
    """Typed core/v1 calls over one ``KubeClient``. ``component`` names us in Events (``--scheduler-name``)."""

    def __init__(
        self,
        client: KubeClient,
        *,
        component: str,
        instance: str = "",
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._client = client
        self._core: Any = client.core
        self.component = component
        self.instance = instance
        self._clock = clock
        self._pod_group_version: str | None = None

    @property
    def client(self) -> KubeClient:
        """The connection the calls go through (an :class:`~shared.k8s.informer.Informer` shares it)."""
        return self._client

    # ---- reads -------------------------------------------------------------------------------------------------

    async def get_pod(self, namespace: str, name: str, *, timeout_s: float | None = None) -> KubeObject:
        what = f"get pod {namespace}/{name}"
        return self._object(
            what, await self._client.call_raw(what, "GET", _pod_path(namespace, name), timeout_s=timeout_s)
        )

    async def get_node(self, name: str, *, timeout_s: float | None = None) -> KubeObject:
        what = f"get node {name}"
        return self._object(what, await self._client.call_raw(what, "GET", _node_path(name), timeout_s=timeout_s))

    @staticmethod
    def _object(what: str, body: bytes) -> KubeObject:
        try:
            obj = json.loads(body)
        except ValueError as e:
            raise TransientError(f"{what}: the API server answered with a body that is not JSON") from e
        if not isinstance(obj, dict):
            raise TransientError(f"{what}: the API server answered with JSON that is not an object")
        return obj

    async def list_pods(
        self,
        *,
        namespace: str | None = None,
        node_name: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_s: float | None = None,
    ) -> list[KubeObject]:
        """Pods of one namespace or all; ``node_name`` adds the field selector ``spec.nodeName=<node>``."""
        fields = [f for f in (f"spec.nodeName={node_name}" if node_name is not None else None, field_selector) if f]
        body = await self._pod_list(namespace, label_selector, ",".join(fields), timeout_s)
        return _with_kind(list(body.get("items") or []), "Pod")

    async def list_pod_summaries(
        self,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_s: float | None = None,
    ) -> list[KubeObject]:
        """Pods of one namespace or all, each cut to its summary (``objects.pod_summary``), read
        :data:`LIST_PAGE` at a time: thousands of whole pods are never decoded at once. ``timeout_s`` is each
        page's. A list whose continuation expired (410: compacted since its first page) is read again, once."""
        try:
            return await self._summary_pages(namespace, label_selector, field_selector, timeout_s)
        except ExpiredError:
            return await self._summary_pages(namespace, label_selector, field_selector, timeout_s)

    async def _summary_pages(
        self, namespace: str | None, label_selector: str | None, field_selector: str | None, timeout_s: float | None
    ) -> list[KubeObject]:
        out: list[KubeObject] = []
        token = ""
        while True:
            body = await self._pod_list(
                namespace, label_selector, field_selector, timeout_s, limit=LIST_PAGE, token=token
            )
            out += (pod_summary(p) for p in _with_kind(list(body.get("items") or []), "Pod"))
            token = str((body.get("metadata") or {}).get("continue") or "")
            if not token:
                return out

    async def _pod_list(
        self,
        namespace: str | None,
        label_selector: str | None,
        field_selector: str | None,
        timeout_s: float | None,
        *,
        limit: int = 0,
        token: str = "",
    ) -> dict[str, Any]:
        given = {"field_selector": field_selector, "label_selector": label_selector, "limit": limit, "_continue": token}
        kwargs: dict[str, Any] = {k: v for k, v in given.items() if v}
        if namespace is None:
            body = await self._client.call_json(
                "list pods", self._core.list_pod_for_all_namespaces, timeout_s=timeout_s, **kwargs
            )
        else:
            body = await self._client.call_json(
                f"list pods in {namespace}", self._core.list_namespaced_pod, namespace, timeout_s=timeout_s, **kwargs
            )
        return body if isinstance(body, dict) else {}

    async def list_nodes(
        self, *, label_selector: str | None = None, timeout_s: float | None = None
    ) -> list[KubeObject]:
        kwargs: dict[str, Any] = {"label_selector": label_selector} if label_selector else {}
        body = await self._client.call_json("list nodes", self._core.list_node, timeout_s=timeout_s, **kwargs)
        return _with_kind(list(body.get("items") or []), "Node")

    async def list_resource_quotas(
        self, *, namespace: str | None = None, timeout_s: float | None = None
    ) -> list[KubeObject]:
        """ResourceQuotas of one namespace or all (the informer's reconcile compares them with Redis)."""
        if namespace is None:
            body = await self._client.call_json(
                "list resourcequotas", self._core.list_resource_quota_for_all_namespaces, timeout_s=timeout_s
            )
        else:
            body = await self._client.call_json(
                f"list resourcequotas in {namespace}",
                self._core.list_namespaced_resource_quota,
                namespace,
                timeout_s=timeout_s,
            )
        return _with_kind(list(body.get("items") or []), "ResourceQuota")

    # ---- metadata patches --------------------------------------------------------------------------------------

    async def patch_pod_metadata(
        self,
        namespace: str,
        name: str,
        *,
        annotations: Mapping[str, str | None] | None = None,
        labels: Mapping[str, str | None] | None = None,
        resource_version: str | None = None,
        timeout_s: float | None = None,
    ) -> KubeObject:
        """Merge-patch a pod's annotations/labels; returns the pod as stored. 409 → ConflictError."""
        patch = metadata_patch(annotations, labels, resource_version)
        return await self._merge_patch(f"patch pod {namespace}/{name}", _pod_path(namespace, name), patch, timeout_s)

    async def patch_node_metadata(
        self,
        name: str,
        *,
        annotations: Mapping[str, str | None] | None = None,
        labels: Mapping[str, str | None] | None = None,
        resource_version: str | None = None,
        timeout_s: float | None = None,
    ) -> KubeObject:
        """Merge-patch a node's annotations/labels (the node lock uses ``resource_version``); returns the node as
        stored. 409 → ConflictError."""
        patch = metadata_patch(annotations, labels, resource_version)
        return await self._merge_patch(f"patch node {name}", _node_path(name), patch, timeout_s)

    async def _merge_patch(self, what: str, path: str, patch: Mapping[str, Any], timeout_s: float | None) -> KubeObject:
        """Merge-patch the object at ``path``; returns it as stored."""
        body = await self._client.call_raw(
            what, "PATCH", path, _dumps(patch), content_type=MERGE_PATCH, timeout_s=timeout_s
        )
        return self._object(what, body)

    async def add_node_annotation_if_absent(
        self, name: str, key: str, value: str, *, timeout_s: float | None = None
    ) -> bool:
        """Set annotation ``key`` on a node only if it is absent, in one call: a JSON patch that tests the member
        for null (the API server passes that test on an absent member) and adds it. False when the annotation is
        present, or the node has no annotations at all (the test or the add fails: read the node and decide).
        The node as stored is not decoded."""
        path = "/metadata/annotations/" + key.replace("~", "~0").replace("/", "~1")
        body = [{"op": "test", "path": path, "value": None}, {"op": "add", "path": path, "value": value}]
        try:
            await self._client.call_raw(
                f"lock node {name}",
                "PATCH",
                _node_path(name),
                _dumps(body),
                content_type=JSON_PATCH,
                timeout_s=timeout_s,
            )
        except KubeRequestError as e:
            if e.code == 422:
                return False
            raise
        return True

    # ---- binding -----------------------------------------------------------------------------------------------

    async def bind_pod(
        self,
        namespace: str,
        name: str,
        node: str,
        *,
        uid: str | None = None,
        resource_version: str | None = None,
        annotations: Mapping[str, str] | None = None,
        labels: Mapping[str, str] | None = None,
        timeout_s: float | None = None,
    ) -> None:
        """``POST pods/{name}/binding`` to ``node``, in one write with ``annotations`` and ``labels``.

        The API server sets the pod's node and merges the Binding's annotations into the pod's in the same update
        (``BindingREST``: always; its labels too from v1.35, where the ``PodTopologyLabelsAdmission`` gate is on by
        default: on an older server the labels are dropped silently). ``uid`` and ``resource_version`` are
        preconditions: a re-created pod, or one changed since that version, is refused with 409
        (:class:`~shared.k8s.errors.StaleVersionError` for the version). AlreadyBoundError (with ``.node``) when
        the pod already has a node."""
        metadata: dict[str, Any] = {"name": name, "namespace": namespace}
        if uid:
            metadata["uid"] = uid
        if resource_version:
            metadata["resourceVersion"] = resource_version
        if annotations:
            metadata["annotations"] = dict(annotations)
        if labels:
            metadata["labels"] = dict(labels)
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": metadata,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        what = f"bind pod {namespace}/{name} to {node}"
        await self._post_subresource(what, _pod_path(namespace, name) + "/binding", body, timeout_s)

    async def _post_subresource(self, what: str, path: str, body: Mapping[str, Any], timeout_s: float | None) -> None:
        await self._client.call_raw(what, "POST", path, _dumps(body), timeout_s=timeout_s)

    # ---- events ------------------------------------------------------------------------------------------------

    async def create_event(
        self,
        kind: str,
        obj: Mapping[str, Any],
        *,
        reason: str,
        message: str,
        event_type: EventType = EventType.NORMAL,
        timeout_s: float | None = None,
    ) -> KubeObject:
        """Record an Event on ``obj`` (``kind`` ``Pod`` or ``Node``: kube-scheduler's pods carry no kind)."""
        body = event_body(
            kind,
            obj,
            reason=reason,
            message=message,
            event_type=event_type,
            component=self.component,
            instance=self.instance,
            now_s=self._clock(),
        )
        ns = body["metadata"]["namespace"]
        created: KubeObject = await self._client.call_json(
            f"create event {reason} on {kind.lower()} {name_of(obj)}",
            self._core.create_namespaced_event,
            ns,
            body,
            timeout_s=timeout_s,
            budget=Budget.EVENTS,
        )
        return created

    async def pod_event(
        self, pod: Mapping[str, Any], *, reason: str, message: str, event_type: EventType = EventType.NORMAL
    ) -> KubeObject:
        return await self.create_event("Pod", pod, reason=reason, message=message, event_type=event_type)

    async def node_event(
        self, node: Mapping[str, Any], *, reason: str, message: str, event_type: EventType = EventType.NORMAL
    ) -> KubeObject:
        return await self.create_event("Node", node, reason=reason, message=message, event_type=event_type)

    # ---- preemption (docs/preemption.md) -----------------------------------------------------------------------

    async def delete_pod(
        self, namespace: str, name: str, *, uid: str | None = None, timeout_s: float | None = None
    ) -> None:
        """Delete a pod (its own grace period). With ``uid`` the server refuses (409) a re-created namesake.
        A pod already gone is not an error."""
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if uid:
            body["preconditions"] = {"uid": uid}
        what = f"delete pod {namespace}/{name}"
        try:
            await self._client.call_raw(what, "DELETE", _pod_path(namespace, name), _dumps(body), timeout_s=timeout_s)
        except NotFoundError:
            return

    async def evict_pod(
        self, namespace: str, name: str, *, uid: str | None = None, timeout_s: float | None = None
    ) -> None:
        """``POST pods/{name}/eviction`` (policy/v1): the API server deletes the pod (its own grace period) only if
        its PodDisruptionBudget allows it, else :class:`~shared.k8s.errors.DisruptionBudgetError` (429). With
        ``uid`` a re-created namesake is refused (409, UidMismatchError). A pod already gone: NotFoundError."""
        options: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if uid:
            options["preconditions"] = {"uid": uid}
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
            "deleteOptions": options,
        }
        what = f"evict pod {namespace}/{name}"
        await self._post_subresource(what, _pod_path(namespace, name) + "/eviction", body, timeout_s)

    async def patch_pod_status(
        self, namespace: str, name: str, status: Mapping[str, Any], *, timeout_s: float | None = None
    ) -> KubeObject:
        """Strategic-merge-patch a pod's ``status`` (conditions merge by type; ``nominatedNodeName``)."""
        what = f"patch status of pod {namespace}/{name}"
        body = await self._client.call_raw(
            what,
            "PATCH",
            _pod_path(namespace, name) + "/status",
            _dumps({"status": dict(status)}),
            content_type=STRATEGIC_MERGE_PATCH,
            timeout_s=timeout_s,
        )
        return self._object(what, body)

    async def list_pod_disruption_budgets(self, *, timeout_s: float | None = None) -> list[KubeObject]:
        """Every PodDisruptionBudget (policy/v1); none when the API does not serve them."""
        what = "list poddisruptionbudgets"
        try:
            body = await self._client.call_raw(what, "GET", "/apis/policy/v1/poddisruptionbudgets", timeout_s=timeout_s)
        except NotFoundError:
            return []
        items = self._object(what, body).get("items") or []
        return _with_kind(list(items), "PodDisruptionBudget")

    async def get_pod_group(self, namespace: str, name: str, *, timeout_s: float | None = None) -> KubeObject | None:
        """A native ``scheduling.k8s.io`` PodGroup (Kubernetes gang scheduling: ``v1beta1`` from v1.37, ``v1alpha2``
        on v1.36; the version that last answered is asked first); None when it does not exist or the API serves no
        PodGroups."""
        what = f"get podgroup {namespace}/{name}"
        versions = sorted(POD_GROUP_VERSIONS, key=lambda v: v != self._pod_group_version)
        for version in versions:
            path = f"/apis/scheduling.k8s.io/{version}/namespaces/{_seg(namespace)}/podgroups/{_seg(name)}"
            try:
                body = await self._client.call_raw(what, "GET", path, timeout_s=timeout_s)
            except NotFoundError:
                continue
            self._pod_group_version = version
            return self._object(what, body)
        return None

    async def get_coscheduling_pod_group(
        self, namespace: str, name: str, *, timeout_s: float | None = None
    ) -> KubeObject | None:
        """A scheduler-plugins ``scheduling.x-k8s.io/v1alpha1`` PodGroup (named by the coscheduling label); None
        when it does not exist or the API does not serve that CRD."""
        what = f"get coscheduling podgroup {namespace}/{name}"
        path = f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{_seg(namespace)}/podgroups/{_seg(name)}"
        try:
            body = await self._client.call_raw(what, "GET", path, timeout_s=timeout_s)
        except NotFoundError:
            return None
        return self._object(what, body)
