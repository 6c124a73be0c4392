"""MIG choice (dynamic profiles, legacy templates) and the fail-closed MIG accounting of hami-wire §7."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests import builders
from vgpu_scheduler.shared.domain.allocation import Allocation
from vgpu_scheduler.shared.domain.mig import (
    LegacyMigChoice,
    flatten_geometry,
    legacy_geometries,
    legacy_state_from_suffixes,
    mig_accounting,
    placement_order,
    select_dynamic,
    select_legacy,
)
from vgpu_scheduler.shared.domain.model import (
    ContainerDevice,
    DeviceInfo,
    DeviceUsage,
    MigAllocation,
    MigGeometryEntry,
    MigPlacement,
    MigProfile,
    MigTemplate,
)


def pl(start: int, size: int) -> MigPlacement:
    return MigPlacement(start=start, size=size)


def profile(name: str, mem: int, slices: int, starts: list[int], size: int, core: int = 0) -> MigProfile:
    return MigProfile(
        name=name, memory_mib=mem, core_pct=core, slice_count=slices, placements=tuple(pl(s, size) for s in starts)
    )


# The shape NVML reports for an A100-PCIE-40GB (placements on the 8-slot memory grid).
A100_PROFILES = (
    profile("1g.5gb", 4864, 1, [0, 1, 2, 3, 4, 5, 6], 1, core=15),
    profile("2g.10gb", 9984, 2, [0, 2, 4], 2, core=29),
    profile("3g.20gb", 19968, 3, [0, 4], 4, core=43),
    profile("4g.20gb", 19968, 4, [0], 4, core=58),
    profile("7g.40gb", 40192, 7, [0], 8, core=100),
)


def gpu(
    uuid: str = "GPU-a",
    mode: str = "mig",
    profiles: tuple[MigProfile, ...] = A100_PROFILES,
    type_: str = "NVIDIA A100-PCIE-40GB",
) -> DeviceInfo:
    return builders.gpu(uuid, count=7, mem=40960, type=type_, mode=mode, mig_profiles=profiles)


def chosen(device: DeviceInfo, occupied: list[MigPlacement], mem: int) -> tuple[str, int] | None:
    got = select_dynamic(device, occupied, mem)
    return None if got is None else (got[0].name, got[1].start)


# ---------------------------------------------------------------------------------------------------------------
# Dynamic MIG (§7.1)
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("occupied", "mem", "expected"),
    [
        pytest.param([], 4000, ("1g.5gb", 6), id="1g-takes-the-highest-start"),
        pytest.param([pl(6, 1)], 4000, ("1g.5gb", 5), id="1g-next-highest-start"),
        pytest.param([], 0, ("1g.5gb", 6), id="zero-request-smallest-profile"),
        pytest.param([], 4864, ("1g.5gb", 6), id="exact-memory-fits"),
        pytest.param([], 4865, ("2g.10gb", 0), id="2g-takes-the-lowest-start"),
        pytest.param([pl(0, 2)], 8000, ("2g.10gb", 2), id="2g-next-lowest-start"),
        pytest.param([], 15000, ("3g.20gb", 4), id="3g-before-4g-fewer-slices-highest-start"),
        pytest.param([pl(5, 1)], 15000, ("3g.20gb", 0), id="3g-lower-placement-when-high-is-taken"),
        pytest.param([pl(1, 1), pl(5, 1)], 15000, None, id="3g-4g-7g-all-blocked"),
        pytest.param([pl(0, 4)], 15000, ("3g.20gb", 4), id="3g-beside-a-4-slice-instance"),
        pytest.param([], 30000, ("7g.40gb", 0), id="whole-gpu"),
        pytest.param([pl(6, 1)], 30000, None, id="whole-gpu-blocked"),
        pytest.param([], 50000, None, id="bigger-than-any-profile"),
        pytest.param([pl(s, 1) for s in range(6)], 4000, ("1g.5gb", 6), id="last-free-1g-slot"),
    ],
)
def test_select_dynamic(occupied: list[MigPlacement], mem: int, expected: tuple[str, int] | None) -> None:
    assert chosen(gpu(), occupied, mem) == expected


def test_a_larger_profile_is_used_when_the_smallest_fitting_one_is_full() -> None:
    dev = gpu(profiles=(profile("1g.5gb", 4864, 1, [0, 1], 1), profile("2g.10gb", 9984, 2, [2], 2)))
    assert chosen(dev, [pl(0, 1), pl(1, 1)], 1000) == ("2g.10gb", 2)


def test_equal_memory_prefers_fewer_slices_whatever_the_registration_order() -> None:
    assert chosen(gpu(profiles=A100_PROFILES[::-1]), [], 15000) == ("3g.20gb", 4)


def test_equal_memory_and_slices_keep_registration_order() -> None:
    dev = gpu(profiles=(profile("2g.b", 9984, 2, [4], 2), profile("2g.a", 9984, 2, [0], 2)))
    assert chosen(dev, [], 1) == ("2g.b", 4)


@pytest.mark.parametrize(
    ("name", "starts"),
    [
        pytest.param("1g.10gb", [6, 4, 2, 0], id="1g-descending"),
        pytest.param("3g.40gb", [6, 4, 2, 0], id="3g-descending"),
        pytest.param("2g.20gb", [0, 2, 4, 6], id="2g-ascending"),
        pytest.param("4g.40gb", [0, 2, 4, 6], id="4g-ascending"),
        pytest.param("1g", [0, 2, 4, 6], id="no-dot-no-prefix-ascending"),
    ],
)
def test_placement_order(name: str, starts: list[int]) -> None:
    assert [p.start for p in placement_order(profile(name, 1, 1, [2, 0, 6, 4], 1))] == starts


def test_zero_size_placements_are_never_handed_out() -> None:
    dev = gpu(profiles=(MigProfile("1g.5gb", 4864, 15, 1, (pl(6, 0), pl(3, 1))),))
    assert chosen(dev, [], 1) == ("1g.5gb", 3)
    assert chosen(dev, [pl(3, 1)], 1) is None


def test_a_gpu_without_profiles_fits_nothing() -> None:
    assert select_dynamic(gpu(profiles=()), [], 0) is None


def test_negative_request_is_an_error() -> None:
    with pytest.raises(ValueError, match="negative memory request -1"):
        select_dynamic(gpu(), [], -1)


def test_select_dynamic_one_after_the_other_sees_the_earlier_choices() -> None:
    # what Fit does for several instances on one GPU (HAMi's CustomFilterRule): each choice joins `occupied`
    occupied: list[MigPlacement] = []
    names = []
    for mem in (4000, 4000, 15000):
        got = select_dynamic(gpu(), occupied, mem)
        assert got is not None
        names.append((got[0].name, got[1].start))
        occupied.append(got[1])
    assert names == [("1g.5gb", 6), ("1g.5gb", 5), ("3g.20gb", 0)]
    assert select_dynamic(gpu(), occupied, 15000) is None  # no 3g/4g/7g placement left beside 3g at 0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=45000), max_size=12))
def test_chosen_placements_never_overlap_and_are_the_first_feasible(requests: list[int]) -> None:
    dev = gpu()
    occupied: list[MigPlacement] = []
    ordered = sorted(dev.mig_profiles, key=lambda p: (p.memory_mib, p.slice_count))
    for mem in requests:
        got = select_dynamic(dev, occupied, mem)
        feasible = [
            p
            for p in ordered
            if p.memory_mib >= mem and any(not any(c.overlaps(o) for o in occupied) for c in p.placements)
        ]
        if got is None:
            assert feasible == []
            continue
        prof, place = got
        assert prof == feasible[0]
        assert place in prof.placements
        assert not any(place.overlaps(o) for o in occupied)
        occupied.append(place)
    for i, a in enumerate(occupied):
        assert not any(a.overlaps(b) for b in occupied[i + 1 :])


# ---------------------------------------------------------------------------------------------------------------
# Legacy templates (§7.2)
# ---------------------------------------------------------------------------------------------------------------

T1G = MigTemplate("1g.5gb", 5120, 14, 1)
T2G = MigTemplate("2g.10gb", 10240, 28, 1)
T3G = MigTemplate("3g.20gb", 20480, 42, 1)
T7G = MigTemplate("7g.40gb", 40960, 100, 1)


def times(t: MigTemplate, count: int) -> MigTemplate:
    return MigTemplate(t.name, t.memory_mib, t.core_pct, count)


# hami-wire §7.2's A100-40GB example: 1g.5gb×7 | 1g.5gb×1 + 2g.10gb×3 | 3g.20gb×2 | 7g.40gb×1
A100_GEOMETRIES = (
    (times(T1G, 7),),
    (times(T1G, 1), times(T2G, 3)),
    (times(T3G, 2),),
    (times(T7G, 1),),
)
ENTRIES = (
    MigGeometryEntry(models=("A30",), geometries=((times(MigTemplate("1g.6gb", 6144, 25, 1), 4),),)),
    MigGeometryEntry(models=("A100-SXM4-40GB", "A100-PCIE-40GB"), geometries=A100_GEOMETRIES),
    MigGeometryEntry(models=("A100",), geometries=((times(T7G, 1),),)),
)


def legacy(geometry: int | None = None, slots: set[int] | None = None) -> DeviceUsage:
    return DeviceUsage(legacy_geometry=geometry, legacy_slots=frozenset(slots or ()))


def pick(usage: DeviceUsage, mem: int, device: DeviceInfo | None = None) -> tuple[int, int, str] | None:
    got = select_legacy(device or gpu(profiles=()), ENTRIES, usage, mem)
    return None if got is None else (got.geometry, got.slot, got.template.name)


@pytest.mark.parametrize(
    ("usage", "mem", "expected"),
    [
        pytest.param(legacy(), 4000, (0, 0, "1g.5gb"), id="fresh-small-first-geometry"),
        pytest.param(legacy(), 8000, (1, 1, "2g.10gb"), id="fresh-2g-slot-after-the-1g"),
        pytest.param(legacy(), 15000, (2, 0, "3g.20gb"), id="fresh-3g"),
        pytest.param(legacy(), 30000, (3, 0, "7g.40gb"), id="fresh-whole-gpu"),
        pytest.param(legacy(), 50000, None, id="fresh-too-big"),
        pytest.param(legacy(1, set()), 15000, (2, 0, "3g.20gb"), id="geometry-without-slots-counts-as-fresh"),
        pytest.param(legacy(1, {1}), 8000, (1, 2, "2g.10gb"), id="in-use-next-free-slot"),
        pytest.param(legacy(1, {1}), 4000, (1, 0, "1g.5gb"), id="in-use-first-free-slot-that-fits"),
        pytest.param(legacy(1, {0}), 4000, (1, 1, "2g.10gb"), id="in-use-bigger-slot-when-small-taken"),
        pytest.param(legacy(1, {0, 1, 2, 3}), 1, None, id="in-use-geometry-full"),
        pytest.param(legacy(0, {0}), 8000, None, id="in-use-never-switches-geometry"),
        pytest.param(legacy(9, {0}), 1, None, id="unknown-geometry-fails-closed"),
        pytest.param(legacy(1, {4}), 1, None, id="unknown-slot-fails-closed"),
    ],
)
def test_select_legacy(usage: DeviceUsage, mem: int, expected: tuple[int, int, str] | None) -> None:
    assert pick(usage, mem) == expected


def test_the_first_matching_entry_supplies_the_geometries() -> None:
    # "NVIDIA A100-PCIE-40GB" also contains "A100" (third entry): the second entry comes first.
    assert legacy_geometries("NVIDIA A100-PCIE-40GB", ENTRIES) == A100_GEOMETRIES
    assert legacy_geometries("NVIDIA A100-SXM4-80GB", ENTRIES) == ((times(T7G, 1),),)
    assert legacy_geometries("NVIDIA a100-pcie-40gb", ENTRIES) == ()  # case-sensitive, as strings.Contains
    assert pick(legacy(), 1, gpu(profiles=(), type_="Tesla V100")) is None


def test_suffix_is_the_flattened_slot_not_the_template_index() -> None:
    # The documented v2.9 quirk: on a first allocation HAMi wrote [g-<template index>] (here [0-1]) while it
    # marked flattened slot 2 in use. We always use the flattened slot: the device plugin reads it that way.
    entries = (MigGeometryEntry(models=("A100",), geometries=((times(T2G, 2), times(T3G, 1)),)),)
    got = select_legacy(gpu(profiles=()), entries, legacy(), 15000)
    assert got == LegacyMigChoice(geometry=0, slot=2, template=times(T3G, 1))
    assert got.suffix == (0, 2)


def test_zero_count_templates_have_no_slot() -> None:
    entries = (MigGeometryEntry(models=("A100",), geometries=((times(T3G, 0), times(T2G, 2)),)),)
    assert flatten_geometry(entries[0].geometries[0]) == (times(T2G, 2), times(T2G, 2))
    got = select_legacy(gpu(profiles=()), entries, legacy(), 1)
    assert got is not None and (got.slot, got.template.name) == (0, "2g.10gb")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=45000), max_size=10))
def test_repeated_legacy_choices_never_share_a_slot_or_a_geometry_change(requests: list[int]) -> None:
    usage = legacy()
    taken: list[LegacyMigChoice] = []
    for mem in requests:
        got = select_legacy(gpu(profiles=()), ENTRIES, usage, mem)
        if got is None:
            continue
        assert got.template.memory_mib >= mem
        assert flatten_geometry(A100_GEOMETRIES[got.geometry])[got.slot] == got.template
        usage = dataclasses.replace(usage, legacy_geometry=got.geometry, legacy_slots=usage.legacy_slots | {got.slot})
        taken.append(got)
    assert len({c.geometry for c in taken}) <= 1
    assert len({c.slot for c in taken}) == len(taken)


@pytest.mark.parametrize(
    ("suffixes", "expected"),
    [
        pytest.param([], (None, frozenset()), id="none"),
        pytest.param([(1, 0), (1, 3)], (1, frozenset({0, 3})), id="one-geometry"),
    ],
)
def test_legacy_state_from_suffixes(
    suffixes: list[tuple[int, int]], expected: tuple[int | None, frozenset[int]]
) -> None:
    assert legacy_state_from_suffixes(suffixes) == expected


@pytest.mark.parametrize(
    ("suffixes", "message"),
    [
        pytest.param([(1, 0), (2, 1)], "geometries 1 and 2", id="two-geometries"),
        pytest.param([(1, 0), (1, 0)], r"slot \[1-0\] is taken twice", id="slot-twice"),
        pytest.param([(-1, 0)], "negative", id="negative"),
    ],
)
def test_inconsistent_suffixes_are_an_error(suffixes: list[tuple[int, int]], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        legacy_state_from_suffixes(suffixes)


# ---------------------------------------------------------------------------------------------------------------
# Accounting (§7.1): in-use placements and fail-closed unhealthy GPUs
# ---------------------------------------------------------------------------------------------------------------

NODE = (
    gpu("mig0"),
    gpu("mig1"),
    gpu("core0", mode="hami-core", profiles=()),
    gpu("mps0", mode="mps", profiles=()),
    gpu("legacy0", profiles=()),
)


def entry(uuid: str, suffix: tuple[int, int] | None = None) -> ContainerDevice:
    return ContainerDevice(uuid=uuid, used_mem_mib=4864, used_cores=15, legacy_mig=suffix)


def res(uuid: str, start: int, size: int = 1, container: int = 0, device: int = 0) -> MigAllocation:
    return MigAllocation(
        container_index=container, device_index=device, gpu_uuid=uuid, profile="1g.5gb", placement=pl(start, size)
    )


def pod(
    name: str, containers: list[list[ContainerDevice]], reservations: list[MigAllocation] | None = None
) -> Allocation:
    return Allocation(
        pod_uid=f"uid-{name}",
        namespace="default",
        name=name,
        node="node-1",
        devices=tuple(tuple(c) for c in containers),
        charges=(),
        mig=tuple(reservations or ()),
    )


@pytest.mark.parametrize(
    ("pods", "unhealthy"),
    [
        pytest.param([pod("a", [[entry("mig0")]], [res("mig0", 6)])], set(), id="matched-reservation"),
        pytest.param([pod("a", [[entry("core0")]])], set(), id="plain-vgpu-on-hami-core"),
        pytest.param([pod("a", [[entry("core0")]], [res("core0", 6)])], {"core0"}, id="reservation-on-hami-core"),
        pytest.param([pod("a", [[entry("mps0")]], [res("mps0", 6)])], {"mps0"}, id="reservation-on-mps"),
        pytest.param([pod("a", [[entry("mig0")]])], {"mig0"}, id="mig-entry-without-reservation"),
        pytest.param(
            [pod("a", [[entry("mig0")], [entry("mig0")]], [res("mig0", 6)])], {"mig0"}, id="second-entry-unreserved"
        ),
        pytest.param(
            [pod("a", [[entry("mig0")]], [res("mig0", 6)]), pod("b", [[entry("mig0")]])],
            {"mig0"},
            id="reservations-do-not-cross-pods",
        ),
        pytest.param([pod("a", [], [res("core0", 6)])], {"core0"}, id="leftover-on-hami-core"),
        pytest.param(
            [pod("a", [], [res("GPU-gone", 6)])], {"mig0", "mig1", "legacy0"}, id="leftover-on-unknown-gpu-all-mig"
        ),
        pytest.param([pod("a", [[entry("GPU-gone")]])], set(), id="unknown-entry-ignored"),
        pytest.param([pod("a", [[entry("legacy0", (1, 0))]])], set(), id="legacy-suffix-on-legacy-gpu"),
        pytest.param([pod("a", [[entry("core0", (1, 0))]])], {"core0"}, id="legacy-suffix-on-hami-core"),
        pytest.param([pod("a", [[entry("mig0", (1, 0))]])], {"mig0"}, id="legacy-suffix-on-dynamic-gpu"),
        pytest.param(
            [pod("a", [[entry("legacy0")]], [res("legacy0", 6)])], {"legacy0"}, id="reservation-on-legacy-gpu"
        ),
        pytest.param(
            [pod("a", [[entry("legacy0", (1, 0))]]), pod("b", [[entry("legacy0", (2, 0))]])],
            {"legacy0"},
            id="legacy-geometries-disagree",
        ),
        pytest.param(
            [pod("a", [[entry("legacy0", (1, 1))]]), pod("b", [[entry("legacy0", (1, 1))]])],
            {"legacy0"},
            id="legacy-slot-twice",
        ),
    ],
)
def test_mig_unhealthy_devices(pods: list[Allocation], unhealthy: set[str]) -> None:
    assert mig_accounting(NODE, pods).unhealthy == frozenset(unhealthy)


def test_accounting_collects_in_use_placements_and_legacy_state() -> None:
    pods = [
        pod(
            "a",
            [[entry("mig0")], [], [entry("mig0"), entry("mig1")]],
            [res("mig0", 6), res("mig0", 0, 2), res("mig1", 4, 4)],
        ),
        pod("b", [[entry("mig1")]], [res("mig1", 6), res("mig1", 0, 2)]),  # the second is a leftover: still in use
        pod("c", [[entry("legacy0", (1, 0))], [entry("legacy0", (1, 2))]]),
    ]
    acc = mig_accounting(NODE, pods)
    assert acc.unhealthy == frozenset()
    assert acc.placements == {"mig0": (pl(6, 1), pl(0, 2)), "mig1": (pl(4, 4), pl(6, 1), pl(0, 2))}
    assert acc.legacy == {"legacy0": (1, frozenset({0, 2}))}
    # The in-use set feeds straight back into the choice: slots 0-1 and 4-7 are taken, so 1g goes to 3.
    assert chosen(NODE[1], list(acc.placements["mig1"]), 1) == ("1g.5gb", 3)
