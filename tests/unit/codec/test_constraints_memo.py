"""Decoded scheduling annotations are kept per annotation set (``Vendors.constraints_memo``): the webhook and
``/filter`` decode every pod, and a workload's pods share their annotations. What is kept must be exactly what a
fresh decoding gives, refusals are never kept, and the memo stays bounded."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from vgpu_scheduler.shared.domain.model import PodConstraints
from vgpu_scheduler.shared.errors import DecodeError
from vgpu_scheduler.shared.vendors import pods
from vgpu_scheduler.shared.vendors.catalog import all_vendors
from vgpu_scheduler.shared.vendors.pods import decode_vendor_constraints
from vgpu_scheduler.shared.vendors.registry import Vendors

_KEYS = (
    "nvidia.com/use-gputype",
    "nvidia.com/nouse-gpuuuid",
    "hygon.com/use-dcutype",
    "cambricon.com/use-mlutype",
    "amd.com/use-gpu-uuid",
    "hami.io/use-xpu-uuid",
    "baidu.com/nouse-gpuuuid",
    "aws.amazon.com/use-neuron-uuid",
    "hami.io/node-scheduler-policy",
    "hami.io/gpu-scheduler-policy",
    "hami.io/numa-bind",
    "example.com/other",
)
_VALUES = st.sampled_from(["", "A100", "GPU-1,GPU-2", ",", " ", "binpack", "spread", "true", "bogus", "1"])
_ANNOTATIONS = st.dictionaries(st.sampled_from(_KEYS), _VALUES, max_size=4)
SHARED = all_vendors()


def _decode(annotations: dict[str, str], vendors: Vendors) -> PodConstraints | str:
    try:
        return decode_vendor_constraints(annotations, vendors)
    except DecodeError as e:
        return f"refused: {e}"


@given(st.lists(_ANNOTATIONS, min_size=1, max_size=6))
def test_a_kept_decoding_is_what_a_fresh_one_gives(seen: list[dict[str, str]]) -> None:
    for annos in seen + seen:  # each set twice: the second comes from the memo when it decoded
        fresh = Vendors(SHARED.all)
        assert _decode(annos, SHARED) == _decode(annos, fresh)
        refused = isinstance(_decode(annos, fresh), str)
        assert (frozenset(annos.items()) in SHARED.constraints_memo) is not refused


def test_the_memo_keeps_the_latest_sets_only() -> None:
    vendors = Vendors(SHARED.all)
    for i in range(pods._MEMO_SIZE + 100):
        decode_vendor_constraints({"example.com/other": str(i)}, vendors)
    assert len(vendors.constraints_memo) == pods._MEMO_SIZE
    assert frozenset({("example.com/other", "0")}) not in vendors.constraints_memo
    latest = str(pods._MEMO_SIZE + 99)
    assert frozenset({("example.com/other", latest)}) in vendors.constraints_memo


def test_annotations_that_cannot_be_kept_are_decoded_every_time() -> None:
    vendors = Vendors(SHARED.all)
    assert isinstance(_decode({"hygon.com/use-dcutype": ["a list"]}, vendors), str)  # type: ignore[dict-item]
    assert vendors.constraints_memo == {}
