"""kube-scheduler's extender preemption wire: both request forms, Go's key folding, clear errors, the answer."""

from __future__ import annotations

import json

import pytest

from vgpu_scheduler.shared.errors import DecodeError
from vgpu_scheduler.shared.protocol.preemption import NodeVictims, parse_preemption_args, preemption_result


def test_meta_victims_as_kube_scheduler_sends_them_with_a_node_cache() -> None:
    body = {
        "Pod": {"metadata": {"name": "p", "uid": "u"}},
        "NodeNameToVictims": None,
        "NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": "a"}, {"UID": "b"}], "NumPDBViolations": 1}, "n2": None},
    }
    args = parse_preemption_args(json.dumps(body))
    assert args.pod["metadata"]["uid"] == "u"
    assert args.victims == {"n1": NodeVictims(("a", "b"), 1), "n2": NodeVictims((), 0)}


def test_whole_pods_without_a_node_cache_and_any_key_case() -> None:
    body = {"pod": {}, "nodeNameToVictims": {"n1": {"pods": [{"metadata": {"uid": "a"}}], "numPDBViolations": 0}}}
    assert parse_preemption_args(json.dumps(body)).victims == {"n1": NodeVictims(("a",), 0)}


@pytest.mark.parametrize(
    "body",
    [
        "{",
        "[]",
        '{"NodeNameToMetaVictims": {}}',
        '{"Pod": {}, "NodeNameToMetaVictims": {"n1": {"Pods": [{}]}}}',
        '{"Pod": {}, "NodeNameToMetaVictims": {"n1": {"Pods": [], "NumPDBViolations": "1"}}}',
        '{"Pod": {}, "NodeNameToMetaVictims": []}',
    ],
)
def test_malformed_bodies_are_clear_errors(body: str) -> None:
    with pytest.raises(DecodeError):
        parse_preemption_args(body)


def test_the_answer_names_nodes_victims_and_violations() -> None:
    out = json.loads(preemption_result({"n1": (["a", "b"], 2)}))
    assert out == {"NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": "a"}, {"UID": "b"}], "NumPDBViolations": 2}}}
    assert json.loads(preemption_result({})) == {"NodeNameToMetaVictims": {}}
