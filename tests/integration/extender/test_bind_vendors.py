"""/bind for pods given devices of other vendors: each vendor's device-list annotations, and the node locks by
kind (HAMi's hami.io/mutex.lock, Cambricon's cambricon.com/dsmlu.lock, none)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from typing import Any

import pytest

from tests.fakevendor import FakeVendor, fake_devices
from tests.integration.extender.bindkit import NOW, Harness, gpu, harness, node_obj, pod_obj
from vgpu_scheduler.services.extender.bind import BindOutcome
from vgpu_scheduler.services.extender.vendorlock import DSMLU_LOCK, TimedLockState, lock_kinds
from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.codec.nodelock import encode_node_lock, format_rfc3339, parse_node_lock
from vgpu_scheduler.shared.domain.accounting import collapse
from vgpu_scheduler.shared.domain.allocation import Allocation
from vgpu_scheduler.shared.domain.model import ContainerDevice, NodeInventory
from vgpu_scheduler.shared.protocol.extender import ExtenderBindingArgs
from vgpu_scheduler.shared.store import ReservationState
from vgpu_scheduler.shared.vendors import hygon
from vgpu_scheduler.shared.vendors.base import NodeLockKind
from vgpu_scheduler.shared.vendors.nvidia import NvidiaVendor
from vgpu_scheduler.shared.vendors.registry import Vendors

NODE = "mixed-1"
DCU = FakeVendor("DCU", NodeLockKind.HAMI)
AWS = FakeVendor("AWS", NodeLockKind.NONE, has_to_allocate=False)
MLU = FakeVendor("MLU", NodeLockKind.CAMBRICON)
VENDORS = Vendors((NvidiaVendor(), DCU, AWS, MLU))
DSMLU = NodeLockKind.CAMBRICON.value


@pytest.fixture
async def h(redis_url: str) -> AsyncIterator[Harness]:
    async with harness(redis_url) as hh:
        devices = (gpu(NODE, 0), gpu(NODE, 1), *fake_devices(NODE, "DCU"), *fake_devices(NODE, "AWS"))
        devices += fake_devices(NODE, "MLU")
        await hh.store.inventory.put(NodeInventory(node=NODE, vendor="NVIDIA", devices=devices))
        hh.em.put(node_obj(NODE))
        yield hh


def _args(pod: dict[str, Any]) -> ExtenderBindingArgs:
    m = pod["metadata"]
    return ExtenderBindingArgs(pod_name=m["name"], pod_namespace=m["namespace"], pod_uid=m["uid"], node=NODE)


def _dev(uuid: str, vendor: str, mem: int = 1000, cores: int = 10) -> ContainerDevice:
    return ContainerDevice(uuid=uuid, used_mem_mib=mem, used_cores=cores, type=vendor)


async def _reserved(h: Harness, name: str, *containers: tuple[ContainerDevice, ...]) -> dict[str, Any]:
    pod = pod_obj(name, gpus=0)
    pod["spec"]["containers"] = [
        {"name": f"c{i}", "image": "busybox", "resources": {"limits": {"dcu.com/num": "1"}}}
        for i in range(len(containers))
    ]
    pod = h.create_pod(pod)
    meta = pod["metadata"]
    alloc = Allocation(
        pod_uid=meta["uid"],
        namespace=meta["namespace"],
        name=meta["name"],
        node=NODE,
        devices=containers,
        charges=collapse(containers, 0, ()),
    )
    await h.reserve(alloc, quota=False)
    return pod


def _node_annos(h: Harness) -> dict[str, str]:
    return dict(h.node(NODE)["metadata"].get("annotations") or {})


def _hami(annos: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in annos.items() if k.startswith("hami.io/")}


async def test_a_hami_lock_vendor_writes_its_own_keys_and_takes_the_mutex_lock(h: Harness) -> None:
    pod = await _reserved(h, "dcu", (_dev(f"DCU-{NODE}-1", "DCU", 2000, 30),), ())
    result = await h.binder(vendors=VENDORS).bind(_args(pod))
    assert result.outcome is BindOutcome.BOUND, result.error
    listed = f"DCU-{NODE}-1,DCU,2000,30:;;"
    assert _hami(h.pod("dcu")["metadata"]["annotations"]) == {
        keys.VGPU_NODE: NODE,
        keys.VGPU_TIME: str(int(NOW)),
        "hami.io/dcu-devices-to-allocate": listed,
        "hami.io/dcu-devices-allocated": listed,
        keys.BIND_PHASE: "allocating",
        keys.BIND_TIME: str(int(NOW)),
    }
    node_annos = _node_annos(h)
    assert parse_node_lock(node_annos[keys.NODE_LOCK]).owned_by("default", "dcu")
    assert DSMLU not in node_annos
    rec = await h.store.reservations.get(pod["metadata"]["uid"])
    assert rec is not None and rec.state is ReservationState.BOUND


async def test_a_vendor_without_a_node_lock_binds_without_any(h: Harness) -> None:
    pod = await _reserved(h, "aws", (_dev(f"AWS-{NODE}-0", "AWS"),))
    result = await h.binder(vendors=VENDORS).bind(_args(pod))
    assert result.outcome is BindOutcome.BOUND, result.error
    annos = h.pod("aws")["metadata"]["annotations"]
    assert annos["hami.io/aws-devices-allocated"] == f"AWS-{NODE}-0,AWS,1000,10:;"
    assert "hami.io/aws-devices-to-allocate" not in annos
    assert keys.NODE_LOCK not in _node_annos(h)
    assert DSMLU not in _node_annos(h)
    assert await h.store.locks.inspect(NODE) is None


async def test_a_cambricon_lock_vendor_sets_the_dsmlu_lock_only(h: Harness) -> None:
    # HAMi pkg/device/cambricon Test_LockNode "node is not locked", Test_setNodeLock "set node lock"
    pod = await _reserved(h, "mlu", (_dev(f"MLU-{NODE}-0", "MLU", 4096, 20),))
    result = await h.binder(vendors=VENDORS).bind(_args(pod))
    assert result.outcome is BindOutcome.BOUND, result.error
    node_annos = _node_annos(h)
    assert node_annos[DSMLU] == format_rfc3339(datetime.fromtimestamp(NOW).astimezone())
    assert keys.NODE_LOCK not in node_annos
    assert h.pod("mlu")["metadata"]["annotations"]["hami.io/mlu-devices-allocated"] == (f"MLU-{NODE}-0,MLU,4096,20:;")


async def test_a_fresh_dsmlu_lock_makes_the_bind_wait_then_fail_and_undo(h: Harness) -> None:
    # HAMi pkg/device/cambricon Test_LockNode "node is already locked within 2 minutes" (a minute ago): an error
    fresh = format_rfc3339(datetime.fromtimestamp(NOW - 60).astimezone())
    h.em.put(node_obj(NODE, annotations={DSMLU: fresh}))
    pod = await _reserved(h, "mlu", (_dev(f"GPU-{NODE}-0", "NVIDIA"), _dev(f"MLU-{NODE}-0", "MLU")))
    result = await h.binder(vendors=VENDORS).bind(_args(pod))
    assert result.outcome is BindOutcome.LOCK_TIMEOUT
    assert DSMLU in result.error
    node_annos = _node_annos(h)
    assert node_annos[DSMLU] == fresh  # not ours: untouched
    assert keys.NODE_LOCK not in node_annos  # the HAMi lock taken first was given back
    assert await h.store.reservations.node_of(pod["metadata"]["uid"]) is None
    assert "spec" not in h.pod("mlu") or not h.pod("mlu")["spec"].get("nodeName")


async def test_an_expired_or_malformed_dsmlu_lock_is_taken_over(h: Harness) -> None:
    # HAMi pkg/device/cambricon Test_LockNode "lock time expired (more than 2 minutes)": taken over. "invalid lock
    # time format" (and Test_setNodeLock "node is locked", "test123"): HAMi fails the bind; ours takes it over
    # (docs/differences.md, 21)
    for name, previous in (("old", datetime.fromtimestamp(NOW - 121).astimezone()), ("junk", None)):
        value = format_rfc3339(previous) if previous is not None else "not-a-time"
        h.em.put(node_obj(NODE, annotations={DSMLU: value}))
        pod = await _reserved(h, name, (_dev(f"MLU-{NODE}-1", "MLU"),))
        result = await h.binder(vendors=VENDORS).bind(_args(pod))
        assert result.outcome is BindOutcome.BOUND, result.error
        assert _node_annos(h)[DSMLU] == format_rfc3339(datetime.fromtimestamp(NOW).astimezone())


async def test_a_mixed_pod_takes_both_locks_and_writes_both_pairs(h: Harness) -> None:
    pod = await _reserved(h, "mixed", (_dev(f"GPU-{NODE}-1", "NVIDIA", 3000, 0), _dev(f"MLU-{NODE}-1", "MLU")))
    result = await h.binder(vendors=VENDORS).bind(_args(pod))
    assert result.outcome is BindOutcome.BOUND, result.error
    annos = h.pod("mixed")["metadata"]["annotations"]
    assert annos[keys.DEVICES_ALLOCATED] == f"GPU-{NODE}-1,NVIDIA,3000,0:;"
    assert annos[keys.DEVICES_TO_ALLOCATE] == f"GPU-{NODE}-1,NVIDIA,3000,0:;"
    assert annos["hami.io/mlu-devices-allocated"] == f"MLU-{NODE}-1,MLU,1000,10:;"
    node_annos = _node_annos(h)
    assert parse_node_lock(node_annos[keys.NODE_LOCK]).owned_by("default", "mixed")
    assert DSMLU in node_annos


def test_lock_kinds_by_vendor() -> None:
    def of(*types: str) -> frozenset[NodeLockKind]:
        return lock_kinds(((*(_dev("x", t) for t in types),),), VENDORS)

    assert of("NVIDIA") == {NodeLockKind.HAMI}
    assert of("AWS") == frozenset()
    assert of("MLU") == {NodeLockKind.CAMBRICON}
    assert of("AWS", "MLU", "DCU") == {NodeLockKind.CAMBRICON, NodeLockKind.HAMI}
    assert of() == {NodeLockKind.HAMI}  # no device at all: as before
    assert of("XPU") == {NodeLockKind.HAMI}  # a vendor no longer enabled: the shared lock


def test_dsmlu_lock_rules() -> None:
    now = datetime.fromtimestamp(NOW).astimezone()
    assert DSMLU_LOCK.key == "cambricon.com/dsmlu.lock"
    assert DSMLU_LOCK.state(DSMLU_LOCK.value(now - timedelta(seconds=119)), now) is TimedLockState.HELD
    assert DSMLU_LOCK.state(DSMLU_LOCK.value(now - timedelta(seconds=121)), now) is TimedLockState.EXPIRED
    assert DSMLU_LOCK.state("2025-13-01T00:00:00Z", now) is TimedLockState.MALFORMED
    assert DSMLU_LOCK.state("2025-01-23T10:00:00+08:00", datetime.fromisoformat("2025-01-23T02:01:00+00:00")) is (
        TimedLockState.HELD
    )


# ---- HAMi's pkg/device/hygon device_test.go TestDevices_LockNode / TestDevices_ReleaseNodeLock (46bd7a88), with
# the real Hygon vendor: which pods take hami.io/mutex.lock, and which give it back


def _hygon_vendors() -> Vendors:
    return Vendors((NvidiaVendor(), hygon.build(None)[0]))


async def test_hygon_lock_node_and_release_without_containers(h: Harness) -> None:
    # "Test with no containers": LockNode takes no lock; ReleaseNodeLock leaves the node's lock alone. Ours: a pod
    # that asks for nothing is bound plainly, the node's lock (another pod's) untouched
    held = encode_node_lock(datetime.fromtimestamp(NOW - 5).astimezone(), "default", "other")
    h.em.put(node_obj(NODE, annotations={keys.NODE_LOCK: held}))
    pod = pod_obj("empty", gpus=0)
    pod["spec"]["containers"] = []
    pod = h.create_pod(pod)
    result = await h.binder(vendors=_hygon_vendors()).bind(_args(pod))
    assert result.outcome is BindOutcome.PLAIN, result.error
    assert _node_annos(h)[keys.NODE_LOCK] == held
    assert await h.store.locks.inspect(NODE) is None


async def _hygon_pod(h: Harness, name: str) -> dict[str, Any]:
    """A pod whose container asks for one DCU in its requests only (HAMi's test pod), reserved on dev DCU-…-1."""
    pod = pod_obj(name, gpus=0)
    pod["spec"]["containers"] = [
        {"name": "c", "image": "busybox", "resources": {"requests": {"hygon.com/dcunum": "1"}}}
    ]
    pod = h.create_pod(pod)
    assert hygon.build(None)[0].container_request(pod["spec"]["containers"][0], "c").nums == 1
    devices = ((_dev(f"DCU-{NODE}-1", "DCU", 2000, 30),),)
    m = pod["metadata"]
    alloc = Allocation(m["uid"], m["namespace"], m["name"], NODE, devices, collapse(devices, 0, ()))
    await h.reserve(alloc, quota=False)
    return pod


async def test_hygon_lock_node_with_a_dcu_request(h: Harness) -> None:
    # TestDevices_LockNode "Test with non-zero resource requests": the node gets hami.io/mutex.lock (naming the pod)
    pod = await _hygon_pod(h, "nozerorr")
    result = await h.binder(vendors=_hygon_vendors()).bind(_args(pod))
    assert result.outcome is BindOutcome.BOUND, result.error
    assert parse_node_lock(_node_annos(h)[keys.NODE_LOCK]).owned_by("default", "nozerorr")


async def test_hygon_release_node_lock_with_a_dcu_request(h: Harness) -> None:
    # TestDevices_ReleaseNodeLock "Test with non-zero resource requests": the pod's lock is removed. Ours: a bind
    # that fails after taking the lock gives it back (the annotation names this pod; HAMi's test value
    # "lock-values,default,nozerorr" has no time in front, which we would not read as this pod's)
    pod = await _hygon_pod(h, "nozerorr")
    h.em.inject_error(500, method="POST", path="/binding", times=1)
    result = await h.binder(vendors=_hygon_vendors()).bind(_args(pod))
    assert result.outcome is BindOutcome.ERROR
    assert keys.NODE_LOCK not in _node_annos(h)
    assert await h.store.locks.inspect(NODE) is None
