"""NVIDIA Fit, check by check, with the reason each failing device counts (hami-wire §6.4, §6.6, §8)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from tests.builders import gpu, pod, req, snap, use
from vgpu_scheduler.shared.domain.model import (
    NO_CONSTRAINTS,
    ContainerRequest,
    GpuPolicy,
    GpuPolicyToken,
    MigPlacement,
    MigProfile,
    NodePolicy,
    NvidiaConfig,
    PodConstraints,
    PodRequest,
    Reason,
)
from vgpu_scheduler.shared.domain.plan import Decision, Failure, plan
from vgpu_scheduler.shared.domain.quota import QuotaLimits, QuotaState
from vgpu_scheduler.shared.domain.reasons import NodeRejection, gen_reason
from vgpu_scheduler.shared.domain.scoring import Policies
from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot

MUTEX = GpuPolicy((GpuPolicyToken.MUTEX,))
DEFAULTS = Policies()
PROFILE_1G = MigProfile(
    name="1g.5gb",
    memory_mib=4864,
    core_pct=15,
    slice_count=1,
    placements=tuple(MigPlacement(s, 1) for s in range(2)),
)


def rejection(
    p: PodRequest,
    node: NodeSnapshot,
    constraints: PodConstraints = NO_CONSTRAINTS,
    *,
    quota: QuotaState | None = None,
    policies: Policies = DEFAULTS,
) -> NodeRejection:
    result = plan(p, constraints, [node], policies=policies, quota=quota)
    assert isinstance(result, Failure), result
    assert result.reasons[node.name] == result.rejections[node.name].text
    return result.rejections[node.name]


@dataclass(frozen=True)
class Case:
    node: NodeSnapshot
    request: ContainerRequest
    text: str
    constraints: PodConstraints = NO_CONSTRAINTS
    quota: QuotaState | None = None
    policies: Policies = field(default_factory=Policies)


CASES = {
    "not-healthy": Case(snap(n=1, health=False), req(1, mem=100), "1/1 CardNotHealth"),
    "cordoned": Case(snap(n=1, cordoned=["GPU-node1-0"]), req(1, mem=100), "1/1 CardCordoned"),
    "use-gputype-mismatch": Case(
        snap(n=1), req(1, mem=100), "1/1 CardTypeMismatch", PodConstraints(use_types=("A100",))
    ),
    "nouse-gputype-match": Case(
        snap(n=1), req(1, mem=100), "1/1 CardTypeMismatch", PodConstraints(nouse_types=("V100",))
    ),
    "vgpu-mode-lacks-device-mode": Case(
        snap(n=1), req(1, mem=100), "1/1 CardTypeMismatch", PodConstraints(vgpu_mode="mps")
    ),
    "use-gpuuuid-not-listed": Case(
        snap(n=1), req(1, mem=100), "1/1 CardUuidMismatch", PodConstraints(use_uuids=frozenset({"GPU-other"}))
    ),
    "nouse-gpuuuid-listed": Case(
        snap(n=1), req(1, mem=100), "1/1 CardUuidMismatch", PodConstraints(nouse_uuids=frozenset({"GPU-node1-0"}))
    ),
    "time-slices-exhausted": Case(
        snap(n=1, count=2, usage={0: use(2)}), req(1, mem=100), "1/1 CardTimeSlicingExhausted"
    ),
    "mutex-needs-idle-card": Case(
        snap(n=1, usage={0: use(1, 100)}),
        req(1, mem=100),
        "1/1 ExclusiveDeviceAllocateConflict",
        PodConstraints(gpu_policy=MUTEX),
    ),
    "quota-memory": Case(
        snap(n=1),
        req(1, mem=2000),
        "1/1 ResourceQuotaNotFit",
        quota=QuotaState(QuotaLimits(mem_mib=3000), used_mem_mib=1500),
    ),
    "quota-cores": Case(
        snap(n=1),
        req(1, mem=100, cores=30),
        "1/1 ResourceQuotaNotFit",
        quota=QuotaState(QuotaLimits(cores_pct=50), used_cores_pct=30),
    ),
    "quota-zero-blocks": Case(
        snap(n=1), req(1, mem=1), "1/1 ResourceQuotaNotFit", quota=QuotaState(QuotaLimits(mem_mib=0))
    ),
    "memory": Case(snap(n=1, usage={0: use(1, 7000)}), req(1, mem=1001), "1/1 CardInsufficientMemory"),
    "memory-percentage": Case(snap(n=1, usage={0: use(1, 1)}), req(1, pct=100), "1/1 CardInsufficientMemory"),
    "bare-request-is-whole-memory": Case(snap(n=1, usage={0: use(1, 1)}), req(1), "1/1 CardInsufficientMemory"),
    "cores": Case(snap(n=1, usage={0: use(1, 0, 80)}), req(1, mem=100, cores=21), "1/1 CardInsufficientCore"),
    "whole-card-needs-idle-card": Case(
        snap(n=1, usage={0: use(1)}), req(1, mem=100, cores=100), "1/1 ExclusiveDeviceAllocateConflict"
    ),
    "cores-clamped-to-100-is-whole-card": Case(
        snap(n=1, usage={0: use(1)}), req(1, mem=100, cores=150), "1/1 ExclusiveDeviceAllocateConflict"
    ),
    "zero-core-job-on-full-card": Case(
        snap(n=1, usage={0: use(1, 0, 100)}), req(1, mem=100, cores=0), "1/1 CardComputeUnitsExhausted"
    ),
    "numa-bind-restarts-per-numa": Case(
        snap(devices=[gpu("a", index=0, numa=0), gpu("b", index=1, numa=1)]),
        req(2, mem=100),
        "1/2 AllocatedCardsInsufficientRequest, 1/2 NumaNotFit",
        PodConstraints(numa_bind=True),
    ),
    "partial-list": Case(
        snap(devices=[gpu("a", index=0, health=False), gpu("b", index=1)]),
        req(2, mem=100),
        "1/2 AllocatedCardsInsufficientRequest, 1/2 CardNotHealth",
    ),
    "node-insufficient-device": Case(snap(n=2), req(3, mem=100), "NodeInsufficientDevice"),
    "mig-no-free-placement": Case(
        snap(
            devices=[gpu("m", mode="mig", count=7, mem=40960, mig_profiles=(PROFILE_1G,))],
            usage={"m": use(2, 9728, 30, mig=[MigPlacement(0, 1), MigPlacement(1, 1)])},
        ),
        req(1, mem=4000),
        "1/1 CardMigTopologyInfeasible",
    ),
    "legacy-mig-no-template": Case(
        snap(devices=[gpu("m", mode="mig", count=7, mem=40960)]),
        req(1, mem=4000),
        "1/1 CardMigTopologyInfeasible",
    ),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_fit_reason(case: Case) -> None:
    got = rejection(pod(case.request), case.node, case.constraints, quota=case.quota, policies=case.policies)
    assert got.text == case.text
    assert got.container_index == 0


def test_checks_run_in_hamis_order_first_failure_counts() -> None:
    # unhealthy AND cordoned AND too busy: only the first check (health) is counted
    node = snap(devices=[gpu("a", health=False)], cordoned=["a"], usage={"a": use(10, 8000, 100)})
    assert rejection(pod(req(1, mem=100)), node).counts == {Reason.CARD_NOT_HEALTH: 1}


def test_numa_reset_happens_before_the_uuid_check() -> None:
    # numa-bind, spread: NUMA 1 is preferred. b (NUMA 1) fits; a (NUMA 0) resets the partial list, then fails
    # its UUID check: NumaNotFit counts the dropped device even though a itself was never accepted.
    node = snap(devices=[gpu("a", index=0, numa=0), gpu("b", index=1, numa=1), gpu("c", index=2, numa=1)])
    constraints = PodConstraints(numa_bind=True, nouse_uuids=frozenset({"a", "c"}))
    got = rejection(pod(req(2, mem=100)), node, constraints)
    assert got.counts == {Reason.CARD_UUID_MISMATCH: 2, Reason.NUMA_NOT_FIT: 1}
    assert got.text == "1/3 NumaNotFit, 2/3 CardUuidMismatch"


def test_numa_bind_takes_devices_from_one_numa_node() -> None:
    # spread under numa-bind: NUMA 1 (b alone) first, then NUMA 0 walked from the end as HAMi does: c, then a
    node = snap(devices=[gpu("a", index=0, numa=0), gpu("b", index=1, numa=1), gpu("c", index=2, numa=0)])
    got = plan(pod(req(2, mem=100)), PodConstraints(numa_bind=True), [node], policies=Policies())
    assert isinstance(got, Decision)
    assert [d.uuid for d in got.devices[0]] == ["c", "a"]


def test_without_numa_bind_devices_cross_numa_nodes() -> None:
    node = snap(devices=[gpu("a", index=0, numa=0), gpu("b", index=1, numa=1)])
    got = plan(pod(req(2, mem=100)), NO_CONSTRAINTS, [node], policies=Policies())
    assert isinstance(got, Decision)
    assert sorted(d.uuid for d in got.devices[0]) == ["a", "b"]


def test_reason_total_counts_only_devices_of_the_request_type() -> None:
    devs = [gpu("a", index=0, type="NVIDIA-A100", health=False), gpu("x", index=1, type="Ascend-910")]
    assert rejection(pod(req(1, mem=100)), snap(devices=devs)).text == "1/1 CardNotHealth"


def test_insufficient_device_ignored_for_mig_requests() -> None:
    # 2 vGPUs from one MIG GPU: more than the node's device count is allowed when a MIG device is there
    node = snap(devices=[gpu("m", mode="mig", count=7, mem=40960, mig_profiles=(PROFILE_1G,))])
    got = plan(pod(req(2, mem=4000)), NO_CONSTRAINTS, [node], policies=Policies())
    assert isinstance(got, Decision), got


def test_insufficient_device_kept_when_vgpu_mode_excludes_mig() -> None:
    node = snap(devices=[gpu("m", mode="mig", count=7, mem=40960, mig_profiles=(PROFILE_1G,))])
    got = rejection(pod(req(2, mem=4000)), node, PodConstraints(vgpu_mode="hami-core"))
    assert got.plain is Reason.NODE_INSUFFICIENT_DEVICE


def test_memory_percentage_resolves_on_each_card() -> None:
    node = snap(devices=[gpu("a", index=0, mem=10000), gpu("b", index=1, mem=24000)])
    got = plan(pod(req(2, pct=25)), NO_CONSTRAINTS, [node], policies=Policies())
    assert isinstance(got, Decision)
    assert {d.uuid: d.used_mem_mib for d in got.devices[0]} == {"a": 2500, "b": 6000}


def test_default_memory_applies_to_a_request_without_memory() -> None:
    got = plan(pod(req(1)), NO_CONSTRAINTS, [snap(n=1)], policies=Policies(), config=NvidiaConfig(default_memory=3000))
    assert isinstance(got, Decision)
    assert got.devices[0][0].used_mem_mib == 3000


def test_quota_memory_limit_is_scaled_by_memory_factor() -> None:
    quota = QuotaState(QuotaLimits(mem_mib=1000))
    p = pod(req(1, mem=2000))
    assert isinstance(plan(p, NO_CONSTRAINTS, [snap(n=1)], policies=Policies(), quota=quota), Failure)
    scaled = plan(
        p, NO_CONSTRAINTS, [snap(n=1)], policies=Policies(), quota=quota, config=NvidiaConfig(memory_factor=2)
    )
    assert isinstance(scaled, Decision)


def test_quota_counts_the_pod_collapsed_over_init_and_app() -> None:
    # init 3000 then app 2000 + 2000 on one card: collapsed total max(3000, 4000) = 4000 MiB
    p = pod(req(1, mem=2000), req(1, mem=2000), init=[req(1, mem=3000)])
    node = snap(n=1)
    fits = plan(p, NO_CONSTRAINTS, [node], policies=Policies(), quota=QuotaState(QuotaLimits(mem_mib=4000)))
    assert isinstance(fits, Decision)
    got = rejection(p, node, quota=QuotaState(QuotaLimits(mem_mib=3999)))
    assert got.counts == {Reason.RESOURCE_QUOTA_NOT_FIT: 1}
    assert got.container_index == 2


def test_quota_with_only_a_cores_limit_ignores_memory() -> None:
    quota = QuotaState(QuotaLimits(cores_pct=100), used_mem_mib=10**9)
    assert isinstance(
        plan(pod(req(1, mem=100, cores=50)), NO_CONSTRAINTS, [snap()], policies=Policies(), quota=quota), Decision
    )


def test_gen_reason_sorts_entries_as_strings() -> None:
    counts = {Reason.CARD_NOT_HEALTH: 2, Reason.CARD_INSUFFICIENT_MEMORY: 2, Reason.NUMA_NOT_FIT: 10}
    assert gen_reason(counts, 12) == "10/12 NumaNotFit, 2/12 CardInsufficientMemory, 2/12 CardNotHealth"
    assert gen_reason({Reason.CARD_NOT_HEALTH: 0}, 4) == ""


def test_rejection_without_counts_reads_node_unfit() -> None:
    assert NodeRejection(node="n").text == "NodeUnfitPod"
    assert NodeRejection(node="n", plain=Reason.NODE_INSUFFICIENT_DEVICE).text == "NodeInsufficientDevice"


def test_request_of_another_vendor_sees_none_of_the_nvidia_cards() -> None:
    # HAMi fits a request against its own vendor's devices only (getNodeResources by type): an NVIDIA card whose
    # type happens to contain the other vendor's word is still not a candidate
    other = ContainerRequest(nums=1, mem_mib=100, type="MLU")
    node = snap(devices=[gpu("a", type="Cambricon MLU370 NVIDIA-ish")])
    assert rejection(pod(other), node).text == "NodeInsufficientDevice"


def test_node_policy_in_policies_is_used() -> None:
    a = snap("a", n=1, usage={0: use(1, 100)})
    b = snap("b", n=1)
    assert plan(pod(req(1, mem=100)), NO_CONSTRAINTS, [a, b], policies=Policies(node=NodePolicy.SPREAD)).node == "b"  # type: ignore[union-attr]
