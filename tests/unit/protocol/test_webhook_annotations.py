"""The webhook refuses scheduling annotations ``/filter`` cannot read (issue 23 item 3), with what to write instead.

The decision is checked against ``/filter``'s own decoding (``decode_vendor_constraints``, what ``/filter`` called
before the two shared :func:`shared.protocol.constraints.pod_constraints`): for every value below the webhook
denies exactly when that decoding fails, so a pod the webhook admits is never refused by ``/filter`` for its
annotations, and a pod it denies would have failed at every ``/filter``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.unit.protocol.test_webhook import ctr, pod
from vgpu_scheduler.shared.devconfig import load_device_config
from vgpu_scheduler.shared.domain.model import NvidiaConfig
from vgpu_scheduler.shared.errors import DecodeError
from vgpu_scheduler.shared.protocol.admission import HTTP_FORBIDDEN, AdmissionOutcome
from vgpu_scheduler.shared.protocol.constraints import SchedulingAnnotationError, pod_constraints
from vgpu_scheduler.shared.protocol.webhook import mutate_pod
from vgpu_scheduler.shared.vendors.catalog import enabled_vendors
from vgpu_scheduler.shared.vendors.pods import decode_vendor_constraints
from vgpu_scheduler.shared.vendors.registry import Vendors

REPO = Path(__file__).resolve().parents[3]
CFG = NvidiaConfig()
VENDORS = enabled_vendors(CFG, load_device_config(str(REPO / "examples" / "device-config.yaml")).vendor_sections)
GPU_POLICY, NODE_POLICY, WEIGHTS = (
    "hami.io/gpu-scheduler-policy",
    "hami.io/node-scheduler-policy",
    "hami.io/device-scoring-weights",
)
GPU_POLICY_HINT = (
    'write "binpack", "spread", "topology-aware", "mutex" or "numa", or a comma-separated chain of them such as '
    '"binpack,numa"'
)
WEIGHTS_HINT = (
    'write "slot=<n>,core=<n>,memory=<n>": each of the three keys once, whole numbers of 0 or more, at least one '
    'above 0, e.g. "slot=1,core=1,memory=1"'
)
LIST_HINT = "write a comma-separated list with at least one entry, or leave the annotation out"


def annotated(annotations: dict[str, Any], limits: dict[str, Any] | None = None) -> dict[str, Any]:
    p = pod(ctr("main", limits if limits is not None else {"nvidia.com/gpu": 1}))
    p["metadata"]["annotations"] = annotations
    return p


def admit(p: dict[str, Any], vendors: Vendors | None = VENDORS) -> AdmissionOutcome:
    return mutate_pod(
        p, cfg=CFG, scheduler_name="vgpu-scheduler", force_overwrite_default_scheduler=True, vendors=vendors
    )


@pytest.mark.parametrize(
    ("annotations", "message"),
    [
        pytest.param(
            {GPU_POLICY: "foo"},
            f"hami.io/gpu-scheduler-policy: unknown GPU scheduler policy token 'foo' (at 'foo'); {GPU_POLICY_HINT}",
            id="gpu-policy",
        ),
        pytest.param(
            {GPU_POLICY: "binpack,nmua"},
            "hami.io/gpu-scheduler-policy: unknown GPU scheduler policy token 'nmua' (at 'binpack,nmua'); "
            + GPU_POLICY_HINT,
            id="gpu-policy-chain",
        ),
        pytest.param(
            {NODE_POLICY: "packed"},
            "hami.io/node-scheduler-policy: unknown node scheduler policy 'packed' (at 'packed'); "
            'write "binpack" or "spread"',
            id="node-policy",
        ),
        pytest.param(
            {WEIGHTS: "memory=x"},
            "hami.io/device-scoring-weights: expected slot, core, and memory weights (at 'memory=x'); " + WEIGHTS_HINT,
            id="weights-one-key",
        ),
        pytest.param(
            {WEIGHTS: "slot=1,core=1,memory=x"},
            f"hami.io/device-scoring-weights: not a base-10 integer: 'x' (at 'memory=x'); {WEIGHTS_HINT}",
            id="weights-not-a-number",
        ),
        pytest.param(
            {WEIGHTS: "slot=0,core=0,memory=0"},
            "hami.io/device-scoring-weights: at least one weight must be positive (at 'slot=0,core=0,memory=0'); "
            + WEIGHTS_HINT,
            id="weights-all-zero",
        ),
        pytest.param(
            {"nvidia.com/use-gputype": " , "},
            "nvidia.com/use-gputype: list holds no token, so no device could ever match (at ' , '); " + LIST_HINT,
            id="use-gputype-empty",
        ),
        pytest.param(
            {"nvidia.com/use-gpuuuid": ","},
            "nvidia.com/use-gpuuuid: list holds no token, so no device could ever match (at ','); " + LIST_HINT,
            id="use-gpuuuid-empty",
        ),
    ],
)
def test_a_bad_scheduling_annotation_is_denied_with_what_to_write(annotations: dict[str, Any], message: str) -> None:
    outcome = admit(annotated(annotations))
    assert (outcome.allowed, outcome.code, outcome.message) == (False, HTTP_FORBIDDEN, message)


def test_another_vendors_selector_is_checked_on_its_pods() -> None:
    outcome = admit(annotated({"hygon.com/use-dcutype": ","}, {"hygon.com/dcunum": 1}))
    assert not outcome.allowed
    assert outcome.message.startswith("hygon.com/use-dcutype: list holds no token")
    assert outcome.message.endswith(LIST_HINT)


@pytest.mark.parametrize(
    "annotations",
    [
        {GPU_POLICY: "binpack,numa", NODE_POLICY: " spread ", WEIGHTS: "slot=1, core=0, memory=2"},
        {GPU_POLICY: "topology-aware"},
        {"nvidia.com/numa-bind": "yes"},  # not a Go boolean: false, as in HAMi (and in /filter)
        {"nvidia.com/nouse-gputype": ","},  # an exclusion that excludes nothing
        {"nvidia.com/use-gputype": ""},  # blank: no constraint
        {"nvidia.com/vgpu-mode": "anything"},
        {"example.com/unrelated": "foo"},
    ],
)
def test_readable_annotations_are_admitted(annotations: dict[str, Any]) -> None:
    outcome = admit(annotated(annotations))
    assert outcome.allowed, outcome.message


def test_a_pod_asking_for_no_device_is_not_judged() -> None:
    """/filter passes such a pod through without reading its annotations: so does the webhook."""
    outcome = admit(annotated({GPU_POLICY: "foo"}, {"cpu": "1"}))
    assert outcome.allowed and not outcome.patch_ops


def test_another_schedulers_pod_is_not_judged() -> None:
    p = annotated({GPU_POLICY: "foo"})
    p["spec"]["schedulerName"] = "other"
    assert admit(p).allowed


def test_a_pod_that_becomes_a_gpu_pod_by_the_mutation_is_judged() -> None:
    """Memory alone gets ``nvidia.com/gpu: 1`` from the webhook (defaultGPUNum): /filter will place it."""
    outcome = admit(annotated({GPU_POLICY: "foo"}, {"nvidia.com/gpumem": 1000}))
    assert not outcome.allowed and outcome.message.startswith("hami.io/gpu-scheduler-policy: unknown")


def test_nvidia_only_webhook_checks_nvidias_annotations() -> None:
    assert not admit(annotated({WEIGHTS: "memory=x"}), vendors=None).allowed
    assert admit(annotated({"hygon.com/use-dcutype": ","}), vendors=None).allowed


VALUES = {
    GPU_POLICY: ["binpack", "spread", "numa,binpack", "mutex", "", " ", "binpack,", "Binpack", "foo", "spread,numa"],
    NODE_POLICY: ["binpack", "spread", " binpack", "", "Spread", "x"],
    WEIGHTS: ["slot=1,core=1,memory=1", "slot=1,core=1", "slot=-1,core=1,memory=1", "slot=1,core=1,memory=1,x=1"],
    "nvidia.com/use-gputype": ["A100", ",", "", "a100, t4", " , "],
    "nvidia.com/use-gpuuuid": ["GPU-1", ",", ""],
    "nvidia.com/nouse-gpuuuid": [",", "GPU-1"],
    "nvidia.com/numa-bind": ["true", "1", "yes", ""],
    "hygon.com/use-dcutype": ["Z100", ","],
    "cambricon.com/use-mlutype": ["MLU370", ","],
    "amd.com/use-gputype": ["MI210", ","],
}


@pytest.mark.parametrize(("key", "value"), [(k, v) for k, vs in VALUES.items() for v in vs])
def test_the_webhook_denies_exactly_what_filter_refuses(key: str, value: str) -> None:
    annotations = {key: value}
    try:
        decode_vendor_constraints(annotations, VENDORS)
        filter_error: str | None = None
    except DecodeError as e:
        filter_error = str(e)
    outcome = admit(annotated(annotations))
    assert outcome.allowed == (filter_error is None), (outcome.message, filter_error)
    if filter_error is not None:
        assert outcome.message.startswith(filter_error + "; write ")
        with pytest.raises(SchedulingAnnotationError) as raised:
            pod_constraints(annotations, VENDORS)
        assert str(raised.value) == outcome.message
