"""``--auto-defrag``'s move budget (per minute, overall and per node) and the fragmentation gauge's grouping."""

from __future__ import annotations

from tests.integration.extender.filter_harness import node
from vgpu_scheduler.services.extender.autodefrag import MoveBudget
from vgpu_scheduler.services.extender.fragmetrics import fragmentation_by_pool
from vgpu_scheduler.shared.domain.model import DeviceUsage
from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot


def test_the_budget_admits_whole_plans_within_both_limits_and_forgets_after_a_minute() -> None:
    now = [1000.0]
    budget = MoveBudget(per_minute=4, per_node_per_minute=2, clock=lambda: now[0])
    assert budget.admit(["a", "b"]) is None
    refused = budget.admit(["a", "a"])
    assert refused == "2 move(s) off node a would pass 2 per minute (1 made)"
    assert budget.admit(["a", "c"]) is None  # the refused plan counted nothing
    assert budget.admit(["d"]) == "1 move(s) would pass 4 per minute (4 made)"
    now[0] += 59.9
    assert budget.admit(["d"]) is not None
    now[0] += 0.1
    assert budget.admit(["a", "a", "d"]) is None


def test_fragmentation_is_grouped_per_vendor_and_device_type_over_usable_devices() -> None:
    t4 = node("n1", 3)  # 16384 MiB cards of type NVIDIA-Tesla T4
    usage = {"GPU-n1-0": DeviceUsage(used=1, used_mem_mib=4384), "GPU-n1-2": DeviceUsage(used=1, used_mem_mib=16384)}
    sick = node("n2", 1, health=False)
    snaps = [NodeSnapshot(t4, usage), NodeSnapshot(sick, {"GPU-n2-0": DeviceUsage(used=1, used_mem_mib=1)})]
    # free: 12000 stranded on card 0, 16384 on the idle card 1, 0 on the full card 2; n2 unusable
    assert fragmentation_by_pool(snaps) == {("NVIDIA", "NVIDIA-Tesla T4"): round(12000 / 28384, 4)}
