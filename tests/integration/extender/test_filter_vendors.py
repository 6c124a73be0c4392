"""/filter with other vendors enabled: requests and selectors of every vendor, their rules, mixed nodes."""

from __future__ import annotations

import uuid
from typing import Any

from tests.fakevendor import FakeVendor, fake_devices, register_annotation
from tests.integration.extender.filter_harness import node, node_object, running_extender, seed
from vgpu_scheduler.shared.domain.model import NodeInventory
from vgpu_scheduler.shared.k8s import Api
from vgpu_scheduler.shared.store import Store
from vgpu_scheduler.shared.vendors.nvidia import NvidiaVendor
from vgpu_scheduler.shared.vendors.registry import Vendors

DCU = FakeVendor("DCU")
MLU = FakeVendor("MLU")
VENDORS = Vendors((NvidiaVendor(), DCU, MLU))


def _pod(name: str, *containers: dict[str, Any], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": str(uuid.uuid5(uuid.NAMESPACE_DNS, name)),
            "annotations": annotations or {},
        },
        "spec": {"containers": list(containers)},
    }


def _dcu(n: int = 1, mem: int = 1000) -> dict[str, Any]:
    return {"name": "c", "resources": {"limits": {"dcu.com/num": n, "dcu.com/mem": mem}}}


def _mixed_node(name: str, *, gpus: int = 1, dcus: int = 2, mlus: int = 0) -> dict[str, Any]:
    annos = register_annotation(DCU, fake_devices(name, "DCU", dcus)) if dcus else {}
    if mlus:
        annos |= register_annotation(MLU, fake_devices(name, "MLU", mlus))
    return node_object(node(name, gpus), annotations=annos)


def _body(pod: dict[str, Any], *nodes: dict[str, Any]) -> dict[str, Any]:
    return {"Pod": pod, "Nodes": {"metadata": {}, "items": list(nodes)}, "NodeNames": None}


def _names(answer: dict[str, Any]) -> list[str]:
    return [n["metadata"]["name"] for n in (answer["Nodes"] or {}).get("items", [])]


async def test_a_vendor_pod_goes_to_a_node_with_its_devices(store: Store, api: Api) -> None:
    await seed(store, [])
    async with running_extender(store, api, vendors=VENDORS) as ext:
        answer = await ext.filter(
            _body(_pod("p", _dcu(2)), _mixed_node("only-gpu", dcus=0), _mixed_node("one-dcu", dcus=1),
                  _mixed_node("two-dcu", dcus=2))
        )  # fmt: skip
    assert answer["Error"] == ""
    assert _names(answer) == ["two-dcu"]
    assert answer["FailedNodes"] == {"only-gpu": "NodeInsufficientDevice", "one-dcu": "NodeInsufficientDevice"}


async def test_without_the_vendor_enabled_the_pod_passes_through(store: Store, api: Api) -> None:
    await seed(store, [])
    pod = _pod("p", _dcu())
    async with running_extender(store, api) as ext:
        answer = await ext.filter({"Pod": pod, "NodeNames": ["a", "b"], "Nodes": None})
    assert answer["NodeNames"] == ["a", "b"]
    assert answer["FailedNodes"] is None


async def test_a_container_asking_two_vendors_needs_both_on_one_node(store: Store, api: Api) -> None:
    await seed(store, [])
    both = {"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1, "mlu.com/num": 1}}}
    async with running_extender(store, api, vendors=VENDORS) as ext:
        answer = await ext.filter(
            _body(_pod("p", both), _mixed_node("gpu-dcu"), _mixed_node("gpu-mlu", dcus=0, mlus=1))
        )
    assert _names(answer) == ["gpu-mlu"]
    assert answer["FailedNodes"] == {"gpu-dcu": "NodeInsufficientDevice"}


async def test_vendor_uuid_selectors_are_honoured(store: Store, api: Api) -> None:
    await seed(store, [])
    pod = _pod("p", _dcu(), annotations={"dcu.com/use-uuid": "DCU-b-1"})
    async with running_extender(store, api, vendors=VENDORS) as ext:
        answer = await ext.filter(_body(pod, _mixed_node("a"), _mixed_node("b")))
    assert _names(answer) == ["b"]
    assert answer["FailedNodes"] == {"a": "2/2 CardUuidMismatch"}  # both DCUs of a excluded


async def test_bad_values_of_any_vendor_refuse_every_candidate(store: Store, api: Api) -> None:
    await seed(store, [])
    bad = {"name": "c", "resources": {"limits": {"dcu.com/num": 1, "dcu.com/mem": "1.5"}}}
    pod = _pod("p", bad, {"name": "d", "resources": {"limits": {"mlu.com/num": "-1"}}})
    async with running_extender(store, api, vendors=VENDORS) as ext:
        answer = await ext.filter({"Pod": pod, "NodeNames": ["a"], "Nodes": None})
    message = answer["FailedAndUnresolvableNodes"]["a"]
    assert "dcu.com/mem" in message and "mlu.com/num" in message


async def test_node_names_reserve_the_vendor_devices(store: Store, api: Api) -> None:
    devices = (*node("m1", 1).devices, *fake_devices("m1", "DCU", 2))
    await seed(store, [NodeInventory(node="m1", vendor="NVIDIA", devices=devices)])
    pod = _pod("p", _dcu(1, 3000))
    async with running_extender(store, api, vendors=VENDORS) as ext:
        answer = await ext.filter({"Pod": pod, "NodeNames": ["m1"], "Nodes": None})
    assert answer["NodeNames"] == ["m1"], answer
    record = await store.reservations.get(pod["metadata"]["uid"])
    assert record is not None
    assert [[(d.uuid, d.type, d.used_mem_mib) for d in c] for c in record.allocation.devices] == [
        [("DCU-m1-1", "DCU", 3000)]  # two equal DCUs: the last, as HAMi's Fit walks them
    ]
