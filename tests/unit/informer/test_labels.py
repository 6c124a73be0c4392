"""Which bound pods lack the ``hami.io/vgpu-node`` label (an API server that drops a Binding's labels)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.informer.builders import pod
from vgpu_scheduler.services.informer.labels import missing_label
from vgpu_scheduler.shared.codec import annotations as keys


def unlabelled(**kw: Any) -> dict[str, Any]:
    p = pod("p1", node="n1", app=[[("GPU-a", 1000, 10)]], **kw)
    p["metadata"]["labels"].pop(keys.VGPU_NODE_LABEL)
    return p


def test_a_bound_pod_without_the_label_is_labelled_with_its_node() -> None:
    assert missing_label(unlabelled()) == "n1"


def test_a_pod_with_the_label_needs_nothing() -> None:
    assert missing_label(pod("p1", node="n1", app=[[("GPU-a", 1000, 10)]])) is None


def test_a_label_naming_another_node_is_corrected() -> None:
    p = unlabelled()
    p["metadata"]["labels"][keys.VGPU_NODE_LABEL] = "n2"
    assert missing_label(p) == "n1"


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda p: p["spec"].pop("nodeName"), id="not-bound-yet"),
        pytest.param(lambda p: p["spec"].update(nodeName="n2"), id="bound-elsewhere"),
        pytest.param(lambda p: p["metadata"]["annotations"].pop(keys.VGPU_NODE), id="not-ours"),
        pytest.param(lambda p: p["status"].update(phase="Succeeded"), id="terminated"),
        pytest.param(lambda p: p["metadata"].update(deletionTimestamp="2026-01-01T00:00:00Z"), id="deleting"),
        pytest.param(lambda p: p["metadata"].update(annotations=[]), id="malformed-annotations"),
        pytest.param(lambda p: p.update(spec=None), id="malformed-spec"),
    ],
)
def test_pods_that_need_no_label(change: Any) -> None:
    p = unlabelled()
    change(p)
    assert missing_label(p) is None


def test_a_node_name_that_cannot_be_a_label_value_is_left_alone() -> None:
    name = "n" * 64  # label values stop at 63 characters; node names may be longer
    p = pod("p1", node=name, app=[[("GPU-a", 1000, 10)]])
    p["metadata"]["labels"].pop(keys.VGPU_NODE_LABEL, None)
    assert missing_label(p) is None
