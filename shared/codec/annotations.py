"""Every annotation key, label key, label value and resource name of the HAMi protocol we read or write.

Byte-exact to ``docs/hami-wire.md`` (section numbers in the comments). The NVIDIA resource names are
HAMi's defaults; the effective names come from :class:`shared.domain.model.NvidiaConfig`.
"""

from __future__ import annotations

from typing import Final

# --- node annotations (§2) -----------------------------------------------------------------------
NODE_NVIDIA_REGISTER: Final = "hami.io/node-nvidia-register"
"""Device inventory written by the device plugin: JSON (v2.8+) or colon format (≤ v2.7) (§2.1)."""
NODE_NVIDIA_SCORE: Final = "hami.io/node-nvidia-score"
"""Topology pair scores between GPUs, JSON (§2.3)."""
NODE_HANDSHAKE: Final = "hami.io/node-handshake"
"""NVIDIA liveness handshake: ``Requesting_<t>`` / ``Reported <t>`` / ``Deleted_<t>`` (§2.2)."""
NODE_HANDSHAKE_PREFIX: Final = "hami.io/node-handshake-"
"""Other vendors append their suffix, e.g. ``hami.io/node-handshake-dcu`` (§9)."""
NODE_LOCK: Final = "hami.io/mutex.lock"
"""The node lock shared by every vendor: ``<RFC3339>,<ns>,<name>`` (§4.1)."""
DEVICE_CORDON: Final = "hami.io/device-cordon"
"""Comma list of GPU UUIDs excluded from new allocations (§2.4)."""
SCHEDULER_ROLE_LABEL: Final = "hami.io/scheduler-role"
"""Pod label on HAMi scheduler replicas: ``leader`` / ``follower`` (§10.3)."""
SCHEDULER_ROLE_LEADER: Final = "leader"
SCHEDULER_ROLE_FOLLOWER: Final = "follower"

# --- pod annotations written by the scheduler (§3) -------------------------------------------
VGPU_NODE: Final = "hami.io/vgpu-node"
"""Chosen node. Also written as a pod *label* with the same key and value."""
VGPU_NODE_LABEL: Final = VGPU_NODE
VGPU_TIME: Final = "hami.io/vgpu-time"
"""Unix seconds as a decimal string."""
DEVICES_TO_ALLOCATE: Final = "hami.io/vgpu-devices-to-allocate"
"""Pod device list; consumed and rewritten by the device plugin (§3.1)."""
DEVICES_ALLOCATED: Final = "hami.io/vgpu-devices-allocated"
"""Pod device list, never modified after the scheduler writes it: the accounting source of truth."""
MIG_ALLOCATIONS: Final = "hami.io/vgpu-mig-allocations"
"""Dynamic-MIG placements, JSON (§7.1)."""
BIND_PHASE: Final = "hami.io/bind-phase"
"""``allocating`` (scheduler) then ``success`` / ``failed`` (device plugin); see ``BindPhase``."""
BIND_TIME: Final = "hami.io/bind-time"
"""Unix seconds as a decimal string."""

# --- pod annotations a user may set (§1.4, §6.1) --------------------------------------------
NODE_SCHEDULER_POLICY: Final = "hami.io/node-scheduler-policy"
GPU_SCHEDULER_POLICY: Final = "hami.io/gpu-scheduler-policy"
DEVICE_SCORING_WEIGHTS: Final = "hami.io/device-scoring-weights"
USE_GPUTYPE: Final = "nvidia.com/use-gputype"
NOUSE_GPUTYPE: Final = "nvidia.com/nouse-gputype"
USE_GPUUUID: Final = "nvidia.com/use-gpuuuid"
NOUSE_GPUUUID: Final = "nvidia.com/nouse-gpuuuid"
NUMA_BIND: Final = "nvidia.com/numa-bind"
VGPU_MODE: Final = "nvidia.com/vgpu-mode"

# --- webhook opt-out (§5.3) ----------------------------------------------------------------------
WEBHOOK: Final = "hami.io/webhook"
"""Label (on namespaces and pods) excluding objects from the admission webhook when set to ``ignore``."""
WEBHOOK_IGNORE: Final = "ignore"

# --- gang scheduling (§4.2) ------------------------------------------------------------------
POD_GROUP_LABEL: Final = "scheduling.x-k8s.io/pod-group"
"""A non-empty value marks a PodGroup member (node-lock contention is retried)."""

# --- NVIDIA resource names, HAMi defaults (§1.1) -----------------------------------------------
RESOURCE_GPU: Final = "nvidia.com/gpu"
RESOURCE_GPUMEM: Final = "nvidia.com/gpumem"
RESOURCE_GPUMEM_PERCENTAGE: Final = "nvidia.com/gpumem-percentage"
RESOURCE_GPUCORES: Final = "nvidia.com/gpucores"
RESOURCE_PRIORITY: Final = "nvidia.com/priority"

QUOTA_LIMITS_PREFIX: Final = "limits."
"""HAMi honours the ResourceQuota keys ``limits.<memory resource>`` and ``limits.<core resource>`` (§8)."""
