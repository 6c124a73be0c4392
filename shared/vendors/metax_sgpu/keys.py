"""MetaX sGPU names on the wire (pod and node annotation keys, QoS policies, app classes) and the constants of its
scores. Pure."""

from __future__ import annotations

from typing import Final

from vgpu_scheduler.shared.domain.model import DeviceUsage

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
