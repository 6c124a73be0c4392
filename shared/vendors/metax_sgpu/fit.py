"""MetaX sGPU ``Fit`` and scores: QoS policies, app classes, the online and MetaLink topology scores
(:class:`SgpuRules`). Pure."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import ClassVar

from vgpu_scheduler.shared.domain.model import (
    ContainerDevice,
    ContainerRequest,
    DeviceCharge,
    DeviceInfo,
    DeviceUsage,
    NodeInventory,
    NodePolicy,
    PodConstraints,
    PodDevices,
    Reason,
)
from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot
from vgpu_scheduler.shared.domain.vendor import BasicRules, DeviceRules, Take, selectors_uuid_ok
from vgpu_scheduler.shared.vendors.metax_sgpu.keys import (
    _IDLE,
    DIRECT_LINK_SCORE,
    NAME,
    OFFLINE,
    OFFLINE_SCORE,
    OFFLINE_TAG,
    ONLINE,
    ONLINE_SCORE,
    ONLINE_TAG,
    ONLY_OFFLINE_SCORE,
    QOS_POLICIES,
    QOS_TAG,
    TOPOLOGY_WEIGHT,
)
from vgpu_scheduler.shared.vendors.metax_sgpu.registration import link_zone_of, qos_of


def qos_ok(dev_qos: str, req_qos: str, cores_pct: int) -> bool:
    """HAMi's ``checkDeviceQos`` for a card already in use: a whole-card request (100 cores) needs no check;
    otherwise the card's policy must be unset or the pod's."""
    return cores_pct == 100 or dev_qos in ("", req_qos)


def held_policies(usage: DeviceUsage) -> frozenset[str]:
    """The QoS policies the pods on a card leave it in (their ``qos=`` tags; ``""`` for a whole card)."""
    return frozenset(t[len(QOS_TAG) :] for t, n in usage.tags if n > 0 and t.startswith(QOS_TAG))


def device_qos_ok(dev: DeviceInfo, usage: DeviceUsage, own: int, req_qos: str, cores_pct: int) -> bool:
    """HAMi's ``checkDeviceQos`` for a card in use, with its jittery-QoS cache read from the card's holders.

    HAMi takes the card's policy from its cache when it holds the card (the policy the last pod placed on it left
    the card in, kept until the device plugin reports it) and else from the registration; here the card's
    policies are those of the pods it holds (:func:`held_policies`), every replica reading the same, and the
    registration only when no pod on it says (only online pods, or pods recorded without tags). ``own`` counts
    the slots the pod's earlier containers took on the card: they set its policy to the pod's (HAMi's
    ``AddResourceUsage``)."""
    if cores_pct == 100:
        return True
    held = held_policies(usage)
    if held:
        return held <= {"", req_qos}
    if own > 0:
        return True
    return qos_of(dev) in ("", req_qos)


def app_class_ok(req_class: str, online: int, offline: int) -> bool:
    """HAMi's ``checkAppClass`` for a card in use running ``online`` online and ``offline`` offline pods (the
    rest unclassed): online and offline pods only join cards that run classed pods, unclassed pods only cards that
    run none, and an offline pod no card that runs an online one."""
    classed = online > 0 or offline > 0
    if classed != (req_class in (ONLINE, OFFLINE)):
        return False
    return not (online > 0 and req_class == OFFLINE)


def holder_tags(app_class: str, qos: str, whole: bool) -> tuple[str, ...]:
    """The usage tags of an sGPU pod's slots: its app class, and unless it is online the policy it leaves the card
    in (its own; ``""`` when it takes the card whole), what HAMi's ``addJitteryQos`` caches."""
    tags: list[str] = []
    if app_class in (ONLINE, OFFLINE):
        tags.append(f"app={app_class}")
    if app_class != ONLINE:
        tags.append(QOS_TAG + ("" if whole else qos.replace("|", "_")))
    return tuple(tags)


def sharing_terms(charge: DeviceCharge, app_class: str, qos: str) -> DeviceCharge:
    """An sGPU pod's charge with its :func:`holder_tags` and the rule the atomic reserve re-checks on a card in use:
    the app classes of :func:`app_class_ok` and, for a pod that is not online and does not take the card whole, no
    pod of another QoS policy; an online pod's charge is not held to the cores. The extender reserves it, and the
    informer records the same from the pod's annotations, so the two are equal byte for byte. (The registration
    fallback of :func:`device_qos_ok` is Fit's alone: a card in use whose pods name no policy runs only online
    pods, which the class rule already keeps other pods off.)"""
    refuse: tuple[str, ...]
    need: tuple[str, ...] = ()
    if app_class == ONLINE:
        refuse, need = (), (ONLINE_TAG, OFFLINE_TAG)
    elif app_class == OFFLINE:
        refuse, need = (ONLINE_TAG,), (OFFLINE_TAG,)
    else:
        refuse = (ONLINE_TAG, OFFLINE_TAG)
    if app_class != ONLINE and not charge.exclusive:
        refuse += tuple(QOS_TAG + p for p in QOS_POLICIES if p != qos)
    return replace(
        charge,
        tags=holder_tags(app_class, qos, charge.exclusive),
        refuse_tags=refuse,
        need_tags=need,
        cores_unchecked=app_class == ONLINE,
    )


def class_counts(usage: DeviceUsage) -> tuple[int, int]:
    """The online and offline pods on a card (slots held, as HAMi counts a card's ``PodInfos``)."""
    return usage.tag_count(ONLINE_TAG), usage.tag_count(OFFLINE_TAG)


def prioritize_online(
    candidates: Sequence[DeviceInfo], usages: Mapping[str, DeviceUsage], nums: int
) -> list[DeviceInfo]:
    """HAMi's ``prioritizeOnlineDevices``: cards with fewer online pods first (then fewer offline ones), cards that
    run only offline pods last (fewer first). Equal cards keep their preference order (HAMi's sort is unstable)."""
    if len(candidates) <= nums:
        return list(candidates)

    def key(dev: DeviceInfo) -> tuple[int, int, int]:
        online, offline = class_counts(usages.get(dev.id, _IDLE))
        if online == 0 and offline > 0:
            return (1, offline, 0)
        return (0, online, offline)

    return sorted(candidates, key=key)[:nums]


def score_online(devices: Sequence[Sequence[ContainerDevice]], usages: Mapping[str, DeviceUsage]) -> int:
    """HAMi's ``scoreOnlineDevices``: over the cards the pod takes (each once), −100 per offline pod on a card that
    runs only offline ones, else −20 per online pod and −2 per offline pod."""
    total = 0
    for uuid in dict.fromkeys(d.uuid for ctr in devices for d in ctr):
        online, offline = class_counts(usages.get(uuid, _IDLE))
        if offline > 0 and online == 0:
            total += ONLY_OFFLINE_SCORE * offline
        else:
            total += ONLINE_SCORE * online + OFFLINE_SCORE * offline
    return total


def prioritize_exclusive(candidates: Sequence[DeviceInfo], nums: int) -> list[DeviceInfo]:
    """HAMi's ``prioritizeExclusiveDevices``: cards grouped by MetaLink zone (zone ≤ 0: no link); the smallest
    zone holding ``nums`` cards gives them all; else cards across zones (smallest zone first), then unlinked ones.
    Zones of equal size keep the order they first appear in (HAMi's map order is random)."""
    if len(candidates) <= nums:
        return list(candidates)
    zones: dict[int, list[DeviceInfo]] = {}
    other: list[DeviceInfo] = []
    for d in candidates:
        zone = link_zone_of(d)
        if zone <= 0:
            other.append(d)
        else:
            zones.setdefault(zone, []).append(d)
    linked = sorted(zones.values(), key=len)
    for cards in linked:
        if len(cards) >= nums:
            return cards[:nums]
    out = [d for cards in linked for d in cards] + other
    return out[:nums]


def link_score(zones: Sequence[int]) -> int:
    """HAMi's ``LinkDevices.Score``: 10 for every pair of cards in one MetaLink zone (zone 0: no link)."""
    return sum(DIRECT_LINK_SCORE for i, a in enumerate(zones) for b in zones[i + 1 :] if a != 0 and a == b)


def topology_aware(devices: Sequence[Sequence[ContainerDevice]], annotated: bool) -> bool:
    """HAMi's ``topologyAwareEnable``: the pod took some card whole (100 cores) and asked for
    ``metax-tech.com/sgpu-topology-aware: true``."""
    return annotated and any(d.used_cores == 100 for ctr in devices for d in ctr)


def score_exclusive(
    devices: Sequence[Sequence[ContainerDevice]], inventory: NodeInventory, usage: Mapping[str, DeviceUsage]
) -> int:
    """HAMi's ``scoreExclusiveDevices``: with the whole cards the pod took (``allocated``), the idle cards of the
    node before it (``available``) and those it leaves idle (``rest``): ``10 × allocated − (available − allocated −
    rest)``, each term the :func:`link_score` of its cards; the MetaLink pairs the pod keeps, less those it breaks."""
    zone = {d.id: link_zone_of(d) for d in inventory.devices if d.vendor == NAME}
    taken = [d.uuid for ctr in devices for d in ctr if d.used_cores == 100]
    idle = [d.id for d in inventory.devices if d.vendor == NAME and usage.get(d.id, _IDLE).used == 0]
    allocated = link_score([zone.get(u, 0) for u in taken])
    available = link_score([zone[u] for u in idle])
    rest = link_score([zone[u] for u in idle if u not in taken])
    return 10 * allocated - (available - allocated - rest)


@dataclass(frozen=True, slots=True)
class SgpuRules(BasicRules):
    """sGPU ``Fit``: the common skeleton with HAMi's sGPU checks: the request's type is the common word, both UUID
    lists apply, a core request above 100 is read as 100 (HAMi's "core limit can't exceed 100"), a card in use
    takes only its QoS policy (:meth:`in_use_ok`), and whole cards come from one MetaLink zone
    (:meth:`select_for`). An unhealthy card reads ``CardUnhealthy``, HAMi's sGPU word."""

    unhealthy_reason: ClassVar[Reason] = Reason.CARD_UNHEALTHY

    def type_ok(self, dev: DeviceInfo, req: ContainerRequest, constraints: PodConstraints) -> bool:
        return req.type == self.name

    def uuid_ok(self, dev: DeviceInfo, constraints: PodConstraints) -> bool:
        return selectors_uuid_ok(dev, constraints.selectors(self.name))

    def take_for(self, dev: DeviceInfo, req: ContainerRequest, used_mem_mib: int, constraints: PodConstraints) -> Take:
        """An online pod takes its memory and no cores, and the cards' cores do not limit it (HAMi's Fit skips the
        core checks for it and records 0 cores); any other pod takes what it asks."""
        took = self.take(dev, req, used_mem_mib)
        if constraints.selectors(self.name).app_class == ONLINE:
            return Take(took.mem_mib, 0, took.reason, cores_checked=False)
        return took

    def in_use_ok(
        self, dev: DeviceInfo, usage: DeviceUsage, own: int, req: ContainerRequest, constraints: PodConstraints
    ) -> Reason | None:
        """Called for a card already in use (``usage`` before the pod, ``own`` slots its earlier containers took):
        ``CardAppClassMismatch`` unless :func:`app_class_ok` (the pod's own slots count as unclassed, as HAMi
        counts only other pods), then, for a pod that is not online, ``CardQosPolicyMismatch`` unless
        :func:`device_qos_ok`."""
        sel = constraints.selectors(self.name)
        if not app_class_ok(sel.app_class, *class_counts(usage)):
            return Reason.CARD_APP_CLASS_MISMATCH
        if sel.app_class == ONLINE or device_qos_ok(dev, usage, own, sel.qos_policy, req.cores_pct):
            return None
        return Reason.CARD_QOS_POLICY_MISMATCH

    def charge_terms(
        self, charge: DeviceCharge, dev: DeviceInfo, usage: DeviceUsage, constraints: PodConstraints
    ) -> DeviceCharge:
        """:func:`sharing_terms` for the pod's app class and QoS policy."""
        del dev, usage
        sel = constraints.selectors(self.name)
        return sharing_terms(charge, sel.app_class, sel.qos_policy)

    @property
    def selects_sets(self) -> bool:
        return True

    def select_for(
        self, candidates: Sequence[DeviceInfo], req: ContainerRequest, snap: NodeSnapshot, constraints: PodConstraints
    ) -> Sequence[DeviceInfo] | None:
        """Every passing card is a candidate. With more than ``nums``: an online pod takes them by
        :func:`prioritize_online`, an offline pod the first in preference order, any other whole-card request (100
        cores) takes them by MetaLink zone (:func:`prioritize_exclusive`), any other the first in preference order."""
        if len(candidates) < req.nums:
            return None
        app = constraints.selectors(self.name).app_class
        if app == ONLINE:
            return prioritize_online(candidates, snap.usage, req.nums)
        if req.cores_pct == 100 and not app:
            return prioritize_exclusive(candidates, req.nums)
        return candidates[: req.nums]

    def pod_score(
        self, snap: NodeSnapshot, devices: PodDevices, policy: NodePolicy, constraints: PodConstraints
    ) -> float:
        """HAMi's sGPU ``ScoreNode`` (+10000 × the term under binpack, −10000 × under spread): for an online pod
        :func:`score_online`, else for a pod that asked for ``metax-tech.com/sgpu-topology-aware``
        :func:`score_exclusive`; 0 for any other pod."""
        sel = constraints.selectors(self.name)
        weight = TOPOLOGY_WEIGHT if policy is NodePolicy.BINPACK else -TOPOLOGY_WEIGHT
        if sel.app_class == ONLINE and any(devices):
            return float(weight * score_online(devices, snap.usage))
        if not topology_aware(devices, sel.topology_aware):
            return 0.0
        return float(weight * score_exclusive(devices, snap.inventory, snap.usage))

    def pod_score_bound(
        self, snap: NodeSnapshot, requests: Sequence[ContainerRequest], policy: NodePolicy, constraints: PodConstraints
    ) -> float:
        """How much the term can improve a node's rank over its own score. For an online pod nothing:
        :func:`score_online` is never positive, so the term lowers a node under binpack and raises it under spread,
        worse either way; the smallest positive bound says so (0 would tell ``plan`` that the terms are all 0 and
        skip them), and the walk stops at the first node whose own score cannot reach the best total found. Else 0
        unless the pod asked for the topology score; then 10000 × the most :func:`score_exclusive` can reach on the
        node: ``10 × pairs + pairs`` with ``pairs`` the link score of all its cards in one zone."""
        del requests, policy
        sel = constraints.selectors(self.name)
        if sel.app_class == ONLINE:
            return math.ulp(0.0)
        if not sel.topology_aware:
            return 0.0
        n = sum(1 for d in snap.inventory.devices if d.vendor == NAME)
        pairs = DIRECT_LINK_SCORE * n * (n - 1) // 2
        return float(TOPOLOGY_WEIGHT * (10 * pairs + pairs))


SGPU_RULES: DeviceRules = SgpuRules(NAME)
