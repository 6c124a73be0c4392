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

The package: :mod:`.keys` (names on the wire), :mod:`.requests` (a container's request and the pod's selectors),
:mod:`.registration` (the register annotation), :mod:`.fit` (``SgpuRules``: QoS, app classes, scores), :mod:`.vendor`
(``MetaxSgpuVendor``). This module re-exports their names."""

from __future__ import annotations

from vgpu_scheduler.shared.vendors.metax_sgpu.fit import (
    SGPU_RULES,
    SgpuRules,
    app_class_ok,
    class_counts,
    device_qos_ok,
    held_policies,
    holder_tags,
    link_score,
    prioritize_exclusive,
    prioritize_online,
    qos_ok,
    score_exclusive,
    score_online,
    sharing_terms,
    topology_aware,
)
from vgpu_scheduler.shared.vendors.metax_sgpu.keys import *  # noqa: F403  (every name on the wire, re-exported)
from vgpu_scheduler.shared.vendors.metax_sgpu.registration import (
    decode_devices_register,
    device_mode,
    link_zone_of,
    qos_of,
    registration_value,
)
from vgpu_scheduler.shared.vendors.metax_sgpu.requests import (
    qos_selectors,
    sgpu_request,
)
from vgpu_scheduler.shared.vendors.metax_sgpu.vendor import (
    MetaxSgpuVendor,
    metax_allocated_value,
)

__all__ = [
    "SGPU_RULES",
    "MetaxSgpuVendor",
    "SgpuRules",
    "app_class_ok",
    "class_counts",
    "decode_devices_register",
    "device_mode",
    "device_qos_ok",
    "held_policies",
    "holder_tags",
    "link_score",
    "link_zone_of",
    "metax_allocated_value",
    "prioritize_exclusive",
    "prioritize_online",
    "qos_of",
    "qos_ok",
    "qos_selectors",
    "registration_value",
    "score_exclusive",
    "score_online",
    "sgpu_request",
    "sharing_terms",
    "topology_aware",
]
