"""MetaX sGPUs as a vendor (HAMi's ``pkg/device/metax``, the shared half ``sdevice.go``): common word
``Metax-SGPU``, pure. Built by :func:`shared.vendors.metax.build` beside the whole GPUs (one ``metax:`` section).

What an sGPU pod and node look like on the wire (docs/vendors/metax.md):

* resources ``metax-tech.com/sgpu`` (the number of cards a container shares), ``metax-tech.com/vcore`` (percent of
  each card's compute, default 100) and ``metax-tech.com/vmemory`` (a bare number is GiB, a number with a unit is
  bytes; absent: the whole card), all read from the **limits** only (HAMi's ``GenerateResourceRequests``);
* registration ``metax-tech.com/node-gpu-devices``, a JSON array of cards (``uuid``, ``totalDevCount`` slots,
  ``totalCompute``, ``totalVRam`` MiB, ``numa``, ``healthy``, the card's current ``qosPolicy`` and MetaLink
  ``linkZone``); no handshake: the node is live while it lists a card. The QoS policy and link zone are kept as
  the device's mode ``qos=<policy> link=<zone>``;
* pod device lists ``hami.io/metax-sgpu-devices-to-allocate`` / ``-allocated`` (the same value), plus
  ``metax-tech.com/gpu-devices-allocated`` (JSON ``[[{"uuid", "compute", "vRam"}]]`` per container) and
  ``metax-tech.com/predicate-time``; the shared node lock ``hami.io/mutex.lock``; UUID selectors
  ``metax-tech.com/use-gpuuuid`` / ``nouse-gpuuuid``;
* the pod annotation ``metax-tech.com/sgpu-qos-policy`` (``best-effort``, ``fixed-share`` or ``burst-share``; the
  webhook writes ``best-effort`` when it is absent, unless the pod is online): a card already in use takes only
  pods of its current policy, unless the pod takes it whole (100 cores);
* the pod annotation ``metax-tech.com/sgpu-app-class`` (``online`` / ``offline``): classed and unclassed pods do not
  share a card, offline pods stay off cards that run online ones (:func:`app_class_ok`); online pods take no cores
  and prefer cards with fewer online pods (:func:`prioritize_online`, :func:`score_online`);
* whole-card requests (100 cores) for several cards take them from one MetaLink zone when they can.

The app class and QoS policy of the pods on a card come from the card's usage tags (:func:`holder_tags`: every
sGPU charge adds its pod's, the informer records the same from the pod's annotations), so every replica sees them;
a card's QoS policy is its pods' (:func:`device_qos_ok`, in place of HAMi's in-memory jittery-QoS cache), and the
atomic reserve re-checks both rules (:meth:`SgpuRules.charge_terms`). A pod with
``metax-tech.com/sgpu-topology-aware: true`` that takes cards whole gets HAMi's MetaLink node score
(:func:`score_exclusive`), an online pod the online score, through the rules' ``pod_score`` hook.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any, Final

from vgpu_scheduler.shared.codec._go import fail
from vgpu_scheduler.shared.codec.quantity import parse_quantity
from vgpu_scheduler.shared.codec.resources import (
    ResourceRequestError,
    container_label,
    container_lists,
)
from vgpu_scheduler.shared.domain.model import (
    EMPTY_REQUEST,
    MEM_PCT_UNSET,
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
    Selectors,
)
from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot
from vgpu_scheduler.shared.domain.vendor import BasicRules, DeviceRules, Take
from vgpu_scheduler.shared.errors import DecodeError
from vgpu_scheduler.shared.vendors.base import ResourceNames
from vgpu_scheduler.shared.vendors.common import uuid_selectors_ok
from vgpu_scheduler.shared.vendors.described import DescribedVendor, Description, Liveness
from vgpu_scheduler.shared.vendors.simple import uuid_selectors

NAME: Final = "Metax-SGPU"
"""HAMi's common word (and device type) of MetaX sGPUs."""

REGISTER_KEY: Final = "metax-tech.com/node-gpu-devices"
TO_ALLOCATE_KEY: Final = "hami.io/metax-sgpu-devices-to-allocate"
ALLOCATED_KEY: Final = "hami.io/metax-sgpu-devices-allocated"
METAX_ALLOCATED_KEY: Final = "metax-tech.com/gpu-devices-allocated"
PREDICATE_TIME_KEY: Final = "metax-tech.com/predicate-time"
USE_UUID: Final = "metax-tech.com/use-gpuuuid"
NOUSE_UUID: Final = "metax-tech.com/nouse-gpuuuid"
QOS_POLICY_KEY: Final = "metax-tech.com/sgpu-qos-policy"
TOPOLOGY_AWARE_KEY: Final = "metax-tech.com/sgpu-topology-aware"
APP_CLASS_KEY: Final = "metax-tech.com/sgpu-app-class"

BEST_EFFORT: Final = "best-effort"
FIXED_SHARE: Final = "fixed-share"
BURST_SHARE: Final = "burst-share"
QOS_POLICIES: Final = (BEST_EFFORT, FIXED_SHARE, BURST_SHARE)
ONLINE: Final = "online"
OFFLINE: Final = "offline"

_GO_TRUE: Final = frozenset({"1", "t", "T", "TRUE", "true", "True"})
"""What Go's ``strconv.ParseBool`` reads as true (HAMi's ``topologyAwareEnable``)."""
DIRECT_LINK_SCORE: Final = 10
"""HAMi's ``DirectLinkScore``: two cards of one MetaLink zone."""
TOPOLOGY_WEIGHT: Final = 10000
"""HAMi's sGPU ``ScoreNode`` weight (negated under spread)."""

MEMORY_FACTOR: Final = 1024
"""A bare ``vmemory`` number is GiB: this many MiB each (HAMi's ``MemoryFactor``)."""
DEFAULT_CORES: Final = 100
INT32_MAX: Final = 2**31 - 1
_MIB: Final = 1024 * 1024
_IDLE: Final = DeviceUsage()

MSG_QOS: Final = f"must be set one of [{BEST_EFFORT}, {FIXED_SHARE}, {BURST_SHARE}]"
"""HAMi's message (after the key, which the error names first)."""
MSG_APP_CLASS: Final = f"must be set one of [{ONLINE}, {OFFLINE}]"

ONLINE_TAG: Final = f"app={ONLINE}"
"""The usage tag of a slot held by an online pod (``DeviceUsage.tags``)."""
OFFLINE_TAG: Final = f"app={OFFLINE}"
QOS_TAG: Final = "qos="
"""The usage tag of a slot held by a pod that is not online: ``qos=<the policy it leaves the card in>`` (the pod's
own, or ``qos=`` for a whole card: HAMi's jittery-QoS cache entry for the card)."""
ONLINE_SCORE: Final = -20
"""HAMi's ``scoreOnlineDevices``: per online pod on a card the pod takes…"""
OFFLINE_SCORE: Final = -2
"""…per offline pod on a card that also runs online ones…"""
ONLY_OFFLINE_SCORE: Final = -100
"""…and per offline pod on a card that runs only offline ones."""


# ------------------------------------------------------------------------------------------------------------
# Requests
# ------------------------------------------------------------------------------------------------------------


def _has_unit(raw: Any) -> bool:
    """HAMi's test: the quantity's text holds a letter (``16Gi``, ``1k``); a bare number does not."""
    return isinstance(raw, str) and any(c.isascii() and c.isalpha() for c in raw)


def sgpu_request(
    container: Mapping[str, Any], what: str, count_name: str, core_name: str, memory_name: str
) -> ContainerRequest:
    """HAMi's ``GenerateResourceRequests`` for sGPUs: from the limits only, ``count`` cards, ``vcore`` percent of
    each (default 100), ``vmemory`` MiB of each (a bare number × 1024, a number with a unit in bytes ÷ 2²⁰; absent
    or 0: 100 % of the card). Values HAMi drops without a word (not whole, negative, beyond int32, a memory below
    1 MiB) or leaves Pending for ever (``vcore`` above 100: ``CardInsufficientCore`` on every card) raise
    :class:`ResourceRequestError` naming the container and what to write."""
    limits, _ = container_lists(container, what)
    if count_name not in limits:
        return EMPTY_REQUEST
    label = container_label(container, what)
    problems: list[str] = []

    def whole(name: str, hint: str) -> tuple[int | None, Any]:
        raw = limits[name]
        try:
            q = parse_quantity(raw, f"{label} {name}")
        except DecodeError:
            problems.append(f"{label}: {name} {raw!r} is not a quantity; {hint}")
            return None, raw
        return _whole_or_problem(q, raw, name, hint), raw

    def _whole_or_problem(q: Fraction, raw: Any, name: str, hint: str) -> int | None:
        if q.denominator != 1 or q < 0:
            problems.append(f"{label}: {name} {raw!r} is not a whole number ≥ 0; {hint}")
            return None
        return q.numerator

    count, _ = whole(count_name, "write the number of cards, such as 1")
    if count is not None and count > INT32_MAX:
        problems.append(f"{label}: {count_name} {count} is out of range; write at most {INT32_MAX}")
    cores = DEFAULT_CORES
    if core_name in limits:
        value, _ = whole(core_name, "write a percentage of one card's compute, such as 50")
        if value is not None and value > 100:
            problems.append(f"{label}: {core_name} {value} is more than a whole card (100); write at most 100")
        elif value is not None:
            cores = value
    mem_mib = 0
    if memory_name in limits:
        value, raw = whole(memory_name, "write GiB as a bare number (16) or a size with a unit (16Gi)")
        if value is not None:
            if _has_unit(raw):
                mem_mib = value // _MIB
                if value and not mem_mib:
                    problems.append(f"{label}: {memory_name} {raw!r} is less than 1 MiB; write a size such as 1Gi")
            else:
                mem_mib = value * MEMORY_FACTOR
            if mem_mib > INT32_MAX:
                problems.append(f"{label}: {memory_name} {raw!r} is out of range (more than {INT32_MAX} MiB)")
    if problems:
        raise ResourceRequestError(problems)
    if not count:
        return EMPTY_REQUEST
    return ContainerRequest(
        nums=count, mem_mib=mem_mib, mem_pct=100 if mem_mib == 0 else MEM_PCT_UNSET, cores_pct=cores, type=NAME
    )


def qos_selectors(annotations: Mapping[str, str]) -> Selectors:
    """The pod's UUID lists, app class and QoS policy for sGPUs. An app class other than ``online``/``offline``
    and, for a pod that is not online, a QoS policy other than HAMi's three are DecodeErrors (HAMi's messages). An
    online pod's QoS policy is not read (HAMi admits and schedules it whatever it says)."""
    sel = uuid_selectors(annotations, USE_UUID, NOUSE_UUID)
    app = annotations.get(APP_CLASS_KEY)
    if app is not None and app not in (ONLINE, OFFLINE):
        fail(APP_CLASS_KEY, MSG_APP_CLASS, str(app))
    app_class = app or ""
    topology = annotations.get(TOPOLOGY_AWARE_KEY)
    aware = isinstance(topology, str) and topology in _GO_TRUE
    qos = annotations.get(QOS_POLICY_KEY) if app_class != ONLINE else None
    if qos is not None and qos not in QOS_POLICIES:
        fail(QOS_POLICY_KEY, MSG_QOS, str(qos))
    if qos is None and not aware and not app_class:
        return sel
    return Selectors(
        use_uuids=sel.use_uuids,
        nouse_uuids=sel.nouse_uuids,
        qos_policy=qos or "",
        topology_aware=aware,
        app_class=app_class,
    )


# ------------------------------------------------------------------------------------------------------------
# Registration
# ------------------------------------------------------------------------------------------------------------


def device_mode(qos: str, link_zone: int) -> str:
    """The device's mode: its registered QoS policy and MetaLink zone (``qos=best-effort link=2``)."""
    return f"qos={qos} link={link_zone}"


def qos_of(dev: DeviceInfo) -> str:
    """The QoS policy the card registered (``""`` when none)."""
    for part in dev.mode.split(" "):
        if part.startswith("qos="):
            return part[4:]
    return ""


def link_zone_of(dev: DeviceInfo) -> int:
    """The card's MetaLink zone (0: none)."""
    for part in dev.mode.split(" "):
        if part.startswith("link="):
            try:
                return int(part[5:])
            except ValueError:
                return 0
    return 0


def _int32(item: Mapping[str, Any], key: str, where: str, value: str) -> int:
    v = item.get(key, 0)
    if isinstance(v, bool) or not isinstance(v, int) or not -(2**31) <= v <= INT32_MAX:
        fail(f"{where}.{key}", "expected a whole number within int32", value)
    return v


def decode_devices_register(value: str) -> tuple[DeviceInfo, ...]:
    """``metax-tech.com/node-gpu-devices`` → the node's cards (HAMi's ``convertMetaxSDeviceToHAMIDevice``: index by
    position, ``totalDevCount`` slots, ``totalVRam`` MiB, ``totalCompute`` cores). A value that is not a JSON array
    of objects with a string ``uuid``, a number field out of int32, or a ``qosPolicy`` or ``uuid`` with a space or
    ``,:;`` is a DecodeError."""
    try:
        items = json.loads(value)
    except ValueError:
        fail(REGISTER_KEY, "expected a JSON array of cards", value)
    if not isinstance(items, list):
        fail(REGISTER_KEY, "expected a JSON array of cards", value)
    out: list[DeviceInfo] = []
    for i, item in enumerate(items):
        where = f"{REGISTER_KEY}[{i}]"
        if not isinstance(item, Mapping):
            fail(where, "expected an object", value)
        uuid = item.get("uuid")
        if not isinstance(uuid, str) or not uuid or any(c in uuid for c in " ,:;"):
            fail(f"{where}.uuid", "expected a card UUID (a string without spaces or ,:;)", value)
        qos = item.get("qosPolicy", "")
        if not isinstance(qos, str) or any(c in qos for c in " ,:;"):
            fail(f"{where}.qosPolicy", "expected a QoS policy name", value)
        healthy = item.get("healthy", False)
        if not isinstance(healthy, bool):
            fail(f"{where}.healthy", "expected true or false", value)
        out.append(
            DeviceInfo(
                id=uuid,
                index=i,
                count=_int32(item, "totalDevCount", where, value),
                devmem_mib=_int32(item, "totalVRam", where, value),
                devcore=_int32(item, "totalCompute", where, value),
                type=NAME,
                numa=_int32(item, "numa", where, value),
                mode=device_mode(qos, _int32(item, "linkZone", where, value)),
                health=healthy,
                vendor=NAME,
            )
        )
    return tuple(out)


def registration_value(devices: Sequence[DeviceInfo]) -> str:
    """The register value the MetaX device plugin writes for ``devices`` (the simulator's nodes)."""
    items = [
        {
            "uuid": d.id,
            "model": NAME,
            "totalDevCount": d.count,
            "totalCompute": d.devcore,
            "totalVRam": d.devmem_mib,
            "numa": d.numa,
            "healthy": d.health,
            "qosPolicy": qos_of(d),
            "linkZone": link_zone_of(d),
        }
        for d in devices
    ]
    return json.dumps(items, separators=(",", ":"))


# ------------------------------------------------------------------------------------------------------------
# Fit
# ------------------------------------------------------------------------------------------------------------


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
    lists apply, a core request above 100 is not capped (HAMi refuses it: ``CardInsufficientCore``), a card in use
    takes only its QoS policy (:meth:`in_use_ok`), and whole cards come from one MetaLink zone
    (:meth:`select_for`)."""

    clamp_cores: bool = False

    def type_ok(self, dev: DeviceInfo, req: ContainerRequest, constraints: PodConstraints) -> bool:
        return req.type == self.name

    def uuid_ok(self, dev: DeviceInfo, constraints: PodConstraints) -> bool:
        return uuid_selectors_ok(dev, constraints.selectors(self.name))

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
        self,
        snap: NodeSnapshot,
        devices: Sequence[Sequence[ContainerDevice]],
        policy: NodePolicy,
        constraints: PodConstraints,
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


# ------------------------------------------------------------------------------------------------------------
# The vendor
# ------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MetaxSgpuVendor(DescribedVendor):
    """MetaX sGPUs (see the module docstring). The names come from the ``metax:`` section."""

    description = Description(
        name=NAME,
        rules=SGPU_RULES,
        allocated_key=ALLOCATED_KEY,
        to_allocate_key=TO_ALLOCATE_KEY,
        register_key=REGISTER_KEY,
        use_uuid=USE_UUID,
        nouse_uuid=NOUSE_UUID,
        decode_register=decode_devices_register,
        liveness=Liveness.LISTED,
    )

    count_name: str = "metax-tech.com/sgpu"
    memory_name: str = "metax-tech.com/vmemory"
    core_name: str = "metax-tech.com/vcore"

    @property
    def resources(self) -> ResourceNames:
        return ResourceNames(
            count=self.count_name, memory=self.memory_name, cores=self.core_name, memory_unit_mib=MEMORY_FACTOR
        )

    # ---- requests ----------------------------------------------------------------------------------------------

    def container_request(self, container: Mapping[str, Any], what: str) -> ContainerRequest:
        return sgpu_request(container, what, self.count_name, self.core_name, self.memory_name)

    def mutate_container(self, container: dict[str, Any], where: str) -> bool:
        """HAMi's ``MutateAdmission`` for the container: no edit; ours when the count is in the limits (validated
        here). The QoS default is :meth:`mutate_pod`'s."""
        limits, _ = container_lists(container, where)
        if self.count_name not in limits:
            return False
        self.container_request(container, where)
        return True

    def mutate_pod(self, pod: dict[str, Any], where: str) -> None:
        """HAMi's ``MutateAdmission`` pod edit: a pod with an sGPU container and no
        ``metax-tech.com/sgpu-qos-policy`` gets ``best-effort``, unless it is online. A pod with an app class must
        ask for exactly one card in each sGPU container (HAMi: "app-class pod must request single device"): a
        :class:`ResourceRequestError` naming the container otherwise. (A bad policy or app class is refused
        through :meth:`selectors`, which the webhook and ``/filter`` both read.)"""
        del where
        spec = pod.get("spec") or {}
        asking = [
            (key, i, ctr)
            for key in ("initContainers", "containers")
            for i, ctr in enumerate(spec.get(key) or ())
            if isinstance(ctr, Mapping)
            and isinstance(ctr.get("resources"), Mapping)
            and isinstance(ctr["resources"].get("limits"), Mapping)
            and self.count_name in ctr["resources"]["limits"]
        ]
        if not asking:
            return
        meta = pod.setdefault("metadata", {})
        annotations = meta.get("annotations")
        if not isinstance(annotations, dict):
            annotations = meta["annotations"] = {}
        app = annotations.get(APP_CLASS_KEY)
        if app in (ONLINE, OFFLINE):
            problems = [
                f"{container_label(ctr, f'spec.{key}[{i}]')}: {self.count_name} "
                f"{ctr['resources']['limits'][self.count_name]!r} is not one card, and a pod with {APP_CLASS_KEY}: "
                f"{app} must ask for exactly one; write 1"
                for key, i, ctr in asking
                if self.container_request(ctr, f"spec.{key}[{i}]").nums != 1
            ]
            if problems:
                raise ResourceRequestError(problems)
        if app != ONLINE:
            annotations.setdefault(QOS_POLICY_KEY, BEST_EFFORT)

    def selectors(self, annotations: Mapping[str, str]) -> Selectors:
        return qos_selectors(annotations)

    def recorded_charge(self, annotations: Mapping[str, Any], charge: DeviceCharge) -> DeviceCharge:
        """A placed pod's charge on a card as the informer records it: :func:`sharing_terms` read from the pod's
        annotations (what the reservation had). Never raises: an app class other than ``online``/``offline`` reads
        as none, an online pod's policy is not read."""
        app = annotations.get(APP_CLASS_KEY)
        app_class = app if app in (ONLINE, OFFLINE) else ""
        qos = annotations.get(QOS_POLICY_KEY)
        return sharing_terms(charge, app_class, qos if isinstance(qos, str) and app_class != ONLINE else "")

    # ---- registration ------------------------------------------------------------------------------------------

    def node_registration(self, devices: Sequence[DeviceInfo]) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
        """What the MetaX device plugin writes on its Node: the JSON register value and the count of slots."""
        if not devices:
            return {}, {}, {}
        return {REGISTER_KEY: registration_value(devices)}, {self.count_name: str(sum(d.count for d in devices))}, {}

    # ---- pod annotations ---------------------------------------------------------------------------------------

    def extra_pod_annotations(self, devices: PodDevices, now_unix: int) -> Mapping[str, str]:
        """HAMi's ``PatchAnnotations`` for sGPUs besides the device lists: the plugin's own JSON list
        (``metax-tech.com/gpu-devices-allocated``, ``compute`` and ``vRam`` left out when 0, as Go's
        ``omitempty``) and ``metax-tech.com/predicate-time`` (the bind's time in nanoseconds, whole seconds)."""
        if not any(devices):
            return {}
        return {
            METAX_ALLOCATED_KEY: metax_allocated_value(devices),
            PREDICATE_TIME_KEY: str(now_unix * 1_000_000_000),
        }


def metax_allocated_value(devices: PodDevices) -> str:
    """``metax-tech.com/gpu-devices-allocated``: one list per container of ``{"uuid", "compute", "vRam"}``."""
    out: list[list[dict[str, Any]]] = []
    for ctr in devices:
        entries: list[dict[str, Any]] = []
        for d in ctr:
            entry: dict[str, Any] = {"uuid": d.uuid}
            if d.used_cores:
                entry["compute"] = d.used_cores
            if d.used_mem_mib:
                entry["vRam"] = d.used_mem_mib
            entries.append(entry)
        out.append(entries)
    return json.dumps(out, separators=(",", ":"))
