"""The emulator's object store: objects by resource, one resourceVersion counter, a bounded event history, and
the open watches. No HTTP here; ``server.py`` maps requests onto these methods.

Stored objects are never modified in place: every write builds a new dict, so history entries and watch frames
can share them. Callers outside the emulator get deep copies.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from vgpu_scheduler.shared.emulator.patch import apply_patch
from vgpu_scheduler.shared.emulator.resources import CreateStatus, ResourceType
from vgpu_scheduler.shared.emulator.selectors import FieldSelector, LabelSelector
from vgpu_scheduler.shared.emulator.status import (
    ApiError,
    already_exists,
    bad_request,
    conflict,
    expired,
    failure_status,
    invalid,
    not_found,
    stale,
)

Obj = dict[str, Any]
_T = TypeVar("_T")
Key = tuple[str, str]  # (namespace or "", name)

ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"


def dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def clone(obj: _T) -> _T:
    """A deep copy of a JSON value (several times faster than ``copy.deepcopy`` for API objects)."""
    return cast(_T, json.loads(json.dumps(obj)))


def rfc3339(epoch_s: float) -> str:
    """A Kubernetes ``Time`` string: RFC 3339, UTC, whole seconds."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch_s))


def _frame(event: str, obj_json: bytes) -> bytes:
    return b'{"type":"' + event.encode() + b'","object":' + obj_json + b"}\n"


def _with_rv(obj: Obj, rv: int) -> Obj:
    out = dict(obj)
    out["metadata"] = {**obj["metadata"], "resourceVersion": str(rv)}
    return out


@dataclass(slots=True)
class HistoryEntry:
    """One committed change; ``old`` is the previous state (None for ADDED)."""

    rv: int
    rtype: ResourceType
    event: str
    obj: Obj
    old: Obj | None
    _json: bytes | None = None

    def obj_json(self) -> bytes:
        if self._json is None:
            self._json = dumps(self.obj)
        return self._json


@dataclass(eq=False)
class Watcher:
    """One open watch: its filters and the queue of frames its HTTP stream writes (None ends the stream)."""

    rtype: ResourceType
    namespace: str | None
    labels: LabelSelector
    fields: FieldSelector
    bookmarks: bool
    queue: asyncio.Queue[bytes | None] = field(default_factory=asyncio.Queue)

    def matches(self, obj: Obj) -> bool:
        meta = obj.get("metadata", {})
        if self.namespace is not None and meta.get("namespace") != self.namespace:
            return False
        return self.labels.matches(meta.get("labels")) and self.fields.matches(obj)

    def offer(self, entry: HistoryEntry) -> None:
        """Queue the event this change means for this watch, as the API server's watch cache converts it."""
        if entry.rtype is not self.rtype:
            return
        if entry.event == DELETED:
            if self.matches(entry.obj):
                self.queue.put_nowait(_frame(DELETED, entry.obj_json()))
            return
        now_match = self.matches(entry.obj)
        was_match = entry.old is not None and self.matches(entry.old)
        if now_match and was_match:
            self.queue.put_nowait(_frame(MODIFIED, entry.obj_json()))
        elif now_match:
            self.queue.put_nowait(_frame(ADDED, entry.obj_json()))
        elif was_match and entry.old is not None:
            # it left the selection: a DELETED with the previous content at the new resourceVersion
            self.queue.put_nowait(_frame(DELETED, dumps(_with_rv(entry.old, entry.rv))))

    def bookmark_frame(self, rv: int) -> bytes:
        meta = {"resourceVersion": str(rv)}
        obj = {"kind": self.rtype.kind, "apiVersion": self.rtype.group_version, "metadata": meta}
        return _frame("BOOKMARK", dumps(obj))


class Store:
    """Objects, resourceVersions, history and watches of one emulated API server."""

    def __init__(
        self,
        *,
        history_limit: int,
        now: Callable[[], float],
        on_change: Callable[[], None],
        graceful_pod_deletion: bool = False,
    ) -> None:
        self.graceful_pod_deletion = graceful_pod_deletion
        """Delete a pod bound to a node as kube-apiserver does: with a grace period, the pod stays (with
        ``deletionTimestamp``) until a kubelet deletes it again with ``gracePeriodSeconds: 0``."""
        self.rv = 1
        self.compacted_rv = 1  # every event with rv > compacted_rv is in the history
        self.history_limit = history_limit
        self._now = now
        self._on_change = on_change
        self._objects: dict[str, dict[Key, Obj]] = {}
        self._history: deque[HistoryEntry] = deque()
        self._watchers: dict[Watcher, None] = {}  # insertion-ordered: events reach watchers in a fixed order

    # ---- reads -------------------------------------------------------------------------------------------------

    def now(self) -> float:
        """The store's clock (seconds since the epoch; the simulator's simulated one)."""
        return self._now()

    def get(self, rtype: ResourceType, namespace: str, name: str) -> Obj:
        obj = self._objects.get(rtype.key, {}).get((namespace, name))
        if obj is None:
            raise not_found(rtype.plural, name)
        return obj

    def find(self, rtype: ResourceType, namespace: str, name: str) -> Obj | None:
        return self._objects.get(rtype.key, {}).get((namespace, name))

    def select(
        self, rtype: ResourceType, namespace: str | None, labels: LabelSelector, fields: FieldSelector
    ) -> tuple[list[Obj], int]:
        """The matching objects in key order (namespace, name), and the store's resourceVersion."""
        table = self._objects.get(rtype.key, {})
        out: list[Obj] = []
        for key in sorted(table):
            obj = table[key]
            if namespace is not None and key[0] != namespace:
                continue
            if labels.matches(obj["metadata"].get("labels")) and fields.matches(obj):
                out.append(obj)
        return out, self.rv

    # ---- writes ------------------------------------------------------------------------------------------------

    def _commit(self, rtype: ResourceType, event: str, key: Key, obj: Obj, old: Obj | None) -> Obj:
        self.rv += 1
        obj = _with_rv(obj, self.rv)
        table = self._objects.setdefault(rtype.key, {})
        if event == DELETED:
            table.pop(key, None)
        else:
            table[key] = obj
        entry = HistoryEntry(self.rv, rtype, event, obj, old)
        self._history.append(entry)
        while len(self._history) > self.history_limit:
            self.compacted_rv = self._history.popleft().rv
        if not self._history:
            self.compacted_rv = self.rv
        for w in self._watchers:
            w.offer(entry)
        self._on_change()
        return obj

    def _check_type(self, rtype: ResourceType, body: Any) -> Obj:
        if not isinstance(body, dict):
            raise bad_request(f"the body of a {rtype.kind} must be a JSON object")
        gv = rtype.group_version
        if body.get("kind", rtype.kind) != rtype.kind or body.get("apiVersion", gv) != gv:
            raise bad_request(
                f"the API version in the data ({body.get('apiVersion')}) and kind ({body.get('kind')}) do not "
                f"match the resource {gv}/{rtype.kind}"
            )
        meta = body.get("metadata", {})
        if not isinstance(meta, dict):
            raise bad_request("metadata must be a JSON object")
        return body

    def create(self, rtype: ResourceType, namespace: str | None, body: Any) -> Obj:
        """POST: assign uid, creationTimestamp and resourceVersion; 409 AlreadyExists on a name clash."""
        body = self._check_type(rtype, body)
        meta = dict(body.get("metadata") or {})
        if not meta.get("name"):
            prefix = meta.get("generateName")
            if not prefix:
                raise invalid(rtype.kind, "", "metadata.name: Required value: name or generateName is required")
            meta["name"] = prefix + uuid.uuid4().hex[:5]
        name = str(meta["name"])
        if rtype.namespaced:
            ns = namespace or meta.get("namespace") or "default"
            if meta.get("namespace") not in (None, "", ns):
                raise bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            meta["namespace"] = ns
        else:
            ns = ""
            meta.pop("namespace", None)
        key = (ns, name)
        if key in self._objects.get(rtype.key, {}):
            raise already_exists(rtype.plural, name)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = rfc3339(self._now())
        meta.pop("resourceVersion", None)
        obj: Obj = {"apiVersion": rtype.group_version, "kind": rtype.kind, "metadata": meta}
        obj.update({k: v for k, v in body.items() if k not in ("apiVersion", "kind", "metadata")})
        if rtype.create_status is CreateStatus.RESET:
            obj.pop("status", None)
        elif rtype.create_status is CreateStatus.PENDING:
            obj["status"] = {"phase": "Pending"}
        return self._commit(rtype, ADDED, key, obj, None)

    def put(self, rtype: ResourceType, obj: Obj) -> Obj:
        """Create or replace an object whole, status included (the in-process helper; no preconditions)."""
        obj = self._check_type(rtype, clone(obj))
        meta = obj.setdefault("metadata", {})
        name = meta.get("name")
        if not name:
            raise ValueError("put: the object has no metadata.name")
        if rtype.namespaced:
            meta.setdefault("namespace", "default")
        key = (meta.get("namespace", "") if rtype.namespaced else "", str(name))
        old = self.find(rtype, *key)
        if old is not None:
            meta.setdefault("uid", old["metadata"]["uid"])
            meta.setdefault("creationTimestamp", old["metadata"]["creationTimestamp"])
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", rfc3339(self._now()))
        obj = {"apiVersion": rtype.group_version, "kind": rtype.kind, **obj}
        return self._commit(rtype, MODIFIED if old is not None else ADDED, key, obj, old)

    def _finish_update(self, rtype: ResourceType, current: Obj, candidate: Any, subresource: str | None) -> Obj:
        """Validate an updated object against the current one, apply status rules, commit if anything changed."""
        candidate = self._check_type(rtype, candidate)
        cmeta = current["metadata"]
        name = cmeta["name"]
        meta = dict(candidate.get("metadata") or {})
        if meta.get("name", name) != name:
            raise bad_request(
                f"the name of the object ({meta.get('name')}) does not match the name on the URL ({name})"
            )
        if rtype.namespaced and meta.get("namespace", cmeta.get("namespace")) != cmeta.get("namespace"):
            raise bad_request("the namespace of the provided object does not match the namespace sent on the request")
        want_rv = meta.get("resourceVersion")
        if want_rv not in (None, "") and want_rv != cmeta["resourceVersion"]:
            raise stale(rtype.plural, name)
        want_uid = meta.get("uid")
        if want_uid not in (None, "") and want_uid != cmeta["uid"]:
            raise conflict(
                rtype.plural,
                name,
                f"Precondition failed: UID in precondition: {want_uid}, UID in object meta: {cmeta['uid']}",
            )
        for fixed in ("name", "namespace", "uid", "creationTimestamp", "resourceVersion"):
            if fixed in cmeta:
                meta[fixed] = cmeta[fixed]
            else:
                meta.pop(fixed, None)
        if subresource == "status":
            # the status endpoint changes status (and, as the real one, labels and annotations), never spec
            new: Obj = dict(current)
            new["metadata"] = {**cmeta, "labels": meta.get("labels"), "annotations": meta.get("annotations")}
            new["metadata"] = {k: v for k, v in new["metadata"].items() if v is not None}
            new["status"] = candidate.get("status", {})
        else:
            new = {"apiVersion": rtype.group_version, "kind": rtype.kind, "metadata": meta}
            new.update({k: v for k, v in candidate.items() if k not in ("apiVersion", "kind", "metadata")})
            if rtype.has_status:
                if "status" in current:
                    new["status"] = current["status"]
                else:
                    new.pop("status", None)
        if new == current:
            return current  # a no-op write: no new resourceVersion, no watch event (as the real server)
        key = (cmeta.get("namespace", ""), name)
        return self._commit(rtype, MODIFIED, key, new, current)

    def replace(self, rtype: ResourceType, namespace: str, name: str, body: Any, *, subresource: str | None) -> Obj:
        """PUT (optionally on ``/status``): a non-empty ``metadata.resourceVersion`` is a precondition."""
        return self._finish_update(rtype, self.get(rtype, namespace, name), body, subresource)

    def patch(
        self, rtype: ResourceType, namespace: str, name: str, content_type: str, body: Any, *, subresource: str | None
    ) -> Obj:
        """PATCH (optionally on ``/status``); a ``metadata.resourceVersion`` in the result is a precondition."""
        current = self.get(rtype, namespace, name)
        patched = apply_patch(content_type, current, body)
        if not isinstance(patched, dict):
            raise ApiError(422, f"the patched {rtype.kind} is not a JSON object")
        return self._finish_update(rtype, current, patched, subresource)

    def delete(self, rtype: ResourceType, namespace: str, name: str, options: Any = None) -> Obj:
        """DELETE now; DeleteOptions ``preconditions`` on uid/resourceVersion are honoured. With
        ``graceful_pod_deletion``, a pod bound to a node and not ended is only marked (:meth:`_grace_of`)."""
        current = self.get(rtype, namespace, name)
        pre = options.get("preconditions") if isinstance(options, dict) else None
        if isinstance(pre, dict):
            meta = current["metadata"]
            if pre.get("uid") not in (None, "") and pre["uid"] != meta["uid"]:
                raise conflict(
                    rtype.plural,
                    name,
                    f"Precondition failed: UID in precondition: {pre['uid']}, UID in object meta: {meta['uid']}",
                )
            if pre.get("resourceVersion") not in (None, "") and pre["resourceVersion"] != meta["resourceVersion"]:
                raise conflict(
                    rtype.plural,
                    name,
                    f"Precondition failed: ResourceVersion in precondition: {pre['resourceVersion']}, "
                    f"ResourceVersion in object meta: {meta['resourceVersion']}",
                )
        grace = self._grace_of(rtype, current, options)
        if grace > 0:
            meta = current["metadata"]
            if meta.get("deletionTimestamp") and int(meta.get("deletionGracePeriodSeconds") or 0) <= grace:
                return current  # already terminating, as soon or sooner
            marked = clone(current)
            marked["metadata"]["deletionTimestamp"] = rfc3339(self._now() + grace)
            marked["metadata"]["deletionGracePeriodSeconds"] = grace
            return self._commit(rtype, MODIFIED, (namespace, name), marked, current)
        return self._commit(rtype, DELETED, (namespace, name), current, current)

    def _grace_of(self, rtype: ResourceType, current: Obj, options: Any) -> int:
        """The grace period of a delete, as the pod registry's ``CheckGracefulDelete`` computes it: 0 for anything
        but a pod bound to a node and not ended; else ``gracePeriodSeconds`` of the DeleteOptions, or the pod's
        ``spec.terminationGracePeriodSeconds`` (default 30)."""
        if not self.graceful_pod_deletion or rtype.kind != "Pod":
            return 0
        spec, status = current.get("spec") or {}, current.get("status") or {}
        if not spec.get("nodeName") or status.get("phase") in ("Succeeded", "Failed"):
            return 0
        given = options.get("gracePeriodSeconds") if isinstance(options, dict) else None
        if isinstance(given, int) and not isinstance(given, bool):
            return max(given, 0)
        default = spec.get("terminationGracePeriodSeconds", 30)
        return default if isinstance(default, int) and not isinstance(default, bool) and default >= 0 else 30

    def bind(self, pods: ResourceType, namespace: str, name: str, body: Any) -> Obj:
        """``POST pods/{name}/binding``: set spec.nodeName once and merge the Binding's annotations and labels into
        the pod's, as ``BindingREST`` does (labels: as from v1.35, whose ``PodTopologyLabelsAdmission`` is on)."""
        if not isinstance(body, dict) or not isinstance(body.get("metadata", {}), dict):
            raise bad_request("the body of a Binding must be a JSON object")
        meta = body.get("metadata") or {}
        target = body.get("target")
        if not isinstance(target, dict) or not target.get("name"):
            raise invalid("Binding", name, "target.name: Required value")
        if target.get("kind") not in (None, "", "Node"):
            raise invalid("Binding", name, "target.kind: Invalid value: must be empty or 'Node'")
        if meta.get("name") not in (None, "", name):
            raise bad_request("name in URL does not match name in Binding object")
        pod = self.get(pods, namespace, name)
        pmeta = pod["metadata"]
        if meta.get("uid") not in (None, "") and meta["uid"] != pmeta["uid"]:
            raise conflict(
                "pods/binding",
                name,
                f"Precondition failed: UID in precondition: {meta['uid']}, UID in object meta: {pmeta['uid']}",
            )
        if meta.get("resourceVersion") not in (None, "") and meta["resourceVersion"] != pmeta["resourceVersion"]:
            raise conflict(
                "pods/binding",
                name,
                f"Precondition failed: ResourceVersion in precondition: {meta['resourceVersion']}, "
                f"ResourceVersion in object meta: {pmeta['resourceVersion']}",
            )
        spec = pod.get("spec") or {}
        if spec.get("nodeName"):
            raise conflict("pods/binding", name, f'pod {name} is already assigned to node "{spec["nodeName"]}"')
        new = dict(pod)
        new["spec"] = {**spec, "nodeName": str(target["name"])}
        new_meta = dict(pmeta)
        if isinstance(meta.get("annotations"), dict) and meta["annotations"]:
            new_meta["annotations"] = {**(pmeta.get("annotations") or {}), **meta["annotations"]}
        if isinstance(meta.get("labels"), dict) and meta["labels"]:  # v1.35+: PodTopologyLabelsAdmission on
            new_meta["labels"] = {**(pmeta.get("labels") or {}), **meta["labels"]}
        new["metadata"] = new_meta
        status = dict(pod.get("status") or {})
        conditions = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
        conditions.append(
            {
                "type": "PodScheduled",
                "status": "True",
                "lastProbeTime": None,
                "lastTransitionTime": rfc3339(self._now()),
            }
        )
        status["conditions"] = conditions
        new["status"] = status
        return self._commit(pods, MODIFIED, (namespace, name), new, pod)

    # ---- history and watches -----------------------------------------------------------------------------------

    def watch(
        self,
        rtype: ResourceType,
        namespace: str | None,
        labels: LabelSelector,
        fields: FieldSelector,
        resource_version: str | None,
        *,
        bookmarks: bool,
    ) -> Watcher:
        """Open a watch: from now with synthetic ADDED events (no version, or "0"), or replaying the history after
        ``resource_version``; a version older than the history raises a 410 ``Expired``."""
        w = Watcher(rtype, namespace, labels, fields, bookmarks)
        if resource_version in (None, "", "0"):
            items, _ = self.select(rtype, namespace, labels, fields)
            for obj in items:
                w.queue.put_nowait(_frame(ADDED, dumps(obj)))
        else:
            try:
                since = int(str(resource_version))
            except ValueError:
                raise bad_request(f"resourceVersion: Invalid value: {resource_version!r}") from None
            if since < self.compacted_rv:
                raise expired(f"too old resource version: {since} ({self.compacted_rv})")
            for entry in self._history:
                if entry.rv > since:
                    w.offer(entry)
        self._watchers[w] = None
        self._on_change()
        return w

    def unwatch(self, w: Watcher) -> None:
        if w in self._watchers:
            del self._watchers[w]
            self._on_change()

    def watchers(self, rtype: ResourceType | None = None) -> list[Watcher]:
        return [w for w in self._watchers if rtype is None or w.rtype is rtype]

    def _end(self, rtype: ResourceType | None, final: Callable[[Watcher], Iterable[bytes]]) -> int:
        ended = self.watchers(rtype)
        for w in ended:
            del self._watchers[w]
            for frame in final(w):
                w.queue.put_nowait(frame)
            w.queue.put_nowait(None)
        if ended:
            self._on_change()
        return len(ended)

    def close_watches(self, rtype: ResourceType | None = None) -> int:
        """End open watch streams cleanly, as an API server restart does; later writes do not reach them."""
        return self._end(rtype, lambda w: ())

    def expire_watches(self, rtype: ResourceType | None = None) -> int:
        """End open watch streams with an ``ERROR`` event carrying a 410 ``Expired`` Status."""
        msg = f"too old resource version: {self.compacted_rv} ({self.rv})"
        error = _frame("ERROR", dumps(failure_status(410, msg, "Expired")))
        return self._end(rtype, lambda w: (error,))

    def send_bookmarks(self, rtype: ResourceType | None = None) -> int:
        """Queue a BOOKMARK at the current resourceVersion on every watch that allows bookmarks."""
        sent = 0
        for w in self.watchers(rtype):
            if w.bookmarks:
                w.queue.put_nowait(w.bookmark_frame(self.rv))
                sent += 1
        return sent

    def compact(self) -> None:
        """Drop the whole history: a watch from any version before now gets 410 ``Expired``."""
        self._history.clear()
        self.compacted_rv = self.rv
        self._on_change()
