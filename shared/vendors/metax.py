"""MetaX GPUs as a vendor (HAMi's ``pkg/device/metax``, the whole-GPU half ``device.go``): common word
``Metax-GPU``, pure.

What a MetaX GPU pod and node look like on the wire (docs/vendors/metax.md):

* one resource, ``metax-tech.com/gpu`` (the number of whole GPUs; renamed by the ``metax:`` section's
  ``resourceCountName``); every GPU asked for is taken whole: 100 % of its memory and 100 cores;
* registration from **node capacity**: ``capacity[metax-tech.com/gpu]`` GPUs ``<node>-metax-<i>``, each with one
  slot, 65536 MiB and 100 cores; no handshake (HAMi's ``CheckHealth`` only asks that the capacity be above 0);
* pod device lists ``hami.io/metax-gpu-devices-to-allocate`` and ``hami.io/metax-gpu-devices-allocated`` (the same
  value), **no node lock**; no UUID selectors (HAMi's ``checkUUID`` accepts every GPU);
* the webhook makes no edit: a container is ours when the count is in its limits.

HAMi's ``ScoreNode`` for MetaX reads the node's ``metax-tech.com/gpu.topology.losses`` (binpack) or
``…scores`` (spread) annotation, a JSON map from a number of GPUs to a figure, and adds ``2000 - figure`` for the
number of GPUs the pod got. :func:`score_node` restates it; the registrar keeps both tables in the inventory's
``pair_scores`` under the annotations' keys (:func:`topology_tables`, as Ascend keeps its NetworkIDs there) and the
plan adds the figure through the rules' ``pod_score`` hook (the pod is fitted on every node that could win). The sGPU
half (``sdevice.go``: ``metax-tech.com/sgpu``, QoS policies) is :mod:`shared.vendors.metax_sgpu`, built here from
the same section.

On by default, as in HAMi (:data:`ENABLE_FLAG` is None).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from vgpu_scheduler.shared.domain.model import ContainerRequest, DeviceInfo, NodePolicy, PodConstraints, PodDevices
from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot
from vgpu_scheduler.shared.domain.vendor import BasicRules, DeviceRules
from vgpu_scheduler.shared.vendors.base import NodeLockKind
from vgpu_scheduler.shared.vendors.common import names_section, section_key, section_keys
from vgpu_scheduler.shared.vendors.counted import Counted, CountedVendor
from vgpu_scheduler.shared.vendors.description import Description, PodLists
from vgpu_scheduler.shared.vendors.metax_sgpu import MetaxSgpuVendor

SECTION: Final = "metax"
ENABLE_FLAG: Final[str | None] = None
"""HAMi v2.10 initialises MetaX whatever its device config holds."""

NAME: Final = "Metax-GPU"
"""HAMi's common word: the ``type`` of MetaX GPU requests and pod device entries, ``DeviceInfo.vendor``."""

LOSSES_KEY: Final = "metax-tech.com/gpu.topology.losses"
SCORES_KEY: Final = "metax-tech.com/gpu.topology.scores"
GPU_MEMORY_MIB: Final = 65536
"""The memory HAMi gives every registered MetaX GPU (the capacity carries only the count)."""
GPU_CORES: Final = 100
GPU_SLOTS: Final = 1
"""A MetaX GPU is registered with one slot: one container per GPU."""
_ID_INFIX: Final = "-metax-"
_SCORE_BASE: Final = 2000.0


@dataclass(frozen=True, slots=True)
class MetaxConfig:
    """The ``metax:`` section (HAMi's ``MetaxConfig``, defaults of its ``--metax-*`` flags): the whole GPUs' count
    and the sGPUs' count, memory and core names."""

    resource_count_name: str = section_key("resourceCountName", "metax-tech.com/gpu")
    resource_vcount_name: str = section_key("resourceVCountName", "metax-tech.com/sgpu")
    resource_vmemory_name: str = section_key("resourceVMemoryName", "metax-tech.com/vmemory")
    resource_vcore_name: str = section_key("resourceVCoreName", "metax-tech.com/vcore")


def parse_config(section: object) -> MetaxConfig:
    """Validate the ``metax:`` section; absent keys keep HAMi's defaults. ConfigError names the key path."""
    return MetaxConfig(**names_section(section, SECTION, section_keys(MetaxConfig), unit="GPUs"))


def build(section: object) -> tuple[MetaxVendor | MetaxSgpuVendor, ...]:
    """The vendors the ``metax:`` section configures: the whole GPUs and the sGPUs (``None`` or ``{}``: HAMi's
    defaults)."""
    config = parse_config(section)
    sgpu = MetaxSgpuVendor(
        count_name=config.resource_vcount_name,
        memory_name=config.resource_vmemory_name,
        core_name=config.resource_vcore_name,
    )
    return (MetaxVendor(config), sgpu)


# ------------------------------------------------------------------------------------------------------------
# Fit and score
# ------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MetaxRules(BasicRules):
    """MetaX GPU ``Fit``: the common skeleton; ``checkType`` compares the request's type with the common word and
    ``checkUUID`` accepts every GPU (HAMi reads no UUID selector for MetaX GPUs)."""

    def type_ok(self, dev: DeviceInfo, req: ContainerRequest, constraints: PodConstraints) -> bool:
        return req.type == self.name

    def uuid_ok(self, dev: DeviceInfo, constraints: PodConstraints) -> bool:
        return True

    def pod_score(
        self, snap: NodeSnapshot, devices: PodDevices, policy: NodePolicy, constraints: PodConstraints
    ) -> float:
        """HAMi's ``ScoreNode``: the node's topology figure for the number of GPUs the pod gets here."""
        del constraints
        return pod_score_of(snap.inventory.pair_scores, sum(len(ctr) for ctr in devices), policy)

    def pod_score_bound(
        self, snap: NodeSnapshot, requests: Sequence[ContainerRequest], policy: NodePolicy, constraints: PodConstraints
    ) -> float:
        """The largest ``|2000 − figure|`` of the node's table for ``policy`` (2000 for a GPU count it lacks); 0
        without a table."""
        del requests, constraints
        table = snap.inventory.pair_scores.get(LOSSES_KEY if policy is NodePolicy.BINPACK else SCORES_KEY)
        if table is None:
            return 0.0
        return max(abs(_SCORE_BASE - v) for v in (0, *table.values()))


METAX_RULES: DeviceRules = MetaxRules(NAME)


def _table(value: str) -> dict[int, int] | None:
    """A topology annotation as Go's ``json.Unmarshal`` into ``map[int]int`` reads it; None when it cannot."""
    try:
        raw = json.loads(value)
    except ValueError:
        return None
    if not isinstance(raw, dict):
        return None
    table: dict[int, int] = {}
    for k, v in raw.items():
        text = k.strip()
        if not (text.lstrip("+-").isdigit() and text.isascii()) or isinstance(v, bool) or not isinstance(v, int):
            return None  # Go's json.Unmarshal into map[int]int fails as a whole
        table[int(text)] = v
    return table


def parse_topology(value: str, index: int) -> float:
    """HAMi's ``parseMetaxAnnos``: ``value`` is a JSON object from a number of GPUs to a whole figure; the figure
    for ``index`` GPUs, 0 when the value is no such object or has no entry for ``index``."""
    table = _table(value)
    return float(table.get(index, 0)) if table is not None else 0.0


def topology_tables(annotations: Mapping[str, str]) -> dict[str, dict[str, int]]:
    """The node's ``…topology.losses`` and ``…topology.scores`` tables as the registrar keeps them (in
    ``NodeInventory.pair_scores`` under the annotation's key, a number of GPUs as text → its figure): an annotation
    :func:`parse_topology` cannot read is kept as an empty table (every figure 0, as HAMi reads it)."""
    tables: dict[str, dict[str, int]] = {}
    for key in (LOSSES_KEY, SCORES_KEY):
        value = annotations.get(key)
        if value is not None:
            table = _table(value) or {}
            tables[key] = {str(n): figure for n, figure in table.items()}
    return tables


def pod_score_of(tables: Mapping[str, Mapping[str, int]], gpus: int, policy: NodePolicy) -> float:
    """:func:`score_node` from the tables :func:`topology_tables` kept: ``2000 −`` the figure of ``gpus`` GPUs in
    the policy's table; 0 when the node has no such table."""
    table = tables.get(LOSSES_KEY if policy is NodePolicy.BINPACK else SCORES_KEY)
    if table is None:
        return 0.0
    return _SCORE_BASE - float(table.get(str(gpus), 0))


def score_node(annotations: Mapping[str, str], gpus: int, policy: str) -> float:
    """HAMi's ``ScoreNode`` for MetaX GPUs: ``gpus`` is how many the pod got on the node. binpack: ``2000 −``
    the loss of that many GPUs (``metax-tech.com/gpu.topology.losses``); spread: ``2000 −`` their score
    (``…topology.scores``); 0 without the annotation or for another policy."""
    key = LOSSES_KEY if policy == "binpack" else SCORES_KEY if policy == "spread" else None
    if key is None or key not in annotations:
        return 0.0
    return _SCORE_BASE - parse_topology(annotations[key], gpus)


# ------------------------------------------------------------------------------------------------------------
# Registration from node capacity
# ------------------------------------------------------------------------------------------------------------


def devices_from_capacity(node: str, count: int) -> tuple[DeviceInfo, ...]:
    """HAMi's ``GetNodeDevices``: ``count`` GPUs ``<node>-metax-<i>`` of 65536 MiB and 100 cores, one slot each."""
    return tuple(
        DeviceInfo(f"{node}{_ID_INFIX}{i}", i, GPU_SLOTS, GPU_MEMORY_MIB, GPU_CORES, NAME, 0, "", True, vendor=NAME)
        for i in range(count)
    )


# ------------------------------------------------------------------------------------------------------------
# The vendor
# ------------------------------------------------------------------------------------------------------------


DESCRIPTION: Final = Description(
    NAME,
    METAX_RULES,
    PodLists("hami.io/metax-gpu-devices-allocated", "hami.io/metax-gpu-devices-to-allocate"),
    node_lock=NodeLockKind.NONE,
)


@dataclass(frozen=True, slots=True)
class MetaxVendor(CountedVendor):
    """MetaX whole GPUs (see the module docstring): HAMi's ``GetNodeDevices`` derives GPUs of 65536 MiB, 100 cores
    and one slot from ``capacity[metax-tech.com/gpu]`` (healthy while the capacity is above 0), with the topology
    tables from the node's annotations; a request takes each GPU whole (100 % of its memory, 100 cores). No UUID
    selector applies (HAMi's ``checkUUID`` is always true)."""

    description = DESCRIPTION
    counted = Counted(
        top=2**63 - 1,
        expected="expected a whole number from 0 to 2^63-1",
        devices=devices_from_capacity,
        cores_pct=GPU_CORES,
        shape=(GPU_MEMORY_MIB, GPU_CORES, GPU_SLOTS),
        refusal="MetaX GPUs register by count only: each has 65536 MiB, 100 cores and one slot",
        pair_scores=topology_tables,
    )

    config: MetaxConfig = dataclasses.field(default_factory=MetaxConfig)

    @property
    def count_name(self) -> str:
        return self.config.resource_count_name
