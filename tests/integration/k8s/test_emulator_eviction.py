"""The emulator's ``pods/{name}/eviction`` subresource and ``policy/v1`` PodDisruptionBudgets, over plain HTTP: what
kube-apiserver answers an Eviction (budgets honoured, the pod marked ``DisruptionTarget`` and deleted gracefully)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from tests.integration.k8s.conftest import make_pod
from vgpu_scheduler.shared.emulator import Emulator

PDBS = "/apis/policy/v1/namespaces/ns/poddisruptionbudgets"
VIOLATES = "Cannot evict pod as it would violate the pod's disruption budget."


@pytest.fixture
async def em() -> AsyncIterator[Emulator]:
    async with Emulator(bookmark_interval_s=None, graceful_pod_deletion=True) as emulator:
        yield emulator


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        yield session


async def call(http: aiohttp.ClientSession, method: str, url: str, body: Any = None) -> tuple[int, Any]:
    data = json.dumps(body) if body is not None else None
    async with http.request(method, url, data=data, headers={"Content-Type": "application/json"}) as r:
        return r.status, await r.json(content_type=None)


def running(name: str, app: str = "web") -> dict[str, Any]:
    pod = make_pod(name, "ns", node="n1", labels={"app": app}, phase="Running")
    pod["spec"]["terminationGracePeriodSeconds"] = 20
    return pod


def budget(name: str, allowed: int | None, selector: dict[str, Any] | None = None) -> dict[str, Any]:
    pdb: dict[str, Any] = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}} if selector is None else selector},
    }
    if allowed is not None:
        pdb["status"] = {"disruptionsAllowed": allowed, "currentHealthy": 2, "desiredHealthy": 2}
    return pdb


async def evict(em: Emulator, http: aiohttp.ClientSession, name: str, **extra: Any) -> tuple[int, Any]:
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": "ns"}, **extra}
    return await call(http, "POST", f"{em.url}/api/v1/namespaces/ns/pods/{name}/eviction", body)


async def test_an_eviction_without_a_budget_marks_the_pod_and_deletes_it_with_its_grace(
    em: Emulator, http: aiohttp.ClientSession
) -> None:
    em.put(running("a"))
    code, body = await evict(em, http, "a")
    assert (code, body["status"], body["code"]) == (201, "Success", 201)
    pod = em.get("Pod", "ns", "a")
    assert pod is not None and pod["metadata"]["deletionGracePeriodSeconds"] == 20  # terminating, not gone
    [condition] = [c for c in pod["status"]["conditions"] if c["type"] == "DisruptionTarget"]
    assert (condition["status"], condition["reason"]) == ("True", "EvictionByEvictionAPI")


async def test_a_budget_that_allows_a_disruption_spends_it(em: Emulator, http: aiohttp.ClientSession) -> None:
    em.put(running("a"))
    em.put(budget("web", 1))
    code, _ = await evict(em, http, "a")
    assert code == 201
    pdb = em.get("PodDisruptionBudget", "ns", "web")
    assert pdb is not None and pdb["status"]["disruptionsAllowed"] == 0
    assert list(pdb["status"]["disruptedPods"]) == ["a"]


@pytest.mark.parametrize("allowed", [0, None], ids=["none-allowed", "no-status-yet"])
async def test_a_budget_that_allows_none_refuses_the_eviction_with_429(
    em: Emulator, http: aiohttp.ClientSession, allowed: int | None
) -> None:
    em.put(running("a"))
    em.put(budget("web", allowed))
    code, body = await evict(em, http, "a")
    assert (code, body["reason"], body["message"]) == (429, "TooManyRequests", VIOLATES)
    assert body["details"]["causes"][0]["reason"] == "DisruptionBudget"
    pod = em.get("Pod", "ns", "a")
    assert pod is not None and "deletionTimestamp" not in pod["metadata"]  # untouched
    assert not [c for c in pod["status"].get("conditions") or [] if c["type"] == "DisruptionTarget"]


async def test_budgets_of_other_pods_or_with_an_empty_selector_do_not_apply(
    em: Emulator, http: aiohttp.ClientSession
) -> None:
    em.put(running("a"))
    em.put(budget("other", 0, {"matchLabels": {"app": "db"}}))
    em.put(budget("empty", 0, {}))
    code, _ = await evict(em, http, "a")
    assert code == 201


async def test_two_budgets_for_one_pod_are_an_error(em: Emulator, http: aiohttp.ClientSession) -> None:
    em.put(running("a"))
    em.put(budget("one", 1))
    em.put(budget("two", 1, {"matchExpressions": [{"key": "app", "operator": "In", "values": ["web"]}]}))
    code, body = await evict(em, http, "a")
    assert code == 500 and "more than one PodDisruptionBudget" in body["message"]


async def test_a_pending_pod_is_evicted_whatever_its_budget_says(em: Emulator, http: aiohttp.ClientSession) -> None:
    em.put(make_pod("p", "ns", labels={"app": "web"}))
    em.put(budget("web", 0))
    code, _ = await evict(em, http, "p")
    assert code == 201 and em.get("Pod", "ns", "p") is None  # on no node: deleted at once


async def test_bad_evictions(em: Emulator, http: aiohttp.ClientSession) -> None:
    em.put(running("a"))
    code, body = await evict(em, http, "ghost")
    assert (code, body["message"]) == (404, 'pods "ghost" not found')
    url = f"{em.url}/api/v1/namespaces/ns/pods/a/eviction"
    code, body = await call(http, "POST", url, {"kind": "Eviction", "metadata": {"name": "b"}})
    assert code == 400 and "does not match" in body["message"]
    code, _ = await call(http, "GET", url)
    assert code == 405


async def test_budgets_are_served_under_policy_v1(em: Emulator, http: aiohttp.ClientSession) -> None:
    code, created = await call(http, "POST", em.url + PDBS, budget("web", None))
    assert code == 201 and created["kind"] == "PodDisruptionBudget"
    status = {**created, "status": {"disruptionsAllowed": 3}}
    code, _ = await call(http, "PUT", f"{em.url}{PDBS}/web/status", status)
    assert code == 200
    code, listed = await call(http, "GET", em.url + "/apis/policy/v1/poddisruptionbudgets")
    assert code == 200 and [p["status"]["disruptionsAllowed"] for p in listed["items"]] == [3]
