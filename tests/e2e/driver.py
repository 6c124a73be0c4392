"""Plays the API server's admission and kube-scheduler for the end-to-end tests, over HTTP with real bodies.

For each pod: POST an AdmissionReview to a random replica's ``/webhook`` and apply its JSONPatch (a denied pod is
never created); create the pod through the emulator's REST API (limits copied into requests, as the API server
does); then, like kube-scheduler, POST ``ExtenderArgs`` (``Pod`` + ``NodeNames``, ``Nodes: null``, compact JSON) to
a random replica's ``/filter`` and ``ExtenderBindingArgs`` to a random replica's ``/bind``. An ``Error`` answer
(filter or bind) is retried after a short jittered backoff; a filter that fails every node leaves the pod
unschedulable. Several workers run at once, so replicas filter and bind concurrently.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from tests.e2e.cluster import Cluster
from vgpu_scheduler.shared.protocol.extender import refused_nodes
from vgpu_scheduler.shared.protocol.jsonpatch import apply_patch


@dataclass(frozen=True)
class PodSpec:
    name: str
    namespace: str = "default"
    gpus: int = 1
    mem_mib: int | None = None
    cores: int | None = None
    pod_group: str | None = None

    def manifest(self) -> dict[str, Any]:
        """The pod as a user submits it (no schedulerName: the webhook sets ours)."""
        limits = {"nvidia.com/gpu": str(self.gpus)}
        if self.mem_mib is not None:
            limits["nvidia.com/gpumem"] = str(self.mem_mib)
        if self.cores is not None:
            limits["nvidia.com/gpucores"] = str(self.cores)
        labels = {"scheduling.x-k8s.io/pod-group": self.pod_group} if self.pod_group else {}
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": self.name, "namespace": self.namespace, "labels": labels},
            "spec": {
                "containers": [{"name": "main", "image": "busybox", "resources": {"limits": limits}}],
                "restartPolicy": "Never",
            },
        }


@dataclass
class Report:
    bound: dict[str, str] = field(default_factory=dict)
    """pod name → node."""
    unschedulable: dict[str, str] = field(default_factory=dict)
    """pod name → one node's reason."""
    denied: dict[str, str] = field(default_factory=dict)
    gave_up: list[str] = field(default_factory=list)
    filter_errors: Counter[str] = field(default_factory=Counter)
    bind_errors: Counter[str] = field(default_factory=Counter)
    unreachable: int = 0
    """Requests that found no replica listening (a killed replica): retried elsewhere."""
    attempts: int = 0
    deleted: set[str] = field(default_factory=set)
    completed: set[str] = field(default_factory=set)

    @property
    def holding(self) -> set[str]:
        """Bound pods still holding their devices (not deleted, not completed)."""
        return set(self.bound) - self.deleted - self.completed


def random_specs(rng: random.Random, n: int, *, namespaces: tuple[str, ...] = ("default",)) -> list[PodSpec]:
    """A mix of shares (1-2 GPUs with memory and cores), memory-only shares, whole cards and gang members."""
    specs = []
    for i in range(n):
        kind = rng.random()
        ns = namespaces[i % len(namespaces)]
        name = f"pod-{i:04d}"
        if kind < 0.1:
            specs.append(PodSpec(name, ns, gpus=1))  # whole card (webhook: gpucores 100)
        elif kind < 0.3:
            specs.append(PodSpec(name, ns, gpus=1, mem_mib=rng.choice((1024, 2048, 4096))))
        elif kind < 0.4:
            specs.append(PodSpec(name, ns, gpus=rng.choice((1, 2)), mem_mib=2048, cores=20, pod_group=f"gang-{i % 5}"))
        else:
            specs.append(
                PodSpec(
                    name,
                    ns,
                    gpus=rng.choice((1, 1, 1, 2)),
                    mem_mib=rng.choice((1000, 2000, 3000, 5000, 8000)),
                    cores=rng.choice((0, 10, 20, 30, 50)),
                )
            )
    return specs


class SchedulerDriver:
    """Admission + kube-scheduler for a list of pods (see the module docstring)."""

    def __init__(
        self,
        cluster: Cluster,
        *,
        seed: int = 7,
        workers: int = 12,
        max_attempts: int = 40,
        retry_unschedulable: bool = False,
    ) -> None:
        self.c = cluster
        self.rng = random.Random(seed)
        self.workers = workers
        self.max_attempts = max_attempts
        self.retry_unschedulable = retry_unschedulable
        self.report = Report()
        self.nodes = cluster.spec.node_names()

    def _replica_url(self) -> str:
        return self.rng.choice([r for r in self.c.replicas if r.alive]).url

    async def _post(self, path: str, body: Any) -> Any:
        """POST to a random live replica; None when it was not reachable (killed meanwhile)."""
        url = self._replica_url() + path
        data = json.dumps(body, separators=(",", ":")).encode()
        try:
            async with self.c.http.post(url, data=data, headers={"Content-Type": "application/json"}) as r:
                assert r.status == 200, (url, r.status, await r.text())
                return await r.json()
        except aiohttp.ClientConnectionError:
            self.report.unreachable += 1
            return None

    async def run(self, specs: list[PodSpec]) -> Report:
        queue: asyncio.Queue[PodSpec] = asyncio.Queue()
        for s in specs:
            queue.put_nowait(s)

        async def worker() -> None:
            while not queue.empty():
                await self.place(queue.get_nowait())

        async with asyncio.TaskGroup() as tg:
            for i in range(self.workers):
                tg.create_task(worker(), name=f"e2e:driver-{i}")
        return self.report

    async def admit_and_create(self, spec: PodSpec) -> dict[str, Any] | None:
        """The webhook's decision applied, then the pod created through the REST API; None if denied."""
        pod = spec.manifest()
        review = {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": f"review-{spec.name}",
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "namespace": spec.namespace,
                "operation": "CREATE",
                "object": pod,
            },
        }
        answered = None
        while answered is None:
            answered = await self._post("/webhook", review)
        answer = answered["response"]
        assert answer["uid"] == f"review-{spec.name}"
        if not answer["allowed"]:
            self.report.denied[spec.name] = answer["status"]["message"]
            return None
        if "patch" in answer:
            pod = apply_patch(pod, json.loads(base64.b64decode(answer["patch"])))
        for c in pod["spec"]["containers"]:  # the API server copies extended-resource limits into requests
            c["resources"]["requests"] = dict(c["resources"]["limits"])
        url = f"{self.c.em.url}/api/v1/namespaces/{spec.namespace}/pods"
        async with self.c.http.post(url, json=pod) as r:
            assert r.status == 201, await r.text()
            created: dict[str, Any] = await r.json()
        return created

    async def place(self, spec: PodSpec) -> None:
        created = await self.admit_and_create(spec)
        if created is None:
            return
        meta = created["metadata"]
        delay = 0.01
        for _ in range(self.max_attempts):
            self.report.attempts += 1
            pod = self.c.em.get("Pod", spec.namespace, spec.name)  # kube-scheduler's informer cache
            assert pod is not None
            nodes = list(self.nodes)
            self.rng.shuffle(nodes)
            result = await self._post("/filter", {"Pod": pod, "Nodes": None, "NodeNames": nodes})
            if result is None:
                pass
            elif result["Error"]:
                self.report.filter_errors[_kind(result["Error"])] += 1
            elif not result["NodeNames"]:
                failed = refused_nodes(result)
                self.report.unschedulable[spec.name] = next(iter(failed.values()), "no nodes")
                if not self.retry_unschedulable:
                    return
            else:
                (node,) = result["NodeNames"]
                args = {"PodName": spec.name, "PodNamespace": spec.namespace, "PodUID": meta["uid"], "Node": node}
                bound = await self._post("/bind", args)
                if bound is not None and not bound["Error"]:
                    self.report.bound[spec.name] = node
                    self.report.unschedulable.pop(spec.name, None)
                    return
                if bound is not None:
                    self.report.bind_errors[_kind(bound["Error"])] += 1
            await asyncio.sleep(delay * (0.5 + self.rng.random()))  # kube-scheduler's backoff before a retry
            delay = min(delay * 2, 0.2)
        if spec.name not in self.report.unschedulable:
            self.report.gave_up.append(spec.name)


class Churn:
    """Ends pods while the driver runs, as users and jobs do: deletes some bound pods (maybe before the device
    plugin got to them) and marks others ``Succeeded``, so their devices are released and reused."""

    def __init__(
        self,
        cluster: Cluster,
        report: Report,
        *,
        namespaces: tuple[str, ...] = ("default",),
        seed: int = 3,
        period_s: float = 0.02,
    ) -> None:
        self.c = cluster
        self.namespaces = namespaces
        self.report = report
        self.rng = random.Random(seed)
        self.period_s = period_s

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            holding = sorted(self.report.holding)
            running = [n for n in holding if self._allocated(n)]
            # mostly pods that ran end; now and then one is deleted before its devices were even allocated
            roll = self.rng.random()
            candidates = running if roll < 0.9 else holding if roll < 0.95 else []
            if candidates:
                pod = self._find(self.rng.choice(candidates))
                if pod is not None:
                    await self._end(pod)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.period_s):
                    await stop.wait()

    def _allocated(self, name: str) -> bool:
        return any(f"{ns}/{name}" in self.c.plugin.allocated_names for ns in self.namespaces)

    def _find(self, name: str) -> dict[str, Any] | None:
        for ns in self.namespaces:
            pod = self.c.em.get("Pod", ns, name)
            if pod is not None:
                return pod
        return None

    async def _end(self, pod: dict[str, Any]) -> None:
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        base = f"{self.c.em.url}/api/v1/namespaces/{ns}/pods/{name}"
        allocated = pod["metadata"]["uid"] in self.c.plugin.allocated
        if not allocated or self.rng.random() < 0.5:  # only a pod that ran can complete
            async with self.c.http.delete(base) as r:
                assert r.status == 200, await r.text()
            self.report.deleted.add(name)
        else:
            headers = {"Content-Type": "application/merge-patch+json"}
            body = json.dumps({"status": {"phase": "Succeeded"}})
            async with self.c.http.patch(base + "/status", data=body, headers=headers) as r:
                assert r.status == 200, await r.text()
            self.report.completed.add(name)


def _kind(error: str) -> str:
    for marker in ("locked by", "not ready", "conflict", "no device reservation", "reserved on node", "not found"):
        if marker in error:
            return marker
    return error[:80]
