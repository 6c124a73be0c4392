"""``shared.domain.diagnosis``: the nearest miss of a refusal, quota headroom and fragmentation.

Every case plans with the core first and explains the rejection ``plan`` returned, as ``explain`` does.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from tests.builders import gpu, pod, req, snap, use
from vgpu_scheduler.shared.domain.diagnosis import NearestMiss, nearest_miss, quota_left
from vgpu_scheduler.shared.domain.fragmentation import fragmentation
from vgpu_scheduler.shared.domain.model import NO_CONSTRAINTS, GpuPolicy, GpuPolicyToken, PodConstraints, PodRequest
from vgpu_scheduler.shared.domain.plan import Failure, plan
from vgpu_scheduler.shared.domain.quota import QuotaLimits, QuotaState
from vgpu_scheduler.shared.domain.scoring import Policies
from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot

POLICIES = Policies()


def miss(
    p: PodRequest,
    s: NodeSnapshot,
    *,
    constraints: PodConstraints = NO_CONSTRAINTS,
    quota: QuotaState | None = None,
    policies: Policies = POLICIES,
) -> NearestMiss:
    result = plan(p, constraints, [s], policies=policies, quota=quota)
    assert isinstance(result, Failure), "the case must not fit"
    return nearest_miss(
        p, constraints, s, result.rejections[s.name], policies=policies, quota=quota, namespace="team-a"
    )


def test_memory_names_the_device_with_the_most_free() -> None:
    s = snap(
        "gpu-a100-3",
        n=3,
        mem=40960,
        usage={0: use(1, mem=30000), 1: use(1, mem=24576), 2: use(1, mem=35000)},
    )
    m = miss(pod(req(1, mem=20000)), s)
    assert m.reason == "CardInsufficientMemory"
    assert m.text == "needs 20,000 MiB on one GPU; the most free on gpu-a100-3 is 16,384 MiB on GPU-gpu-a100-3-1"
    assert (m.device, m.needed, m.available, m.unit) == ("GPU-gpu-a100-3-1", 20000, 16384, "MiB")


def test_percentage_memory_is_said_as_a_share_and_in_mib() -> None:
    s = snap("n", n=1, mem=10000, usage={0: use(1, mem=6000)})
    m = miss(pod(req(1, pct=50)), s)
    assert m.reason == "CardInsufficientMemory"
    assert m.text == (
        "needs 50% of the memory of one GPU (5,000 MiB on GPU-n-0); the closest on n is GPU-n-0 with 4,000 MiB free"
    )


def test_cores_name_the_most_free() -> None:
    s = snap("n", n=2, usage={0: use(1, cores=80), 1: use(1, cores=60)})
    m = miss(pod(req(1, mem=100, cores=50)), s)
    assert m.text == "needs 50% of the cores of one GPU; the most free on n is 40% on GPU-n-1"
    assert (m.needed, m.available) == (50, 40)


def test_multi_gpu_shortage_counts_the_devices_that_can_take_it_and_explains_the_rest() -> None:
    s = snap("n", n=4, mem=16384, usage={2: use(1, mem=8000), 3: use(1, mem=10000)})
    m = miss(pod(req(4, mem=10000)), s)
    assert m.reason == "AllocatedCardsInsufficientRequest"
    assert m.text == (
        "needs 4 GPUs; 2 on n can take this container; "
        "needs 10,000 MiB on each of 4 GPUs; the most free on n is 8,384 MiB on GPU-n-2"
    )
    assert (m.needed, m.available, m.device) == (4, 2, "GPU-n-2")


def test_too_few_devices() -> None:
    m = miss(pod(req(8, mem=100)), snap("n", n=4))
    assert (m.reason, m.text) == ("NodeInsufficientDevice", "needs 8 GPUs in one container; n has 4")


def test_full_slots_and_the_whole_card_conflict() -> None:
    full = snap("n", n=2, count=2, usage={0: use(2, mem=10), 1: use(2, mem=10)})
    m = miss(pod(req(1, mem=100)), full)
    assert m.reason == "CardTimeSlicingExhausted"
    assert m.text == "2 GPUs on n already run as many pods as they may share (GPU-n-0: 2/2)"
    busy = snap("n", n=2, usage={0: use(3, mem=10), 1: use(1, mem=10)})
    m = miss(pod(req(1, mem=100, cores=100)), busy)
    assert m.reason == "ExclusiveDeviceAllocateConflict"
    assert m.text.endswith("the least busy is GPU-n-1 with 1 pod")
    assert "a whole card" in m.text
    mutex = Policies(gpu=GpuPolicy((GpuPolicyToken.MUTEX,)))
    assert "the mutex GPU policy" in miss(pod(req(1, mem=100)), busy, policies=mutex).text


def test_quota_left_in_plain_words() -> None:
    quota = QuotaState(limits=QuotaLimits(mem_mib=10000), used_mem_mib=8000)
    m = miss(pod(req(1, mem=5000)), snap("n", n=2), quota=quota)
    assert m.reason == "ResourceQuotaNotFit"
    assert m.text == (
        "quota: namespace team-a has 2,000 MiB of nvidia.com/gpumem left; this container asks for 5,000 MiB"
    )
    cores = QuotaState(limits=QuotaLimits(cores_pct=100), used_cores_pct=90)
    m = miss(pod(req(1, mem=10, cores=20)), snap("n", n=2), quota=cores)
    assert m.text == "quota: namespace team-a has 10% of nvidia.com/gpucores left; this container asks for 20%"


def test_static_reasons_list_the_devices() -> None:
    devices = (gpu("GPU-a", index=0, health=False), gpu("GPU-b", index=1))
    m = miss(pod(req(1, mem=100)), snap("n", devices, cordoned=["GPU-b"]))
    assert (m.reason, m.text) == ("CardCordoned", "1 GPU cordoned by hami.io/device-cordon: GPU-b")
    sick = (gpu("GPU-a", index=0, health=False), gpu("GPU-b", index=1, health=False))
    m = miss(pod(req(1, mem=100)), snap("n", sick))
    assert m.text == "2 GPUs reported unhealthy by the device plugin: GPU-a, GPU-b"
    typed = miss(pod(req(1, mem=100)), snap("n", n=1), constraints=PodConstraints(use_types=("A100",)))
    assert typed.reason == "CardTypeMismatch"
    assert typed.text == "asks for a GPU type containing A100; n has NVIDIA-Tesla V100-PCIE-32GB (hami-core)"


def test_an_app_container_sees_the_earlier_containers_of_its_pod() -> None:
    # one 10,000 MiB GPU: the first container takes 6,000, the second (4,000 wanted + …) sees 4,000 free
    s = snap("n", n=1, mem=10000)
    m = miss(pod(req(1, mem=6000), req(1, mem=5000)), s)
    assert m.text == "needs 5,000 MiB on one GPU; the most free on n is 4,000 MiB on GPU-n-0"


def test_quota_left_never_negative_and_scaled_by_the_memory_factor() -> None:
    q = QuotaState(limits=QuotaLimits(mem_mib=100, cores_pct=50), used_mem_mib=150, used_cores_pct=60)
    assert (quota_left(q).mem_mib, quota_left(q).cores_pct) == (0, 0)
    assert quota_left(q, memory_factor=4).mem_mib == 250
    assert quota_left(QuotaState()).mem_mib is None


@dataclass
class Dev:
    usable: bool
    used: int
    free_mem_mib: int


@pytest.mark.parametrize(
    ("devices", "expected"),
    [
        ([], (0, 0, 0, 0.0)),
        ([Dev(True, 0, 100), Dev(True, 2, 50), Dev(False, 1, 1000)], (150, 50, 1, 0.3333)),
        ([Dev(True, 1, 0)], (0, 0, 0, 0.0)),
    ],
)
def test_fragmentation(devices: list[Dev], expected: tuple[int, int, int, float]) -> None:
    f = fragmentation(devices)
    assert (f.free_memory_mib, f.stranded_memory_mib, f.idle_devices, f.ratio) == expected
    assert f.to_json()["ratio"] == expected[3]
