"""NodePool documents: nodes of every vendor, registered through each vendor's own decode path."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from vgpu_scheduler.services.simulate.documents import ManifestError
from vgpu_scheduler.services.simulate.main import EXAMPLE_CLUSTER, EXAMPLE_DEVICE_CONFIG
from vgpu_scheduler.services.simulate.manifests import load_cluster
from vgpu_scheduler.services.simulate.pools import ALL_VENDORS, expand_pool
from vgpu_scheduler.shared.devconfig import load_device_config
from vgpu_scheduler.shared.domain.model import NvidiaConfig
from vgpu_scheduler.shared.vendors import awsneuron, cambricon, kunlun, metax
from vgpu_scheduler.shared.vendors.catalog import enabled_vendors, observe_node
from vgpu_scheduler.shared.vendors.registration import NodeView
from vgpu_scheduler.shared.vendors.registry import Vendors

NOW = datetime(2025, 1, 1, 12, 0, 0)
EXAMPLE_VENDORS = enabled_vendors(
    NvidiaConfig(), load_device_config(str(EXAMPLE_DEVICE_CONFIG)).vendor_sections, {"enable-ascend"}
)


def pool(name: str, *devices: dict[str, Any], nodes: int = 1, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "NodePool",
        "metadata": {"name": name, "labels": {"team": "x"}},
        "spec": {"nodes": nodes, "devices": list(devices), **spec},
    }


def write(tmp_path: Path, *docs: dict[str, Any]) -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump_all(docs), encoding="utf-8")
    return path


def registered(node: dict[str, Any], vendors: Vendors = EXAMPLE_VENDORS) -> dict[str, list[tuple[str, int, int]]]:
    """What the registrar's decode makes of ``node``: vendor → [(type, devmem, devcore, count)]."""
    seen = observe_node(vendors, NodeView.of(node), NOW)
    assert seen.merged.inventory is not None, seen.observations
    out: dict[str, list[tuple[str, int, int]]] = {}
    for d in seen.merged.inventory.devices:
        out.setdefault(d.vendor, []).append((d.type, d.devmem_mib, d.count))
    return out


def test_each_vendor_pool_registers_through_that_vendors_decode() -> None:
    cases = [
        ({"vendor": "NVIDIA", "type": "NVIDIA A10", "count": 2, "memory": "24Gi"}, "NVIDIA", ("NVIDIA A10", 24576, 10)),
        ({"vendor": "DCU", "type": "DCU-Z100", "count": 2, "memory": 32768, "split": 4}, "DCU", ("DCU-Z100", 32768, 4)),
        ({"vendor": "AMD", "count": 2, "memory": 65536}, "AMD", ("AMD", 65536, 10)),
        ({"vendor": "MLU", "type": "MLU370-X8", "count": 2, "memory": "48Gi"}, "MLU", ("MLU370-X8", 49152, 100)),
        ({"vendor": "ascend910b3", "count": 2, "memory": "64Gi"}, "Ascend910B3", ("Ascend910B3", 65536, 10)),
    ]  # fmt: skip
    for group, vendor, device in cases:
        (node,) = expand_pool(pool("p", group), EXAMPLE_VENDORS).nodes
        assert node["metadata"]["name"] == "p-01"
        assert node["metadata"]["labels"] == {"team": "x", "kubernetes.io/hostname": "p-01", **(
            {"Model": "MLU370-X8"} if vendor == "MLU" else {}
        )}  # fmt: skip
        assert registered(node) == {vendor: [device, device]}, vendor
        assert node["status"]["capacity"] == node["status"]["allocatable"]


def test_the_vendor_modules_write_what_a_device_plugin_writes() -> None:
    (dcu,) = expand_pool(pool("d", {"vendor": "DCU", "count": 2, "memory": 1024}), EXAMPLE_VENDORS).nodes
    assert set(dcu["metadata"]["annotations"]) == {"hami.io/node-dcu-register"}
    assert dcu["status"]["allocatable"]["hygon.com/dcunum"] == "20"
    (mlu,) = expand_pool(pool("m", {"vendor": "MLU", "count": 4, "memory": 1024}), EXAMPLE_VENDORS).nodes
    assert mlu["metadata"]["annotations"] == {}  # Cambricon registers through node capacity
    cap = mlu["status"]["capacity"]
    assert (cap["cambricon.com/vmlu"], cap["cambricon.com/mlu.smlu.vcore"], cap["cambricon.com/mlu.smlu.vmemory"]) == (
        "400",
        "400",
        "16",  # 4 × 1024 MiB in 256 MiB units
    )
    (npu,) = expand_pool(pool("n", {"vendor": "Ascend310P", "count": 3, "memory": 21527}), EXAMPLE_VENDORS).nodes
    assert set(npu["metadata"]["annotations"]) == {"hami.io/node-register-Ascend310P"}
    assert npu["status"]["allocatable"]["huawei.com/Ascend310P"] == "30"


def test_a_mixed_node_registers_both_vendors_with_distinct_ids() -> None:
    spec = pool(
        "mix",
        {"vendor": "NVIDIA", "count": 2, "memory": 24576},
        {"vendor": "DCU", "count": 3, "memory": 32768},
        nodes=3,
    )
    nodes = expand_pool(spec, EXAMPLE_VENDORS).nodes
    assert [n["metadata"]["name"] for n in nodes] == ["mix-01", "mix-02", "mix-03"]
    for node in nodes:
        seen = observe_node(EXAMPLE_VENDORS, NodeView.of(node), NOW)
        assert seen.registered == ("NVIDIA", "DCU")
        assert seen.merged.collisions == ()
        inv = seen.merged.inventory
        assert inv is not None and [d.vendor for d in inv.devices] == ["NVIDIA"] * 2 + ["DCU"] * 3
        assert [d.index for d in inv.devices] == [0, 1, 0, 1, 2]
    all_ids = {
        dev.id
        for n in nodes
        for dev in (observe_node(EXAMPLE_VENDORS, NodeView.of(n), NOW).merged.inventory or _none()).devices
    }
    assert len(all_ids) == 15
    # the same input gives the same IDs
    again = expand_pool(spec, EXAMPLE_VENDORS).nodes
    assert again == nodes


def _none() -> Any:
    raise AssertionError("not registered")


@pytest.mark.parametrize(
    ("group", "field", "problem"),
    [
        ({"vendor": "Gaudi", "count": 1, "memory": 1}, "spec.devices[0].vendor", "unknown vendor 'Gaudi'"),
        ({"vendor": "MLU", "count": 1, "memory": 1000}, "spec.devices[0].memory", "not a whole number of 256 MiB"),
        ({"vendor": "MLU", "count": 1, "memory": 1024, "type": "X8"}, "spec.devices[0].type", "names the MLU"),
        ({"vendor": "MLU", "count": 1, "memory": 1024, "cores": 50}, "spec.devices[0].cores", "100 cores"),
        ({"vendor": "DCU", "count": 0, "memory": 1024}, "spec.devices[0].count", "expected 1 to 1024, got 0"),
        ({"vendor": "DCU", "count": 1}, "spec.devices[0].memory", "missing"),
        ({"vendor": "DCU", "count": 1, "memory": "1.5Ki"}, "spec.devices[0].memory", "not a whole number of MiB"),
        ({"vendor": "DCU", "count": 1, "memory": 1024, "type": "a,b"}, "spec.devices[0].type", "without ','"),
        ({"vendor": "DCU", "count": 1, "memory": 1024, "colour": 1}, "spec.devices[0].colour", "unknown key"),
        ({"vendor": "AWSNeuron", "count": 1, "memory": 1024}, "spec.devices[0].memory", "no memory or split"),
        ({"vendor": "AWSNeuron", "count": 1, "cores": 0}, "spec.devices[0].cores", "expected 1 to 64, got 0"),
    ],
)
def test_a_bad_pool_is_one_line_naming_the_document_and_field(
    tmp_path: Path, group: dict[str, Any], field: str, problem: str
) -> None:
    path = write(tmp_path, pool("bad", group))
    with pytest.raises(ManifestError) as e:
        load_cluster(path, vendors=EXAMPLE_VENDORS)
    message = str(e.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: document 1: {field}: "), message
    assert problem in message


def test_pool_nodes_host_running_pods_and_clash_with_a_node_of_the_same_name(tmp_path: Path) -> None:
    running = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "r", "namespace": "default"},
        "spec": {"nodeName": "p-02", "containers": [{"name": "c"}]},
    }
    cluster = load_cluster(
        write(tmp_path, pool("p", {"vendor": "AMD", "count": 1, "memory": 1024}, nodes=2), running),
        vendors=EXAMPLE_VENDORS,
    )
    assert [n["metadata"]["name"] for n in cluster.nodes] == ["p-01", "p-02"]
    assert cluster.unregistered == ()
    clash = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "p-01"}}
    with pytest.raises(ManifestError, match="Node p-01 is already defined"):
        load_cluster(write(tmp_path, pool("p", {"vendor": "AMD", "count": 1, "memory": 1024}), clash))


def test_an_opt_in_vendor_not_enabled_leaves_the_node_unregistered_with_a_warning(tmp_path: Path) -> None:
    path = write(tmp_path, pool("d", {"vendor": "Ascend910B3", "count": 1, "memory": "64Gi"}))
    cluster = load_cluster(path, vendors=enabled_vendors(NvidiaConfig()))
    assert [n for n, _ in cluster.unregistered] == ["d-01"]
    (warning,) = cluster.warnings
    assert "Ascend910B3 devices: Ascend910B3 is not enabled (opt-in, as in HAMi: give --enable-ascend)" in warning
    # and the registrar indeed registers nothing on it without the flag
    seen = observe_node(enabled_vendors(NvidiaConfig()), NodeView.of(cluster.nodes[0]), NOW)
    assert seen.merged.inventory is None


def test_a_vendor_on_by_default_registers_with_no_device_config(tmp_path: Path) -> None:
    path = write(tmp_path, pool("d", {"vendor": "DCU", "count": 1, "memory": 1024}))
    cluster = load_cluster(path, vendors=enabled_vendors(NvidiaConfig()))
    assert not cluster.unregistered and not cluster.warnings
    seen = observe_node(enabled_vendors(NvidiaConfig()), NodeView.of(cluster.nodes[0]), NOW)
    assert seen.registered == ("DCU",)


def test_a_malformed_registration_of_another_vendor_is_a_bad_manifest(tmp_path: Path) -> None:
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n", "annotations": {"hami.io/node-dcu-register": '[{"id":"x"}]'}},
        "status": {"allocatable": {"hygon.com/dcunum": "4"}},
    }
    path = write(tmp_path, node)
    with pytest.raises(ManifestError) as info:  # a bad manifest, as NVIDIA's is: file, document, field
        load_cluster(path, vendors=EXAMPLE_VENDORS)
    assert str(info.value).startswith(f"{path}: document 1: metadata.annotations[hami.io/node-dcu-register]: ")


def test_the_bundled_cluster_has_a_pool_of_every_vendor_and_a_mixed_node() -> None:
    cluster = load_cluster(EXAMPLE_CLUSTER, vendors=EXAMPLE_VENDORS)
    vendors_of = {n["metadata"]["name"]: set(registered(n)) for n in cluster.nodes if n["metadata"].get("annotations")}
    vendors_of.update(
        {n["metadata"]["name"]: {"MLU"} for n in cluster.nodes if n["metadata"]["name"].startswith("mlu-")}
    )
    found = set().union(*vendors_of.values())
    assert {"NVIDIA", "DCU", "MLU", "AMD", "Ascend910B3", "Ascend310P"} <= found
    assert vendors_of["mixed-a10-dcu-01"] == {"NVIDIA", "DCU"}
    assert cluster.unregistered == ()  # with the bundled device config every pool's vendor is enabled
    # with no device config and no flag, only the opt-in Ascend pools are left unregistered
    without = load_cluster(EXAMPLE_CLUSTER, vendors=enabled_vendors(NvidiaConfig()))
    assert {n for n, _ in without.unregistered} == {"npu-910b-01", "npu-910b-02", "npu-310p-01"}


def test_every_known_vendor_has_a_simulated_device_plugin() -> None:
    for vendor in ALL_VENDORS:
        group: dict[str, Any] = {"vendor": vendor.name, "count": 1, "memory": cambricon.MEMORY_UNIT_MIB * 4}
        if vendor.name == metax.NAME:  # MetaX GPUs register by count alone: HAMi's 65536 MiB, one slot
            group.update(memory=metax.GPU_MEMORY_MIB, split=metax.GPU_SLOTS)
        if vendor.name == awsneuron.NAME:  # Neuron devices register by count and cores: no memory
            del group["memory"]

        if vendor.name == kunlun.NAME:  # whole Kunlunxin XPUs too: 98304 MiB, 100 slots
            group.update(memory=kunlun.XPU_MEMORY_MIB, split=kunlun.XPU_SLOTS)
        (node,) = expand_pool(pool("p", group), ALL_VENDORS).nodes
        assert set(registered(node, ALL_VENDORS)) == {vendor.name}


def test_a_neuron_pool_registers_its_instance_type_and_cores() -> None:
    group = {"vendor": "AWSNeuron", "count": 2, "cores": 4, "type": "inf1.6xlarge"}
    (node,) = expand_pool(pool("inf1", group), EXAMPLE_VENDORS).nodes
    assert node["metadata"]["labels"]["node.kubernetes.io/instance-type"] == "inf1.6xlarge"
    assert node["status"]["capacity"]["aws.amazon.com/neuroncore"] == "8"
    seen = observe_node(EXAMPLE_VENDORS, NodeView.of(node), NOW).merged.inventory
    assert seen is not None
    assert [(d.id, d.count, d.devcore, d.mode) for d in seen.devices] == [
        ("inf1-01-AWSNeuron-0", 4, 3, "inf1.6xlarge"),
        ("inf1-01-AWSNeuron-1", 4, 3, "inf1.6xlarge"),
    ]
    (default,) = expand_pool(pool("inf2", {"vendor": "AWSNeuron", "count": 1}), EXAMPLE_VENDORS).nodes
    assert default["metadata"]["labels"]["node.kubernetes.io/instance-type"] == "inf2.48xlarge"
    assert default["status"]["capacity"]["aws.amazon.com/neuroncore"] == "2"
