"""The Eviction API (``pods/eviction``, policy/v1) through ``Api.evict_pod`` against the emulator, which honours
PodDisruptionBudgets as kube-apiserver does: a pod not yet running is evicted whatever its budget, a budget that
allows a disruption is spent, one that allows none (or is not computed yet) refuses with 429 and a
``DisruptionBudget`` cause (``DisruptionBudgetError``), and two budgets on one pod are a 500."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.k8s.conftest import make_pod
from vgpu_scheduler.shared.emulator import Emulator
from vgpu_scheduler.shared.errors import NotFoundError, TransientError
from vgpu_scheduler.shared.k8s import Api, DisruptionBudgetError, KubeSettings, UidMismatchError, open_client

PDB_API = "policy/v1"


def budget(name: str, allowed: int, *, generation: int | None = None, observed: int = 1) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "default"}
    if generation is not None:
        meta["generation"] = generation
    return {
        "apiVersion": PDB_API,
        "kind": "PodDisruptionBudget",
        "metadata": meta,
        "spec": {"selector": {"matchLabels": {"app": "web"}}, "maxUnavailable": 1},
        "status": {"disruptionsAllowed": allowed, "observedGeneration": observed, "desiredHealthy": 2},
    }


def running(name: str) -> dict[str, Any]:
    return make_pod(name, node="n1", labels={"app": "web"}, phase="Running")


async def test_a_budget_that_allows_a_disruption_is_spent_and_the_pod_deleted(emulator: Emulator, api: Api) -> None:
    emulator.put(budget("web", 1))
    pod = emulator.put(running("web-1"))
    await api.evict_pod("default", "web-1", uid=pod["metadata"]["uid"])
    assert emulator.get("Pod", "default", "web-1") is None
    pdb = emulator.get("PodDisruptionBudget", "default", "web")
    assert pdb is not None
    assert pdb["status"]["disruptionsAllowed"] == 0
    assert list(pdb["status"]["disruptedPods"]) == ["web-1"]


async def test_a_budget_that_allows_none_refuses_with_its_cause(emulator: Emulator, api: Api) -> None:
    emulator.put(budget("web", 0))
    emulator.put(running("web-1"))
    with pytest.raises(DisruptionBudgetError) as caught:
        await api.evict_pod("default", "web-1")
    assert "429 TooManyRequests: Cannot evict pod as it would violate the pod's disruption budget." in str(caught.value)
    assert "The disruption budget web needs 2 healthy pods" in str(caught.value)
    assert emulator.get("Pod", "default", "web-1") is not None


async def test_a_budget_not_computed_yet_refuses(emulator: Emulator, api: Api) -> None:
    emulator.put(budget("web", 1, generation=2, observed=1))
    emulator.put(running("web-1"))
    with pytest.raises(DisruptionBudgetError, match="still being processed"):
        await api.evict_pod("default", "web-1")


async def test_a_pod_not_running_yet_is_evicted_whatever_its_budget(emulator: Emulator, api: Api) -> None:
    emulator.put(budget("web", 0))
    emulator.put(make_pod("web-1", labels={"app": "web"}))  # Pending
    await api.evict_pod("default", "web-1")
    assert emulator.get("Pod", "default", "web-1") is None


async def test_a_budget_selecting_other_pods_does_not_apply(emulator: Emulator, api: Api) -> None:
    emulator.put(budget("web", 0))
    emulator.put(make_pod("db-1", node="n1", labels={"app": "db"}, phase="Running"))
    await api.evict_pod("default", "db-1")
    assert emulator.get("Pod", "default", "db-1") is None


async def test_two_budgets_on_one_pod_are_a_server_error_not_a_budget_refusal(emulator: Emulator, api: Api) -> None:
    emulator.put(budget("web", 1))
    emulator.put(budget("web-too", 1))
    emulator.put(running("web-1"))
    with pytest.raises(TransientError, match="more than one PodDisruptionBudget") as caught:
        await api.evict_pod("default", "web-1")
    assert not isinstance(caught.value, DisruptionBudgetError)


async def test_a_re_created_or_missing_pod_is_not_evicted(emulator: Emulator, api: Api) -> None:
    emulator.put(running("web-1"))
    with pytest.raises(UidMismatchError):
        await api.evict_pod("default", "web-1", uid="some-older-uid")
    assert emulator.get("Pod", "default", "web-1") is not None
    with pytest.raises(NotFoundError):
        await api.evict_pod("default", "nobody")


async def test_an_eviction_deletes_with_the_pods_grace_period() -> None:
    async with Emulator(bookmark_interval_s=None, graceful_pod_deletion=True) as emulator:
        async with open_client(KubeSettings(server=emulator.url, qps=0, timeout_s=5.0)) as client:
            api = Api(client, component="test")
            emulator.put(running("web-1"))
            await api.evict_pod("default", "web-1")
            pod = emulator.get("Pod", "default", "web-1")
            assert pod is not None and pod["metadata"]["deletionTimestamp"]
