"""Every vendor's ``manages`` covers every resource name its request reads.

``vendors_pod_request`` (the webhook, ``/filter``, ``/bind``) asks only the vendors that manage a container for
its request: with every family on by default, asking each of a dozen vendors to parse every container was a
measurable part of the extender's CPU per pod. That is right only if a vendor that does not manage a container
has nothing to say about it: an empty request, no error. Checked here for every family with its defaults, over
containers naming any mix of the resource names the families use (and names none of them use), with valid and
invalid quantities."""

from __future__ import annotations

from collections.abc import Mapping
from copy import deepcopy
from dataclasses import replace
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from vgpu_scheduler.shared.codec.resources import ResourceRequestError
from vgpu_scheduler.shared.domain.hooks import implements
from vgpu_scheduler.shared.domain.model import NVIDIA, ContainerRequest, NvidiaConfig
from vgpu_scheduler.shared.protocol.admission import AdmissionOutcome
from vgpu_scheduler.shared.protocol.webhook import PodMutation, mutate_pod
from vgpu_scheduler.shared.vendors.base import AdmissionWarnings, Vendor
from vgpu_scheduler.shared.vendors.catalog import all_vendors
from vgpu_scheduler.shared.vendors.nvidia import NvidiaVendor
from vgpu_scheduler.shared.vendors.pods import vendors_pod_request
from vgpu_scheduler.shared.vendors.registry import Vendors

_DOMAINS = (
    "nvidia.com",
    "hygon.com",
    "cambricon.com",
    "amd.com",
    "mthreads.com",
    "birentech.com",
    "metax-tech.com",
    "vastaitech.com",
    "enflame.com",
    "huawei.com",
    "iluvatar.ai",
    "iluvatar.com",
    "kunlunxin.com",
    "aws.amazon.com",
    "example.com",
)
_SUFFIXES = (
    "gpu",
    "gpumem",
    "gpucores",
    "gpumem-percentage",
    "priority",
    "vgpu",
    "sgpu",
    "vmemory",
    "vcore",
    "dcunum",
    "dcumem",
    "dcucores",
    "vmlu",
    "mlu.smlu.vmemory",
    "mlu.smlu.vcore",
    "sgpu-memory",
    "sgpu-core",
    "va",
    "gcu",
    "drs-gcu",
    "gcu-memory",
    "gcu-core",
    "Ascend910B3",
    "Ascend910B3-memory",
    "Ascend310P",
    "Ascend310P-memory",
    "xpu",
    "vxpu",
    "vxpu-memory",
    "neuron",
    "neuroncore",
    "vcuda-core",
    "vcuda-memory",
)
_NAMES = sorted({f"{d}/{s}" for d in _DOMAINS for s in _SUFFIXES} | {"cpu", "memory", "ephemeral-storage"})
_VALUES = st.sampled_from(
    ["0", "1", "2", "4", "100", "120", "3000", "20Gi", "-1", "1.5", "abc", "", "1k"]
) | st.integers(-5, 200000).map(str)
_RESOURCES = st.dictionaries(st.sampled_from(_NAMES), _VALUES, max_size=4)
VENDORS = all_vendors()


def _container(limits: dict[str, str], requests: dict[str, str]) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if limits:
        resources["limits"] = limits
    if requests:
        resources["requests"] = requests
    return {"name": "c", "image": "x", "resources": resources}


@given(_RESOURCES, _RESOURCES)
def test_a_vendor_that_does_not_manage_a_container_asks_nothing_of_it(
    limits: dict[str, str], requests: dict[str, str]
) -> None:
    container = _container(limits, requests)
    for vendor in VENDORS:
        if vendor.manages(container):
            continue
        try:
            request = vendor.container_request(container, "container c")
        except ResourceRequestError as e:
            raise AssertionError(f"{vendor.name} does not manage {container} but refused it: {e}") from e
        assert request.empty, f"{vendor.name} does not manage {container} but asked {request}"


@given(st.lists(st.tuples(_RESOURCES, _RESOURCES), min_size=1, max_size=3))
def test_the_pod_request_is_the_same_as_asking_every_vendor(containers: list[tuple[Any, Any]]) -> None:
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [_container(lim, req) for lim, req in containers]}}
    try:
        fast = vendors_pod_request(pod, VENDORS)
    except ResourceRequestError as e:
        fast_error: str | None = str(e)
    else:
        fast_error = None
    # the reference: every vendor asked about every container, as before the shortcut
    entries: list[ContainerRequest | None] = []
    problems: list[str] = []
    for i, (lim, req) in enumerate(containers):
        asked: list[ContainerRequest | None] = []
        for vendor in VENDORS:
            try:
                r = vendor.container_request(_container(lim, req), f"container {i}")
            except ResourceRequestError as e:
                problems.extend(e.problems)
                continue
            if not r.empty:
                asked.append(r)
        entries.extend(asked or [None])
    if problems:
        assert fast_error is not None
    else:
        assert fast_error is None
        assert [None if e.empty else e for e in fast.containers] == entries


@given(_RESOURCES, _RESOURCES)
def test_the_vendor_set_finds_exactly_the_vendors_that_manage_a_container(
    limits: dict[str, str], requests: dict[str, str]
) -> None:
    # Vendors.managing reads each vendor's resource names once; it must agree with every vendor's own manages
    container = _container(limits, requests)
    assert VENDORS.managing(container) == tuple(v for v in VENDORS if v.manages(container))


def test_a_vendor_with_a_configured_resource_name_is_found_by_that_name() -> None:
    # a renamed resource (device config) is the vendor's, and the default name no longer is
    nvidia = next(v for v in VENDORS if isinstance(v, NvidiaVendor))
    renamed = Vendors((replace(nvidia, config=replace(nvidia.config, resource_count_name="example.com/gpu")),))
    assert [v.name for v in renamed.managing(_container({"example.com/gpu": "1"}, {}))] == [nvidia.name]
    assert renamed.managing(_container({"nvidia.com/gpu": "1"}, {})) == ()


@given(st.lists(st.tuples(_RESOURCES, _RESOURCES), min_size=1, max_size=3))
def test_a_vendor_that_manages_no_container_leaves_the_pod_alone_at_admission(
    containers: list[tuple[Any, Any]],
) -> None:
    # the webhook asks only the vendors that manage a container (Vendors.managing): the others must have nothing
    # to edit or say about it, nor about a pod none of whose containers they manage
    listed: list[dict[str, Any]] = [_container(lim, req) for lim, req in containers]
    pod: dict[str, Any] = {"metadata": {"name": "p"}, "spec": {"containers": listed}}
    for vendor in VENDORS:
        if vendor.name == NVIDIA:
            continue  # its admission edits are the webhook's own (shared.protocol.webhook), for every container
        name = vendor.name
        for i, c in enumerate(listed):
            if vendor.manages(c):
                continue
            edited = deepcopy(c)
            assert vendor.mutate_container(edited, f"container {i}") is False, name
            assert edited == c, name
            if implements(vendor, AdmissionWarnings):  # type: ignore[type-abstract]
                assert vendor.admission_warnings(c, f"container {i}") == (), name
        if not any(vendor.manages(c) for c in listed) and implements(vendor, PodMutation):  # type: ignore[type-abstract]
            edited_pod = deepcopy(pod)
            vendor.mutate_pod(edited_pod, "pod")
            assert edited_pod == pod, name


class _EveryVendorAsked(Vendors):
    """The reference: every vendor asked about every container, as the webhook did before the shortcut."""

    def managing(self, container: Mapping[str, Any], what: str = "container") -> tuple[Vendor, ...]:
        del container, what
        return self.all


@given(st.lists(st.tuples(_RESOURCES, _RESOURCES), min_size=1, max_size=3))
def test_the_webhook_decides_as_if_every_vendor_were_asked(containers: list[tuple[Any, Any]]) -> None:
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [_container(lim, req) for lim, req in containers]}}
    cfg = NvidiaConfig()

    def decide(vendors: Vendors) -> AdmissionOutcome:
        return mutate_pod(
            deepcopy(pod),
            cfg=cfg,
            scheduler_name="vgpu-scheduler",
            force_overwrite_default_scheduler=True,
            vendors=vendors,
        )

    assert decide(VENDORS) == decide(_EveryVendorAsked(VENDORS.all))
