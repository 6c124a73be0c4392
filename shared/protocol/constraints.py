"""A pod's scheduling annotations, decoded once for ``/filter`` and the webhook, so the two never disagree.

``/filter`` decodes the annotations of every pod that asks for a managed resource
(:func:`shared.vendors.pods.decode_vendor_constraints`: node and GPU policy, scoring weights, every vendor's
type and UUID selectors). A value it cannot read fails the pod on every node, again at every scheduling attempt.
The webhook runs the same decoding on the same pods at creation and denies such a pod, so the mistake is seen when
the pod is created. :func:`pod_constraints` is the one entry point of both; its error says what to write instead.

Values HAMi reads leniently stay lenient here too: ``nvidia.com/numa-bind`` is a Go boolean and anything else
means false; ``nvidia.com/nouse-gputype``/``nouse-gpuuuid`` and a blank *use* list are no constraint;
``nvidia.com/vgpu-mode`` is matched as written.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from vgpu_scheduler.shared.codec import annotations as keys
from vgpu_scheduler.shared.codec.selectors import decode_pod_constraints
from vgpu_scheduler.shared.domain.model import GpuPolicyToken, NodePolicy, PodConstraints
from vgpu_scheduler.shared.errors import DecodeError
from vgpu_scheduler.shared.vendors.pods import decode_vendor_constraints

if TYPE_CHECKING:
    from vgpu_scheduler.shared.vendors.registry import Vendors

__all__ = ["SchedulingAnnotationError", "hint_for", "pod_constraints"]


def _quoted(values: list[str]) -> str:
    return ", ".join(f'"{v}"' for v in values[:-1]) + f' or "{values[-1]}"'


_GPU_POLICIES: Final = [t.value for t in GpuPolicyToken]
_NODE_POLICIES: Final = [p.value for p in NodePolicy]

HINTS: Final[Mapping[str, str]] = {
    keys.GPU_SCHEDULER_POLICY: (
        f"write {_quoted(_GPU_POLICIES)}, or a comma-separated chain of them such as "
        f'"{GpuPolicyToken.BINPACK.value},{GpuPolicyToken.NUMA.value}"'
    ),
    keys.NODE_SCHEDULER_POLICY: f"write {_quoted(_NODE_POLICIES)}",
    keys.DEVICE_SCORING_WEIGHTS: (
        'write "slot=<n>,core=<n>,memory=<n>": each of the three keys once, whole numbers of 0 or more, at least one '
        'above 0, e.g. "slot=1,core=1,memory=1"'
    ),
    "metax-tech.com/sgpu-qos-policy": 'write "best-effort", "fixed-share" or "burst-share", or leave it out',
    "metax-tech.com/sgpu-app-class": "leave the annotation out: sGPU app classes are not scheduled by this release",
}
"""What to write instead, per annotation whose value can be wrong in more than one way."""

LIST_HINT: Final = "write a comma-separated list with at least one entry, or leave the annotation out"
"""A *use* selector (``nvidia.com/use-gputype``, ``hygon.com/use-dcutype`` …) whose value holds no entry."""
STRING_HINT: Final = "annotation values are strings"


def hint_for(error: DecodeError) -> str:
    """What to write instead of the value ``error`` refused (its ``what`` is the annotation's key)."""
    if error.detail.startswith("annotation value must be a string"):
        return STRING_HINT
    return HINTS.get(error.what, LIST_HINT)


class SchedulingAnnotationError(DecodeError):
    """A scheduling annotation ``/filter`` cannot read; the message ends with what to write instead."""

    def __init__(self, cause: DecodeError) -> None:
        super().__init__(cause.what, cause.detail, cause.part)
        self.hint = hint_for(cause)
        self.args = (f"{cause}; {self.hint}",)


def pod_constraints(annotations: Mapping[str, Any], vendors: Vendors | None) -> PodConstraints:
    """The pod's device-choice constraints from its annotations (``vendors``: the enabled ones; None: NVIDIA only).

    Raises :class:`SchedulingAnnotationError` for a value ``/filter`` would refuse."""
    try:
        if vendors is None:
            return decode_pod_constraints(annotations)
        return decode_vendor_constraints(annotations, vendors)
    except SchedulingAnnotationError:
        raise
    except DecodeError as e:
        raise SchedulingAnnotationError(e) from e
