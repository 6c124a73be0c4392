"""The chaos run's workload (``tests/controlplane/chaos.py``): pods created at a steady rate for the whole run, each
of a kind drawn (seeded) from a mix, and deleted once bound after a lifetime of their own (a job ending):

* ``shared``: one container, 1-4 GB and 10-30 % of a card; ``whole``: one container, whole cards' memory and
  cores, 1, 2, 4 or 8 cards (:data:`WHOLE_CARDS`, those a node has); ``multi``: two GPU containers and one
  without; ``quota``: a shared pod in a second namespace under a ResourceQuota on GPU memory; ``high``: a
  ``whole`` pod of a PriorityClass of value 1000 (on a full cluster kube-scheduler asks our ``/preempt`` for
  GPU-aware victims); ``gang``: three one-card pods of one PodGroup (the release's gang API, minCount 3), when
  the API server serves it.
* A share of the pods (5 %) is deleted the moment its bind is in flight (``hami.io/bind-phase: allocating`` seen:
  the bind is writing it or the device plugin has not allocated it yet).

A watch on both namespaces (re-opened when the API server goes away) records when each pod was created, bound and
deleted; every API call is retried through an API server restart."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from tests.controlplane.gangapi import GangApi
from tests.controlplane.harness import Kube, NodeShape, gpu_container, gpu_pod, watch_objects
from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.domain.model import BindPhase

KINDS: dict[str, float] = {"shared": 0.36, "whole": 0.18, "multi": 0.14, "quota": 0.1, "high": 0.1, "gang": 0.12}
"""Each kind's share of the draws (a ``gang`` draw creates three pods)."""
CARD_SHARE = {"shared": 0.2, "whole": 1.0, "multi": 0.3, "quota": 0.2, "high": 1.0, "gang": 3.0}
"""Roughly what a draw of each kind holds, in cards (to size the lifetimes to the cluster); ``whole`` and ``high``
per card they ask for (:func:`whole_cards`)."""
WHOLE_CARDS: dict[int, float] = {1: 0.4, 2: 0.2, 4: 0.2, 8: 0.2}
"""How many cards a ``whole`` or ``high`` pod asks for, with each count's share of the draws (a training job's
1-8): only the counts a node has are drawn, so that every pod fits an empty node."""
GANG_SIZE = 3
DELETE_NOW = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0}
"""Delete options without a grace period (the workload's ends and the faults' deletions)."""


async def call(kube: Kube, method: str, path: str, body: Any = None, *, attempts: int = 60) -> tuple[int, Any]:
    """``kube.call`` retried while the API server cannot be reached (a restart): (status, body)."""
    for attempt in range(attempts):
        try:
            return await kube.call(method, path, body)
        except (aiohttp.ClientError, OSError, TimeoutError):
            await asyncio.sleep(min(2.0, 0.2 * (attempt + 1)))  # the API server is restarting: nothing to await
    return 0, None


async def patch_merge(kube: Kube, path: str, patch: Any, *, attempts: int = 60) -> int:
    """A JSON merge patch retried while the API server cannot be reached or answers 5xx: the status."""
    headers = {**kube.headers, "Content-Type": "application/merge-patch+json"}
    for attempt in range(attempts):
        try:
            async with kube.session.patch(
                kube.api.url + path, data=json.dumps(patch), ssl=kube.ssl, headers=headers
            ) as resp:
                await resp.read()
                if resp.status < 500:
                    return resp.status
        except (aiohttp.ClientError, OSError, TimeoutError):
            pass
        await asyncio.sleep(min(2.0, 0.2 * (attempt + 1)))  # the API server is restarting: nothing to await
    return 0


@dataclass
class PodLife:
    kind: str
    created: float
    lifetime_s: float
    bound: float | None = None
    node: str | None = None
    deleted: float | None = None
    bind_seen: bool = False
    deleted_in_bind: bool = False
    preempted: bool = False
    """Deleted by kube-scheduler to make room for a pod of higher priority (its ``DisruptionTarget`` condition)."""


@dataclass
class Workload:
    """The churn (module docstring); ``namespaces``: (the main one, the one under a quota)."""

    kube: Kube
    rng: random.Random
    namespaces: tuple[str, str]
    shape: NodeShape
    pods: int
    duration_s: float
    lifetime_s: float
    high_class: str
    gang: GangApi | None = None
    delete_in_bind: float = 0.05
    lives: dict[str, PodLife] = field(default_factory=dict)
    """``<ns>/<name>`` → the pod's life."""
    reaping: bool = True
    """Whether bound pods are deleted at the end of their lifetime (off while the run settles)."""
    failed_creates: list[str] = field(default_factory=list)
    created_all: asyncio.Event = field(default_factory=asyncio.Event)
    """Set once every pod has been created (or refused)."""

    @property
    def created(self) -> int:
        return len(self.lives)

    def latencies_s(self) -> list[float]:
        return [p.bound - p.created for p in self.lives.values() if p.bound is not None]

    def occupied(self) -> set[str]:
        """The nodes its bound pods, not yet deleted, are on."""
        return {p.node for p in self.lives.values() if p.node is not None and p.deleted is None}

    def count(self, kind: str) -> int:
        return sum(1 for p in self.lives.values() if p.kind == kind)

    async def run(self) -> None:
        """Watch, reap and create until every pod is created; the watch and the reaper go on until cancelled."""
        tasks = [asyncio.create_task(self._watch(ns), name=f"chaos-watch:{ns}") for ns in self.namespaces]
        tasks.append(asyncio.create_task(self._reap(), name="chaos-reaper"))
        try:
            await self._create_all()
            self.created_all.set()
            await asyncio.gather(*tasks)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _create_all(self) -> None:
        kinds, weights = list(KINDS), list(KINDS.values())
        gap_s = self.duration_s / max(1, self.pods)
        start = time.monotonic()
        i = 0
        creating: set[asyncio.Task[None]] = set()  # the arrival rate holds while earlier creations wait
        while i < self.pods:
            kind = self.rng.choices(kinds, weights)[0]
            if kind == "gang" and (self.gang is None or self.pods - i < GANG_SIZE):
                kind = "whole"
            bodies = self._bodies(kind, i)
            task = asyncio.create_task(self._create_in_order(kind, bodies))
            creating.add(task)
            task.add_done_callback(creating.discard)
            i += sum(1 for _, b in bodies if b.get("kind") == "Pod")
            await asyncio.sleep(max(0.0, start + i * gap_s - time.monotonic()))  # the arrival rate
        await asyncio.gather(*creating)

    def _lifetime(self) -> float:
        return min(3 * self.lifetime_s, max(5.0, self.rng.expovariate(1 / self.lifetime_s)))

    def _bodies(self, kind: str, i: int) -> list[tuple[str, dict[str, Any]]]:
        ns, quota_ns = self.namespaces
        mem, cores = 1000 * self.rng.randint(1, 4), 10 * self.rng.randint(1, 3)
        name = f"p{i:05d}"
        if kind == "shared":
            return [(ns, gpu_pod(name, mem=mem, cores=cores))]
        if kind == "quota":
            return [(quota_ns, gpu_pod(name, mem=mem, cores=cores))]
        if kind == "whole":
            return [(ns, self._whole(name))]
        if kind == "high":
            pod = self._whole(name)
            pod["spec"]["priorityClassName"] = self.high_class
            return [(ns, pod)]
        if kind == "multi":
            pod = gpu_pod(name, mem=mem, cores=cores)
            pod["spec"]["containers"] += [
                gpu_container("second", mem=1000 * self.rng.randint(1, 3), cores=10),
                {"name": "sidecar", "image": "app", "resources": {"limits": {"cpu": "100m"}}},
            ]
            return [(ns, pod)]
        assert self.gang is not None
        group = f"g{i:05d}"
        out: list[tuple[str, dict[str, Any]]] = [(ns, _pod_group(self.gang, group))]
        for k in range(GANG_SIZE):
            pod = self._whole(f"p{i + k:05d}", 1)
            pod["spec"]["schedulingGroup"] = {"podGroupName": group}
            out.append((ns, pod))
        return out

    def _whole(self, name: str, gpus: int | None = None) -> dict[str, Any]:
        if gpus is None:
            counts = whole_cards(self.shape.gpus)
            gpus = self.rng.choices(list(counts), list(counts.values()))[0]
        return gpu_pod(name, gpus=gpus, mem=self.shape.mem_mib, cores=self.shape.cores)

    async def _create_in_order(self, kind: str, bodies: list[tuple[str, dict[str, Any]]]) -> None:
        """A gang's PodGroup before its pods; the pods at once."""
        if bodies and bodies[0][1].get("kind") == "PodGroup":
            await self._create(kind, *bodies[0])
            bodies = bodies[1:]
        await asyncio.gather(*(self._create(kind, ns, body) for ns, body in bodies))

    async def _create(self, kind: str, ns: str, body: dict[str, Any]) -> None:
        name = body["metadata"]["name"]
        if body.get("kind") == "PodGroup":
            assert self.gang is not None
            status, data = await call(self.kube, "POST", self.gang.podgroups(ns), body)
        else:
            self.lives[f"{ns}/{name}"] = PodLife(kind, time.monotonic(), self._lifetime())
            status, data = await call(self.kube, "POST", f"/api/v1/namespaces/{ns}/pods", body)
        if not 200 <= status < 300 and status != 409:  # 409: created by an attempt whose answer was lost
            self.failed_creates.append(f"{ns}/{name}: {status} {(data or {}).get('message', data)}")
            self.lives.pop(f"{ns}/{name}", None)

    async def _watch(self, ns: str) -> None:
        async def handle(kind: str, pod: dict[str, Any]) -> None:
            meta = pod.get("metadata") or {}
            life = self.lives.get(f"{ns}/{meta.get('name')}")
            if life is None or life.deleted is not None:
                return
            if kind == "DELETED":
                life.deleted = time.monotonic()
                life.preempted = any(
                    c.get("type") == "DisruptionTarget" and c.get("reason") == "PreemptionByScheduler"
                    for c in (pod.get("status") or {}).get("conditions") or []
                )
                return
            node = (pod.get("spec") or {}).get("nodeName")
            if node and life.bound is None:
                life.bound, life.node = time.monotonic(), node
            phase = (meta.get("annotations") or {}).get(keys.BIND_PHASE)
            if not life.bind_seen and phase == BindPhase.ALLOCATING.value:
                life.bind_seen = True  # one draw per pod: its bind, or its Allocate, is in flight
                if self.rng.random() < self.delete_in_bind:
                    life.deleted_in_bind = True
                    await self.delete(ns, str(meta.get("name")))

        await watch_objects(self.kube, f"/api/v1/namespaces/{ns}/pods", handle)

    async def delete(self, ns: str, name: str) -> None:
        status, _ = await call(self.kube, "DELETE", f"/api/v1/namespaces/{ns}/pods/{name}", DELETE_NOW)
        life = self.lives.get(f"{ns}/{name}")
        if life is not None and status in (200, 202, 404) and life.deleted is None:
            life.deleted = time.monotonic()

    async def _reap(self) -> None:
        while True:
            await asyncio.sleep(1.0)  # a job's end is a moment in time, not an event
            if not self.reaping:
                continue
            now = time.monotonic()
            due = [k for k, p in self.lives.items() if p.deleted is None and p.bound and p.bound + p.lifetime_s < now]
            for key in due:
                ns, name = key.split("/", 1)
                with contextlib.suppress(Exception):
                    await self.delete(ns, name)


def _pod_group(gang: GangApi, name: str) -> dict[str, Any]:
    spec = {"schedulingPolicy": {"gang": {"minCount": GANG_SIZE}}}
    return {"apiVersion": gang.api_version, "kind": "PodGroup", "metadata": {"name": name}, "spec": spec}


def whole_cards(gpus: int) -> dict[int, float]:
    """The card counts of :data:`WHOLE_CARDS` a node of ``gpus`` cards holds, with their shares."""
    return {n: w for n, w in WHOLE_CARDS.items() if n <= gpus} or {1: 1.0}


def mean_lifetime_s(nodes: int, gpus: int, pods: int, duration_s: float, fill: float) -> float:
    """The mean lifetime at which the pods alive at once would hold ``fill`` times the cluster's cards."""
    counts = whole_cards(gpus)
    cards = sum(n * w for n, w in counts.items()) / sum(counts.values())
    share = {k: v * cards if k in ("whole", "high") else v for k, v in CARD_SHARE.items()}
    per_draw = sum(KINDS[k] * share[k] for k in KINDS) / sum(KINDS.values())
    pods_per_draw = 1 + (GANG_SIZE - 1) * KINDS["gang"] / sum(KINDS.values())
    draws_per_s = pods / pods_per_draw / max(duration_s, 1.0)
    return fill * nodes * gpus / max(draws_per_s * per_draw, 1e-6)
