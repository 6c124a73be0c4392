"""Hypothesis strategies for the codec tests: values each encoder can represent."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from hypothesis import strategies as st

from vgpu_scheduler.shared.codec._go import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN, UINT32_MAX
from vgpu_scheduler.shared.domain.model import ContainerDevice, DeviceInfo, MigAllocation, MigPlacement, MigProfile

int32 = st.integers(INT32_MIN, INT32_MAX)
int64 = st.integers(INT64_MIN, INT64_MAX)
uint32 = st.integers(0, UINT32_MAX)

# Any text Python and Go agree on (Go turns lone surrogates into U+FFFD).
text = st.text(st.characters(exclude_categories=["Cs"]), max_size=12)
nonempty_text = st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=12)


def text_without(chars: str, min_size: int = 0) -> st.SearchStrategy[str]:
    return st.text(st.characters(exclude_categories=["Cs"], exclude_characters=chars), min_size=min_size, max_size=12)


placements = st.builds(MigPlacement, start=uint32, size=uint32)
profiles = st.builds(
    MigProfile,
    name=text,
    memory_mib=int32,
    core_pct=int32,
    slice_count=uint32,
    placements=st.lists(placements, max_size=3).map(tuple),
)

json_devices = st.builds(
    DeviceInfo,
    id=nonempty_text,
    index=st.integers(0, 2**64 - 1),
    count=int32,
    devmem_mib=int32,
    devcore=int32,
    type=text,
    numa=int64,
    mode=text,
    health=st.booleans(),
    mig_profiles=st.lists(profiles, max_size=2).map(tuple),
)

json_device_lists = st.lists(json_devices, max_size=4, unique_by=lambda d: d.id).map(tuple)


def _not_json_start(s: str) -> bool:
    return not s.lstrip(" \t\n\r").startswith("[")


_colon_text = text_without(",:")


def colon_devices(fields: int) -> st.SearchStrategy[DeviceInfo]:
    legacy = fields == 7
    return st.builds(
        DeviceInfo,
        id=text_without(",:", min_size=1).filter(_not_json_start),
        index=st.just(0) if legacy else st.integers(0, INT64_MAX),
        count=int32,
        devmem_mib=int32,
        devcore=int32,
        type=_colon_text,
        numa=int64,
        mode=st.just("hami-core") if legacy else _colon_text,
        health=st.booleans(),
    )


def colon_device_lists(fields: int) -> st.SearchStrategy[tuple[DeviceInfo, ...]]:
    return st.lists(colon_devices(fields), max_size=4, unique_by=lambda d: d.id).map(tuple)


_list_text = text_without(",:;[]", min_size=1)
container_devices = st.builds(
    ContainerDevice,
    uuid=_list_text,
    used_mem_mib=st.integers(0, INT32_MAX),
    used_cores=st.integers(0, INT32_MAX),
    type=_list_text | st.just("NVIDIA"),
    legacy_mig=st.none() | st.tuples(st.integers(0, 10**18 - 1), st.integers(0, 10**18 - 1)),
)
pod_devices = st.lists(st.lists(container_devices, max_size=3).map(tuple), max_size=5).map(tuple)


@st.composite
def mig_allocations(draw: st.DrawFn) -> tuple[MigAllocation, ...]:
    keys = draw(st.lists(st.tuples(st.integers(0, INT64_MAX), st.integers(0, INT64_MAX)), unique=True, max_size=4))
    out = []
    for ci, di in keys:
        runtime = draw(st.booleans())
        out.append(
            MigAllocation(
                container_index=ci,
                device_index=di,
                gpu_uuid=draw(nonempty_text),
                profile=draw(nonempty_text),
                placement=MigPlacement(draw(uint32), draw(st.integers(1, UINT32_MAX))),
                mig_uuid=draw(nonempty_text) if runtime else None,
                gpu_instance_id=draw(uint32) if runtime else None,
                compute_instance_id=draw(uint32) if runtime else None,
            )
        )
    return tuple(out)


offsets = st.integers(-23 * 60 - 59, 23 * 60 + 59).map(lambda m: timezone(timedelta(minutes=m)))
aware_whole_seconds = st.builds(
    lambda dt, tz: dt.replace(tzinfo=tz),
    st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 59)).map(
        lambda d: d.replace(microsecond=0)
    ),
    offsets,
)
naive_whole_seconds = st.datetimes(min_value=datetime(1000, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 59)).map(
    lambda d: d.replace(microsecond=0)
)
