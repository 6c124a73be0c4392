"""The fewest nodes a burst fits on (tests/controlplane/density.py): the bound is reached by a real packing for
the benchmark's bursts, so nodes touched is measured against a true minimum."""

from __future__ import annotations

import pytest

from benchmarks.bench_cluster import _pods
from tests.controlplane.density import first_fit_nodes, minimum_nodes
from tests.controlplane.harness import NodeShape, gpu_pod


@pytest.mark.parametrize(
    ("pods", "gpus", "shared", "expected"),
    [
        (600, 8, True, 15),  # compute shares bind: 600 x 20 % = 120 cards
        (600, 8, False, 75),  # one whole card each
        (2000, 8, False, 250),
        (40, 4, True, 2),  # 8 cards by compute; memory asks 100 GB of 16 GB cards: 7
        (30, 2, True, 3),  # 6 cards by compute: 3 nodes of 2
    ],
)
def test_benchmark_bursts_reach_the_bound(pods: int, gpus: int, shared: bool, expected: int) -> None:
    shape = NodeShape(gpus=gpus)
    burst = _pods(pods, shared=shared)
    assert minimum_nodes(burst, shape) == first_fit_nodes(burst, shape) == expected


def test_a_pod_without_memory_takes_a_whole_card() -> None:
    shape = NodeShape(gpus=2)
    pods = [gpu_pod("a", mem=None, cores=None), gpu_pod("b", mem=None, cores=10), gpu_pod("c", mem=1000, cores=10)]
    assert minimum_nodes(pods, shape) == first_fit_nodes(pods, shape) == 2  # two whole cards and a share of a third


def test_only_one_card_pods_are_counted() -> None:
    with pytest.raises(ValueError, match="one GPU"):
        minimum_nodes([gpu_pod("a", gpus=2)], NodeShape())
