"""What a pod holds (difference 10, §5.4): facts, status, collapsed allocation, unreadable annotations."""

from __future__ import annotations

import pytest

from tests.unit.informer.builders import mig_alloc, pod
from vgpu_scheduler.services.informer.pods import PodStatus, pod_allocation, pod_facts
from vgpu_scheduler.shared.domain.model import BindPhase, DeviceCharge, MigPlacement
from vgpu_scheduler.shared.errors import DecodeError


def test_facts_of_a_placed_pod() -> None:
    p = pod("a", "ns", uid="u1", node="n1", app=[[("GPU-1", 1000, 10)]], bind_phase="success", phase="Running")
    f = pod_facts(p)
    assert (f.uid, f.namespace, f.name, f.node, f.phase) == ("u1", "ns", "a", "n1", "Running")
    assert f.bind_phase is BindPhase.SUCCESS and f.settled
    assert f.bind_time_s == 1_700_000_000
    assert f.status is PodStatus.HOLDS


@pytest.mark.parametrize(
    ("phase", "node", "status"),
    [
        ("Pending", None, PodStatus.NOT_PLACED),
        ("Pending", "n1", PodStatus.HOLDS),
        ("Running", "n1", PodStatus.HOLDS),
        ("Unknown", "n1", PodStatus.HOLDS),
        ("Succeeded", "n1", PodStatus.TERMINATED),
        ("Failed", "n1", PodStatus.TERMINATED),
        ("Failed", None, PodStatus.TERMINATED),
    ],
    ids=["pending", "placed", "running", "unknown-phase", "succeeded", "failed", "failed-unplaced"],
)
def test_status(phase: str, node: str | None, status: PodStatus) -> None:
    app = [[("GPU-1", 1000, 10)]] if node else []
    assert pod_facts(pod("a", uid="u", node=node, app=app, phase=phase)).status is status


def test_odd_bind_phase_and_time_read_as_absent() -> None:
    p = pod("a", uid="u", node="n1", app=[[("GPU-1", 1, 1)]], bind_phase="weird")
    p["metadata"]["annotations"]["hami.io/bind-time"] = "soon"
    f = pod_facts(p)
    assert f.bind_phase is None and not f.settled and f.bind_time_s is None


def test_facts_never_raise_on_garbage() -> None:
    f = pod_facts({"metadata": "x", "status": 3})
    assert (f.uid, f.name, f.node, f.phase) == ("", "", None, "")


def test_unplaced_pod_holds_nothing() -> None:
    assert pod_allocation(pod("a", uid="u")) is None


def test_allocation_collapses_init_and_app_containers() -> None:
    # init uses 6000 MiB on GPU-1; two app containers use 2000 + 3000 on GPU-1 and one uses GPU-2
    p = pod(
        "a",
        "ns",
        uid="u1",
        node="n1",
        init=[[("GPU-1", 6000, 50)], []],
        app=[[("GPU-1", 2000, 20)], [("GPU-1", 3000, 10), ("GPU-2", 1000, 100)]],
    )
    alloc = pod_allocation(p)
    assert alloc is not None
    assert (alloc.pod_uid, alloc.namespace, alloc.name, alloc.node) == ("u1", "ns", "a", "n1")
    assert alloc.charges == (
        DeviceCharge("GPU-1", slots=2, mem_mib=6000, cores_pct=50),
        DeviceCharge("GPU-2", slots=1, mem_mib=1000, cores_pct=100, exclusive=True),
    )
    assert (alloc.quota_mem_mib, alloc.quota_cores_pct) == (7000, 150)
    assert len(alloc.devices) == 4  # one entry per container, init first


def test_device_totals_decide_whole_card_charges() -> None:
    p = pod("a", uid="u", node="n1", app=[[("GPU-1", 1000, 100)]])
    alloc = pod_allocation(p, {"GPU-1": 200})
    assert alloc is not None and not alloc.charges[0].exclusive


def test_mig_placements_are_charged() -> None:
    p = pod(
        "a",
        uid="u",
        node="n1",
        app=[[("GPU-M", 10240, 28), ("GPU-M", 4864, 14)]],
        mig=[mig_alloc(0, 0, "GPU-M", 0, 2), mig_alloc(0, 1, "GPU-M", 6, 1)],
    )
    alloc = pod_allocation(p)
    assert alloc is not None
    assert alloc.charges[0].mig_placements == (MigPlacement(0, 2), MigPlacement(6, 1))
    assert len(alloc.mig) == 2


def test_placed_pod_without_device_entries_holds_nothing() -> None:
    p = pod("a", uid="u", node="n1", app=[[]])
    assert pod_allocation(p) is None


@pytest.mark.parametrize(
    ("key", "value", "what"),
    [
        ("hami.io/vgpu-devices-allocated", "GPU-1,NVIDIA,abc,0:;", "hami.io/vgpu-devices-allocated"),
        ("hami.io/vgpu-devices-allocated", "GPU-1,NVIDIA:;", "hami.io/vgpu-devices-allocated"),
        ("hami.io/vgpu-mig-allocations", "[{]", "hami.io/vgpu-mig-allocations"),
        ("hami.io/vgpu-node", "", "hami.io/vgpu-node"),
    ],
    ids=["bad-number", "too-few-fields", "bad-mig-json", "empty-node"],
)
def test_unreadable_allocation_names_the_annotation(key: str, value: str, what: str) -> None:
    p = pod("a", uid="u", node="n1", app=[[("GPU-1", 1, 1)]])
    p["metadata"]["annotations"][key] = value
    with pytest.raises(DecodeError) as e:
        pod_allocation(p)
    assert e.value.what == what


def test_more_entries_than_containers_is_unreadable() -> None:
    p = pod("a", uid="u", node="n1", app=[[("GPU-1", 1, 1)]])
    p["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"] = "GPU-1,NVIDIA,1,1:;GPU-2,NVIDIA,1,1:;"
    with pytest.raises(DecodeError):
        pod_allocation(p)
