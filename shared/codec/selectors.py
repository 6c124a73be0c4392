"""Pod and node annotations that select or order devices (hami-wire §1.4, §2.4, §6.1).

* ``hami.io/device-cordon``: comma list, trimmed, de-duplicated, empty = none.
* ``nvidia.com/use-gputype`` / ``nouse-gputype``: comma list; tokens trimmed, upper-cased (Go's simple case
  mapping), empty tokens dropped. ``use-gpuuuid`` / ``nouse-gpuuuid``: trimmed UUIDs, exact match.
  A blank value means no constraint. A *use* list that is not blank but holds no token (``","``) makes HAMi
  match no device at all; that cannot be expressed as a constraint, so it is a DecodeError.
* ``hami.io/device-scoring-weights``: ``slot=<int>,core=<int>,memory=<int>``, exactly these three keys once
  each, non-negative, at least one > 0; anything else is a DecodeError (HAMi fails Filter for such a pod).
* ``hami.io/node-scheduler-policy`` (``binpack``/``spread``) and ``hami.io/gpu-scheduler-policy`` (a token or a
  comma chain of ``binpack``, ``spread``, ``topology-aware``, ``mutex``, ``numa``), tokens trimmed. An unknown
  token is a DecodeError (HAMi HEAD logs it and falls back to the default; we make the mistake visible).
* ``nvidia.com/numa-bind``: Go ``strconv.ParseBool``; like HAMi, a value that is not a Go boolean means false.
* ``nvidia.com/vgpu-mode``: kept verbatim (a device's mode must be a substring of it).
"""

from __future__ import annotations

from collections.abc import Mapping

from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.codec._go import INT64_MAX, fail, go_upper, parse_bool, parse_int, trim_space
from vgpu_scheduler.shared.domain.model import (
    NO_CONSTRAINTS,
    GpuPolicy,
    GpuPolicyToken,
    NodePolicy,
    PodConstraints,
    ScoringWeights,
)
from vgpu_scheduler.shared.errors import DecodeError

_WEIGHT_KEYS = ("slot", "core", "memory")


def _tokens(value: str) -> list[str]:
    return [t for t in (trim_space(p) for p in value.split(",")) if t]


def _dedupe(items: list[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


def decode_cordon(value: str) -> frozenset[str]:
    """``hami.io/device-cordon`` → the cordoned GPU UUIDs (never fails: any text is a list)."""
    return frozenset(_tokens(value))


def decode_type_list(value: str) -> tuple[str, ...]:
    """A GPU type list → upper-cased, trimmed, non-empty tokens in order, duplicates removed (never fails)."""
    return _dedupe([go_upper(t) for t in _tokens(value)])


def decode_uuid_list(value: str) -> frozenset[str]:
    """A GPU UUID list → trimmed, non-empty UUIDs (never fails)."""
    return frozenset(_tokens(value))


def _use_list_guard(value: str, tokens_found: bool, what: str) -> None:
    if trim_space(value) != "" and not tokens_found:
        fail(what, "list holds no token, so no device could ever match", value)


def decode_scoring_weights(value: str) -> ScoringWeights:
    """``hami.io/device-scoring-weights`` → ScoringWeights, with HAMi's ``ParseDeviceScoringWeights`` rules."""
    what = keys.DEVICE_SCORING_WEIGHTS
    parts = value.split(",")
    if len(parts) != 3:
        fail(what, "expected slot, core, and memory weights", value)
    weights: dict[str, int] = {}
    for part in parts:
        key_value = trim_space(part).split("=", 1)
        if len(key_value) != 2:
            fail(what, "expected key=value entries", part)
        key = trim_space(key_value[0])
        if key in weights:
            fail(what, f"duplicate {key!r} weight", part)
        weight = parse_int(trim_space(key_value[1]), 64, what, part)
        if weight < 0:
            fail(what, f"{key!r} weight must not be negative", part)
        if key not in _WEIGHT_KEYS:
            fail(what, f"unknown weight {key!r}", part)
        weights[key] = weight
    if not any(weights.values()):
        fail(what, "at least one weight must be positive", value)
    return ScoringWeights(slot=weights["slot"], core=weights["core"], memory=weights["memory"])


def encode_scoring_weights(w: ScoringWeights) -> str:
    """``slot=<n>,core=<n>,memory=<n>``; the decoder's rules apply (DecodeError otherwise)."""
    for v in (w.slot, w.core, w.memory):
        if not 0 <= v <= INT64_MAX:
            fail(keys.DEVICE_SCORING_WEIGHTS, "cannot encode a weight outside 0..2^63-1", str(v))
    if not (w.slot or w.core or w.memory):
        fail(keys.DEVICE_SCORING_WEIGHTS, "cannot encode all-zero weights")
    return f"slot={w.slot},core={w.core},memory={w.memory}"


def decode_node_policy(value: str) -> NodePolicy:
    """``binpack`` or ``spread`` (trimmed)."""
    token = trim_space(value)
    for p in NodePolicy:
        if p.value == token:
            return p
    fail(keys.NODE_SCHEDULER_POLICY, f"unknown node scheduler policy {token!r}", value)


def decode_gpu_policy(value: str) -> GpuPolicy:
    """A GPU policy token or comma chain (each token trimmed); any unknown or empty token is a DecodeError."""
    by_value = {t.value: t for t in GpuPolicyToken}
    tokens = []
    for part in value.split(","):
        token = by_value.get(trim_space(part))
        if token is None:
            fail(keys.GPU_SCHEDULER_POLICY, f"unknown GPU scheduler policy token {trim_space(part)!r}", value)
        tokens.append(token)
    return GpuPolicy(tuple(tokens))


def decode_numa_bind(value: str) -> bool:
    """HAMi ``assertNuma``: true only for a Go ``ParseBool`` true; anything unparsable is false."""
    try:
        return parse_bool(value, keys.NUMA_BIND)
    except DecodeError:
        return False


_CONSTRAINT_KEYS = frozenset(
    {
        keys.USE_GPUTYPE,
        keys.NOUSE_GPUTYPE,
        keys.USE_GPUUUID,
        keys.NOUSE_GPUUUID,
        keys.NUMA_BIND,
        keys.VGPU_MODE,
        keys.NODE_SCHEDULER_POLICY,
        keys.GPU_SCHEDULER_POLICY,
        keys.DEVICE_SCORING_WEIGHTS,
    }
)
"""Every annotation :func:`decode_pod_constraints` reads."""


def annotation_text(annotations: Mapping[str, str], key: str) -> str | None:
    """The value of annotation ``key``, None when absent; a value that is not a string is a DecodeError naming
    ``key``."""
    v = annotations.get(key)
    if v is None:
        return None
    if not isinstance(v, str):
        fail(key, f"annotation value must be a string, got {type(v).__name__}")
    return v


def decode_pod_constraints(annotations: Mapping[str, str]) -> PodConstraints:
    """Everything a pod's annotations say about device choice; absent keys leave the defaults."""
    if _CONSTRAINT_KEYS.isdisjoint(annotations):  # most pods: none of them
        return NO_CONSTRAINTS
    a = annotations

    use_types: tuple[str, ...] = ()
    nouse_types: tuple[str, ...] = ()
    use_uuids: frozenset[str] = frozenset()
    nouse_uuids: frozenset[str] = frozenset()
    if (v := annotation_text(a, keys.USE_GPUTYPE)) is not None:
        use_types = decode_type_list(v)
        _use_list_guard(v, bool(use_types), keys.USE_GPUTYPE)
    if (v := annotation_text(a, keys.NOUSE_GPUTYPE)) is not None:
        nouse_types = decode_type_list(v)
    if (v := annotation_text(a, keys.USE_GPUUUID)) is not None:
        use_uuids = decode_uuid_list(v)
        _use_list_guard(v, bool(use_uuids), keys.USE_GPUUUID)
    if (v := annotation_text(a, keys.NOUSE_GPUUUID)) is not None:
        nouse_uuids = decode_uuid_list(v)
    numa = annotation_text(a, keys.NUMA_BIND)
    node_policy = annotation_text(a, keys.NODE_SCHEDULER_POLICY)
    gpu_policy = annotation_text(a, keys.GPU_SCHEDULER_POLICY)
    weights = annotation_text(a, keys.DEVICE_SCORING_WEIGHTS)
    return PodConstraints(
        use_types=use_types,
        nouse_types=nouse_types,
        use_uuids=use_uuids,
        nouse_uuids=nouse_uuids,
        numa_bind=decode_numa_bind(numa) if numa is not None else False,
        vgpu_mode=annotation_text(a, keys.VGPU_MODE),
        node_policy=decode_node_policy(node_policy) if node_policy is not None else None,
        gpu_policy=decode_gpu_policy(gpu_policy) if gpu_policy is not None else None,
        weights=decode_scoring_weights(weights) if weights is not None else ScoringWeights(),
    )
