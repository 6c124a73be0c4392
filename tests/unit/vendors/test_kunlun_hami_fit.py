"""HAMi's Kunlunxin ``Fit`` cases of ``device_test.go`` (the mutex policy, the topology walk with no match) on XPUs
built the way a node registers them: whole XPUs from ``status.capacity[kunlunxin.com/xpu]``, vXPUs from the
``hami.io/node-register-xpu`` JSON.

HAMi's tests leave ``Count`` 0 (and ``Health`` false but in the mutex test), which its Kunlunxin ``Fit`` never
reads; our core checks both for every family (docs/vendors/kunlunxin.md, "Where we differ"), so on HAMi's own
devices these cases read ``CardTimeSlicingExhausted`` or ``CardNotHealth``. On registered devices (healthy, with
their slots) each gives HAMi's result and HAMi's reason word: the difference is the set-up only, pinned here too.
``device_test.go`` read at fffcfe9b (the index holds no copy at v2.10.0, 4707fb02)."""

from __future__ import annotations

import json

from tests.unit.vendors.kit import NOW, Fit, reason
from vgpu_scheduler.shared.codec.selectors import decode_gpu_policy
from vgpu_scheduler.shared.domain.model import MEM_PCT_UNSET, ContainerRequest, DeviceInfo, DeviceUsage
from vgpu_scheduler.shared.domain.plan import Decision
from vgpu_scheduler.shared.domain.scoring import Policies
from vgpu_scheduler.shared.vendors import kunlun
from vgpu_scheduler.shared.vendors.nvidia import NvidiaVendor
from vgpu_scheduler.shared.vendors.registration import NodeView, Registered
from vgpu_scheduler.shared.vendors.registry import Vendors

X, V = kunlun.build(None)
fit = Fit(Vendors((NvidiaVendor(), X, V)))
MAX = kunlun.XPU_MEMORY_MIB
QUARTER = 24576
MUTEX = {"hami.io/gpu-scheduler-policy": "mutex"}
WHOLE = ContainerRequest(nums=1, mem_mib=0, mem_pct=100, cores_pct=0, type=kunlun.NAME)


def vxpu(nums: int = 1, mem: int = QUARTER) -> ContainerRequest:
    return V.container_request(
        {"resources": {"limits": {"kunlunxin.com/vxpu": str(nums), "kunlunxin.com/vxpu-memory": str(mem)}}}, "c"
    )


def registered(view: NodeView) -> list[DeviceInfo]:
    got = (X if kunlun.VXPU_REGISTER_KEY not in view.annotations else V).observe(view, NOW)
    assert isinstance(got, Registered), got
    return list(got.inventory.devices)


def whole_xpus(cards: int = 8) -> list[DeviceInfo]:
    """The XPUs HAMi's ``GetNodeDevices`` derives from the capacity: 100 slots each, healthy."""
    return registered(
        NodeView("n1", "1", {}, {"kunlunxin.com/xpu": str(cards)}, capacity={"kunlunxin.com/xpu": str(cards)})
    )


def vxpu_xpus(*, devmem: int = MAX, count: int = 4, cards: int = 8) -> list[DeviceInfo]:
    """The XPUs a vXPU device plugin writes in ``hami.io/node-register-xpu``: healthy, ``count`` slots (4: an XPU
    holds at most four quarter vXPUs)."""
    entries = [
        {"id": f"xpu-{i}", "index": i, "count": count, "devmem": devmem, "devcore": 100, "type": "XPU", "health": True}
        for i in range(cards)
    ]
    annotations = {kunlun.VXPU_REGISTER_KEY: json.dumps(entries)}
    return registered(NodeView("n1", "1", annotations, {"kunlunxin.com/vxpu": str(count * cards)}))


def hami_devices(vendor: str, *, devmem: int, health: bool) -> list[DeviceInfo]:
    """HAMi's test devices: ``Count`` 0, no cores."""
    return [DeviceInfo(f"xpu-{i}", i, 0, devmem, 0, vendor, 0, "", health, vendor=vendor) for i in range(8)]


def test_vxpu_fit_mutex() -> None:
    # TestKunlunVDevices_Fit_Mutex: 8 XPUs each holding one 24576 MiB vXPU, a 24576 MiB vXPU asked
    devices = vxpu_xpus()
    usage = {d.id: DeviceUsage(1, QUARTER, 25) for d in devices}
    # "Default policy shares a used device": fits
    got = fit(devices, vxpu(), usage=usage)
    assert isinstance(got, Decision) and {d.used_mem_mib for d in got.devices[0]} == {QUARTER}
    # "Mutex policy has no idle device to use": "8/8 ExclusiveDeviceAllocateConflict"
    assert reason(fit(devices, vxpu(), usage=usage, annotations=MUTEX)) == "8/8 ExclusiveDeviceAllocateConflict"
    # the same when the scheduler's configured policy is mutex
    configured = Policies(gpu=decode_gpu_policy("mutex"))
    assert reason(fit(devices, vxpu(), usage=usage, policies=configured)) == "8/8 ExclusiveDeviceAllocateConflict"
    # the mutex policy takes an idle XPU while there is one
    idle = {k: v for k, v in usage.items() if k != "xpu-3"}
    assert isinstance(fit(devices, vxpu(), usage=idle, annotations=MUTEX), Decision)
    # HAMi's set-up (Count 0) has no slot to share: refused under either policy, by our slot check
    hami = hami_devices("XPU", devmem=MAX, health=True)
    usage = {d.id: DeviceUsage(1, QUARTER) for d in hami}
    assert reason(fit(hami, vxpu(), usage=usage)) == "8/8 CardTimeSlicingExhausted"
    assert reason(fit(hami, vxpu(), usage=usage, annotations=MUTEX)) == "8/8 CardTimeSlicingExhausted"
    # a plugin that registers one slot per XPU means one vXPU each: the default policy is refused the same way
    one = vxpu_xpus(count=1)
    assert (
        reason(fit(one, vxpu(), usage={d.id: DeviceUsage(1, QUARTER) for d in one})) == "8/8 CardTimeSlicingExhausted"
    )


def test_vxpu_fit_numa_not_fit() -> None:
    # TestKunlunVDevices_Fit_NumaNotFit: 8 idle XPUs of 1024 MiB, a 2048 MiB vXPU → "1/8 NumaNotFit"
    small = vxpu_xpus(devmem=1024)
    req = ContainerRequest(nums=1, mem_mib=2048, mem_pct=MEM_PCT_UNSET, cores_pct=2, type=kunlun.VXPU_NAME)
    assert reason(fit(small, req)) == "1/8 NumaNotFit"
    # the same through the request as a pod writes it (rounded up to a quarter, still above 1024 MiB)
    assert reason(fit(small, vxpu(mem=2048))) == "1/8 NumaNotFit"
    # HAMi's set-up (Health false): our health check speaks first
    assert reason(fit(hami_devices("XPU", devmem=1024, health=False), req)) == "8/8 CardNotHealth"


def test_whole_fit_numa_not_fit() -> None:
    # TestKunlunDevices_Fit_NumaNotFit: 8 XPUs all in use, 1 whole XPU → "1/8 NumaNotFit"
    devices = whole_xpus()
    assert reason(fit(devices, WHOLE, usage={d.id: DeviceUsage(1, MAX, 100) for d in devices})) == "1/8 NumaNotFit"
    # ours: 3 XPUs is no topology HAMi knows: refused on an idle board too
    assert reason(fit(devices, ContainerRequest(3, 0, 100, 0, kunlun.NAME))) == "1/8 NumaNotFit"
    # HAMi's set-up (Health false, Count 0): our health check speaks first
    hami = hami_devices(kunlun.NAME, devmem=0, health=False)
    assert reason(fit(hami, WHOLE, usage={d.id: DeviceUsage(1, 0) for d in hami})) == "8/8 CardNotHealth"
