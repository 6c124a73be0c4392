"""``hami.io/node-nvidia-register``: both encodings, Go JSON rules, strictness, round trips."""

from __future__ import annotations

import pytest
from hypothesis import given, settings

from tests.unit.codec.strategies import colon_device_lists, json_device_lists
from vgpu_scheduler.shared.codec.register import decode_register, encode_register_colon, encode_register_json, is_json
from vgpu_scheduler.shared.domain.model import DeviceInfo, MigProfile
from vgpu_scheduler.shared.errors import DecodeError

GPU = DeviceInfo("GPU-1", 0, 10, 1024, 100, "NVIDIA-T4", 0, "hami-core", True)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param("[]", (), id="empty-array-no-gpu"),
        pytest.param(' \n\t[{"id":"GPU-1"}]', (DeviceInfo("GPU-1", 0, 0, 0, 0, "", 0, "", False),), id="blank-first"),
        pytest.param('[{"id":"GPU-1","health":null}]', (DeviceInfo("GPU-1", 0, 0, 0, 0, "", 0, "", False),), id="null"),
        pytest.param(
            '[{"ID":"GPU-1","COUNT":10,"DevMem":1024,"devcore":100,"Type":"NVIDIA-T4","Mode":"hami-core","Health":true}]',
            (GPU,),
            id="keys-case-insensitive",
        ),
        pytest.param(
            '[{"id":"GPU-1","count":10,"devmem":1024,"devcore":100,"type":"NVIDIA-T4","mode":"hami-core",'
            '"health":true,"custominfo":{"a":[1,2.5]},"devicevendor":"NVIDIA","future":null}]',
            (GPU,),
            id="unknown-keys-ignored",
        ),
        pytest.param(
            '[{"id":"GPU-1","count":3,"count":10,"devmem":1024,"devcore":100,"type":"NVIDIA-T4","mode":"hami-core",'
            '"health":true}]',
            (GPU,),
            id="later-duplicate-wins",
        ),
        pytest.param(
            '[{"id":"GPU-1","count":10,"count":null,"devmem":1024,"devcore":100,"type":"NVIDIA-T4","mode":"hami-core",'
            '"health":true}]',
            (GPU,),
            id="later-null-duplicate-leaves-value",
        ),
        pytest.param(
            '[{"id":"G","migProfiles":[{"name":"1g.5gb","placements":null}]}]',
            (DeviceInfo("G", 0, 0, 0, 0, "", 0, "", False, (MigProfile("1g.5gb", 0, 0, 0, ()),)),),
            id="profile-defaults",
        ),
        pytest.param(
            '[{"id":"GPU-1","type":"\\u003cT4\\u003e \\ud800"}]',
            (DeviceInfo("GPU-1", 0, 0, 0, 0, "<T4> \ufffd", 0, "", False),),
            id="escapes-and-lone-surrogate",
        ),
    ],
)
def test_decode_json(value: str, expected: tuple[DeviceInfo, ...]) -> None:
    assert decode_register(value) == expected


@pytest.mark.parametrize(
    ("value", "what"),
    [
        pytest.param("[", "hami.io/node-nvidia-register", id="truncated"),
        pytest.param('{"id":"GPU-1"}', "hami.io/node-nvidia-register", id="object-not-array"),
        pytest.param("[null]", "hami.io/node-nvidia-register[0]", id="null-device"),
        pytest.param('[{"id":"G","count":10.0}]', "hami.io/node-nvidia-register[0].count", id="float-count"),
        pytest.param('[{"id":"G","count":1e1}]', "hami.io/node-nvidia-register[0].count", id="exponent-count"),
        pytest.param('[{"id":"G","count":2147483648}]', "hami.io/node-nvidia-register[0].count", id="count-int32"),
        pytest.param('[{"id":"G","devmem":"1024"}]', "hami.io/node-nvidia-register[0].devmem", id="string-devmem"),
        pytest.param('[{"id":"G","index":-1}]', "hami.io/node-nvidia-register[0].index", id="negative-index"),
        pytest.param('[{"id":"G","health":"true"}]', "hami.io/node-nvidia-register[0].health", id="string-health"),
        pytest.param('[{"id":"G","count":NaN}]', "hami.io/node-nvidia-register", id="nan"),
        pytest.param('[{"id":7}]', "hami.io/node-nvidia-register[0].id", id="numeric-id"),
        pytest.param('[{"count":1}]', "hami.io/node-nvidia-register", id="empty-id"),
        pytest.param('[{"id":"G"},{"id":"G"}]', "hami.io/node-nvidia-register", id="duplicate-id"),
        pytest.param(
            '[{"id":"G","migProfiles":[{"placements":[{"start":-1,"size":1}]}]}]',
            "hami.io/node-nvidia-register[0].migProfiles[0].placements[0].start",
            id="negative-placement",
        ),
        pytest.param('[{"id":"G","migProfiles":{}}]', "hami.io/node-nvidia-register[0].migProfiles", id="profiles-obj"),
        pytest.param("[]x", "hami.io/node-nvidia-register", id="trailing-data"),
    ],
)
def test_decode_json_rejects(value: str, what: str) -> None:
    with pytest.raises(DecodeError) as e:
        decode_register(value)
    assert e.value.what == what


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("", id="empty"),
        pytest.param("GPU-1,10,1024,100,T4,0,true", id="no-colon"),
        pytest.param("GPU-1:", id="segment-without-comma"),
        pytest.param("GPU-1,10,1024,100,T4,0,true,0:", id="eight-fields"),
        pytest.param("GPU-1,1.5,1024,100,T4,0,true:", id="fractional-count"),
        pytest.param("GPU-1,10,4294967296,100,T4,0,true:", id="devmem-int32"),
        pytest.param("GPU-1,10,1024,100,T4,0,yes:", id="health-not-go-bool"),
        pytest.param("GPU-1,10,1024,100,T4,0,true,-1,hami-core:", id="negative-index"),
        pytest.param("GPU-1,10,1024,100,T4,x,true:", id="numa-not-int"),
        pytest.param("GPU-1,10, 1024,100,T4,0,true:", id="space-in-number"),
        pytest.param(",10,1024,100,T4,0,true:", id="empty-id"),
    ],
)
def test_decode_colon_rejects(value: str) -> None:
    with pytest.raises(DecodeError):
        decode_register(value)


def test_decode_colon_go_number_forms() -> None:
    (dev,) = decode_register("::GPU-1,+10,1024,100,T4,-1,T,0,mig::")
    assert (dev.count, dev.numa, dev.health, dev.mode) == (10, -1, True, "mig")


def test_detection_by_first_non_blank_character() -> None:
    assert is_json("  [") and not is_json("GPU-1,...:") and not is_json("")


def test_encode_json_escapes_like_go() -> None:
    dev = DeviceInfo("GPU-<&>", 0, 0, 0, 0, 'a"b\\c\n\u2028\x01\x7f', 0, "", False)
    text = encode_register_json((dev,))
    assert text == '[{"id":"GPU-\\u003c\\u0026\\u003e","type":"a\\"b\\\\c\\n\\u2028\\u0001\x7f"}]'
    assert decode_register(text) == (dev,)


@pytest.mark.parametrize(
    ("devices", "fields"),
    [
        pytest.param((DeviceInfo("GPU-1", 0, 1, 1, 1, "a,b", 0, "hami-core", True),), 9, id="comma-in-type"),
        pytest.param((DeviceInfo("GPU:1", 0, 1, 1, 1, "t", 0, "hami-core", True),), 9, id="colon-in-id"),
        pytest.param((DeviceInfo("", 0, 1, 1, 1, "t", 0, "hami-core", True),), 9, id="empty-id"),
        pytest.param((DeviceInfo("[x", 0, 1, 1, 1, "t", 0, "hami-core", True),), 9, id="looks-like-json"),
        pytest.param((DeviceInfo("G", 1, 1, 1, 1, "t", 0, "hami-core", True),), 7, id="index-in-7-fields"),
        pytest.param((DeviceInfo("G", 0, 1, 1, 1, "t", 0, "mig", True),), 7, id="mode-in-7-fields"),
        pytest.param(
            (DeviceInfo("G", 0, 1, 1, 1, "t", 0, "mig", True, (MigProfile("1g", 1, 1, 1, ()),)),), 9, id="mig-profiles"
        ),
    ],
)
def test_encode_colon_refuses_what_the_format_cannot_carry(devices: tuple[DeviceInfo, ...], fields: int) -> None:
    with pytest.raises(DecodeError):
        encode_register_colon(devices, fields)


@settings(deadline=None)
@given(json_device_lists)
def test_json_round_trip(devices: tuple[DeviceInfo, ...]) -> None:
    assert decode_register(encode_register_json(devices)) == devices


@settings(deadline=None)
@given(colon_device_lists(9))
def test_colon_9_round_trip(devices: tuple[DeviceInfo, ...]) -> None:
    text = encode_register_colon(devices, 9)
    if devices:
        assert decode_register(text) == devices
    else:
        assert text == ""


@settings(deadline=None)
@given(colon_device_lists(7))
def test_colon_7_round_trip(devices: tuple[DeviceInfo, ...]) -> None:
    text = encode_register_colon(devices, 7)
    if devices:
        assert decode_register(text) == devices
        assert all(len(seg.split(",")) == 7 for seg in text.split(":") if seg)
