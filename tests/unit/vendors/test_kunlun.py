"""Kunlunxin vendors (whole XPUs ``kunlun`` and vXPUs ``XPU``): HAMi's ``pkg/device/kunlun`` tests restated.

The index holds no copy at v2.10.0 (4707fb02); read at the nearest stored versions: ``device_test.go`` 078d582d
(with ``TestKunlunVDevices_Fit_Mutex``, the ``1/8 NumaNotFit`` reasons and the per-container
``BAIDU_COM_DEVICE_IDX``), ``topo_test.go`` 1512f4b2 (with ``TestDevicepick_FewerThanEightDevices``),
``topo_order_test.go`` 779d8116, ``vdevice_test.go`` 225c5e15 (``FitVXPU`` with its memory bound),
``device_cordon_test.go`` ad358d3a; the sources ``device.go`` e2be9094 / 140b2cb5, ``topo.go`` 326f155f,
``vdevice.go`` 176d0516 and the version with the memory bound, ``config.go`` 3ffb248e. ``device.go``'s UUID check
of v2.10 (#2577: both ``hami.io/use-xpu-uuid`` and ``baidu.com/use-gpuuuid`` pairs, inside the topology walk) is
not in the index: it is restated from its diff. ``pkg/device/kunlunxin/device.go`` (09aa9d0d) is the 2024
predecessor of ``vdevice.go``, gone by v2.10; nothing of it is restated. Every HAMi case names its Go test in a
comment. Where HAMi's test devices leave ``Count`` or ``Health`` unset (0, false), ours register what a device
plugin registers (slots, healthy): our core keeps checking both (docs/vendors/kunlunxin.md)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.unit.vendors.kit import NOW, Fit, ctr, reason
from vgpu_scheduler.shared.codec.envelope import decode_allocation, encode_allocation
from vgpu_scheduler.shared.domain.accounting import collapse
from vgpu_scheduler.shared.domain.allocation import Allocation
from vgpu_scheduler.shared.domain.model import (
    MEM_PCT_UNSET,
    NVIDIA,
    ContainerDevice,
    ContainerRequest,
    DeviceInfo,
    DeviceUsage,
    GpuPolicy,
    GpuPolicyToken,
    NodeInventory,
    NodePolicy,
    PodConstraints,
    PodRequest,
)
from vgpu_scheduler.shared.domain.plan import Decision, Failure, plan, plan_ranked
from vgpu_scheduler.shared.domain.quota import QuotaLimits, QuotaState, QuotaUse, VendorLimits
from vgpu_scheduler.shared.domain.scoring import Policies
from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot
from vgpu_scheduler.shared.errors import ConfigError, DecodeError
from vgpu_scheduler.shared.vendors import kunlun
from vgpu_scheduler.shared.vendors.base import NodeLockKind
from vgpu_scheduler.shared.vendors.catalog import FAMILIES
from vgpu_scheduler.shared.vendors.kunlun import (
    graph_select,
    score_fragmentation,
    score_node,
    trim_memory,
)
from vgpu_scheduler.shared.vendors.kunlun.topology import _can_meet, _count_bubble, _delta, _interconnect, _pick
from vgpu_scheduler.shared.vendors.nvidia import NvidiaVendor
from vgpu_scheduler.shared.vendors.pods import device_list_annotations
from vgpu_scheduler.shared.vendors.registration import (
    DecodeFailure,
    Invalid,
    NodeView,
    NotRegistered,
    Registered,
    Unregistered,
)
from vgpu_scheduler.shared.vendors.registry import Vendors

X, V = kunlun.build(None)
VENDORS = Vendors((NvidiaVendor(), X, V))
fit = Fit(VENDORS)
XPU = "kunlunxin.com/xpu"
VXPU = "kunlunxin.com/vxpu"
VMEM = "kunlunxin.com/vxpu-memory"
MAX = kunlun.XPU_MEMORY_MIB


def xpu(i: int, *, vendor: str = "kunlun", count: int = 100, mem: int = MAX, health: bool = True) -> DeviceInfo:
    return DeviceInfo(f"xpu-{i}", i, count, mem, 100, vendor, 0, "", health, vendor=vendor)


def board(vendor: str = "kunlun", n: int = 8, **kw: Any) -> list[DeviceInfo]:
    return [xpu(i, vendor=vendor, **kw) for i in range(n)]


def whole(nums: int = 1) -> ContainerRequest:
    return ContainerRequest(nums=nums, mem_mib=0, mem_pct=100, cores_pct=0, type="kunlun")


def vx(nums: int = 1, mem: int = MAX) -> ContainerRequest:
    return ContainerRequest(nums=nums, mem_mib=mem, mem_pct=MEM_PCT_UNSET, cores_pct=mem * 100 // MAX, type="XPU")


def picked(result: Decision | Failure, container: int = 0) -> list[str]:
    assert isinstance(result, Decision), result
    return [d.uuid for d in result.devices[container]]


def busy(*indexes: int, mem: int = 0) -> dict[str, DeviceUsage]:
    return {f"xpu-{i}": DeviceUsage(1, mem) for i in indexes}


def free_board(*used: int) -> list[tuple[int, bool]]:
    """``newDevices(usedMask...)`` of topo_test.go: 8 XPUs, the listed ones in use."""
    return [(i, i not in used) for i in range(8)]


MUTEX = Policies(gpu=GpuPolicy((GpuPolicyToken.MUTEX,)))
NO_SELECTORS = PodConstraints()


# ---- keys, names, config (Test_InitKunlunVDevice, Test_CommonWord, Test_KunlunVDevices_GetResourceNames) -------


def test_keys_names_and_config() -> None:
    assert FAMILIES[-1] is kunlun or kunlun in FAMILIES
    # whole XPUs (device.go): no to-allocate list, no register annotation, no handshake, no lock
    assert (X.name, X.to_allocate_key, X.allocated_key, X.register_key, X.handshake_key) == (
        "kunlun", None, "hami.io/kunlun-allocated", None, None
    )  # fmt: skip
    assert X.node_lock is NodeLockKind.NONE  # LockNode returns nil
    assert (X.resources.count, X.resources.memory, X.resources.cores) == (XPU, None, None)
    # Test_InitKunlunVDevice / Test_CommonWord / Test_KunlunVDevices_GetResourceNames
    assert (V.name, V.to_allocate_key, V.allocated_key) == (
        "XPU", "hami.io/xpu-devices-to-allocate", "hami.io/xpu-devices-allocated"
    )  # fmt: skip
    assert (V.register_key, V.handshake_key) == ("hami.io/node-register-xpu", "hami.io/node-handshake-xpu")
    assert (V.resources.count, V.resources.memory, V.resources.cores) == (VXPU, VMEM, None)
    # Test_KunlunVDevices_LockNode / _ReleaseNodeLock: a pod with vXPUs takes (and releases) hami.io/mutex.lock
    assert V.node_lock is NodeLockKind.HAMI
    renamed = kunlun.build({"resourceCountName": "a/x", "resourceVCountName": "a/v", "resourceVMemoryName": "a/m"})
    assert renamed[0].resources.count == "a/x" and (renamed[1].resources.count, renamed[1].resources.memory) == (
        "a/v", "a/m"
    )  # fmt: skip
    with pytest.raises(ConfigError, match=re.escape("kunlun.resourceCoreName: unknown key")):
        kunlun.build({"resourceCoreName": "x"})
    with pytest.raises(ConfigError, match=re.escape("kunlun.resourceVCountName: must not be empty")):
        kunlun.build({"resourceVCountName": " "})
    with pytest.raises(ConfigError, match="must differ"):
        kunlun.build({"resourceVCountName": XPU})


# ---- whole XPUs: MutateAdmission, GenerateResourceRequests, CheckType, GetNodeDevices ----------------------------


def test_whole_xpu_requests_and_admission() -> None:
    c = ctr({XPU: "2"})
    assert X.mutate_container(c, "c") is True and c == ctr({XPU: "2"})  # no edit
    assert X.mutate_container(ctr(requests={XPU: "1"}), "c") is False  # only the limits make it ours
    assert X.container_request(ctr(), "c").empty
    want = ContainerRequest(2, 0, 100, 0, "kunlun")  # Nums 2, Memreq 0, MemPercentagereq 100, Coresreq 0
    for c in (ctr({XPU: "2"}), ctr(requests={XPU: "2"}), ctr({XPU: "2"}, {XPU: "2"})):
        assert X.container_request(c, "c") == want
    with pytest.raises(DecodeError, match=re.escape(XPU)):
        X.container_request(ctr({XPU: "1.5"}), "c")  # HAMi drops a fractional count; refused here


def test_whole_xpu_check_type() -> None:
    assert X.rules.type_ok(xpu(0), whole(), PodConstraints())
    assert not X.rules.type_ok(xpu(0), ContainerRequest(1, 0, 100, 0, "XPU"), PodConstraints())


def node(annotations: dict[str, str] | None = None, capacity: dict[str, Any] | None = None, **kw: Any) -> NodeView:
    allocatable = kw.get("allocatable", capacity if capacity is not None else {})
    return NodeView("n1", "1", annotations or {}, allocatable, capacity=capacity or {})


def test_whole_xpu_registration_from_capacity() -> None:
    assert X.observe(node(), NOW) == NotRegistered(Unregistered.ABSENT)
    assert X.observe(node(capacity={XPU: "0"}), NOW) == NotRegistered(Unregistered.NO_DEVICES)  # "device not found"
    got = X.observe(node(capacity={XPU: "8"}), NOW)
    assert isinstance(got, Registered)
    devices = got.inventory.devices
    assert [d.id for d in devices] == [f"n1-kunlun-{i}" for i in range(8)]
    assert {(d.count, d.devmem_mib, d.devcore, d.type, d.vendor, d.health) for d in devices} == {
        (100, 98304, 100, "kunlun", "kunlun", True)
    }
    assert [d.numa for d in devices] == [0, 0, 0, 0, 1, 1, 1, 1]  # the second half on NUMA node 1
    bad = X.observe(node(capacity={XPU: "1.5"}), NOW)
    assert isinstance(bad, Invalid) and bad.failure is DecodeFailure.REGISTER
    # a cordoned XPU (hami.io/device-cordon) is registered as cordoned
    got = X.observe(node({"hami.io/device-cordon": "n1-kunlun-3, other"}, {XPU: "4"}), NOW)
    assert isinstance(got, Registered) and got.inventory.cordoned == frozenset({"n1-kunlun-3"})
    # the simulated device plugin writes what decodes to the same XPUs
    _, capacity, _ = X.node_registration(devices)
    again = X.observe(node(capacity=capacity), NOW)
    assert isinstance(again, Registered) and again.inventory.devices == devices


# ---- vXPUs: Test_trimMemory, Test_MutateAdmission, Test_KunlunVDevices_GenerateResourceRequests ------------------


@pytest.mark.parametrize(
    ("mib", "want"),
    [(0, 24576), (24576, 24576), (24577, 49152), (49152, 49152), (49153, MAX), (200000, MAX)],
)  # zero, at first threshold, just above first, at second, just above second, far above
def test_trim_memory(mib: int, want: int) -> None:
    assert trim_memory(mib) == want


def test_vxpu_mutate_admission() -> None:
    # "no vcount limit" → false
    assert V.mutate_container(ctr(), "c") is False
    # "vcount without vmemory" → true, no edit
    c = ctr({VXPU: "1"})
    assert V.mutate_container(c, "c") is True and c == ctr({VXPU: "1"})
    # "vcount with vmemory gets trimmed": 30000 → 49152 in the limits and the requests
    c = ctr({VXPU: "1", VMEM: "30000"})
    assert V.mutate_container(c, "c") is True
    assert (c["resources"]["limits"][VMEM], c["resources"]["requests"][VMEM]) == ("49152", "49152")
    # "vcount with vmemory and nil requests does not panic": the requests are created
    c = {"name": "c", "resources": {"limits": {VXPU: "1", VMEM: "30000"}}}
    assert V.mutate_container(c, "c") is True and c["resources"]["requests"] == {VMEM: "49152"}


def test_vxpu_generate_resource_requests() -> None:
    # "no vcount requested" → empty
    assert V.container_request(ctr(), "c").empty
    # "vcount without memory defaults to full device": Memreq 98304, MemPercentagereq 100, Coresreq 100
    assert V.container_request(ctr({VXPU: "1"}), "c") == ContainerRequest(1, MAX, 100, 100, "XPU")
    # "vcount with memory from requests fallback": 2 × 24576 MiB, 25 cores (HAMi's MemPercentagereq 0: no
    # percentage, which our model writes MEM_PCT_UNSET)
    got = V.container_request(ctr(requests={VXPU: "2", VMEM: "24576"}), "c")
    assert got == ContainerRequest(2, 24576, MEM_PCT_UNSET, 25, "XPU")
    # ours: rounded up like the webhook, 50 cores for a half
    assert V.container_request(ctr({VXPU: "1", VMEM: "30000"}), "c") == ContainerRequest(
        1, 49152, MEM_PCT_UNSET, 50, "XPU"
    )


def test_vxpu_strict_requests() -> None:
    # what HAMi silently adjusts into something else is refused with what to write
    with pytest.raises(DecodeError, match=r"200000 MiB is not a vXPU size"):
        V.container_request(ctr({VXPU: "1", VMEM: "200000"}), "c")  # HAMi: a whole XPU
    with pytest.raises(DecodeError, match=r"0 MiB is not a vXPU size"):
        V.container_request(ctr({VXPU: "1", VMEM: "0"}), "c")  # HAMi: a quarter
    with pytest.raises(DecodeError, match=re.escape(f"{VMEM} needs {VXPU}")):
        V.container_request(ctr({VMEM: "24576"}), "c")
    with pytest.raises(DecodeError, match=re.escape(f"{VXPU} is 0 but {VMEM}")):
        V.container_request(ctr({VXPU: "0", VMEM: "24576"}), "c")
    with pytest.raises(DecodeError, match=r"did you mean 24576\?"):
        V.container_request(ctr({VXPU: "1", VMEM: "24Gi"}), "c")
    with pytest.raises(DecodeError):
        V.mutate_container(ctr({VXPU: "1", VMEM: "-1"}), "c")


def test_vxpu_check_type_and_score_node() -> None:
    # Test_KunlunVDevices_CheckType "matching type" / "different type"
    assert V.rules.type_ok(xpu(0, vendor="XPU"), vx(), PodConstraints())
    assert not V.rules.type_ok(xpu(0, vendor="XPU"), ContainerRequest(1, 0, 100, 0, "other"), PodConstraints())
    # Test_KunlunVDevices_ScoreNode: 0
    inv = NodeInventory("n1", "XPU", tuple(board("XPU")))
    assert V.rules.score_node(inv) == 0.0


# ---- vXPUs: Test_GetNodeDevices, Test_KunlunVDevices_CheckHealth, Test_NodeCleanUp -----------------------------

REGISTER = '[{"id":"xpu-0","index":0,"count":1,"devmem":98304,"devcore":100,"type":"XPU","health":true}]'


def test_vxpu_get_node_devices() -> None:
    # "annotation missing" → "annos not found"
    assert V.observe(node(allocatable={VXPU: "1"}), NOW) == NotRegistered(Unregistered.ABSENT)
    # "invalid json"
    bad = V.observe(node({kunlun.VXPU_REGISTER_KEY: "not-json"}, allocatable={VXPU: "1"}), NOW)
    assert isinstance(bad, Invalid) and (bad.failure, bad.source) == (DecodeFailure.REGISTER, kunlun.VXPU_REGISTER_KEY)
    # "empty device list" → "no device found on node"
    got = V.observe(node({kunlun.VXPU_REGISTER_KEY: "[]"}, allocatable={VXPU: "1"}), NOW)
    assert isinstance(got, NotRegistered) and got.reason is Unregistered.NO_DEVICES
    # "valid devices get vendor tagged"
    got = V.observe(node({kunlun.VXPU_REGISTER_KEY: REGISTER}, allocatable={VXPU: "1"}), NOW)
    assert isinstance(got, Registered)
    assert got.inventory.devices == (DeviceInfo("xpu-0", 0, 1, MAX, 100, "XPU", 0, "", True, vendor="XPU"),)
    annotations, capacity, _ = V.node_registration(got.inventory.devices)
    again = V.observe(node(annotations, allocatable=capacity), NOW)
    assert isinstance(again, Registered) and again.inventory.devices == got.inventory.devices


def test_vxpu_check_health() -> None:
    reg = {kunlun.VXPU_REGISTER_KEY: REGISTER}
    # "unknown handshake state patches node": healthy, a fresh Requesting_ written
    got = V.observe(node({**reg, kunlun.VXPU_HANDSHAKE_KEY: "Unknown"}, allocatable={}), NOW)
    assert isinstance(got, Registered) and got.handshake == "Requesting_2025-01-07 12:00:00"
    # "requesting state recently set is still online": healthy, nothing to write
    fresh = {**reg, kunlun.VXPU_HANDSHAKE_KEY: "Requesting_2025-01-07 11:59:50"}
    got = V.observe(node(fresh, allocatable={}), NOW)
    assert isinstance(got, Registered) and got.handshake is None
    # an expired Requesting_ with nothing allocatable: the plugin is gone
    expired = {**reg, kunlun.VXPU_HANDSHAKE_KEY: "Requesting_2025-01-07 00:00:00"}
    assert V.observe(node(expired, allocatable={}), NOW) == NotRegistered(Unregistered.HANDSHAKE_TIMEOUT, legacy=True)
    # Test_NodeCleanUp: the registrar deletes the handshake of a node it drops, by this key
    assert V.handshake_key == "hami.io/node-handshake-xpu"


# ---- PatchAnnotations (both), AddResourceUsage -----------------------------------------------------------------


def test_patch_annotations() -> None:
    # Test_KunlunVDevices_PatchAnnotations "with devices": both lists set; "no devices for this type": untouched
    devices = ((ContainerDevice("xpu-0", 24576, 100, "XPU"),),)
    assert device_list_annotations(devices, VENDORS) == {
        "hami.io/xpu-devices-to-allocate": "xpu-0,XPU,24576,100:;",
        "hami.io/xpu-devices-allocated": "xpu-0,XPU,24576,100:;",
    }
    nv = ((ContainerDevice("GPU-0", 10, 0, NVIDIA),),)
    assert not any("xpu" in k or "kunlun" in k for k in device_list_annotations(nv, VENDORS))
    # whole XPUs: only the allocated list
    whole_devs = ((ContainerDevice("n1-kunlun-0", MAX, 100, "kunlun"),),)
    assert device_list_annotations(whole_devs, VENDORS) == {
        "hami.io/kunlun-allocated": "n1-kunlun-0,kunlun,98304,100:;",
        "BAIDU_COM_DEVICE_IDX": "0",
    }


def test_device_idx_annotation() -> None:
    # TestKunlunDevices_PatchAnnotations: containers [0], [1], [] → "0;1;"
    devs = (
        (ContainerDevice("n1-kunlun-0", MAX, 100, "kunlun"),),
        (ContainerDevice("n1-kunlun-1", MAX, 100, "kunlun"),),
        (),
    )
    assert X.extra_pod_annotations(devs, 0) == {"BAIDU_COM_DEVICE_IDX": "0;1;"}
    # one container of four XPUs: "0,1,2,3" (HAMi's docs: BAIDU_COM_DEVICE_IDX=0,1,2,3); a pod without XPUs: none
    four = (tuple(ContainerDevice(f"n1-kunlun-{i}", MAX, 100, "kunlun") for i in range(4)),)
    assert X.extra_pod_annotations(four, 0) == {"BAIDU_COM_DEVICE_IDX": "0,1,2,3"}
    assert X.extra_pod_annotations(((),), 0) == {}
    assert device_list_annotations(four, VENDORS)["BAIDU_COM_DEVICE_IDX"] == "0,1,2,3"


def test_add_resource_usage() -> None:
    # Test_KunlunVDevices_AddResourceUsage: Used 1→2, Usedcores 10→30, Usedmem 1000→3000
    before = DeviceUsage(1, 1000, 10)
    (charge,) = collapse(((ContainerDevice("d", 2000, 20, "XPU"),),), 0)
    after = DeviceUsage(
        before.used + charge.slots, before.used_mem_mib + charge.mem_mib, before.used_cores + charge.cores_pct
    )
    assert (after.used, after.used_cores, after.used_mem_mib) == (2, 30, 3000)


# ---- Test_FitVXPU_direct ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("used", "used_mem", "memreq", "want"),
    [
        (0, 90000, 20000, False),  # "would exceed total memory"
        (0, 0, 24576, True),  # "idle device always fits"
        (2, 49152, 24576, True),  # "shared device with matching average memory"
        (1, 49152, 24576, False),  # "shared device with mismatched average memory"
    ],
)
def test_fit_vxpu_direct(used: int, used_mem: int, memreq: int, want: bool) -> None:
    fits = kunlun.VXPU_RULES.device_fits  # type: ignore[attr-defined]
    assert fits(xpu(0, vendor="XPU"), vx(mem=memreq), used, used_mem) is want


# ---- device_test.go: Fit (the mutex and NumaNotFit cases: test_kunlun_hami_fit.py) ------------------------------


GRAPH_CASES = [
    ("full allocate", [], 8, [0, 1, 2, 3, 4, 5, 6, 7]),
    ("full allocate not success", [5], 8, []),
    ("allocate 2 cards", [5], 2, [4, 6]),
    ("allocate 1 card", [5], 1, [4]),
    ("allocate 1 card (6, 7 used)", [6, 7], 1, [4]),
    ("allocate 2 card according to interconnect", [0, 1, 2, 4, 5, 6], 2, [3, 7]),
    ("allocate 4 cards according to interconnect when have 5 cards", [2, 3, 7], 4, [0, 1, 4, 5]),
    ("allocate 4 cards ... have 6 cards, leave 2 cards unconnected", [3, 6], 4, [0, 1, 4, 5]),
    ("allocate 4 cards ... have 6 cards, leave 2 cards connected", [2, 6], 4, [0, 1, 4, 5]),
]


@pytest.mark.parametrize(("name", "used", "nums", "want"), GRAPH_CASES, ids=[c[0] for c in GRAPH_CASES])
def test_graph_select(name: str, used: list[int], nums: int, want: list[int]) -> None:
    # Test_graphSelect (graghSelect with FitXPU: free = Used == 0)
    assert graph_select(free_board(*used), nums) == want
    # the same through the scheduling core: whole XPUs on a node whose listed XPUs are busy
    got = fit(board(), whole(nums), usage=busy(*used))
    if want:
        assert sorted(picked(got)) == [f"xpu-{i}" for i in sorted(want)]
    else:
        assert reason(got) == "1/8 NumaNotFit"


VXPU_CASES = [
    ("full allocate with unused devices", {}, 8, 24576, [0, 1, 2, 3, 4, 5, 6, 7]),
    ("allocate with matching memory requirements", {1: (1, 24576), 3: (2, 49152), 5: (1, 49152)}, 4, 24576,
     [0, 1, 2, 3]),
    ("allocate with mixed memory requirements", {1: (2, 49152), 3: (1, 49152), 5: (1, 24576)}, 4, 24576,
     [4, 5, 6, 7]),
    ("no suitable devices due to memory mismatch", {i: (1, 49152) for i in range(8)}, 2, 24576, []),
    ("allocate 1 card with matching memory", {0: (1, 24576), 1: (1, 24576), 2: (1, 49152), 5: (1, 24576)}, 1,
     24576, [0]),
    ("allocate 2 cards with different memory requirements", {1: (2, 49152), 2: (1, 24576), 3: (1, 49152),
                                                               6: (1, 24576)}, 2, 24576, [0, 1]),
]  # fmt: skip


@pytest.mark.parametrize(("name", "held", "nums", "mem", "want"), VXPU_CASES, ids=[c[0] for c in VXPU_CASES])
def test_graph_select_vxpu(name: str, held: dict[int, tuple[int, int]], nums: int, mem: int, want: list[int]) -> None:
    # Test_graphSelectVXPU (graghSelect with FitVXPU)
    fits = kunlun.VXPU_RULES.device_fits  # type: ignore[attr-defined]
    flags = [(i, fits(xpu(i, vendor="XPU"), vx(mem=mem), *held.get(i, (0, 0)))) for i in range(8)]
    assert graph_select(flags, nums) == want
    usage = {f"xpu-{i}": DeviceUsage(u, m, m * 100 // MAX) for i, (u, m) in held.items()}
    got = fit(board("XPU", count=10), vx(nums, mem), usage=usage)
    if want:
        assert sorted(picked(got)) == [f"xpu-{i}" for i in sorted(want)]
        assert isinstance(got, Decision) and {d.used_mem_mib for d in got.devices[0]} == {mem}
    else:
        assert reason(got) == "1/8 NumaNotFit"


def test_score_node() -> None:
    # Test_ScoreNode "Scenario 1": 0–3 busy, the pod takes all 8 → 3000; "Scenario 2": nothing busy, the pod takes
    # XPU 0 → 0
    previous = [("kunlun", i, 1) for i in range(4)]
    assert score_node(previous, [[("kunlun", i) for i in range(8)]]) == 3000.0
    assert score_node([], [[("kunlun", 0)]]) == 0.0
    # any other family on the node or in the pod: 0
    assert score_node([("NVIDIA", 0, 1)], [[("kunlun", 0)]]) == 0.0
    assert score_node([], [[("XPU", 0)]]) == 0.0


# ---- topo_test.go ---------------------------------------------------------------------------------------------


def test_parse_usage_and_addidx() -> None:
    # TestParseUsage: 1, 3, 5 used → free 0, 2, 4, 6, 7; TestParseUsage_NoneAvailable → none
    assert [i for i, f in free_board(1, 3, 5) if f] == [0, 2, 4, 6, 7]
    assert not any(f for _, f in free_board(*range(8)))
    # TestAddidx: a repeated index counts once (score_node's prev/current lists)
    assert score_node([("kunlun", 0, 1), ("kunlun", 0, 1)], [[("kunlun", 0), ("kunlun", 0)]]) == 2000.0


def test_getvalue_countbubble_calcscore() -> None:
    # TestGetvalue (through one wing): 4 → 0, 1 → 2, 0/2/3 → 1 (plus the other, empty wing's 1)
    assert [_count_bubble(list(range(n))) - 1 for n in (4, 1, 2, 3)] == [0, 2, 1, 1]
    # TestCountbubble: empty 1, all left 1, single left 3, single right 3, two left 2
    assert [_count_bubble(x) for x in ([], [0, 1, 2, 3], [0], [4], [0, 1])] == [1, 1, 3, 3, 2]
    # TestCalcscore: -1 → 3000, 0 → 2000, +1 → 1000, +2 → 0
    assert score_fragmentation([0], [0, 1]) == 3000.0
    assert score_fragmentation([0], [4]) == 2000.0
    assert score_fragmentation([0, 1], [0]) == 1000.0
    assert score_fragmentation([0, 1, 2, 3], [0]) == 0.0


def test_can_meet_and_delta() -> None:
    # TestCanMeet
    assert _can_meet([0, 1, 2, 3], [1, 2]) and _can_meet([0, 1], [0, 1]) and _can_meet([0, 1], [])
    assert not _can_meet([0, 1, 2], [2, 3])
    # TestDelta
    assert _delta([0, 1, 2, 3], [1, 2]) == [0, 3]
    assert _delta([0, 1], [5, 6]) == [0, 1]
    assert _delta([0, 1], [0, 1]) == []


def test_devicepick() -> None:
    # TestDevicepick: 1 and 3 used; from 0 take 2 → [0, 2]; from 4 take 3 → [4, 5, 6]; from 6 take 5 → [6, 7]
    b = free_board(1, 3)
    idx, free = [i for i, _ in b], [f for _, f in b]
    assert _pick(idx, free, 0, 2) == [0, 2]
    assert _pick(idx, free, 4, 3) == [4, 5, 6]
    assert _pick(idx, free, 6, 5) == [6, 7]
    # TestDevicepick_FewerThanEightDevices: a node with 4 XPUs, all busy → [] (no index out of range)
    assert _pick(idx[:4], [False] * 4, 0, 2) == []
    assert graph_select([(i, False) for i in range(4)], 2) == []


def test_graph_select_basic() -> None:
    # TestGraghSelect_AllEightAvailable / _EightNotFullyAvailable / _SingleDevice / _FourFromLeftWing
    assert graph_select(free_board(), 8) == list(range(8))
    assert graph_select(free_board(0), 8) == []
    assert graph_select(free_board(), 1) == [0]
    assert graph_select(free_board(4, 5, 6, 7), 4) == [0, 1, 2, 3]


def test_interconnect() -> None:
    pairs = [*kunlun.INTER_GROUP_PAIRS, *kunlun.GROUP_PAIRS]
    # TestInterconnect_TwoDevices: only parseInterconnection()[0] = (0, 4) free → that pair
    b = [(i, i in (0, 4)) for i in range(8)]
    assert sorted(_interconnect([i for i, _ in b], [f for _, f in b], 2)) == [0, 4]
    # TestInterconnect_TwoDevices_ChoosesAmongMultipleCandidates: all free → a known pair of two XPUs
    got = _interconnect(list(range(8)), [True] * 8, 2)
    assert len(got) == 2 and got[0] != got[1] and tuple(sorted(got)) in {tuple(sorted(p)) for p in pairs}
    # TestInterconnect_FourDevices: only parseInterconnection2()[0] = (0, 1, 4, 5) free → that group
    b = [(i, i in (0, 1, 4, 5)) for i in range(8)]
    assert sorted(_interconnect([i for i, _ in b], [f for _, f in b], 4)) == [0, 1, 4, 5]
    # TestInterconnect_UnsupportedCount: 3 → []
    assert _interconnect(list(range(8)), [True] * 8, 3) == []
    # TestParseInterconnection_Structure / TestParseInterconnection2_Structure
    assert all(len(p) == 2 and p[0] != p[1] for p in pairs)
    assert all(len(q) == 4 and len(set(q)) == 4 for q in kunlun.QUADS)


# ---- topo_order_test.go ---------------------------------------------------------------------------------------


def test_graph_select_ignores_input_order() -> None:
    # TestGraghSelect_ScoreSortedInputMatchesIndexOrder: XPU 7 used, the list rotated → still the left wing
    ordered = free_board(7)
    scrambled = [ordered[7], *ordered[:7]]
    assert graph_select(scrambled, 4) == graph_select(ordered, 4) == [0, 1, 2, 3]
    # TestGraghSelect_DoesNotMutateCallerSlice
    rotated = [*free_board()[4:], *free_board()[:4]]
    snapshot = list(rotated)
    graph_select(rotated, 2)
    assert rotated == snapshot
    # through the core, whatever the preference order the policy gives (binpack puts busy XPUs first)
    # (the same four XPUs, listed in the order the core met them: equal XPUs from the last)
    got = fit(board(), whole(4), usage=busy(7), policies=Policies(gpu=GpuPolicy((GpuPolicyToken.BINPACK,))))
    assert picked(got) == ["xpu-3", "xpu-2", "xpu-1", "xpu-0"]


# ---- device_cordon_test.go ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("devices", "request_"), [(board(count=1), whole()), (board("XPU", count=10), vx())])
def test_fit_device_cordon(devices: list[DeviceInfo], request_: ContainerRequest) -> None:
    # TestKunlunDevices_Fit_DeviceCordon / TestKunlunVDevices_Fit_DeviceCordon
    # "a cordoned card is not allocated, positions are preserved": cordon what was picked → another card
    (first,) = picked(fit(devices, request_))
    (second,) = picked(fit(devices, request_, cordoned=frozenset({first})))
    assert second != first
    # "all cards cordoned fails with CardCordoned reason"
    every = frozenset(d.id for d in devices)
    assert reason(fit(devices, request_, cordoned=every)) == "8/8 CardCordoned"
    # "a cordoned card is not double-counted under the mutex policy": every card in use and cordoned
    usage = {d.id: DeviceUsage(1, 24576, 25) for d in devices}
    assert reason(fit(devices, request_, usage=usage, cordoned=every, policies=MUTEX)) == "8/8 CardCordoned"
    # "no annotation or no node info means nothing cordoned"
    assert isinstance(fit(devices, request_, cordoned=frozenset()), Decision)


# ---- UUID selectors (device.go #2577, vdevice.go CheckUUID) ------------------------------------------------------


def test_uuid_selectors() -> None:
    # whole XPUs: both pairs apply, inside the topology walk (a mismatch is a device reason)
    got = fit(board(), whole(), annotations={"baidu.com/use-gpuuuid": "xpu-6"})
    assert picked(got) == ["xpu-6"]
    got = fit(board(), whole(), annotations={"hami.io/use-xpu-uuid": "xpu-5,xpu-6", "baidu.com/nouse-gpuuuid": "xpu-5"})
    assert picked(got) == ["xpu-6"]
    assert reason(fit(board(), whole(), annotations={"hami.io/use-xpu-uuid": "other"})) == "8/8 CardUuidMismatch"
    with pytest.raises(DecodeError, match="shares no UUID"):
        X.selectors({"hami.io/use-xpu-uuid": "xpu-1", "baidu.com/use-gpuuuid": "xpu-2"})
    with pytest.raises(DecodeError, match="no UUID"):
        X.selectors({"baidu.com/use-gpuuuid": ","})
    # vXPUs: hami.io/use-xpu-uuid / no-use-xpu-uuid (the baidu.com pair is the whole XPUs')
    got = fit(board("XPU", count=10), vx(), annotations={"hami.io/no-use-xpu-uuid": "xpu-0"})
    assert picked(got) == ["xpu-1"]
    assert V.selectors({"baidu.com/use-gpuuuid": "xpu-1"}).use_uuids == frozenset()


# ---- ours: multi-container pods, unhealthy vXPUs, sharing bounded by slots --------------------------------------


def test_containers_take_distinct_xpus_and_wings() -> None:
    # the second container sees the first one's XPUs busy (HAMi's cumulative app containers)
    got = fit(board(), whole(2), whole(2))
    assert isinstance(got, Decision)
    assert [sorted(d.uuid for d in c) for c in got.devices] == [["xpu-0", "xpu-1"], ["xpu-2", "xpu-3"]]
    # a whole XPU is charged whole: its memory and cores (HAMi's Fit writes Totalmem/Totalcore)
    assert {(d.used_mem_mib, d.used_cores) for c in got.devices for d in c} == {(MAX, 100)}


def test_unhealthy_and_slots() -> None:
    # an unhealthy vXPU is not chosen (HAMi's kunlun Fit does not look at health)
    devices = board("XPU", count=10)
    devices[0] = xpu(0, vendor="XPU", count=10, health=False)
    assert picked(fit(devices, vx(mem=24576))) == ["xpu-1"]
    # an XPU is shared by at most its registered slots
    one = [xpu(i, vendor="XPU", count=1) for i in range(8)]
    usage = {d.id: DeviceUsage(1, 24576, 25) for d in one}
    assert reason(fit(one, vx(mem=24576), usage=usage)) == "8/8 CardTimeSlicingExhausted"


# ---- ScoreNode in the plan: the node where the pod's XPUs keep the board tightest ---------------------------------


def board_node(name: str, busy_idx: tuple[int, ...]) -> NodeSnapshot:
    """An 8-XPU board ``<name>-kunlun-<i>`` whose listed XPUs are busy (taken whole)."""
    devices = tuple(
        DeviceInfo(f"{name}-kunlun-{i}", i, 100, MAX, 100, "kunlun", 0, "", True, vendor="kunlun") for i in range(8)
    )
    usage = {f"{name}-kunlun-{i}": DeviceUsage(1, MAX, 100) for i in busy_idx}
    return NodeSnapshot(NodeInventory(name, "kunlun", devices), usage)


def two_nodes(busy_a: tuple[int, ...], busy_b: tuple[int, ...]) -> list[NodeSnapshot]:
    return [board_node("a", busy_a), board_node("b", busy_b)]


@pytest.mark.parametrize("busy_path", [False, True])
def test_score_node_decides_between_nodes(busy_path: bool) -> None:
    nodes = two_nodes((0,), (0, 1, 2))
    pod = PodRequest(containers=(whole(),), init_count=0)
    # a: busy {0}, the pod takes XPU 1: countbubble 3 → 3, +2000; b: busy {0,1,2}, the pod takes XPU 3: countbubble
    # of the busy 2 → of the pod's one XPU 3, +1000
    score = X.rules.pod_score  # type: ignore[attr-defined]
    bp = NodePolicy.BINPACK
    assert score(nodes[0], ((ContainerDevice("a-kunlun-1", MAX, 100, "kunlun"),),), bp, NO_SELECTORS) == 2000
    assert score(nodes[1], ((ContainerDevice("b-kunlun-3", MAX, 100, "kunlun"),),), bp, NO_SELECTORS) == 1000
    busy = frozenset({"zz"}) if busy_path else frozenset()  # a bind in flight elsewhere: plan goes through tiers
    binpack = plan(pod, NO_SELECTORS, nodes, policies=Policies(), rules=VENDORS.rules, busy=busy)
    # b is busier (the usage score alone would take it under binpack); a's term is larger
    assert isinstance(binpack, Decision) and binpack.node == "a"
    assert binpack.score == pytest.approx(nodes[0].score + 2000.0)
    spread = Policies(node=NodePolicy.SPREAD)
    got = plan(pod, NO_SELECTORS, nodes, policies=spread, rules=VENDORS.rules, busy=busy)
    assert isinstance(got, Decision) and got.node == "b"  # HAMi's spread takes the lowest sum, as here
    # plan_ranked (the extender's walk) gives the same answers, whatever the order it is given
    for policies, want in ((Policies(), "a"), (spread, "b")):
        for order in (nodes, nodes[::-1]):
            ranked = plan_ranked(pod, NO_SELECTORS, iter(order), policies=policies, rules=VENDORS.rules)
            assert ranked is not None and ranked.node == want
    # a vXPU pod has no node term (HAMi's vXPU ScoreNode is 0)
    assert not hasattr(V.rules, "pod_score")


def test_score_node_is_zero_on_a_node_with_other_families() -> None:
    snap = NodeSnapshot(NodeInventory("n", "kunlun,XPU", (xpu(0), xpu(1, vendor="XPU"))), {})
    pod_devs = ((ContainerDevice("xpu-0", MAX, 100, "kunlun"),),)
    for policy in NodePolicy:
        assert X.rules.pod_score(snap, pod_devs, policy, NO_SELECTORS) == 0.0  # type: ignore[attr-defined]
        assert X.rules.pod_score_bound(snap, (whole(),), policy, NO_SELECTORS) == 0.0  # type: ignore[attr-defined]


def test_scored_plan_skips_hopeless_nodes_yet_gives_them_reasons() -> None:
    a, b = two_nodes((0,), (0, 1, 2))
    full = board_node("c", tuple(range(8)))  # every XPU busy: the busiest node, so binpack would try it first
    pod = PodRequest(containers=(whole(),), init_count=0)
    got = plan(pod, NO_SELECTORS, [a, b, full], policies=Policies(), rules=VENDORS.rules)
    assert isinstance(got, Decision) and (got.node, got.passed_over) == ("a", 1)  # c ranks first and does not fit
    # nothing fits: every node, the skipped one included, has its reason
    eight = PodRequest(containers=(whole(8),), init_count=0)
    failed = plan(eight, NO_SELECTORS, [a, b, full], policies=Policies(), rules=VENDORS.rules)
    assert isinstance(failed, Failure)
    assert dict(failed.reasons) == {"a": "1/8 NumaNotFit", "b": "1/8 NumaNotFit", "c": "1/8 NumaNotFit"}


def test_vxpu_memory_counts_against_the_namespace_quota() -> None:
    # limits.kunlunxin.com/vxpu-memory: 49152 with a quarter (24576) already used
    limits = QuotaLimits(others=(("XPU", VendorLimits(mem_mib=49152)),))
    quota = QuotaState(limits, used_others=(("XPU", QuotaUse(mem_mib=24576)),))
    devices = board("XPU", count=10)
    pod = PodRequest(containers=(vx(mem=24576),), init_count=0)
    node = NodeSnapshot(NodeInventory("n1", "XPU", tuple(devices)), {})
    got = plan(pod, NO_SELECTORS, [node], policies=Policies(), rules=VENDORS.rules, quota=quota)
    assert isinstance(got, Decision)  # 24576 + 24576 = the limit
    half = PodRequest(containers=(vx(mem=49152),), init_count=0)
    failed = plan(half, NO_SELECTORS, [node], policies=Policies(), rules=VENDORS.rules, quota=quota)
    assert isinstance(failed, Failure) and failed.reasons["n1"] == "8/8 ResourceQuotaNotFit"
    # the whole XPUs have no memory resource: no quota applies to them
    assert X.resources.memory is None


def test_vxpu_charges_are_uniform_and_survive_the_envelope() -> None:
    # a vXPU's charge says "shared only by tasks of one size", so the atomic reserve re-checks FitVXPU's rule
    got = fit(board("XPU", count=10), vx(mem=24576))
    assert isinstance(got, Decision) and [c.uniform for c in got.charges] == [True]
    whole_got = fit(board(), whole())
    assert isinstance(whole_got, Decision) and [c.uniform for c in whole_got.charges] == [False]
    alloc = Allocation("uid", "default", "p", "n1", got.devices, got.charges)
    assert decode_allocation(encode_allocation(alloc)) == alloc
    plain = Allocation("uid", "default", "p", "n1", whole_got.devices, whole_got.charges)
    assert b"uniform" not in encode_allocation(plain)  # other families' envelopes are unchanged
