"""AWS Neuron devices (Inferentia, Trainium) as a vendor (HAMi's ``pkg/device/awsneuron``): common word
``AWSNeuron``, pure.

What a Neuron pod and node look like on the wire (docs/vendors/awsneuron.md):

* resources ``aws.amazon.com/neuron`` (whole Neuron devices) and ``aws.amazon.com/neuroncore`` (NeuronCores);
  the count wins when a container names both. A core request of 1 or 2 takes that many cores of one device; more
  must be a multiple of 2 and takes whole devices (``cores / 2`` of them). A device request takes the whole device;
* registration from **node capacity** (AWS's own Neuron device plugin advertises both resources):
  ``capacity[neuron]`` devices ``<node>-AWSNeuron-<i>``, each with ``capacity[neuroncore] / capacity[neuron]``
  slots; the node's ``node.kubernetes.io/instance-type`` label (kept as the devices' ``mode``) decides how several
  devices are chosen. At most two cores of a device are addressable: a device's cores are the bit mask ``0b11``
  (``0b1`` for a one-core device), also on a four-core Inferentia1, as HAMi #2809 made it just after v2.10.0
  (v2.10.0 registers ``0b1111`` there and over-commits the device: docs/vendors/awsneuron.md, Inferentia1);
* a container's cores are a **contiguous** run of free bits of one device's mask, recorded as that mask in the
  pod's device entry (``<id>,AWSNeuron,0,<mask>:``) under ``hami.io/aws-neuron-devices-allocated`` (HAMi writes no
  to-allocate key for it). Several devices are a contiguous run by index: on an ``inf`` instance any run (a ring),
  otherwise (Trainium) only 1, 4, 8 or 16 devices, aligned on a multiple of their number;
  no run: ``NumaNotFit``;
* the AWS scheduler-extension annotations the device plugin reads: ``AWS_NEURON_IDS`` (device indexes, or core
  indexes ``stride × index + bit`` for core requests, with ``NEURON_RESOURCE_TYPE`` = the core resource),
  ``NEURON_ALLOC_TIME`` (the bind's time, nanoseconds), ``NEURON_ALLOCATED: "false"`` and
  ``aws.amazon.com/predicate-node``; **no node lock**;
* selectors ``aws.amazon.com/use-neuron-uuid`` / ``aws.amazon.com/nouse-neuron-uuid`` (both apply).

On by default, as in HAMi (:data:`ENABLE_FLAG` is None).

The package: :mod:`.keys` (names on the wire, the section), :mod:`.fit` (core masks, device runs, the rules),
:mod:`.requests` (devices from capacity, a container's request), :mod:`.vendor` (the vendor and ``build``). This
module re-exports their names."""

from __future__ import annotations

from vgpu_scheduler.shared.vendors.awsneuron.fit import (
    AWSNEURON_RULES,
    AWSNeuronRules,
    bits,
    contiguous_run,
    core_mask,
    core_tags,
    core_terms,
    cores_in_use,
    device_index,
    free_run,
    is_ring,
    tagged_cores,
)
from vgpu_scheduler.shared.vendors.awsneuron.keys import *  # noqa: F403  (every name on the wire, re-exported)
from vgpu_scheduler.shared.vendors.awsneuron.keys import ENABLE_FLAG, SECTION
from vgpu_scheduler.shared.vendors.awsneuron.requests import (
    devices_from_capacity,
    split_cores,
)
from vgpu_scheduler.shared.vendors.awsneuron.vendor import (
    AWSNeuronVendor,
    build,
)

__all__ = [
    "AWSNEURON_RULES",
    "ENABLE_FLAG",
    "SECTION",
    "AWSNeuronRules",
    "AWSNeuronVendor",
    "bits",
    "build",
    "contiguous_run",
    "core_mask",
    "core_tags",
    "core_terms",
    "cores_in_use",
    "device_index",
    "devices_from_capacity",
    "free_run",
    "is_ring",
    "split_cores",
    "tagged_cores",
]
