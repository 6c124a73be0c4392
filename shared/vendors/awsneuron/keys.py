"""AWS Neuron names on the wire, its limits and the ``awsneuron:`` section's names. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from vgpu_scheduler.shared.vendors.common import names_section, section_key, section_keys

SECTION: Final = "awsneuron"
ENABLE_FLAG: Final[str | None] = None
"""HAMi v2.10 initialises AWS Neuron whatever its device config holds: no flag enables it."""

NAME: Final = "AWSNeuron"
ALLOCATED_KEY: Final = "hami.io/aws-neuron-devices-allocated"
USE_UUID: Final = "aws.amazon.com/use-neuron-uuid"
NOUSE_UUID: Final = "aws.amazon.com/nouse-neuron-uuid"
ASSIGNED_IDS_KEY: Final = "AWS_NEURON_IDS"
ALLOC_TIME_KEY: Final = "NEURON_ALLOC_TIME"
RESOURCE_TYPE_KEY: Final = "NEURON_RESOURCE_TYPE"
ALLOCATED_FLAG_KEY: Final = "NEURON_ALLOCATED"
PREDICATE_NODE_KEY: Final = "aws.amazon.com/predicate-node"
INSTANCE_TYPE_LABEL: Final = "node.kubernetes.io/instance-type"
MAX_CORES_PER_DEVICE: Final = 2
"""The NeuronCores of one device we address (its core mask has two bits, also on Inferentia1, as after HAMi #2809)."""
MAX_DEVICES: Final = 2**31 - 1
MAX_CORES: Final = MAX_DEVICES * MAX_CORES_PER_DEVICE
RING_GROUPS: Final = ("inf", "Inf")
"""An instance type containing one of these is an Inferentia ring: any contiguous run of devices is connected."""
TRAINIUM_SIZES: Final = (1, 4, 8, 16)
"""How many devices a Trainium (non-``inf``) node gives one container, each run aligned on its size."""
_ID_INFIX: Final = "-" + NAME + "-"
CORE_TAG: Final = "core="
"""The usage tag of a NeuronCore a charge holds: ``core=<bit>`` (``DeviceUsage.tags``), one per bit of its mask."""


@dataclass(frozen=True, slots=True)
class AWSNeuronConfig:
    """The ``awsneuron:`` section (HAMi's ``AWSNeuronConfig``)."""

    resource_count_name: str = section_key("resourceCountName", "aws.amazon.com/neuron")
    resource_core_name: str = section_key("resourceCoreName", "aws.amazon.com/neuroncore")


def parse_config(section: object) -> AWSNeuronConfig:
    """Validate the ``awsneuron:`` section; absent keys keep HAMi's defaults. The core name registers the devices'
    cores (node capacity), so it must not be empty either. ConfigError names the key path."""
    required = {"resourceCoreName": "the devices' cores register through it"}
    return AWSNeuronConfig(
        **names_section(section, SECTION, section_keys(AWSNeuronConfig), unit="Neuron devices", required=required)
    )
