"""NodeSnapshot: usage aligned with the inventory, and the per-node summary used to skip hopeless nodes."""

from __future__ import annotations

import pytest

from tests.builders import gpu, inventory, req, snap, use
from vgpu_scheduler.shared.domain.model import ZERO_USAGE, ContainerRequest, MigProfile
from vgpu_scheduler.shared.domain.prefilter import PodNeeds
from vgpu_scheduler.shared.domain.snapshot import NodeSnapshot


def test_missing_usage_is_zero() -> None:
    s = NodeSnapshot(inventory("n", n=2), {"GPU-n-1": use(1, 100, 10)})
    assert s.usages == (ZERO_USAGE, use(1, 100, 10))
    assert s.device_usage("GPU-n-0") is ZERO_USAGE
    assert (s.name, s.score) == ("n", s.summary.score)


def test_summary_counts_only_usable_devices() -> None:
    devs = [
        gpu("sick", index=0, health=False),
        gpu("cordoned", index=1),
        gpu("full", index=2, count=2),
        gpu("idle", index=3, mem=16000),
        gpu("busy", index=4, core=100),
        gpu("coreful", index=5),
    ]
    s = snap(
        devices=devs,
        cordoned=["cordoned"],
        usage={"full": use(2), "busy": use(1, 6000, 40), "coreful": use(1, 1000, 100)},
    )
    x = s.summary
    assert x.usable_count == 3  # not unhealthy, cordoned nor full
    assert x.idle_count == 1  # idle
    assert x.exclusive_ok_count == 1  # only the idle 100-core card may be taken whole
    assert x.zero_core_ok_count == 2  # idle and busy; coreful has every core allocated
    assert x.max_free_mem_mib == 16000
    assert x.max_free_cores == 100
    assert x.max_fit_pct == 100
    assert not x.has_mig


@pytest.mark.parametrize(
    ("devmem", "used_mem", "pct_fits", "pct_does_not"),
    [(8000, 0, 100, None), (8000, 4000, 50, 51), (10000, 2501, 74, 75), (3, 1, 99, 100)],
)
def test_max_fit_pct_matches_fit_arithmetic(
    devmem: int, used_mem: int, pct_fits: int, pct_does_not: int | None
) -> None:
    s = snap(n=1, mem=devmem, usage={0: use(1, used_mem)})
    assert s.summary.max_fit_pct == pct_fits
    free = devmem - used_mem
    assert devmem * pct_fits // 100 <= free
    if pct_does_not is not None:
        assert devmem * pct_does_not // 100 > free


def test_mig_nodes_are_never_hopeless() -> None:
    profile = MigProfile("1g.5gb", 4864, 15, 1, ())
    s = snap(devices=[gpu("m", mode="mig", mig_profiles=(profile,))])
    assert s.summary.has_mig
    assert not PodNeeds.of([req(8, mem=10**6)], mutex=True).hopeless(s.summary)


@pytest.mark.parametrize(
    ("requests", "mutex", "hopeless"),
    [
        pytest.param([req(2, mem=1000)], False, False, id="fits"),
        pytest.param([req(4, mem=1000)], False, True, id="more-devices-than-usable"),
        pytest.param([req(1, mem=8001)], False, True, id="memory"),
        pytest.param([req(1, pct=100)], False, False, id="whole-memory-on-the-idle-card"),
        pytest.param([req(1, mem=100, cores=100), req(1, mem=100, cores=100)], False, False, id="one-whole-card"),
        pytest.param([req(2, mem=100, cores=100)], False, True, id="two-whole-cards"),
        pytest.param([req(2, mem=100)], True, True, id="mutex-needs-two-idle"),
        pytest.param([req(3, mem=100, cores=0)], False, True, id="zero-core-on-full-cores"),
    ],
)
def test_pod_needs_against_summary(requests: list[ContainerRequest], mutex: bool, hopeless: bool) -> None:
    # three usable cards: one idle, one half used, one with every core allocated
    s = snap(n=3, usage={1: use(1, 4000, 50), 2: use(1, 1000, 100)})
    assert PodNeeds.of(requests, mutex).hopeless(s.summary) is hopeless
