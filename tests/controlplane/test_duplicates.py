"""Duplicate scheduling on the real control plane: while the real kube-scheduler schedules the pods through the
extender, a second scheduler sees the same pods and filters and binds each of them on another replica, and
replays a bind for every pod kube-scheduler has already bound (to its node, and to another node). The audit from
the API's objects (``tests/controlplane/audit.py``) must find no device over capacity, no bound pod without its
allocation, no pending pod left with one, and every pod bound."""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.controlplane.control import ApiServer, Cleanup
from tests.controlplane.harness import RUN_LABEL, BindWatch, Kube, Settings, System
from tests.controlplane.scenario import Scenario, run_scenario
from tests.controlplane.test_scenarios import shared_mix

pytestmark = pytest.mark.timeout(300)


class SecondScheduler:
    """Filters and binds the run's pods itself, on a replica chosen at random, racing kube-scheduler."""

    def __init__(self, system: System, watch: BindWatch, kube: Kube, session: aiohttp.ClientSession) -> None:
        self.system = system
        self.watch = watch
        self.kube = kube
        self.session = session
        self.ssl = system.api.ssl_context()
        if system.scheduler_client is not None:  # /filter and /bind take kube-scheduler's client certificate only
            self.ssl.load_cert_chain(str(system.scheduler_client.cert), str(system.scheduler_client.key))
        self.rng = random.Random(12)
        self.answers: dict[str, int] = {}
        self.bound_by_us = 0
        self.replayed = 0

    async def _post(self, path: str, body: Any) -> dict[str, Any] | None:
        url = self.rng.choice(self.system.extender_urls) + path
        with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
            async with self.session.post(url, json=body, ssl=self.ssl, timeout=aiohttp.ClientTimeout(total=30)) as r:
                assert r.status == 200, (path, r.status, await r.text())
                answer: dict[str, Any] = await r.json()
                return answer
        return None

    def _count(self, kind: str) -> None:
        self.answers[kind] = self.answers.get(kind, 0) + 1

    async def _bind(self, pod: dict[str, Any], node: str) -> bool:
        meta = pod["metadata"]
        args = {"PodName": meta["name"], "PodNamespace": meta["namespace"], "PodUID": meta["uid"], "Node": node}
        answer = await self._post("/bind", args)
        if answer is None:
            return False
        self._count("bind ok" if not answer["Error"] else "bind: " + _kind(answer["Error"]))
        return not answer["Error"]

    async def schedule(self, pod: dict[str, Any], nodes: list[str]) -> None:
        answer = await self._post("/filter", {"Pod": pod, "Nodes": None, "NodeNames": nodes})
        if answer is None or answer["Error"] or not answer["NodeNames"]:
            self._count("filter refused")
            return
        (node,) = answer["NodeNames"]
        self._count("filter ok")
        if await self._bind(pod, node):
            self.bound_by_us += 1

    async def replay(self, pod: dict[str, Any], nodes: list[str]) -> None:
        """A bind replayed after the pod was bound: to its node (a retry), and to another node (a stale one)."""
        node = pod["spec"]["nodeName"]
        other = next(n for n in nodes if n != node)
        await asyncio.gather(self._bind(pod, node), self._bind(pod, other))
        self.replayed += 1

    async def run(self, ns: str, run_id: str, idle_s: float) -> None:
        """Schedule every pod a second time and replay the bind of every bound one; ends when every created pod is
        bound and replayed, or when nothing new was bound for ``idle_s`` (pods no node fits stay pending: the
        audit proves them so)."""
        listed = await self.kube.items(f"/api/v1/nodes?labelSelector={RUN_LABEL}%3D{run_id}")
        nodes = [n["metadata"]["name"] for n in listed]
        seen: set[str] = set()
        replayed: set[str] = set()
        tasks: set[asyncio.Task[None]] = set()
        progress, last = time.monotonic(), 0
        while True:
            pods = await self.kube.items(f"/api/v1/namespaces/{ns}/pods")
            for pod in pods:
                name = pod["metadata"]["name"]
                if not pod["spec"].get("nodeName") and name not in seen:
                    seen.add(name)
                    tasks.add(asyncio.create_task(self.schedule(pod, nodes), name=f"second-scheduler:{name}"))
                elif pod["spec"].get("nodeName") and name not in replayed:
                    replayed.add(name)
                    tasks.add(asyncio.create_task(self.replay(pod, nodes), name=f"replay:{name}"))
            if self.watch.created and len(replayed) >= len(self.watch.created) and len(pods) >= len(self.watch.created):
                break
            if len(replayed) != last:
                progress, last = time.monotonic(), len(replayed)
            elif self.watch.created and time.monotonic() - progress > idle_s:
                break
            await asyncio.sleep(0.2)  # polling the API, as a second scheduler's informer would
        await asyncio.gather(*tasks)


def _kind(error: str) -> str:
    markers = ("already bound", "another bind", "locked by", "reserved on node", "no device reservation", "not ready")
    return next((m for m in markers if m in error), error[:60])


async def test_a_second_scheduler_and_replayed_binds_on_the_real_control_plane(
    kube_apiserver: ApiServer, kube_cleanup: Cleanup, redis_url: str, tmp_path: Path
) -> None:
    pods = shared_mix(60, prefix="d")
    second: list[SecondScheduler] = []

    async def duplicate(system: System, watch: BindWatch) -> None:
        ns = system.services[0].log.parent.name  # the run id is the namespace's name
        async with Kube.open(system.api) as kube, aiohttp.ClientSession(trust_env=False) as session:
            s = SecondScheduler(system, watch, kube, session)
            second.append(s)
            await asyncio.wait_for(s.run(ns, ns, idle_s=scenario.stall_s), 200)

    scenario = Scenario("dup", pods, Settings(replicas=2), nodes=10, deadline_s=200)
    outcome = await run_scenario(kube_apiserver, kube_cleanup, redis_url, tmp_path, scenario, during=duplicate)
    (s,) = second
    print(f"\n{outcome.report.summary()}; second scheduler: {s.answers}, bound {s.bound_by_us}, replayed {s.replayed}")
    outcome.report.check()
    # the random mix may leave a pod that no node fits once the others are placed: the audit proves it so
    assert outcome.report.bound + outcome.report.unschedulable == len(pods), outcome.report.notes
    assert outcome.report.bound >= len(pods) - 3
    assert s.replayed == outcome.report.bound
    assert s.answers.get("filter ok", 0) > 0, s.answers
