"""The collapse of a pod's device list into per-device charges (hami-wire §5.4)."""

from __future__ import annotations

from vgpu_scheduler.shared.domain.accounting import collapse
from vgpu_scheduler.shared.domain.model import ContainerDevice


def dev(uuid: str, mem: int, cores: int) -> ContainerDevice:
    return ContainerDevice(uuid=uuid, used_mem_mib=mem, used_cores=cores)


def test_app_containers_sum_and_count_slots() -> None:
    charges = collapse(((dev("a", 1000, 10),), (dev("a", 2000, 20), dev("b", 500, 0))), init_count=0)
    by = {c.uuid: c for c in charges}
    assert (by["a"].slots, by["a"].mem_mib, by["a"].cores_pct) == (2, 3000, 30)
    assert (by["b"].slots, by["b"].mem_mib, by["b"].cores_pct) == (1, 500, 0)


def test_init_peak_versus_app_sum() -> None:
    # init uses 5000 on a, app containers 1000 + 1000: the init peak wins for memory, app wins for slots
    charges = collapse(((dev("a", 5000, 10),), (dev("a", 1000, 30),), (dev("a", 1000, 30),)), init_count=1)
    (a,) = charges
    assert (a.slots, a.mem_mib, a.cores_pct) == (2, 5000, 60)


def test_init_only_device_takes_one_slot() -> None:
    charges = collapse(((dev("a", 100, 0),), (dev("a", 200, 0),), ()), init_count=2)
    (a,) = charges
    assert (a.slots, a.mem_mib) == (1, 200)


def test_whole_card_claim_is_exclusive_only_on_100_core_cards() -> None:
    (a,) = collapse(((dev("a", 1000, 100),),), init_count=0)
    assert a.exclusive
    (b,) = collapse(((dev("b", 1000, 100),),), init_count=0, device_totals={"b": 200})
    assert not b.exclusive
