"""What a kubelet would do that the tests need without running one: finish a pod's graceful deletion (a kubelet
stops the containers, then deletes the pod with grace 0), optionally report a pod running and ready once the device
plugin has allocated it (``run_pods``: PodDisruptionBudgets count only ready pods, and the API server's eviction
ignores budgets for pods still ``Pending``), and what a controller-manager would do: remove a deleted PodGroup's
``scheduling.k8s.io/podgroup-protection`` finalizer.

:class:`Finisher` watches one namespace and does these as soon as an object calls for them; it remembers the last
state of every pod it saw (``last``), so a test can read a deleted pod's allocation afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from tests.controlplane.harness import Kube
from vgpu_scheduler.shared.codec.annotations import BIND_PHASE

PODGROUP_FINALIZER = "scheduling.k8s.io/podgroup-protection"


@dataclass
class Finisher:
    """Finish pods' deletion (and PodGroups' finalizer) in one namespace (module docstring)."""

    namespace: str
    finished: list[str] = field(default_factory=list)
    """Pods whose deletion was finished here, in order."""
    last: dict[str, dict[str, Any]] = field(default_factory=dict)
    """The last state of every pod seen, by name (kept after deletion)."""
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    run_pods: bool = False
    """Report every pod the device plugin allocated (bind phase ``success``) ``Running`` and ``Ready``."""

    async def run(self, kube: Kube, *, podgroups: str | None = None) -> None:
        """Watch the namespace's pods and, given their API path (the release's ``GangApi.podgroups``), its
        PodGroups."""
        tasks = [asyncio.create_task(self._watch(kube, f"/api/v1/namespaces/{self.namespace}/pods", self._pod))]
        if podgroups:
            tasks.append(asyncio.create_task(self._watch(kube, podgroups, self._podgroup)))
        try:
            await asyncio.gather(*tasks)
        finally:
            for t in tasks:
                t.cancel()
            for t in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await t

    async def _watch(self, kube: Kube, path: str, handle: Any) -> None:
        rv = "0"
        while True:
            url = f"{kube.api.url}{path}?watch=1&allowWatchBookmarks=false"
            if rv != "0":
                url += f"&resourceVersion={rv}"
            async with kube.session.get(
                url, ssl=kube.ssl, headers=kube.headers, timeout=aiohttp.ClientTimeout(total=None, sock_read=120)
            ) as resp:
                if resp.status != 200:
                    raise RuntimeError(f"watch {path}: {resp.status} {await resp.text()}")
                async for line in resp.content:
                    event = json.loads(line)
                    if event.get("type") == "ERROR":
                        rv = "0"
                        break
                    obj = event.get("object") or {}
                    rv = obj.get("metadata", {}).get("resourceVersion", rv)
                    await handle(kube, event.get("type"), obj)

    async def _pod(self, kube: Kube, kind: str, pod: dict[str, Any]) -> None:
        meta = pod.get("metadata") or {}
        name = meta.get("name", "")
        self.last[name] = pod
        if kind != "DELETED" and meta.get("deletionTimestamp"):
            uid = meta.get("uid")
            status, _ = await kube.call(
                "DELETE",
                f"/api/v1/namespaces/{self.namespace}/pods/{name}",
                {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0, "preconditions": {"uid": uid}},
            )
            if status in (200, 202) and name not in self.finished:
                self.finished.append(name)
        elif (
            kind != "DELETED"
            and self.run_pods
            and _allocated(pod)
            and (pod.get("status") or {}).get("phase") != "Running"
        ):
            now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            ready = [{"type": t, "status": "True", "lastTransitionTime": now} for t in ("Ready", "ContainersReady")]
            running = {"status": {"phase": "Running", "startTime": now, "conditions": ready}}
            await kube.merge_patch(f"/api/v1/namespaces/{self.namespace}/pods/{name}/status", running)
        self.changed.set()

    async def _podgroup(self, kube: Kube, kind: str, group: dict[str, Any]) -> None:
        meta = group.get("metadata") or {}
        finalizers = meta.get("finalizers") or []
        if kind != "DELETED" and meta.get("deletionTimestamp") and PODGROUP_FINALIZER in finalizers:
            path = f"/apis/{group.get('apiVersion')}/namespaces/{self.namespace}/podgroups/{meta.get('name')}"
            rest = [f for f in finalizers if f != PODGROUP_FINALIZER]
            patch = {"metadata": {"finalizers": rest, "resourceVersion": meta.get("resourceVersion")}}
            await kube.merge_patch(path, patch)
        self.changed.set()


def _allocated(pod: dict[str, Any]) -> bool:
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    return bool((pod.get("spec") or {}).get("nodeName")) and annotations.get(BIND_PHASE) == "success"
