"""Pods listed as summaries a page at a time (``Api.list_pod_summaries``) against the emulator: the pages asked
for and followed, the fields kept, selectors passed through, an expired continuation read again once."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.k8s.conftest import make_pod
from vgpu_scheduler.shared.emulator import Emulator
from vgpu_scheduler.shared.k8s import Api
from vgpu_scheduler.shared.k8s.api import LIST_PAGE
from vgpu_scheduler.shared.k8s.errors import ExpiredError
from vgpu_scheduler.shared.k8s.objects import NOT_ENDED
from vgpu_scheduler.shared.preemption import PLACED, placed_pods


def _big_pod(i: int, **kw: Any) -> dict[str, Any]:
    pod = make_pod(f"p{i:04d}", annotations={"hami.io/vgpu-devices-allocated": "GPU-0,NVIDIA,1024,10:;" * 4}, **kw)
    pod["metadata"]["labels"] = {"app": "train"}
    pod["spec"].update(priority=7, preemptionPolicy="Never", schedulingGroup={"podGroupName": "g"})
    pod["status"]["startTime"] = "2026-12-03T10:00:00Z"
    return pod


async def test_every_pod_is_read_in_pages_and_kept_as_its_summary(emulator: Emulator, api: Api) -> None:
    count = 2 * LIST_PAGE + 1
    for i in range(count):
        emulator.put(_big_pod(i, node="n1", phase="Running"))
    emulator.requests.clear()

    pods = await api.list_pod_summaries()

    assert [p["metadata"]["name"] for p in pods] == [f"p{i:04d}" for i in range(count)]
    lists = [q.query for q in emulator.requests if q.path == "/api/v1/pods"]
    assert [q.get("limit") for q in lists] == [str(LIST_PAGE)] * 3
    assert [bool(q.get("continue")) for q in lists] == [False, True, True]
    pod = pods[-1]
    assert pod["kind"] == "Pod" and pod["apiVersion"] == "v1"
    assert set(pod["metadata"]) == {"name", "namespace", "uid", "labels", "creationTimestamp"}
    assert pod["metadata"]["labels"] == {"app": "train"}
    assert pod["spec"] == {
        "nodeName": "n1",
        "priority": 7,
        "preemptionPolicy": "Never",
        "schedulingGroup": {"podGroupName": "g"},
    }
    assert pod["status"] == {"phase": "Running", "startTime": "2026-12-03T10:00:00Z"}


async def test_summaries_follow_the_namespace_and_selectors(emulator: Emulator, api: Api) -> None:
    emulator.put(make_pod("placed", "ns1", node="n1", phase="Running", labels={"g": "a"}))
    emulator.put(make_pod("pending", "ns1", labels={"g": "a"}))
    emulator.put(make_pod("done", "ns1", node="n1", phase="Succeeded", labels={"g": "a"}))
    emulator.put(make_pod("failed", "ns1", node="n1", phase="Failed"))
    emulator.put(make_pod("other-ns", "ns2", node="n1", phase="Running", labels={"g": "a"}))
    emulator.put(make_pod("other-label", "ns1", node="n1", phase="Running", labels={"g": "b"}))

    def names(pods: list[dict[str, Any]]) -> list[str]:
        return sorted(p["metadata"]["name"] for p in pods)

    assert names(await placed_pods(api)) == ["other-label", "other-ns", "placed"]
    assert names(await api.list_pod_summaries(field_selector=PLACED, namespace="ns2")) == ["other-ns"]
    assert names(await api.list_pod_summaries(namespace="ns1", label_selector="g=a", field_selector=NOT_ENDED)) == [
        "pending",
        "placed",
    ]


async def test_an_expired_continuation_reads_the_list_again_once(
    emulator: Emulator, api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The API server answers 410 to a continue token once its version is compacted; the list starts over."""
    for i in range(LIST_PAGE + 1):
        emulator.put(_big_pod(i))
    real = api._pod_list
    expire = [True]

    async def flaky(*args: Any, **kw: Any) -> dict[str, Any]:
        if kw.get("token") and expire:
            expire.pop()
            raise ExpiredError("list pods: the continue token is too old")
        return await real(*args, **kw)

    monkeypatch.setattr(api, "_pod_list", flaky)
    emulator.requests.clear()
    assert len(await api.list_pod_summaries()) == LIST_PAGE + 1
    lists = [q.query for q in emulator.requests if q.path == "/api/v1/pods"]
    assert [bool(q.get("continue")) for q in lists] == [False, False, True]  # the first page read again

    async def always_expired(*args: Any, **kw: Any) -> dict[str, Any]:
        if kw.get("token"):
            raise ExpiredError("list pods: the continue token is too old")
        return await real(*args, **kw)

    monkeypatch.setattr(api, "_pod_list", always_expired)
    with pytest.raises(ExpiredError):
        await api.list_pod_summaries()
