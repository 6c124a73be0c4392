"""/filter with another vendor's namespace quota: the plan checks the DCU limit per device, the reserve charges
it atomically beside NVIDIA's, and an NVIDIA pod of the same namespace is not limited by it."""

from __future__ import annotations

import json
import uuid
from typing import Any

from tests.fakevendor import FakeVendor, fake_devices
from tests.integration.extender.filter_harness import node, running_extender, seed
from tests.integration.extender.test_webhook import review
from vgpu_scheduler.services.extender.webhook import Admitter, WebhookOutcome
from vgpu_scheduler.shared.domain.model import NodeInventory, NvidiaConfig
from vgpu_scheduler.shared.domain.quota import QuotaUse, VendorLimits, quota_limits
from vgpu_scheduler.shared.k8s import Api
from vgpu_scheduler.shared.protocol.admission import parse_admission_review
from vgpu_scheduler.shared.store import PodQuotaCharge, Store
from vgpu_scheduler.shared.vendors.nvidia import NvidiaVendor
from vgpu_scheduler.shared.vendors.registry import Vendors

DCU = FakeVendor("DCU")
VENDORS = Vendors((NvidiaVendor(), DCU))


def _pod(name: str, limits: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "team", "uid": str(uuid.uuid5(uuid.NAMESPACE_DNS, name))},
        "spec": {"containers": [{"name": "c", "resources": {"limits": limits}}]},
    }


def _uid(pod: dict[str, Any]) -> str:
    uid: str = pod["metadata"]["uid"]
    return uid


async def test_a_dcu_limit_refuses_a_dcu_pod_beyond_it_and_not_an_nvidia_pod(store: Store, api: Api) -> None:
    devices = (*node("m1", 2).devices, *fake_devices("m1", "DCU", 2))
    await seed(store, [NodeInventory(node="m1", vendor="NVIDIA", devices=devices)])
    await store.quota.set_limits("team", quota_limits(VendorLimits(), {"DCU": VendorLimits(mem_mib=5000)}))
    first = _pod("d1", {"dcu.com/num": 1, "dcu.com/mem": 3000, "dcu.com/cores": 10})
    second = _pod("d2", {"dcu.com/num": 1, "dcu.com/mem": 3000, "dcu.com/cores": 10})
    gpu = _pod("g1", {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 9000})
    async with running_extender(store, api, vendors=VENDORS) as ext:
        one = await ext.filter({"Pod": first, "NodeNames": ["m1"], "Nodes": None})
        two = await ext.filter({"Pod": second, "NodeNames": ["m1"], "Nodes": None})
        three = await ext.filter({"Pod": gpu, "NodeNames": ["m1"], "Nodes": None})
    assert one["NodeNames"] == ["m1"], one
    assert two["NodeNames"] in (None, []), two
    assert two["FailedAndUnresolvableNodes"] == {"m1": "2/2 ResourceQuotaNotFit"}
    assert three["NodeNames"] == ["m1"], three
    charges = await store.quota.pod_charges("team")
    assert charges[_uid(first)] == PodQuotaCharge(0, 0, (("DCU", QuotaUse(3000, 10)),))
    assert charges[_uid(gpu)].others == ()
    assert charges[_uid(gpu)].mem_mib == 9000
    assert _uid(second) not in charges
    state = await store.quota.get("team")
    assert state.used_others == (("DCU", QuotaUse(3000, 10)),)


async def test_the_webhook_reads_the_quota_for_a_vendor_only_pod_and_denies_beyond_the_limit(store: Store) -> None:
    await store.quota.set_limits("team", quota_limits(VendorLimits(), {"DCU": VendorLimits(mem_mib=5000)}))
    await store.quota.charge("team", "running", 0, 0, others=(("DCU", QuotaUse(3000, 10)),))
    admitter = Admitter(
        nvidia=NvidiaConfig(),
        scheduler_name="vgpu-scheduler",
        force_overwrite_default_scheduler=True,
        quota=store.quota,
        vendors=VENDORS,
    )

    async def admit(pod: dict[str, Any]) -> tuple[WebhookOutcome, str]:
        kind, outcome = await admitter.admit(parse_admission_review(json.dumps(review(pod, namespace="team"))))
        return kind, outcome.message

    over = _pod("d3", {"dcu.com/num": 1, "dcu.com/mem": 2001})
    assert await admit(over) == (WebhookOutcome.DENIED, "exceeding resource quota")
    within = _pod("d4", {"dcu.com/num": 1, "dcu.com/mem": 2000})
    assert (await admit(within))[0] is WebhookOutcome.MUTATED
    gpu = _pod("g2", {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 50_000})
    assert (await admit(gpu))[0] is WebhookOutcome.MUTATED
