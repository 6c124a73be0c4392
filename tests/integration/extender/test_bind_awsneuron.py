"""/bind of AWS Neuron pods with the real vendor, a real Redis and the API emulator: the device list as core masks,
the AWS annotations its device plugin reads (core indexes from the node's registered geometry), and no node lock."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.integration.extender.bindkit import NOW, Harness, harness, node_obj, pod_obj
from vgpu_scheduler.services.extender.bind import BindOutcome
from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.domain.accounting import collapse
from vgpu_scheduler.shared.domain.allocation import Allocation
from vgpu_scheduler.shared.domain.model import ContainerDevice, NodeInventory
from vgpu_scheduler.shared.protocol.extender import ExtenderBindingArgs
from vgpu_scheduler.shared.vendors import awsneuron
from vgpu_scheduler.shared.vendors.nvidia import NvidiaVendor
from vgpu_scheduler.shared.vendors.registry import Vendors

NODE = "inf1-1"
V = awsneuron.build(None)[0]
VENDORS = Vendors((NvidiaVendor(), V))
# an Inferentia1 node: 2 devices of 4 cores (two addressable): device 1's cores are 4 and 5
DEVICES = awsneuron.devices_from_capacity(NODE, 2, 8, "inf1.6xlarge")


@pytest.fixture
async def h(redis_url: str) -> AsyncIterator[Harness]:
    async with harness(redis_url) as hh:
        await hh.store.inventory.put(NodeInventory(node=NODE, vendor=awsneuron.NAME, devices=DEVICES))
        hh.em.put(node_obj(NODE))
        yield hh


async def _bind(h: Harness, name: str, limits: dict[str, str], *entries: tuple[ContainerDevice, ...]) -> dict[str, Any]:
    pod = pod_obj(name, gpus=0)
    pod["spec"]["containers"] = [
        {"name": f"c{i}", "image": "busybox", "resources": {"limits": dict(limits)}} for i in range(len(entries))
    ]
    pod = h.create_pod(pod)
    meta = pod["metadata"]
    alloc = Allocation(
        pod_uid=meta["uid"],
        namespace=meta["namespace"],
        name=meta["name"],
        node=NODE,
        devices=entries,
        charges=collapse(entries, 0, ()),
    )
    await h.reserve(alloc, quota=False)
    args = ExtenderBindingArgs(pod_name=meta["name"], pod_namespace=meta["namespace"], pod_uid=meta["uid"], node=NODE)
    result = await h.binder(vendors=VENDORS).bind(args)
    assert result.outcome is BindOutcome.BOUND, result.error
    return dict(h.pod(name)["metadata"]["annotations"])


def _core(index: int, mask: int) -> ContainerDevice:
    return ContainerDevice(uuid=DEVICES[index].id, used_mem_mib=0, used_cores=mask, type=awsneuron.NAME)


async def test_a_core_pod_gets_core_indexes_by_the_nodes_stride_and_no_lock(h: Harness) -> None:
    annos = await _bind(h, "cores", {"aws.amazon.com/neuroncore": "1"}, (_core(1, 0b10),))
    assert annos["hami.io/aws-neuron-devices-allocated"] == f"{NODE}-AWSNeuron-1,AWSNeuron,0,2:;"
    assert "hami.io/aws-neuron-devices-to-allocate" not in annos
    assert annos["AWS_NEURON_IDS"] == "5"  # the second core of device 1, stride 4
    assert annos["NEURON_RESOURCE_TYPE"] == "aws.amazon.com/neuroncore"
    assert annos["NEURON_ALLOC_TIME"] == str(int(NOW) * 1_000_000_000)
    assert (annos["NEURON_ALLOCATED"], annos["aws.amazon.com/predicate-node"]) == ("false", NODE)
    assert keys.NODE_LOCK not in (h.node(NODE)["metadata"].get("annotations") or {})
    assert await h.store.locks.inspect(NODE) is None


async def test_a_device_pod_gets_device_indexes(h: Harness) -> None:
    annos = await _bind(h, "devices", {"aws.amazon.com/neuron": "2"}, (_core(0, 0b11), _core(1, 0b11)))
    assert annos["AWS_NEURON_IDS"] == "0,1"
    assert "NEURON_RESOURCE_TYPE" not in annos
