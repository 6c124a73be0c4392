"""What every vendor's tests build with: a container, a one-node plan through the shared fit, and the readings of
its result. Written once here so that each family's test file holds only its own cases (and
``test_contract.py`` the cases every family shares).

The plan goes the way /filter takes it: the pod's annotations decoded by the codec for every vendor of
``vendors`` (selectors, policies), then :func:`~shared.domain.plan.plan` with ``vendors.rules``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pytest

from vgpu_scheduler.shared.domain.model import (
    ContainerDevice,
    ContainerRequest,
    DeviceInfo,
    DeviceUsage,
    NodeInventory,
    PodRequest,
)
from vgpu_scheduler.shared.domain.plan import Decision, Failure, plan
from vgpu_scheduler.shared.domain.scoring import Policies
from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot
from vgpu_scheduler.shared.vendors.pods import decode_vendor_constraints
from vgpu_scheduler.shared.vendors.registry import Vendors

NODE = "n1"
"""The node every plan here runs on (the key of ``Failure.reasons``)."""

NOW = datetime(2025, 1, 7, 12, 0, 0)
"""The registrar's local time in registration and handshake cases."""


def ctr(
    limits: dict[str, Any] | None = None, requests: dict[str, Any] | None = None, name: str = "c"
) -> dict[str, Any]:
    """A pod spec container named ``name`` with these limits and requests."""
    return {"name": name, "resources": {"limits": limits or {}, "requests": requests or {}}}


@dataclass(frozen=True)
class Refusal:
    """One row of a family's refusal table: a pod asking ``asked`` on a node of ``devices`` in ``usage``, with
    these pod ``annotations``, is refused with the node reason ``expected``."""

    devices: list[DeviceInfo]
    asked: ContainerRequest
    usage: dict[str, DeviceUsage] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    expected: str = ""


def hami_share_refusals(card: Callable[..., DeviceInfo], ask: Callable[..., ContainerRequest]) -> list[Any]:
    """The refusals of HAMi's ``TestDevices_Fit`` that each family sharing a card by memory and cores repeats in
    its own package (Hygon, MetaX GPU and sGPU, Moore Threads), as :class:`Refusal` rows named by HAMi's case
    names. ``card(uuid, mem=…)`` is one of the family's cards (128 MiB unless ``mem``), ``ask(nums, mem_mib,
    cores=…)`` one of its requests."""
    big = [card("dev-0", mem=1280)]
    return [
        pytest.param(Refusal([card("dev-0")], ask(1, 512, cores=50), expected="1/1 CardInsufficientMemory"),
                     id="fit fail: memory not enough"),
        pytest.param(Refusal([card("dev-0", mem=1024)], ask(1, 512, cores=50), {"dev-0": DeviceUsage(0, 0, 100)},
                             expected="1/1 CardInsufficientCore"), id="fit fail: core not enough"),
        pytest.param(Refusal(big, ask(1, 512, cores=50), {"dev-0": DeviceUsage(100)},
                             expected="1/1 CardTimeSlicingExhausted"), id="fit fail: card overused"),
        pytest.param(Refusal(big, ask(1, 512, cores=100), {"dev-0": DeviceUsage(20)},
                             expected="1/1 ExclusiveDeviceAllocateConflict"), id="fit fail: card exclusively"),
        pytest.param(Refusal(big, ask(1, 512, cores=0), {"dev-0": DeviceUsage(20, 0, 100)},
                             expected="1/1 CardComputeUnitsExhausted"), id="fit fail: CardComputeUnitsExhausted"),
    ]  # fmt: skip


def check_share_usage(fit: Fit, card: Callable[..., DeviceInfo], ask: Callable[..., ContainerRequest]) -> None:
    """HAMi's "fit success:  memory percentage" and ``AddResourceUsage`` cases, which the same families repeat
    (arguments as :func:`hami_share_refusals`): 10 % of a 1280 MiB card is 128 MiB; usage adds up (15 + 50 cores,
    2000 + 1024 MiB) and the next request sees it, to the core and the MiB."""
    got = fit([card("dev-0", mem=1280)], ask(1, 0, 10, cores=20), usage={"dev-0": DeviceUsage(20, 0, 10)})
    assert isinstance(got, Decision) and got.devices == ((ContainerDevice("dev-0", 128, 20, card("x").vendor),),)
    used = {"dev-0": DeviceUsage(1, 3024, 65)}
    four = [card("dev-0", mem=4096)]
    assert isinstance(fit(four, ask(1, 1072, cores=35), usage=used), Decision)
    assert reason(fit(four, ask(1, 1072, cores=36), usage=used)) == "1/1 CardInsufficientCore"
    assert reason(fit(four, ask(1, 1073, cores=35), usage=used)) == "1/1 CardInsufficientMemory"


class Fit:
    """``fit(devices, *requests, usage=…, annotations=…)``: one pod (a container per request, no init
    containers) planned on one node holding ``devices``, with the selectors and policies ``vendors`` decode
    from ``annotations``."""

    def __init__(self, vendors: Vendors) -> None:
        self.vendors = vendors

    def __call__(
        self,
        devices: list[DeviceInfo],
        *requests: ContainerRequest,
        usage: dict[str, DeviceUsage] | None = None,
        annotations: dict[str, str] | None = None,
        cordoned: frozenset[str] = frozenset(),
        policies: Policies | None = None,
    ) -> Decision | Failure:
        vendor = devices[0].vendor if devices else ""
        inv = NodeInventory(node=NODE, vendor=vendor, devices=tuple(devices), cordoned=cordoned)
        constraints = decode_vendor_constraints(annotations or {}, self.vendors)
        pod = PodRequest(containers=requests, init_count=0)
        snapshot = NodeSnapshot(inv, usage or {})
        return plan(pod, constraints, [snapshot], policies=policies or Policies(), rules=self.vendors.rules)

    def refusal(self, case: Refusal) -> str:
        """The node reason of the :class:`Refusal` row's pod (it must be refused)."""
        return reason(self(case.devices, case.asked, usage=case.usage, annotations=case.annotations))


def reason(result: Decision | Failure) -> str:
    """The refusal text of the node (the plan must have failed)."""
    assert isinstance(result, Failure), result
    return result.reasons[NODE]


def uuids(result: Decision | Failure, container: int = 0) -> list[str]:
    """The device IDs one container was given (the plan must have succeeded)."""
    assert isinstance(result, Decision), result
    return [d.uuid for d in result.devices[container]]
