"""One pod, two decisions at once: every pod (and, in a variant, 10 %) is scheduled twice concurrently on
different extender replicas — two schedulers each filtering and binding it, a bind replayed on another replica
(kube-scheduler retrying after a timeout, a proxy retry), or two filters answered at once — while Redis is killed
and restarted empty mid-run. Audited from the API objects: no device over capacity at any API state, no bound pod
without its allocation, no pod lost (each bound, or refused with a reason)."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.e2e.cluster import Cluster, ClusterSpec, eventually, running_cluster
from tests.e2e.driver import PodSpec, SchedulerDriver, random_specs
from tests.e2e.redisproc import RedisProcess
from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.protocol.extender import refused_nodes

MODES = ("two-schedulers", "replayed-bind", "double-filter")


@dataclass
class Outcome:
    bound: dict[str, str] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)
    gave_up: list[str] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    modes: Counter[str] = field(default_factory=Counter)


class DuplicatingScheduler:
    """kube-scheduler's loop for each pod, with a share of the pods scheduled twice at once on two replicas."""

    def __init__(self, c: Cluster, *, share: float, seed: int, workers: int = 10, max_attempts: int = 150) -> None:
        self.c = c
        self.share = share
        self.rng = random.Random(seed)
        self.workers = workers
        self.max_attempts = max_attempts
        self.admission = SchedulerDriver(c, seed=seed)
        self.out = Outcome()

    def _two_replicas(self) -> tuple[str, str]:
        live = [r.url for r in self.c.replicas if r.alive]
        a, b = self.rng.sample(live, 2)
        return a, b

    async def _post(self, url: str, path: str, body: Any) -> Any:
        try:
            async with self.c.http.post(url + path, json=body) as r:
                assert r.status == 200, (path, r.status, await r.text())
                return await r.json()
        except OSError:
            return None

    def _pod(self, spec: PodSpec) -> dict[str, Any]:
        pod = self.c.em.get("Pod", spec.namespace, spec.name)
        assert pod is not None, f"pod {spec.name} lost"
        return pod

    async def _filter(self, url: str, pod: dict[str, Any]) -> tuple[str | None, str]:
        """(node, '') on success; (None, reason) when refused everywhere; (None, '') on an Error to retry."""
        nodes = self.c.spec.node_names()
        self.rng.shuffle(nodes)
        result = await self._post(url, "/filter", {"Pod": pod, "Nodes": None, "NodeNames": nodes})
        if result is None:
            return None, ""
        if result["Error"]:
            self.out.errors["filter: " + result["Error"][:60]] += 1
            return None, ""
        if not result["NodeNames"]:
            return None, next(iter(refused_nodes(result).values()), "no nodes")
        (node,) = result["NodeNames"]
        return node, ""

    async def _bind(self, url: str, spec: PodSpec, uid: str, node: str) -> bool:
        args = {"PodName": spec.name, "PodNamespace": spec.namespace, "PodUID": uid, "Node": node}
        answer = await self._post(url, "/bind", args)
        if answer is None:
            return False
        if answer["Error"]:
            self.out.errors["bind: " + answer["Error"][:60]] += 1
            return False
        return True

    async def _one_scheduler(self, spec: PodSpec, uid: str, url: str, mode: str) -> str | None:
        """Filter and bind until the pod is bound (by anyone) or refused; the refusal reason, if any."""
        delay = 0.01
        for _ in range(self.max_attempts):
            pod = self._pod(spec)
            if pod["spec"].get("nodeName"):
                return None  # the scheduler's informer sees it bound: out of the queue
            node, reason = await self._filter(url, pod)
            if reason:
                return reason
            if node is not None:
                if mode == "replayed-bind":
                    other = self._two_replicas()[0]
                    await asyncio.gather(self._bind(url, spec, uid, node), self._bind(other, spec, uid, node))
                else:
                    await self._bind(url, spec, uid, node)
                if self._pod(spec)["spec"].get("nodeName"):
                    return None
            await asyncio.sleep(delay * (0.5 + self.rng.random()))
            delay = min(delay * 2, 0.2)
        self.out.gave_up.append(spec.name)
        return None

    async def place(self, spec: PodSpec) -> None:
        created = await self.admission.admit_and_create(spec)
        if created is None:
            return
        uid = created["metadata"]["uid"]
        a, b = self._two_replicas()
        if self.rng.random() >= self.share:
            reasons = [await self._one_scheduler(spec, uid, a, "single")]
        else:
            mode = self.rng.choice(MODES)
            self.out.modes[mode] += 1
            if mode == "double-filter":  # two filters at once, then each answer bound where it says
                pod = self._pod(spec)
                (na, _), (nb, _) = await asyncio.gather(self._filter(a, pod), self._filter(b, pod))
                await asyncio.gather(*(self._bind(u, spec, uid, n) for u, n in ((a, na), (b, nb)) if n is not None))
                reasons = [await self._one_scheduler(spec, uid, a, "single")]
            elif mode == "two-schedulers":
                reasons = list(
                    await asyncio.gather(
                        self._one_scheduler(spec, uid, a, mode), self._one_scheduler(spec, uid, b, mode)
                    )
                )
            else:
                reasons = [await self._one_scheduler(spec, uid, a, mode)]
        node = self._pod(spec)["spec"].get("nodeName")
        if node:
            self.out.bound[spec.name] = node
        elif any(reasons):
            self.out.refused[spec.name] = next(r for r in reasons if r)

    async def run(self, specs: list[PodSpec]) -> Outcome:
        queue: asyncio.Queue[PodSpec] = asyncio.Queue()
        for s in specs:
            queue.put_nowait(s)

        async def worker() -> None:
            while not queue.empty():
                await self.place(queue.get_nowait())

        async with asyncio.TaskGroup() as tg:
            for i in range(self.workers):
                tg.create_task(worker(), name=f"e2e:dup-driver-{i}")
        return self.out


def audit_from_api(c: Cluster, specs: list[PodSpec], out: Outcome) -> None:
    """0 devices over capacity (at every API state), 0 bound pods without their allocation, 0 pods lost."""
    assert c.monitor.violations == [], c.monitor.violations[:5]
    assert c.plugin.violations == [], c.plugin.violations[:5]
    pods = {p["metadata"]["name"]: p for p in c.pods()}
    assert set(pods) == {s.name for s in specs}, "a pod went missing"
    unallocated = []
    for name, pod in pods.items():
        node = pod["spec"].get("nodeName")
        annos = pod["metadata"].get("annotations") or {}
        if node and (annos.get(keys.VGPU_NODE) != node or not annos.get(keys.DEVICES_ALLOCATED)):
            unallocated.append(name)
        if not node:
            assert keys.VGPU_NODE not in annos, f"{name}: allocation annotations on an unbound pod"
    assert unallocated == [], f"bound pods without their allocation: {unallocated}"
    assert out.gave_up == [], out
    lost = [n for n in pods if n not in out.bound and n not in out.refused]
    assert lost == [], f"pods neither bound nor refused with a reason: {lost}"


async def _race(*, pods: int, share: float, seed: int, nodes: int = 6, replicas: int = 3, workers: int = 10) -> None:
    async with RedisProcess() as redis:
        spec = ClusterSpec(nodes=nodes, gpus_per_node=4, replicas=replicas, registrar_resync_s=0.5)
        async with running_cluster(redis.url, spec) as c:
            specs = random_specs(random.Random(seed), pods)
            sched = DuplicatingScheduler(c, share=share, seed=seed, workers=workers)

            async def restart_redis_mid_run() -> None:
                await eventually(lambda: len(sched.out.bound) >= pods // 3, 60, what=f"{pods // 3} pods bound")
                await redis.restart()

            restarter = asyncio.create_task(restart_redis_mid_run(), name="e2e:redis-restart")
            try:
                out = await sched.run(specs)
            finally:
                await restarter
            assert redis.restarts == 1
            assert sum(out.modes.values()) > 0
            await eventually(lambda: not c.plugin.busy, 30, what="device plugin idle")
            audit_from_api(c, specs, out)
            assert len(out.bound) >= pods // 3
            # once everything settled, Redis (rebuilt after the restart) agrees with the pods' annotations
            await eventually(c.audit_matches, 30, what="Redis usage == usage recomputed from the API's pods")
            # the duplicates did meet: a second filter kept the first one's node
            assert c.metric_sum("vgpu_filter_outcomes_total", outcome="kept") > 0
            print(f"\nduplicates: {dict(out.modes)}; bound {len(out.bound)}, refused {len(out.refused)}")
            filters = ("kept", "owned_elsewhere", "scheduled")
            print("filter:", {k: c.metric_sum("vgpu_filter_outcomes_total", outcome=k) for k in filters})
            binds = ("bound", "already_bound", "not_owner", "wrong_node", "no_reservation", "bound_elsewhere")
            print("bind:", {k: c.metric_sum("vgpu_bind_outcomes_total", outcome=k) for k in binds})


async def test_every_pod_scheduled_twice_with_a_redis_restart(redis_url: str) -> None:
    await _race(pods=90, share=1.0, seed=12)


async def test_a_tenth_of_the_pods_scheduled_twice_with_a_redis_restart(redis_url: str) -> None:
    await _race(pods=90, share=0.1, seed=13)


@pytest.mark.slow
async def test_many_pods_scheduled_twice_on_four_replicas(redis_url: str) -> None:
    await _race(pods=600, share=1.0, seed=14, nodes=20, replicas=4, workers=12)
