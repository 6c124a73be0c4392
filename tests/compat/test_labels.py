"""The ``hami.io/vgpu-node`` label is written only when the node name is a valid label value (the API server
refuses the whole write otherwise)."""

from __future__ import annotations

import pytest

from vgpu_scheduler.shared.codec.podannotations import allocation_labels, is_valid_label_value


@pytest.mark.parametrize(
    ("node", "valid"),
    [
        pytest.param("gpu-node-1", True, id="plain"),
        pytest.param("ip-10-0-0-1.ec2.internal", True, id="fqdn"),
        pytest.param("a" * 63, True, id="63-chars"),
        pytest.param("a" * 64, False, id="64-chars"),
        pytest.param("node-" + "x" * 60 + ".example.com", False, id="long-fqdn"),
        pytest.param("-node", False, id="leading-dash"),
        pytest.param("node.", False, id="trailing-dot"),
        pytest.param("n", True, id="one-char"),
    ],
)
def test_label_value_validation(node: str, valid: bool) -> None:
    assert is_valid_label_value(node) is valid
    assert allocation_labels(node) == ({"hami.io/vgpu-node": node} if valid else {})
