"""Full Node objects → inventories (the autoscaler path), and the scrape-time allocation gauges."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from tests.builders import gpus, inventory, use
from vgpu_scheduler.services.extender.metrics import AllocationCollector, ExtenderMetrics, FilterOutcome, QuotaView
from vgpu_scheduler.services.extender.nodes import inventory_from_node
from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.codec.register import encode_register_colon, encode_register_json
from vgpu_scheduler.shared.domain.model import NvidiaConfig
from vgpu_scheduler.shared.domain.quota import QuotaLimits, QuotaState
from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot
from vgpu_scheduler.shared.errors import DecodeError

CFG = NvidiaConfig()


def node_obj(annotations: dict[str, str] | None, allocatable: Any = "8", name: str = "n1") -> dict[str, Any]:
    status: dict[str, Any] = {} if allocatable is None else {"allocatable": {"nvidia.com/gpu": allocatable}}
    return {"metadata": {"name": name, "annotations": annotations}, "status": status}


def test_a_registered_node_decodes_with_topology_and_cordon() -> None:
    devices = gpus("n1", 2)
    annotations = {
        keys.NODE_NVIDIA_REGISTER: encode_register_json(devices),
        keys.NODE_NVIDIA_SCORE: '[{"uuid":"GPU-n1-0","score":{"GPU-n1-1":100}}]',
        keys.DEVICE_CORDON: " GPU-n1-1 ",
    }
    inv = inventory_from_node(node_obj(annotations, "20"), CFG)
    assert (inv.node, inv.vendor, [d.id for d in inv.devices]) == ("n1", "NVIDIA", ["GPU-n1-0", "GPU-n1-1"])
    assert inv.pair_scores == {"GPU-n1-0": {"GPU-n1-1": 100}}
    assert inv.cordoned == frozenset({"GPU-n1-1"})


def test_the_colon_format_of_older_device_plugins_is_accepted() -> None:
    inv = inventory_from_node(node_obj({keys.NODE_NVIDIA_REGISTER: encode_register_colon(gpus("n1", 1))}), CFG)
    assert [d.id for d in inv.devices] == ["GPU-n1-0"]


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        pytest.param(node_obj(None), "no hami.io/node-nvidia-register annotation", id="no-annotations"),
        pytest.param(node_obj({keys.NODE_NVIDIA_REGISTER: "  "}), "no hami.io/node-nvidia-register", id="blank"),
        pytest.param(node_obj({keys.NODE_NVIDIA_REGISTER: "[]"}), "registers no devices", id="empty-list"),
        pytest.param(node_obj({keys.NODE_NVIDIA_REGISTER: "[{"}), "hami.io/node-nvidia-register", id="malformed"),
        pytest.param(node_obj({keys.NODE_NVIDIA_REGISTER: encode_register_json(gpus("n1", 1))}, allocatable="0"),
                     "allocatable nvidia.com/gpu is not positive", id="zero-allocatable"),
        pytest.param(node_obj({keys.NODE_NVIDIA_REGISTER: encode_register_json(gpus("n1", 1))}, allocatable=None),
                     "allocatable nvidia.com/gpu is not positive", id="no-allocatable"),
        pytest.param(node_obj({keys.NODE_NVIDIA_REGISTER: encode_register_json(gpus("n1", 1)),
                               keys.NODE_NVIDIA_SCORE: "{"}), "hami.io/node-nvidia-score", id="bad-topology"),
        pytest.param({"metadata": {"name": "n1", "annotations": "x"}}, "annotations must be an object",
                     id="annotations-not-object"),
    ],
)  # fmt: skip
def test_unregistered_nodes_say_why(obj: dict[str, Any], message: str) -> None:
    with pytest.raises(DecodeError, match=message):
        inventory_from_node(obj, CFG)


def _scrape(registry: CollectorRegistry) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    from prometheus_client import generate_latest

    out = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def test_allocation_gauges_are_computed_from_the_snapshots_at_scrape_time() -> None:
    snaps = {"n1": NodeSnapshot(inventory("n1", n=2, mem=8000, type="NVIDIA-T4"), {"GPU-n1-1": use(2, 3000, 40)})}
    quotas = QuotaView({"team": QuotaState(QuotaLimits(mem_mib=10_000, cores_pct=None), 3000, 40)})
    registry = CollectorRegistry()
    current = {"view": snaps}
    registry.register(AllocationCollector(lambda: current["view"], lambda: quotas))
    samples = _scrape(registry)

    def v(name: str, **labels: str) -> float:
        return samples[(name, frozenset({**labels, "zone": "vGPU"}.items()))]

    busy = {
        "node": "n1",
        "device_uuid": "GPU-n1-1",
        "device_index": "1",
        "device_type": "NVIDIA-T4",
        "vendor": "NVIDIA",
    }
    assert v("hami_gpu_memory_limit_bytes", **busy) == 8000 * 1048576
    assert v("hami_gpu_memory_allocated_bytes", **busy, device_cores="40") == 3000 * 1048576
    assert v("hami_gpu_shared_count", **busy) == 2
    assert v("hami_gpu_core_allocated_ratio", **busy) == 40
    assert v("hami_node_gpu_memory_allocated_ratio", **busy) == 3000 / 8000
    assert v("hami_node_gpu_overview", **busy, device_cores="40", device_memory_limit="8000") == 3000 * 1048576
    assert v("hami_resource_quota_used", namespace="team", quota_name="nvidia.com/gpumem", limit="10000") == 3000
    assert v("hami_resource_quota_limit", namespace="team", quota_name="nvidia.com/gpumem") == 10_000
    assert not any(name == "hami_resource_quota_used" and ("quota_name", "nvidia.com/gpucores") in labels
                   for name, labels in samples)  # fmt: skip  # no cores limit: no cores series

    current["view"] = {}  # the next scrape sees the node gone
    assert not any(name.startswith("hami_gpu") for name, _ in _scrape(registry))


def test_extender_metrics_register_every_name_deploy_references() -> None:
    registry = CollectorRegistry()
    metrics = ExtenderMetrics(registry)
    metrics.filter_outcome(FilterOutcome.SCHEDULED)
    names = {f.name for f in registry.collect()}
    assert {
        "vgpu_extender_request_duration_seconds",
        "vgpu_filter_outcomes",
        "vgpu_filter_reasons",
        "vgpu_reservation_conflicts",
        "vgpu_reservation_retries",
        "vgpu_bind_outcomes",
        "vgpu_node_lock_wait_seconds",
        "vgpu_webhook_outcomes",
    } <= names
    assert registry.get_sample_value("vgpu_filter_outcomes_total", {"outcome": "scheduled"}) == 1
    assert registry.get_sample_value("vgpu_filter_outcomes_total", {"outcome": "unschedulable"}) == 0


def test_legacy_metrics_repeat_the_gauges_under_hami_old_names() -> None:
    snaps = {"n1": NodeSnapshot(inventory("n1", n=1, mem=8000, type="NVIDIA-T4"), {"GPU-n1-0": use(1, 2000, 25)})}
    quotas = QuotaView({"team": QuotaState(QuotaLimits(mem_mib=None, cores_pct=200), 0, 25)})
    plain, legacy = CollectorRegistry(), CollectorRegistry()
    plain.register(AllocationCollector(lambda: snaps, lambda: quotas))
    legacy.register(AllocationCollector(lambda: snaps, lambda: quotas, legacy=True))
    assert not any(name[0].isupper() or name.startswith("node") for name, _ in _scrape(plain))
    samples = _scrape(legacy)
    dev = {"nodeid": "n1", "deviceuuid": "GPU-n1-0", "deviceidx": "0", "zone": "vGPU"}
    assert samples[("GPUDeviceMemoryLimit", frozenset({**dev, "devicetype": "NVIDIA-T4"}.items()))] == 8000 * 1048576
    assert samples[("GPUDeviceSharedNum", frozenset({**dev, "devicetype": "NVIDIA-T4"}.items()))] == 1
    assert samples[("nodeGPUMemoryPercentage", frozenset(dev.items()))] == 0.25
    quota = {"quotanamespace": "team", "quotaName": "nvidia.com/gpucores", "limit": "200", "zone": "vGPU"}
    assert samples[("QuotaUsed", frozenset(quota.items()))] == 25


def test_bind_rate_ceiling_follows_the_api_rate_limit() -> None:
    from vgpu_scheduler.services.extender.main import bind_rate_ceiling

    assert bind_rate_ceiling(5) == 1.25  # HAMi's client default: about one bind per second (four calls each)
    assert bind_rate_ceiling(100) == 25.0
    assert bind_rate_ceiling(0) is None  # no limit


def test_device_gauges_carry_the_devices_vendor() -> None:
    from tests.fakevendor import fake_devices, mixed_inventory

    inv = mixed_inventory("n1", inventory("n1", n=1, type="NVIDIA-T4").devices, fake_devices("n1", "DCU", n=1))
    snaps = {"n1": NodeSnapshot(inv, {"DCU-n1-0": use(1, 2000, 30)})}
    registry = CollectorRegistry()
    registry.register(AllocationCollector(lambda: snaps, lambda: QuotaView({}), legacy=True))
    samples = _scrape(registry)
    dcu = {"node": "n1", "device_uuid": "DCU-n1-0", "device_index": "0", "device_type": "DCU", "zone": "vGPU"}
    assert samples[("hami_gpu_shared_count", frozenset({**dcu, "vendor": "DCU"}.items()))] == 1
    assert samples[("hami_gpu_core_allocated_ratio", frozenset({**dcu, "vendor": "DCU"}.items()))] == 30
    nvidia = {"node": "n1", "device_uuid": "GPU-n1-0", "device_index": "0", "device_type": "NVIDIA-T4"}
    assert samples[("hami_gpu_shared_count", frozenset({**nvidia, "vendor": "NVIDIA", "zone": "vGPU"}.items()))] == 0
    legacy = {"nodeid": "n1", "deviceuuid": "DCU-n1-0", "deviceidx": "0", "devicetype": "DCU", "zone": "vGPU"}
    assert samples[("GPUDeviceSharedNum", frozenset(legacy.items()))] == 1  # HAMi's old names: labels as they were
