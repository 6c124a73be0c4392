"""The pure NVIDIA vendor: register/topology/cordon decoding and liveness (hami-wire §2, differences 1 and 9)."""

from __future__ import annotations

import ast
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vgpu_scheduler.services.registrar.nvidia import NvidiaVendor
from vgpu_scheduler.services.registrar.vendor import (
    DecodeFailure,
    HandshakeState,
    Invalid,
    NodeView,
    NotRegistered,
    Registered,
    Unregistered,
    judge_handshake,
)
from vgpu_scheduler.shared.codec.handshake import format_deleted, format_requesting
from vgpu_scheduler.shared.domain.model import DeviceInfo, NvidiaConfig

NOW = datetime(2025, 6, 13, 9, 7, 40)
REGISTER = "hami.io/node-nvidia-register"
SCORE = "hami.io/node-nvidia-score"
HANDSHAKE = "hami.io/node-handshake"
CORDON = "hami.io/device-cordon"

UUID_A = "GPU-00552014-5c87-89ac-b1a6-7b53aa24b0ec"
UUID_B = "GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448"
JSON_2 = (
    f'[{{"id":"{UUID_A}","count":10,"devmem":32768,"devcore":100,"type":"NVIDIA-Tesla V100-PCIE-32GB",'
    f'"mode":"hami-core","health":true}},{{"id":"{UUID_B}","index":1,"count":10,"devmem":32768,"devcore":100,'
    f'"type":"NVIDIA-Tesla V100-PCIE-32GB","numa":1,"mode":"hami-core","health":true}}]'
)
COLON_9 = (
    f"{UUID_A},10,32768,100,NVIDIA-Tesla V100-PCIE-32GB,0,true,0,hami-core:"
    f"{UUID_B},10,32768,100,NVIDIA-Tesla V100-PCIE-32GB,0,true,1,hami-core:"
)
T = "NVIDIA-Tesla V100-PCIE-32GB"
COLON_7 = f"{UUID_A},10,32768,100,{T},0,true:{UUID_B},10,32768,100,{T},0,true:"


def view(annotations: dict[str, str], allocatable: Any = "4", *, resource: str = "nvidia.com/gpu") -> NodeView:
    alloc = {} if allocatable is None else {resource: allocatable}
    return NodeView(name="n1", resource_version="7", annotations=annotations, allocatable=alloc)


def observe(annotations: dict[str, str], allocatable: Any = "4", **kw: Any) -> Any:
    return NvidiaVendor().observe(view(annotations, allocatable), NOW, **kw)


def device(uuid: str, index: int, numa: int = 0) -> DeviceInfo:
    return DeviceInfo(
        id=uuid,
        index=index,
        count=10,
        devmem_mib=32768,
        devcore=100,
        type="NVIDIA-Tesla V100-PCIE-32GB",
        numa=numa,
        mode="hami-core",
        health=True,
    )


# ---- register formats ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected", "legacy"),
    [
        pytest.param(JSON_2, (device(UUID_A, 0), device(UUID_B, 1, numa=1)), False, id="json-v2.8+"),
        pytest.param(COLON_9, (device(UUID_A, 0), device(UUID_B, 1)), True, id="colon-9-field-v2.5-v2.7"),
        pytest.param(COLON_7, (device(UUID_A, 0), device(UUID_B, 0)), True, id="colon-7-field-v2.4"),
    ],
)
def test_every_register_format_decodes(value: str, expected: tuple[DeviceInfo, ...], legacy: bool) -> None:
    obs = observe({REGISTER: value}, "20")
    assert isinstance(obs, Registered)
    assert obs.inventory.node == "n1"
    assert obs.inventory.vendor == "NVIDIA"
    assert obs.inventory.devices == expected
    assert obs.legacy is legacy


@pytest.mark.parametrize(
    ("annotations", "reason"),
    [
        pytest.param({}, Unregistered.ABSENT, id="no-annotation"),
        pytest.param({REGISTER: "[]"}, Unregistered.NO_DEVICES, id="empty-json-array"),
        pytest.param({REGISTER: "  [ ] "}, Unregistered.NO_DEVICES, id="empty-json-array-blanks"),
    ],
)
def test_unregistered(annotations: dict[str, str], reason: Unregistered) -> None:
    obs = observe(annotations)
    assert isinstance(obs, NotRegistered)
    assert obs.reason is reason


@pytest.mark.parametrize(
    ("annotations", "allocatable", "failure", "source"),
    [
        pytest.param({REGISTER: "garbage"}, "4", DecodeFailure.REGISTER, REGISTER, id="neither-json-nor-colon"),
        pytest.param({REGISTER: '[{"id":"GPU-a","count":"x"}]'}, "4", DecodeFailure.REGISTER, REGISTER, id="json-type"),
        pytest.param({REGISTER: "[{"}, "4", DecodeFailure.REGISTER, REGISTER, id="torn-json"),
        pytest.param({REGISTER: "GPU-a,1,2,3,T4:"}, "4", DecodeFailure.REGISTER, REGISTER, id="colon-5-fields"),
        pytest.param({REGISTER: JSON_2, SCORE: "{not json"}, "4", DecodeFailure.TOPOLOGY, SCORE, id="bad-topology"),
        pytest.param({REGISTER: JSON_2, SCORE: '{"a":1}'}, "4", DecodeFailure.TOPOLOGY, SCORE, id="topology-object"),
        pytest.param(
            {REGISTER: JSON_2}, "four", DecodeFailure.ALLOCATABLE, "status.allocatable[nvidia.com/gpu]", id="alloc"
        ),
    ],
)
def test_malformed_values_are_invalid(
    annotations: dict[str, str], allocatable: str, failure: DecodeFailure, source: str
) -> None:
    obs = observe(annotations, allocatable)
    assert isinstance(obs, Invalid)
    assert obs.failure is failure
    assert obs.source == source
    assert obs.value == (annotations.get(source) or allocatable)
    assert source.split("[", maxsplit=1)[0] in str(obs.error) or obs.error.what == source


def test_topology_scores_become_pair_scores() -> None:
    score = f'[{{"uuid":"{UUID_A}","score":{{"{UUID_B}":1260}}}},{{"uuid":"{UUID_B}","score":{{"{UUID_A}":1260}}}}]'
    obs = observe({REGISTER: JSON_2, SCORE: score})
    assert isinstance(obs, Registered)
    assert obs.inventory.pair_scores == {UUID_A: {UUID_B: 1260}, UUID_B: {UUID_A: 1260}}


def test_null_topology_is_empty() -> None:
    obs = observe({REGISTER: JSON_2, SCORE: "null"})
    assert isinstance(obs, Registered)
    assert obs.inventory.pair_scores == {}


@pytest.mark.parametrize(
    ("cordon", "expected"),
    [
        pytest.param(f" {UUID_A} ,{UUID_A},", frozenset({UUID_A}), id="trimmed-deduplicated"),
        pytest.param("", frozenset(), id="empty"),
        pytest.param(f"{UUID_B},GPU-not-here", frozenset({UUID_B}), id="unknown-uuid-ignored"),
    ],
)
def test_cordon(cordon: str, expected: frozenset[str]) -> None:
    obs = observe({REGISTER: JSON_2, CORDON: cordon})
    assert isinstance(obs, Registered)
    assert obs.inventory.cordoned == expected


# ---- liveness ----------------------------------------------------------------------------------------------------


def at(delta_s: float) -> datetime:
    return NOW + timedelta(seconds=delta_s)


@pytest.mark.parametrize(
    ("allocatable", "live"),
    [
        pytest.param("4", True, id="4"),
        pytest.param("1k", True, id="quantity-suffix"),
        pytest.param("0", False, id="zero"),
        pytest.param(None, False, id="missing"),
    ],
)
def test_json_plugin_liveness_is_allocatable(allocatable: str | None, live: bool) -> None:
    # a HEAD HAMi scheduler's leftover Requesting_ is not consulted for a JSON plugin
    obs = observe({REGISTER: JSON_2, HANDSHAKE: format_requesting(NOW)}, allocatable)
    assert isinstance(obs, Registered) is live
    if not live:
        assert obs == NotRegistered(Unregistered.NO_ALLOCATABLE, legacy=False)
    else:
        assert obs.handshake is None


def test_configured_count_resource_is_judged() -> None:
    vendor = NvidiaVendor(NvidiaConfig(resource_count_name="example.com/vgpu"))
    assert isinstance(vendor.observe(view({REGISTER: JSON_2}, "2", resource="example.com/vgpu"), NOW), Registered)
    assert isinstance(vendor.observe(view({REGISTER: JSON_2}, "2"), NOW), NotRegistered)


REQUESTING = format_requesting(NOW)
REPORTED = "Reported 2024-01-23 04:30:04.434037031 +0000 UTC m=+1104711.777756895"


@pytest.mark.parametrize(
    ("register", "handshake", "now", "allocatable", "outcome", "write"),
    [
        pytest.param(COLON_9, None, NOW, "0", "live", True, id="absent-requested-live"),
        pytest.param(COLON_9, REPORTED, NOW, "0", "live", True, id="reported-answered-live"),
        pytest.param(COLON_9, format_deleted(at(-3600)), NOW, "0", "live", True, id="deleted-re-requested"),
        pytest.param(COLON_9, "Requesting_garbage", NOW, "0", "live", True, id="garbled-requesting-re-requested"),
        pytest.param(COLON_9, REQUESTING, at(59), "0", "live", False, id="requesting-fresh"),
        pytest.param(COLON_9, REQUESTING, at(60), "0", Unregistered.HANDSHAKE_TIMEOUT, False, id="requesting-60s"),
        pytest.param(COLON_9, REQUESTING, at(3600), "2", "live", False, id="requesting-stale-allocatable"),
        pytest.param(COLON_7, REQUESTING, at(61), None, Unregistered.HANDSHAKE_TIMEOUT, False, id="7-field-stale"),
        pytest.param(JSON_2, REPORTED, NOW, "0", "live", True, id="json-plugin-that-reports"),
    ],
)
def test_legacy_handshake(
    register: str, handshake: str | None, now: datetime, allocatable: str | None, outcome: Any, write: bool
) -> None:
    annotations = {REGISTER: register} | ({HANDSHAKE: handshake} if handshake is not None else {})
    obs = NvidiaVendor().observe(view(annotations, allocatable), now)
    if outcome == "live":
        assert isinstance(obs, Registered)
        assert obs.legacy
        assert obs.handshake == (format_requesting(now) if write else None)
        assert obs.reporter == (handshake == REPORTED)
    else:
        assert obs == NotRegistered(outcome, legacy=True)


def test_reporter_memory_keeps_a_json_plugin_on_the_handshake() -> None:
    annotations = {REGISTER: JSON_2, HANDSHAKE: REQUESTING}
    stale = at(120)
    assert NvidiaVendor().observe(view(annotations, "0"), stale) == NotRegistered(Unregistered.NO_ALLOCATABLE)
    obs = NvidiaVendor().observe(view(annotations, "0"), stale, reported_before=True)
    assert obs == NotRegistered(Unregistered.HANDSHAKE_TIMEOUT, legacy=True)
    fresh = NvidiaVendor().observe(view(annotations, "0"), at(30), reported_before=True)
    assert isinstance(fresh, Registered) and fresh.handshake is None


def test_timeout_is_configurable() -> None:
    vendor = NvidiaVendor(handshake_timeout_s=300)
    assert isinstance(vendor.observe(view({REGISTER: COLON_9, HANDSHAKE: REQUESTING}, "0"), at(299)), Registered)


def test_empty_legacy_node_writes_no_handshake() -> None:
    assert observe({REGISTER: ":"}, "0") == NotRegistered(Unregistered.NO_DEVICES, legacy=True)


@pytest.mark.parametrize(
    ("value", "state"),
    [
        pytest.param(None, HandshakeState.ANSWER, id="absent"),
        pytest.param(REQUESTING, HandshakeState.AWAITING, id="fresh"),
        pytest.param(format_requesting(at(-61)), HandshakeState.EXPIRED, id="stale"),
        pytest.param(format_requesting(at(3600)), HandshakeState.AWAITING, id="future-clock-skew"),
        pytest.param("Requesting_2006.01.02 15:04:05", HandshakeState.EXPIRED, id="v2.4-dotted-layout"),
    ],
)
def test_judge_handshake(value: str | None, state: HandshakeState) -> None:
    assert judge_handshake(value, NOW).state is state


# ---- robustness and purity ----------------------------------------------------------------------------------------


@given(
    register=st.one_of(st.none(), st.text(max_size=60), st.sampled_from([JSON_2, COLON_9, COLON_7, "[]"])),
    score=st.one_of(st.none(), st.text(max_size=40)),
    handshake=st.one_of(st.none(), st.text(max_size=40), st.just(REQUESTING)),
    cordon=st.one_of(st.none(), st.text(max_size=40)),
    allocatable=st.one_of(st.none(), st.text(max_size=8), st.integers(-5, 5)),
)
def test_observe_never_raises(
    register: str | None, score: str | None, handshake: str | None, cordon: str | None, allocatable: Any
) -> None:
    annotations = {
        k: v
        for k, v in ((REGISTER, register), (SCORE, score), (HANDSHAKE, handshake), (CORDON, cordon))
        if v is not None
    }
    obs = observe(annotations, allocatable)
    assert isinstance(obs, Registered | NotRegistered | Invalid)
    if isinstance(obs, Registered):
        assert obs.inventory.devices
        assert obs.inventory.cordoned <= {d.id for d in obs.inventory.devices}


def test_node_view_of_tolerates_partial_objects() -> None:
    assert NodeView.of({}) == NodeView(name="", resource_version="", annotations={}, allocatable={})
    v = NodeView.of(
        {
            "metadata": {"name": "n", "resourceVersion": "3", "annotations": {"a": "b", "bad": 1}},
            "status": {"allocatable": {"nvidia.com/gpu": "2"}},
        }
    )
    assert v == NodeView(name="n", resource_version="3", annotations={"a": "b"}, allocatable={"nvidia.com/gpu": "2"})


PURE = ("vendor.py", "nvidia.py")
IO_MODULES = (
    "asyncio",
    "logging",
    "redis",
    "aiohttp",
    "kubernetes_asyncio",
    "vgpu_scheduler.shared.store",
    "vgpu_scheduler.shared.k8s",
    "socket",
)


@pytest.mark.parametrize("name", PURE)
def test_vendor_modules_are_pure(name: str) -> None:
    path = Path(__file__).resolve().parents[3] / "services" / "registrar" / name
    imported: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            imported.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module)
    assert sorted(m for m in imported if any(m == f or m.startswith(f + ".") for f in IO_MODULES)) == []
