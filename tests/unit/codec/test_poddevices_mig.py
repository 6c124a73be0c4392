"""Pod device lists, container alignment and MIG allocations."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.codec.strategies import container_devices, mig_allocations, pod_devices
from vgpu_scheduler.shared.codec.mig import decode_mig_allocations, encode_mig_allocations
from vgpu_scheduler.shared.codec.poddevices import align_to_containers, decode_pod_devices, encode_pod_devices
from vgpu_scheduler.shared.domain.model import ContainerDevice, MigAllocation, MigPlacement, PodDevices
from vgpu_scheduler.shared.errors import DecodeError

G1 = ContainerDevice("GPU-1", 1000, 10)
G2 = ContainerDevice("GPU-2", 2000, 20)

# --- decoding -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param("", ((),), id="empty-is-one-empty-piece"),
        pytest.param("x:;", ((), ()), id="x-colon-semicolon-two-pieces"),
        pytest.param("GPU-1,NVIDIA,1000,10:;", ((G1,), ()), id="one"),
        pytest.param("GPU-1,NVIDIA,1000,10:GPU-2,NVIDIA,2000,20:;", ((G1, G2), ()), id="two-devices"),
        pytest.param("GPU-1,NVIDIA,1000,10:;;GPU-2,NVIDIA,2000,20:;", ((G1,), (), (G2,), ()), id="empty-kept"),
        pytest.param("junk:GPU-1,NVIDIA,1000,10::;", ((G1,), ()), id="sub-pieces-without-comma-skipped"),
        pytest.param("GPU-1,NVIDIA,1000,10,extra,fields:;", ((G1,), ()), id="extra-fields-ignored"),
        pytest.param("GPU-1,NVIDIA,+1000,10", ((G1,),), id="no-terminators"),
        pytest.param(
            "GPU-1,Other,5,6:;", ((ContainerDevice("GPU-1", 5, 6, type="Other"),), ()), id="type-kept-verbatim"
        ),
        pytest.param(
            "GPU-9[2-13],NVIDIA,10240,28:",
            ((ContainerDevice("GPU-9", 10240, 28, legacy_mig=(2, 13)),),),
            id="legacy-mig",
        ),
    ],
)
def test_decode_pod_devices(value: str, expected: PodDevices) -> None:
    assert decode_pod_devices(value) == expected


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("GPU-1,NVIDIA,1000:;", id="three-fields"),
        pytest.param("GPU-1,NVIDIA,2147483648,0:;", id="mem-over-int32"),
        pytest.param("GPU-1,NVIDIA,1000,1.5:;", id="fractional-cores"),
        pytest.param("GPU-1,NVIDIA,-1,0:;", id="negative-mem"),
        pytest.param(",NVIDIA,1,0:;", id="empty-uuid"),
        pytest.param("GPU-1,,1,0:;", id="empty-type"),
        pytest.param("GPU-1[1],NVIDIA,1,0:;", id="legacy-suffix-one-number"),
        pytest.param("GPU-1[a-b],NVIDIA,1,0:;", id="legacy-suffix-letters"),
        pytest.param("GPU-1[1-0]x,NVIDIA,1,0:;", id="text-after-suffix"),
        pytest.param("GPU-1 ,NVIDIA, 1,0:;", id="space-in-number"),
    ],
)
def test_decode_pod_devices_rejects(value: str) -> None:
    with pytest.raises(DecodeError) as e:
        decode_pod_devices(value, what="hami.io/vgpu-devices-to-allocate")
    assert e.value.what == "hami.io/vgpu-devices-to-allocate"


# --- alignment ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entries", "count", "expected"),
    [
        pytest.param(((G1,), ()), 1, ((G1,),), id="terminator-piece-dropped"),
        pytest.param(((G1,), (), (), ()), 2, ((G1,), ()), id="surplus-empties-dropped"),
        pytest.param(((G1,),), 1, ((G1,),), id="exact"),
        pytest.param(((G1,), ()), 3, ((), (), (G1,)), id="shortfall-padded-at-front"),
        pytest.param(((), (G1,), ()), 3, ((), (), (G1,)), id="v2.8-regular-only-behind-one-init"),
        pytest.param(((G1,), (), (G2,)), 3, ((G1,), (), (G2,)), id="no-terminator"),
        pytest.param(((),), 0, (), id="no-containers"),
    ],
)
def test_align_to_containers(entries: PodDevices, count: int, expected: PodDevices) -> None:
    assert align_to_containers(entries, count) == expected


def test_align_rejects_surplus_devices() -> None:
    with pytest.raises(DecodeError):
        align_to_containers(((G1,), (G2,), ()), 1)


@settings(deadline=None)
@given(st.lists(st.lists(container_devices, max_size=2).map(tuple), max_size=4), st.integers(0, 4))
def test_alignment_never_moves_an_entry_earlier(entries: list[tuple[ContainerDevice, ...]], extra: int) -> None:
    """Shortfall padding keeps every entry at or after its true index, so app devices never land on init slots."""
    listed = tuple(e for e in entries if e)  # HAMi HEAD's unpadded form lists only the requesting containers
    count = len(entries) + extra
    aligned = align_to_containers(listed, count)
    assert len(aligned) == count
    positions = [i for i, e in enumerate(entries) if e]
    for true_pos, entry in zip(positions, listed, strict=True):
        assert aligned.index(entry, true_pos) >= true_pos


# --- encoding -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "device",
    [
        pytest.param(ContainerDevice("GPU,1", 1, 1), id="comma-in-uuid"),
        pytest.param(ContainerDevice("GPU;1", 1, 1), id="semicolon-in-uuid"),
        pytest.param(ContainerDevice("GPU[1]", 1, 1), id="bracket-in-uuid"),
        pytest.param(ContainerDevice("", 1, 1), id="empty-uuid"),
        pytest.param(ContainerDevice("GPU-1", 1, 1, type=""), id="empty-type"),
        pytest.param(ContainerDevice("GPU-1", -1, 1), id="negative-mem"),
        pytest.param(ContainerDevice("GPU-1", 1, 2**31), id="cores-over-int32"),
        pytest.param(ContainerDevice("GPU-1", 1, 1, legacy_mig=(-1, 0)), id="negative-legacy-index"),
    ],
)
def test_encode_refuses_unrepresentable_devices(device: ContainerDevice) -> None:
    with pytest.raises(DecodeError):
        encode_pod_devices(((device,),))


@settings(deadline=None)
@given(pod_devices)
def test_pod_devices_round_trip(devices: PodDevices) -> None:
    text = encode_pod_devices(devices)
    assert text.count(";") == len(devices)
    decoded = decode_pod_devices(text)
    assert decoded == (*devices, ())
    assert align_to_containers(decoded, len(devices)) == devices


# --- MIG allocations --------------------------------------------------------------------------------------

_OK = '"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-1","profile":"1g.5gb","placement":{"start":0,"size":1}'


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param("", (), id="empty-string"),
        pytest.param("null", (), id="null"),
        pytest.param("[]", (), id="empty-array"),
        pytest.param(
            "[{" + _OK + ',"gpuInstanceID":null,"computeInstanceID":null,"migUUID":""}]',
            (MigAllocation(0, 0, "GPU-1", "1g.5gb", MigPlacement(0, 1)),),
            id="null-and-empty-runtime-fields-are-absent",
        ),
    ],
)
def test_decode_mig(value: str, expected: tuple[MigAllocation, ...]) -> None:
    assert decode_mig_allocations(value) == expected


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("[{" + _OK.replace('"containerIndex":0', '"containerIndex":-1') + "}]", id="negative-container"),
        pytest.param("[{" + _OK.replace('"deviceIndex":0', '"deviceIndex":-1') + "}]", id="negative-device"),
        pytest.param("[{" + _OK.replace('"GPU-1"', '""') + "}]", id="empty-uuid"),
        pytest.param("[{" + _OK.replace('"1g.5gb"', '""') + "}]", id="empty-profile"),
        pytest.param("[{" + _OK.replace('"size":1', '"size":0') + "}]", id="zero-size"),
        pytest.param('[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"G","profile":"p"}]', id="no-placement"),
        pytest.param("[{" + _OK + ',"migUUID":"MIG-1"}]', id="partial-runtime-uuid-only"),
        pytest.param("[{" + _OK + ',"gpuInstanceID":1,"computeInstanceID":2}]', id="partial-runtime-no-uuid"),
        pytest.param("[{" + _OK + "},{" + _OK + "}]", id="duplicate-indices"),
        pytest.param("[{" + _OK.replace('"deviceIndex":0', '"deviceIndex":0.0') + "}]", id="float-index"),
        pytest.param("[{" + _OK.replace('"deviceIndex":0', '"deviceIndex":"0"') + "}]", id="string-index"),
        pytest.param("[{" + _OK + ',"migUUID":"M","gpuInstanceID":-1,"computeInstanceID":0}]', id="negative-gi"),
        pytest.param("{}", id="object"),
        pytest.param("[", id="truncated"),
    ],
)
def test_decode_mig_rejects(value: str) -> None:
    with pytest.raises(DecodeError) as e:
        decode_mig_allocations(value)
    assert e.value.what.startswith("hami.io/vgpu-mig-allocations")


def test_encode_mig_refuses_invalid() -> None:
    bad = MigAllocation(0, 0, "GPU-1", "1g.5gb", MigPlacement(0, 1), mig_uuid="MIG-1")
    with pytest.raises(DecodeError):
        encode_mig_allocations((bad,))


@settings(deadline=None)
@given(mig_allocations())
def test_mig_round_trip(allocs: tuple[MigAllocation, ...]) -> None:
    assert decode_mig_allocations(encode_mig_allocations(allocs)) == allocs
