"""The fewest nodes a burst of GPU pods can fit on: what node binpack's ``nodes touched`` is measured against.

``minimum_nodes`` is a lower bound that is exact for the bursts the benchmark and the suite create: the largest of

* the cards the pods need by compute share: ``⌈Σ cores / card cores⌉`` cards, the memory and the time slices
  alike (a pod asking no memory takes a whole card's: HAMi's default of 100 %), and whole cards counted one each;
* turned into nodes: ``⌈cards / GPUs per node⌉``.

``first_fit_nodes`` packs the burst for real (first fit on cards, in the burst's order and largest first, the
better of the two): an upper bound. Where the two agree, as the tests check for the benchmark's bursts, the bound
is the true minimum.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tests.controlplane.harness import NodeShape


@dataclass(frozen=True, slots=True)
class CardShare:
    """What one single-card pod takes of a card: memory (MiB), compute (%) and one time slice."""

    mem_mib: int
    cores: int

    @property
    def whole(self) -> bool:
        return self.cores >= 100


def card_share(pod: Mapping[str, Any], shape: NodeShape) -> CardShare:
    """The share of one card the pod's only GPU container asks (``nvidia.com/gpumem``, ``nvidia.com/gpucores``;
    no memory: the whole card's, no cores: none)."""
    containers = pod["spec"]["containers"]
    gpu = [c for c in containers if "nvidia.com/gpu" in c.get("resources", {}).get("limits", {})]
    if len(gpu) != 1 or int(gpu[0]["resources"]["limits"]["nvidia.com/gpu"]) != 1:
        raise ValueError(f"{pod['metadata']['name']}: minimum_nodes counts pods with one container of one GPU")
    limits = gpu[0]["resources"]["limits"]
    mem = int(limits.get("nvidia.com/gpumem", shape.mem_mib))
    cores = int(limits.get("nvidia.com/gpucores", 0))
    if "nvidia.com/gpumem" not in limits:
        cores = max(cores, 100)  # a whole card's memory leaves nothing for another pod
    return CardShare(mem_mib=mem, cores=cores)


def minimum_nodes(pods: Sequence[Mapping[str, Any]], shape: NodeShape) -> int:
    """The lower bound of the module docstring."""
    shares = [card_share(p, shape) for p in pods]
    if not shares:
        return 0
    cards = max(
        math.ceil(sum(min(s.cores, shape.cores) for s in shares) / shape.cores),
        math.ceil(sum(s.mem_mib for s in shares) / shape.mem_mib),
        math.ceil(len(shares) / shape.slots),
        sum(1 for s in shares if s.whole),
    )
    return math.ceil(cards / shape.gpus)


def first_fit_nodes(pods: Sequence[Mapping[str, Any]], shape: NodeShape) -> int:
    """Nodes used by first fit on cards, in the burst's order or largest compute share first, whichever packs
    tighter: an upper bound on the minimum."""
    shares = [card_share(p, shape) for p in pods]
    largest_first = sorted(shares, key=lambda s: (s.cores, s.mem_mib), reverse=True)
    return math.ceil(min(_first_fit_cards(shares, shape), _first_fit_cards(largest_first, shape)) / shape.gpus)


def _first_fit_cards(shares: Sequence[CardShare], shape: NodeShape) -> int:
    cards: list[list[int]] = []  # [free cores, free memory, free slots]
    for s in shares:
        for card in cards:
            if card[0] >= s.cores and card[1] >= s.mem_mib and card[2] >= 1 and not (s.whole and card[2] < shape.slots):
                card[0] -= s.cores
                card[1] -= s.mem_mib
                card[2] -= 1
                break
        else:
            cards.append([shape.cores - min(s.cores, shape.cores), shape.mem_mib - s.mem_mib, shape.slots - 1])
    return len(cards)
