"""``Api.get_pod_group`` finds a native PodGroup in whichever ``scheduling.k8s.io`` version the API server serves
(``v1beta1`` on Kubernetes v1.37, ``v1alpha2`` on v1.36) and asks the version that answered first next time."""

from __future__ import annotations

import json
from typing import Any, cast

from vgpu_scheduler.shared.errors import NotFoundError
from vgpu_scheduler.shared.k8s.api import Api
from vgpu_scheduler.shared.k8s.client import KubeClient


class _Client:
    """Answers GETs of the paths it holds; any other path is not found (a version not served, or no object)."""

    core: Any = None

    def __init__(self, objects: dict[str, dict[str, Any]]) -> None:
        self.objects = objects
        self.asked: list[str] = []

    async def call_raw(self, what: str, method: str, path: str, *_: Any, **__: Any) -> bytes:
        self.asked.append(path)
        if path not in self.objects:
            raise NotFoundError(what)
        return json.dumps(self.objects[path]).encode()


def _path(version: str, name: str = "train") -> str:
    return f"/apis/scheduling.k8s.io/{version}/namespaces/ns/podgroups/{name}"


def _group(version: str) -> dict[str, Any]:
    return {"apiVersion": f"scheduling.k8s.io/{version}", "spec": {"schedulingPolicy": {"gang": {"minCount": 4}}}}


async def test_a_v1beta1_pod_group_is_found_first() -> None:
    client = _Client({_path("v1beta1"): _group("v1beta1")})
    api = Api(cast(KubeClient, client), component="test")
    group = await api.get_pod_group("ns", "train")
    assert group is not None and group["apiVersion"] == "scheduling.k8s.io/v1beta1"
    assert client.asked == [_path("v1beta1")]


async def test_a_v1alpha2_pod_group_is_found_and_its_version_asked_first_afterwards() -> None:
    client = _Client({_path("v1alpha2"): _group("v1alpha2"), _path("v1alpha2", "other"): _group("v1alpha2")})
    api = Api(cast(KubeClient, client), component="test")
    assert await api.get_pod_group("ns", "train") is not None
    assert client.asked == [_path("v1beta1"), _path("v1alpha2")]
    client.asked.clear()
    assert await api.get_pod_group("ns", "other") is not None
    assert client.asked == [_path("v1alpha2", "other")]


async def test_no_pod_group_in_any_version_is_none() -> None:
    client = _Client({})
    api = Api(cast(KubeClient, client), component="test")
    assert await api.get_pod_group("ns", "train") is None
    assert client.asked == [_path("v1beta1"), _path("v1alpha2")]
