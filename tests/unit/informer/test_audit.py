"""The audit helper (tests/audit.py): usage and quota usage recomputed from pod JSON alone."""

from __future__ import annotations

import pytest

from tests.audit import quota_usage_from_pods, usage_from_pods
from tests.unit.informer.builders import mig_alloc, pod
from vgpu_scheduler.shared.domain.model import DeviceUsage, MigPlacement
from vgpu_scheduler.shared.errors import DecodeError


def test_usage_sums_collapsed_pods_per_node_and_device() -> None:
    pods = [
        pod("a", "ns1", uid="a", node="n1", init=[[("GPU-1", 6000, 50)]], app=[[("GPU-1", 2000, 20)]]),
        pod("b", "ns1", uid="b", node="n1", app=[[("GPU-1", 1000, 10), ("GPU-2", 500, 0)]]),
        pod("c", "ns2", uid="c", node="n2", app=[[("GPU-9", 100, 5)]], phase="Running"),
        pod("done", "ns2", uid="d", node="n2", app=[[("GPU-9", 100, 5)]], phase="Succeeded"),
        pod("pending", "ns2", uid="e"),
    ]
    assert usage_from_pods(pods) == {
        "n1": {"GPU-1": DeviceUsage(2, 7000, 60), "GPU-2": DeviceUsage(1, 500, 0)},
        "n2": {"GPU-9": DeviceUsage(1, 100, 5)},
    }
    assert quota_usage_from_pods(pods) == {"ns1": (7500, 60), "ns2": (100, 5)}


def test_mig_placements_are_sorted_like_the_store() -> None:
    pods = [
        pod("a", uid="a", node="n1", app=[[("GPU-M", 4864, 14)]], mig=[mig_alloc(0, 0, "GPU-M", 6, 1)]),
        pod("b", uid="b", node="n1", app=[[("GPU-M", 4864, 14)]], mig=[mig_alloc(0, 0, "GPU-M", 0, 1)]),
    ]
    usage = usage_from_pods(pods)["n1"]["GPU-M"]
    assert usage.mig_in_use == (MigPlacement(0, 1), MigPlacement(6, 1))
    assert (usage.used, usage.used_mem_mib) == (2, 9728)


def test_unreadable_pods_raise_unless_skipped() -> None:
    bad = pod("a", uid="a", node="n1", app=[[("GPU-1", 1, 1)]])
    bad["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"] = "GPU-1,NVIDIA,x,1:;"
    good = pod("b", uid="b", node="n1", app=[[("GPU-1", 1, 1)]])
    with pytest.raises(DecodeError):
        usage_from_pods([bad, good])
    assert usage_from_pods([bad, good], skip_unreadable=True) == {"n1": {"GPU-1": DeviceUsage(1, 1, 1)}}
