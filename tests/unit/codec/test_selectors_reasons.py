"""Pod/node selector annotations and filter reason strings."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.codec.strategies import text_without
from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.codec.reasons import ReasonCount, gen_reason, parse_reason
from vgpu_scheduler.shared.codec.selectors import (
    decode_cordon,
    decode_gpu_policy,
    decode_node_policy,
    decode_numa_bind,
    decode_pod_constraints,
    decode_scoring_weights,
    decode_type_list,
    decode_uuid_list,
    encode_scoring_weights,
)
from vgpu_scheduler.shared.domain.model import (
    NO_CONSTRAINTS,
    GpuPolicy,
    GpuPolicyToken,
    NodePolicy,
    PodConstraints,
    Reason,
    ScoringWeights,
)
from vgpu_scheduler.shared.errors import DecodeError


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("", frozenset()),
        ("  ", frozenset()),
        ("GPU-a", frozenset({"GPU-a"})),
        (" GPU-a , GPU-b,GPU-a,, ", frozenset({"GPU-a", "GPU-b"})),
        ("\u3000GPU-a\t", frozenset({"GPU-a"})),
    ],
)
def test_cordon(value: str, expected: frozenset[str]) -> None:
    assert decode_cordon(value) == expected


def test_type_and_uuid_lists() -> None:
    assert decode_type_list(" a100 ,V100,,a100") == ("A100", "V100")
    assert decode_type_list("straße") == ("STRAßE",)  # Go's simple case mapping, not "STRASSE"
    assert decode_uuid_list(" GPU-a ,, GPU-b ") == frozenset({"GPU-a", "GPU-b"})
    assert decode_type_list("\x1fa100") == ("\x1fA100",)  # Go's TrimSpace keeps \x1f


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("slot=1,core=1,memory=3", ScoringWeights(1, 1, 3)),
        ("memory=0,slot=2,core=0", ScoringWeights(2, 0, 0)),
        (" slot = 2 , core=+0,\tmemory=1 ", ScoringWeights(2, 0, 1)),
        ("slot=-0,core=0,memory=9223372036854775807", ScoringWeights(0, 0, 2**63 - 1)),
    ],
)
def test_scoring_weights(value: str, expected: ScoringWeights) -> None:
    assert decode_scoring_weights(value) == expected


@pytest.mark.parametrize(
    "value",
    [
        "",
        "slot=1,core=1",
        "slot=1,core=1,memory=1,extra=1",
        "slot=1,slot=1,memory=1",
        "slot=a,core=1,memory=1",
        "slot=1.5,core=1,memory=1",
        "slot=-1,core=1,memory=1",
        "gpu=1,core=1,memory=1",
        "slot=0,core=0,memory=0",
        "slot,core,memory",
        "slot=1,core=1,memory=9223372036854775808",
        "SLOT=1,core=1,memory=1",
    ],
)
def test_scoring_weights_rejects(value: str) -> None:
    with pytest.raises(DecodeError) as e:
        decode_scoring_weights(value)
    assert e.value.what == keys.DEVICE_SCORING_WEIGHTS


@settings(deadline=None)
@given(st.builds(ScoringWeights, st.integers(0, 2**63 - 1), st.integers(0, 2**63 - 1), st.integers(0, 2**63 - 1)))
def test_scoring_weights_round_trip(w: ScoringWeights) -> None:
    if w.slot or w.core or w.memory:
        assert decode_scoring_weights(encode_scoring_weights(w)) == w
    else:
        with pytest.raises(DecodeError):
            encode_scoring_weights(w)


def test_policies() -> None:
    assert decode_node_policy(" spread ") is NodePolicy.SPREAD
    assert decode_gpu_policy("topology-aware") == GpuPolicy((GpuPolicyToken.TOPOLOGY_AWARE,))
    assert decode_gpu_policy(" binpack , numa") == GpuPolicy((GpuPolicyToken.BINPACK, GpuPolicyToken.NUMA))
    for bad in ("", "binpak", "topology-aware,", "Binpack", "mutex,,numa"):
        with pytest.raises(DecodeError):
            decode_gpu_policy(bad)
    for bad in ("", "numa", "binpack,spread"):
        with pytest.raises(DecodeError):
            decode_node_policy(bad)


@settings(deadline=None)
@given(st.lists(st.sampled_from(list(GpuPolicyToken)), min_size=1, max_size=4))
def test_gpu_policy_round_trip(tokens: list[GpuPolicyToken]) -> None:
    policy = GpuPolicy(tuple(tokens))
    assert decode_gpu_policy(str(policy)) == policy


@pytest.mark.parametrize("value", ["1", "t", "T", "TRUE", "true", "True"])
def test_numa_bind_true(value: str) -> None:
    assert decode_numa_bind(value) is True


@pytest.mark.parametrize("value", ["0", "f", "false", "yes", " true", "tRUE", ""])
def test_numa_bind_false_or_unparsable(value: str) -> None:
    assert decode_numa_bind(value) is False


def test_pod_constraints_full() -> None:
    annos = {
        keys.USE_GPUTYPE: "a100, h100",
        keys.NOUSE_GPUTYPE: "mig",
        keys.USE_GPUUUID: "GPU-a,GPU-b",
        keys.NOUSE_GPUUUID: "GPU-c",
        keys.NUMA_BIND: "true",
        keys.VGPU_MODE: "hami-core,mig",
        keys.NODE_SCHEDULER_POLICY: "spread",
        keys.GPU_SCHEDULER_POLICY: "binpack,numa",
        keys.DEVICE_SCORING_WEIGHTS: "slot=1,core=0,memory=2",
        "unrelated.io/x": "y",
    }
    assert decode_pod_constraints(annos) == PodConstraints(
        use_types=("A100", "H100"),
        nouse_types=("MIG",),
        use_uuids=frozenset({"GPU-a", "GPU-b"}),
        nouse_uuids=frozenset({"GPU-c"}),
        numa_bind=True,
        vgpu_mode="hami-core,mig",
        node_policy=NodePolicy.SPREAD,
        gpu_policy=GpuPolicy((GpuPolicyToken.BINPACK, GpuPolicyToken.NUMA)),
        weights=ScoringWeights(1, 0, 2),
    )


def test_pod_constraints_defaults() -> None:
    assert decode_pod_constraints({}) == NO_CONSTRAINTS
    assert decode_pod_constraints({keys.USE_GPUTYPE: " ", keys.NOUSE_GPUUUID: ","}) == NO_CONSTRAINTS
    assert decode_pod_constraints({"unrelated.io/x": "y", keys.VGPU_MODE: None}) == NO_CONSTRAINTS  # type: ignore[dict-item]


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (keys.USE_GPUTYPE, "a100"),
        (keys.NOUSE_GPUTYPE, "mig"),
        (keys.USE_GPUUUID, "GPU-a"),
        (keys.NOUSE_GPUUUID, "GPU-c"),
        (keys.NUMA_BIND, "true"),
        (keys.VGPU_MODE, "hami-core"),
        (keys.NODE_SCHEDULER_POLICY, "spread"),
        (keys.GPU_SCHEDULER_POLICY, "binpack"),
        (keys.DEVICE_SCORING_WEIGHTS, "slot=1,core=0,memory=2"),
    ],
)
def test_pod_constraints_each_annotation_alone_counts(key: str, value: str) -> None:
    """No annotation is skipped by the shortcut for pods that carry none of them."""
    assert decode_pod_constraints({"unrelated.io/x": "y", key: value}) != NO_CONSTRAINTS


@pytest.mark.parametrize(
    ("annos", "what"),
    [
        pytest.param({keys.USE_GPUTYPE: ","}, keys.USE_GPUTYPE, id="use-type-list-without-tokens"),
        pytest.param({keys.USE_GPUUUID: " , "}, keys.USE_GPUUUID, id="use-uuid-list-without-tokens"),
        pytest.param({keys.DEVICE_SCORING_WEIGHTS: "slot=1"}, keys.DEVICE_SCORING_WEIGHTS, id="bad-weights"),
        pytest.param({keys.GPU_SCHEDULER_POLICY: "fastest"}, keys.GPU_SCHEDULER_POLICY, id="bad-gpu-policy"),
        pytest.param({keys.NODE_SCHEDULER_POLICY: "fastest"}, keys.NODE_SCHEDULER_POLICY, id="bad-node-policy"),
        pytest.param({keys.VGPU_MODE: 3}, keys.VGPU_MODE, id="non-string-value"),
    ],
)
def test_pod_constraints_rejects(annos: dict[str, object], what: str) -> None:
    with pytest.raises(DecodeError) as e:
        decode_pod_constraints(annos)  # type: ignore[arg-type]
    assert e.value.what == what


# --- reasons --------------------------------------------------------------------------------------------


def test_gen_reason_sorts_entries_as_strings() -> None:
    mixed: dict[Reason | str, int] = {"B": 10, Reason.CARD_NOT_HEALTH: 2, "A": 2}
    assert gen_reason(mixed, 12) == "10/12 B, 2/12 A, 2/12 CardNotHealth"
    assert gen_reason({}, 4) == ""
    with_zero: dict[Reason | str, int] = {Reason.NUMA_NOT_FIT: 0, "A": 1}
    assert gen_reason(with_zero, 4) == "1/4 A"  # as the domain's: zero counts are left out


def test_reason_count_known() -> None:
    assert parse_reason("1/2 CardCordoned")[0].known is Reason.CARD_CORDONED
    assert parse_reason("1/2 CardUnhealthy")[0].known is Reason.CARD_UNHEALTHY  # MetaX sGPU's word
    assert parse_reason("1/2 CardAbsent")[0].known is None


@pytest.mark.parametrize(
    "text", ["node unregistered", "2/4", "2/4 Card Foo", "a/4 X", "2/4 X,2/4 Y", "2/4  X", " 2/4 X"]
)
def test_parse_reason_rejects(text: str) -> None:
    with pytest.raises(DecodeError):
        parse_reason(text)


def test_gen_reason_refuses_unencodable() -> None:
    for counts in ({"two words": 1}, {"": 1}, {"a,b": 1}, {"A": -1}):
        with pytest.raises(DecodeError):
            gen_reason(counts, 4)


@settings(deadline=None)
@given(
    st.dictionaries(
        text_without(", \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f\x85\xa0", min_size=1).filter(
            lambda s: not any(c.isspace() for c in s)
        ),
        st.integers(0, 10**18 - 1),
        max_size=6,
    ),
    st.integers(0, 10**18 - 1),
)
def test_reason_round_trip(counts: dict[str, int], total: int) -> None:
    parsed = parse_reason(gen_reason(counts, total))
    assert sorted(parsed, key=lambda r: r.reason) == sorted(
        (ReasonCount(r, c, total) for r, c in counts.items() if c > 0), key=lambda r: r.reason
    )
