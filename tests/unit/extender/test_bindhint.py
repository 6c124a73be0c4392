"""The bind hint /filter stores with a reservation: written only for a pod the bind could patch as it stands."""

from __future__ import annotations

from typing import Any

import pytest

from vgpu_scheduler.services.extender.bindhint import BindHint, bind_hint_for, is_pod_group_member, parse_bind_hint
from vgpu_scheduler.shared.codec import annotations as keys

ALLOCATED = (keys.DEVICES_ALLOCATED, "hygon.com/dcu-devices-allocated")


def pod(**meta: Any) -> dict[str, Any]:
    spec = meta.pop("spec", {"containers": [{"name": "main"}]})
    return {"metadata": {"name": "p", "namespace": "ns", "uid": "u-1", "resourceVersion": "42", **meta}, "spec": spec}


def test_a_pending_pod_gets_its_resource_version_and_no_pod_group() -> None:
    hint = bind_hint_for(pod(), ALLOCATED)
    assert hint == "1|-|42"
    assert parse_bind_hint(hint) == BindHint(resource_version="42", pod_group=False)


@pytest.mark.parametrize(
    "member",
    [
        pytest.param(pod(labels={keys.POD_GROUP_LABEL: "gang-1"}), id="label"),
        pytest.param(pod(spec={"schedulingGroup": {"podGroupName": "gang-1"}}), id="scheduling-group"),
    ],
)
def test_a_pod_group_member_is_marked(member: dict[str, Any]) -> None:
    assert is_pod_group_member(member)
    assert parse_bind_hint(bind_hint_for(member, ALLOCATED)) == BindHint("42", pod_group=True)


@pytest.mark.parametrize(
    "unfit",
    [
        pytest.param(pod(resourceVersion=""), id="no-resource-version"),
        pytest.param({"metadata": {"name": "p"}, "spec": {}}, id="no-resource-version-at-all"),
        pytest.param(pod(deletionTimestamp="2027-01-01T00:00:00Z"), id="being-deleted"),
        pytest.param(pod(spec={"nodeName": "n1"}), id="bound"),
        pytest.param(pod(annotations={keys.VGPU_NODE: "n1"}), id="vgpu-node"),
        pytest.param(pod(annotations={keys.DEVICES_ALLOCATED: "GPU-a,NVIDIA,1000,10:;"}), id="allocated"),
        pytest.param(pod(annotations={"hygon.com/dcu-devices-allocated": "x"}), id="another-vendors-allocation"),
    ],
)
def test_no_hint_for_a_pod_the_bind_must_read(unfit: dict[str, Any]) -> None:
    assert bind_hint_for(unfit, ALLOCATED) == ""


def test_unrelated_annotations_do_not_matter() -> None:
    assert bind_hint_for(pod(annotations={"hami.io/gpu-scheduler-policy": "binpack"}), ALLOCATED) == "1|-|42"


@pytest.mark.parametrize("text", ["", "1", "1|-|", "2|-|42", "1|x|42", "garbage"])
def test_a_hint_this_version_does_not_know_is_none(text: str) -> None:
    assert parse_bind_hint(text) is None
