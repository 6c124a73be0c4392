"""The kube-scheduler extender v1 wire shapes: real bodies, case-insensitive keys, malformed input, golden output."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vgpu_scheduler.shared.errors import DecodeError
from vgpu_scheduler.shared.protocol.extender import (
    MAX_BODY_BYTES,
    MISSING_POD_MESSAGE,
    ExtenderArgs,
    ExtenderBindingArgs,
    ExtenderFilterResult,
    MissingPodError,
    _parse_extender_args,
    _plain_filter_args,
    binding_result,
    parse_binding_args,
    parse_extender_args,
    refused_nodes,
)

WIRE = Path(__file__).resolve().parents[2] / "data" / "kube-scheduler-wire"
FILTER_BODIES = sorted(WIRE.glob("*-filter.json"))
BIND_BODIES = sorted(WIRE.glob("*-bind.json"))


def compact(path: Path) -> bytes:
    """The body as kube-scheduler puts it on the wire: one compact line."""
    return json.dumps(json.loads(path.read_bytes()), separators=(",", ":")).encode()


def test_wire_corpus_is_present() -> None:
    assert [p.name for p in FILTER_BODIES] == ["001-filter.json", "003-filter.json", "005-filter.json"]
    assert [p.name for p in BIND_BODIES] == ["002-bind.json", "004-bind.json", "006-bind.json"]


@pytest.mark.parametrize("path", FILTER_BODIES, ids=lambda p: p.name)
@pytest.mark.parametrize("form", ["pretty", "compact"])
def test_real_filter_bodies_parse(path: Path, form: str) -> None:
    body = path.read_bytes() if form == "pretty" else compact(path)
    raw = json.loads(body)
    args = parse_extender_args(body)
    assert args.pod == raw["Pod"]
    assert args.node_names == raw["NodeNames"]
    assert args.nodes is None
    assert args.pod["metadata"]["name"].startswith("gpu-pod-")


def test_real_filter_body_keeps_quantities_as_sent() -> None:
    args = parse_extender_args((WIRE / "005-filter.json").read_bytes())
    limits = args.pod["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"nvidia.com/gpu": "8", "nvidia.com/gpucores": "30", "nvidia.com/gpumem": "3k"}


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (
            "002-bind.json",
            ExtenderBindingArgs("gpu-pod-1", "default", "84b6aa31-78e6-4344-b242-d2eb58f60cb9", "gpu-node-1"),
        ),
        (
            "004-bind.json",
            ExtenderBindingArgs("gpu-pod-2", "default", "9595a6af-6e30-4f06-95e0-f6d80a390407", "gpu-node-2"),
        ),
        (
            "006-bind.json",
            ExtenderBindingArgs("gpu-pod-3", "default", "16083488-820d-4c06-8be5-28e3ef56d5f0", "gpu-node-1"),
        ),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_real_bind_bodies_parse(path: str, expected: ExtenderBindingArgs) -> None:
    assert parse_binding_args((WIRE / path).read_bytes()) == expected
    assert parse_binding_args(compact(WIRE / path)) == expected


POD = {"metadata": {"name": "p", "namespace": "ns"}, "spec": {"containers": [{"name": "c"}]}}


@pytest.mark.parametrize(
    ("body", "names"),
    [
        ({"Pod": POD, "NodeNames": ["a"]}, ["a"]),
        ({"pod": POD, "nodenames": ["a"]}, ["a"]),
        ({"POD": POD, "NODENAMES": ["a", "b"]}, ["a", "b"]),
        ({"pOd": POD, "nodeNames": []}, []),
        ({"Pod": POD}, None),
        ({"Pod": POD, "NodeNames": None}, None),
        # Go: every key matching the field (exact or folded) is decoded in document order; the last wins.
        ({"Pod": POD, "NodeNames": ["a"], "nodenames": ["b"]}, ["b"]),
    ],
    ids=["go-names", "lower", "upper", "mixed-empty", "names-absent", "names-null", "last-variant-wins"],
)
def test_extender_args_keys_any_case(body: dict[str, object], names: list[str] | None) -> None:
    args = parse_extender_args(json.dumps(body).encode())
    assert args == ExtenderArgs(pod=POD, node_names=names, nodes=None)


def test_last_duplicate_in_document_order_wins() -> None:
    body = b'{"Pod":{"a":1},"pod":{"a":2},"Pod":{"a":3}}'
    assert parse_extender_args(body).pod == {"a": 3}
    body = b'{"Pod":{"a":1},"Pod":{"a":3},"pod":{"a":2}}'
    assert parse_extender_args(body).pod == {"a": 2}


def test_pod_keys_are_kept_as_sent() -> None:
    pod = {"metadata": {"name": "p"}, "spec": {"schedulerName": "x"}, "Extra": 1}
    assert parse_extender_args(json.dumps({"pod": pod}).encode()).pod == pod


@pytest.mark.parametrize(
    ("nodes", "expected"),
    [
        ({"items": [{"metadata": {"name": "n1"}}]}, [{"metadata": {"name": "n1"}}]),
        ({"Items": [{"metadata": {"name": "n1"}}], "metadata": {}}, [{"metadata": {"name": "n1"}}]),
        ({"ITEMS": []}, []),
        ({"items": None}, []),
        ({}, []),
    ],
    ids=["items", "Items", "ITEMS-empty", "items-null", "empty-nodelist"],
)
def test_full_nodes_are_accepted(nodes: dict[str, object], expected: list[dict[str, object]]) -> None:
    args = parse_extender_args(json.dumps({"Pod": POD, "Nodes": nodes}).encode())
    assert args.nodes == expected
    assert args.node_names is None


BAD_ARGS = [
    (b"", "empty body"),
    (b"   \n", "empty body"),
    (b"not json", "not JSON"),
    (b'{"Pod": {}', "not JSON"),
    (b"\xff\xfe{}", "not valid UTF-8"),
    (b"[]", "expected a JSON object, got array"),
    (b'"pod"', "expected a JSON object, got string"),
    (b"null", "expected a JSON object, got null"),
    (b"{}", MISSING_POD_MESSAGE),
    (b'{"Pod": null, "NodeNames": ["a"]}', MISSING_POD_MESSAGE),
    (b'{"Pod": "x"}', "Pod must be an object, got string"),
    (b'{"Pod": [], "NodeNames": []}', "Pod must be an object, got array"),
    (b'{"Pod": {}, "NodeNames": "a"}', "NodeNames must be an array of strings, got string"),
    (b'{"Pod": {}, "NodeNames": {"a": 1}}', "NodeNames must be an array of strings, got object"),
    (b'{"Pod": {}, "NodeNames": ["a", 1]}', "NodeNames[1] must be a string, got number"),
    (b'{"Pod": {}, "NodeNames": ["a", null]}', "NodeNames[1] must be a string, got null"),
    (b'{"Pod": {}, "Nodes": []}', "Nodes must be a NodeList object, got array"),
    (b'{"Pod": {}, "Nodes": {"items": {}}}', "Nodes.items must be an array, got object"),
    (b'{"Pod": {}, "Nodes": {"items": [1]}}', "Nodes.items[0] must be an object, got number"),
    (b'{"Pod": {"spec": {"priority": 99999999999999999999}}}', "integer out of int64 range"),
    (b'{"Pod": {"spec": {"priority": 9223372036854775808}}}', "integer out of int64 range"),
    (b'{"Pod": {"spec": {"x": 1e400}}}', "number out of float64 range"),
    (b'{"Pod": {"spec": {"x": NaN}}}', "non-standard constant"),
    (b'{"Pod": {"spec": {"x": -Infinity}}}', "non-standard constant"),
    (b'{"Pod": {"x": ' + b"9" * 5000 + b"}}", "integer out of int64 range"),
    (b"[" * 100_000 + b"]" * 100_000, "nesting too deep"),
    (b'\xef\xbb\xbf{"Pod": {}}', "byte-order mark"),
]


@pytest.mark.parametrize(("body", "message"), BAD_ARGS, ids=[m for _, m in BAD_ARGS])
def test_malformed_extender_args(body: bytes, message: str) -> None:
    with pytest.raises(DecodeError) as e:
        parse_extender_args(body)
    assert message in str(e.value)
    assert len(str(e.value)) < 300


def test_missing_pod_error_text_is_hamis() -> None:
    with pytest.raises(MissingPodError) as e:
        parse_extender_args(b'{"NodeNames": ["a"]}')
    assert str(e.value) == "extender args missing pod"
    assert isinstance(e.value, DecodeError)


def test_int64_bounds_are_accepted() -> None:
    body = b'{"Pod": {"a": 9223372036854775807, "b": -9223372036854775808, "c": 1.5e300}}'
    assert parse_extender_args(body).pod == {"a": (1 << 63) - 1, "b": -(1 << 63), "c": 1.5e300}


def test_max_body_bytes_is_one_mib() -> None:
    assert MAX_BODY_BYTES == 1_048_576


@pytest.mark.parametrize(
    "body",
    [
        {"podname": "p", "podnamespace": "ns", "poduid": "u", "node": "n"},
        {"PODNAME": "p", "PODNAMESPACE": "ns", "PODUID": "u", "NODE": "n", "extra": [1]},
        {"podName": "p", "podNamespace": "ns", "podUID": "u", "Node": "n"},
    ],
    ids=["lower", "upper-extra", "camel"],
)
def test_binding_args_any_case(body: dict[str, object]) -> None:
    assert parse_binding_args(json.dumps(body).encode()) == ExtenderBindingArgs("p", "ns", "u", "n")


BAD_BINDING = [
    (b"", "empty body"),
    (b"{", "not JSON"),
    (b"[1]", "expected a JSON object, got array"),
    (b'{"PodNamespace": "ns", "PodUID": "u", "Node": "n"}', "missing PodName"),
    (b'{"PodName": "", "PodNamespace": "ns", "PodUID": "u", "Node": "n"}', "missing PodName"),
    (b'{"PodName": "p", "PodNamespace": "ns", "PodUID": "u"}', "missing Node"),
    (b'{"PodName": "p", "PodNamespace": "ns", "PodUID": null, "Node": "n"}', "missing PodUID"),
    (b'{"PodName": 7, "PodNamespace": "ns", "PodUID": "u", "Node": "n"}', "PodName must be a string, got number"),
    (b'{"PodName": "p", "PodNamespace": ["ns"], "PodUID": "u", "Node": "n"}', "PodNamespace must be a string"),
]


@pytest.mark.parametrize(("body", "message"), BAD_BINDING, ids=[m for _, m in BAD_BINDING])
def test_malformed_binding_args(body: bytes, message: str) -> None:
    with pytest.raises(DecodeError, match="extender binding args") as e:
        parse_binding_args(body)
    assert message in str(e.value)


# Golden bytes: what Go's json.Marshal writes for extenderv1.ExtenderFilterResult (no JSON tags, no omitempty).
GOLDEN = [
    (
        ExtenderFilterResult.fit("gpu-node-1"),
        b'{"Nodes":null,"NodeNames":["gpu-node-1"],"FailedNodes":null,"FailedAndUnresolvableNodes":null,"Error":""}',
    ),
    (
        ExtenderFilterResult.failure(
            {"n2": "2/4 CardInsufficientMemory, 2/4 CardNotHealth", "n1": "node unregistered"}
        ),
        b'{"Nodes":null,"NodeNames":null,"FailedNodes":{"n1":"node unregistered",'
        b'"n2":"2/4 CardInsufficientMemory, 2/4 CardNotHealth"},"FailedAndUnresolvableNodes":null,"Error":""}',
    ),
    (
        ExtenderFilterResult.refusal({"n2": "8/8 CardInsufficientMemory", "n1": "ResourceQuotaNotFit"}),
        b'{"Nodes":null,"NodeNames":null,"FailedNodes":null,"FailedAndUnresolvableNodes":{"n1":"ResourceQuotaNotFit",'
        b'"n2":"8/8 CardInsufficientMemory"},"Error":""}',
    ),
    (
        ExtenderFilterResult.failure({}),
        b'{"Nodes":null,"NodeNames":null,"FailedNodes":{},"FailedAndUnresolvableNodes":null,"Error":""}',
    ),
    (
        ExtenderFilterResult.from_error("extender args missing pod"),
        b'{"Nodes":null,"NodeNames":null,"FailedNodes":null,"FailedAndUnresolvableNodes":null,'
        b'"Error":"extender args missing pod"}',
    ),
    (
        ExtenderFilterResult.fit_node({"metadata": {"name": "n1"}}),
        b'{"Nodes":{"metadata":{},"items":[{"metadata":{"name":"n1"}}]},"NodeNames":null,"FailedNodes":null,'
        b'"FailedAndUnresolvableNodes":null,"Error":""}',
    ),
    (
        ExtenderFilterResult(failed_and_unresolvable_nodes={"b": "x", "a": "y"}, error="<&>"),
        b'{"Nodes":null,"NodeNames":null,"FailedNodes":null,"FailedAndUnresolvableNodes":{"a":"y","b":"x"},'
        b'"Error":"\\u003c\\u0026\\u003e"}',
    ),
    (
        ExtenderFilterResult.from_error('n\u00e9ud \u2028 "q"\n'),
        b'{"Nodes":null,"NodeNames":null,"FailedNodes":null,"FailedAndUnresolvableNodes":null,'
        b'"Error":"n\xc3\xa9ud \\u2028 \\"q\\"\\n"}',
    ),
]


@pytest.mark.parametrize(
    ("result", "golden"),
    GOLDEN,
    ids=["fit", "failure", "refusal", "failure-empty", "error", "fit-node", "escapes", "utf8"],
)
def test_filter_result_golden(result: ExtenderFilterResult, golden: bytes) -> None:
    assert result.to_json() == golden
    assert json.loads(golden) == result.to_dict()


def test_passthrough_echoes_candidates() -> None:
    args = parse_extender_args(b'{"Pod": {}, "NodeNames": ["b", "a"]}')
    assert ExtenderFilterResult.passthrough(args).to_dict()["NodeNames"] == ["b", "a"]
    args = parse_extender_args(b'{"Pod": {}, "Nodes": {"items": [{"metadata": {"name": "x"}}]}}')
    out = ExtenderFilterResult.passthrough(args).to_dict()
    assert out["Nodes"] == {"metadata": {}, "items": [{"metadata": {"name": "x"}}]}
    assert out["NodeNames"] is None


@pytest.mark.parametrize(
    ("error", "golden"),
    [("", b'{"Error":""}'), ("node lock busy: n1", b'{"Error":"node lock busy: n1"}')],
    ids=["ok", "error"],
)
def test_binding_result_golden(error: str, golden: bytes) -> None:
    assert binding_result(error) == golden


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(1 << 63), (1 << 63) - 1) | st.text(),
    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=5), c, max_size=4),
    max_leaves=20,
)


@given(JSON_VALUES)
def test_any_pod_value_parses_or_fails_cleanly(pod: object) -> None:
    body = json.dumps({"Pod": pod}).encode()
    if isinstance(pod, dict):
        assert parse_extender_args(body).pod == pod
    else:
        with pytest.raises(DecodeError):
            parse_extender_args(body)


# ---- the orjson shortcut decodes as the Go-rules parser does -----------------------------------------------


def _same_answer(body: bytes) -> None:
    """``parse_extender_args`` (shortcut first) and the Go-rules parser alone: the same value or the same error."""
    try:
        want: object = _parse_extender_args(body)
    except DecodeError as e:
        want = (type(e), str(e))
    try:
        got: object = parse_extender_args(body)
    except DecodeError as e:
        got = (type(e), str(e))
    assert got == want


def test_the_shortcut_takes_the_real_filter_bodies() -> None:
    for path in FILTER_BODIES:
        body = compact(path)
        if b'"NodeNames":[' in body:
            assert _plain_filter_args(body) == _parse_extender_args(body)


_NAMES = b', "NodeNames": ["a", "b"]'
SHORTCUT_EDGES = [
    b'{"Pod": {"spec": {"priority": 9223372036854775807}}' + _NAMES + b"}",
    b'{"Pod": {"spec": {"priority": 9223372036854775808}}' + _NAMES + b"}",
    b'{"Pod": {"spec": {"priority": 18446744073709551615}}' + _NAMES + b"}",
    b'{"Pod": {"spec": {"priority": 18446744073709551616}}' + _NAMES + b"}",
    b'{"Pod": {"spec": {"priority": -9223372036854775809}}' + _NAMES + b"}",
    b'{"Pod": {"x": ' + b"9" * 5000 + b"}" + _NAMES + b"}",
    b'{"Pod": {"x": 1.5, "y": 1e400}' + _NAMES + b"}",
    b'{"Pod": {"x": 0.1}' + _NAMES + b"}",
    b'{"Pod": {"x": NaN}' + _NAMES + b"}",
    b'{"Pod": {"x": "\\ud800"}' + _NAMES + b"}",
    b'{"Pod": {"x": "\\ud83d\\ude00 \\u00e9"}' + _NAMES + b"}",
    b'{"Pod": {"x": "\xff"}' + _NAMES + b"}",
    b'\xef\xbb\xbf{"Pod": {}' + _NAMES + b"}",
    b'{"Pod": {"x": ' + b"[" * 70 + b"]" * 70 + b"}" + _NAMES + b"}",
    b'{"Pod": {"x": ' + b"[" * 1000 + b"]" * 1000 + b"}" + _NAMES + b"}",
    b'{"Pod": {"x": ' + b"[" * 2000 + b"]" * 2000 + b"}" + _NAMES + b"}",
    b'{"Pod": {"a": 1}, "pod": {"a": 2}' + _NAMES + b"}",
    b'{"Pod": {"a": 1}, "Pod": {"a": 2}' + _NAMES + b"}",
    b'{"Pod": {"a": 1}, "pod": {"a": 2}, "Pod": {"a": 3}' + _NAMES + b"}",
    b'{"Pod": {"a": 1}, "Pod": {"a": 3}, "pod": {"a": 2}' + _NAMES + b"}",
    b'{"Pod": {"a": 1}' + _NAMES + b', "nodenames": ["c"]}',
    b'{"Pod": {"a": 1}' + _NAMES + b', "NodeNames": ["c"]}',
    b'{"Pod": {}, "NodeNames": ["a", 1]}',
    b'{"Pod": {}, "NodeNames": []}',
    b'{"Pod": {}, "NodeNames": null}',
    b'{"Pod": {}, "NodeNames": ["a"], "Nodes": null}',
    b'{"Pod": {}, "NodeNames": ["a"], "Nodes": {"items": [{"metadata": {"name": "n"}}]}}',
    b'{"Pod": null, "NodeNames": ["a"]}',
    b'{"Pod": [], "NodeNames": ["a"]}',
    b'{"Pod": {}, "NodeNames": ["a"], "Extra": 99999999999999999999}',
    b'{"Pod": {}, "NodeNames": ["a"], "Extra": true}',
    b' {"Pod": {}, "NodeNames": ["a"]} \n',
    b'{"Pod": {}, "NodeNames": ["a"]} x',
    b'["a"]',
]


@pytest.mark.parametrize("body", SHORTCUT_EDGES)
def test_the_shortcut_answers_as_go_rules_do(body: bytes) -> None:
    _same_answer(body)


_KEYS = st.sampled_from(["Pod", "pod", "POD", "NodeNames", "nodenames", "Nodes", "x", "priority", "\u00e9"])
_NUMBERS = st.integers(-(1 << 65), 1 << 65) | st.floats(allow_nan=False) | st.sampled_from([2**63, -(2**63) - 1])
_ANY = st.recursive(
    st.none() | st.booleans() | _NUMBERS | st.text(max_size=6),
    lambda c: st.lists(c, max_size=4) | st.dictionaries(_KEYS | st.text(max_size=4), c, max_size=4),
    max_leaves=24,
)


@given(
    pod=_ANY,
    names=st.lists(st.text(max_size=8), max_size=5) | _ANY,
    extra=st.dictionaries(_KEYS, _ANY, max_size=2),
    ascii_only=st.booleans(),
)
def test_any_body_gets_the_same_answer_with_or_without_the_shortcut(
    pod: object, names: object, extra: dict[str, object], ascii_only: bool
) -> None:
    try:
        body = json.dumps({"Pod": pod, "NodeNames": names, **extra}, ensure_ascii=ascii_only).encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate written raw: not UTF-8, both refuse it (checked above)
        return
    _same_answer(body)


def test_pod_identity_and_candidates() -> None:
    args = parse_extender_args((WIRE / "001-filter.json").read_bytes())
    assert (args.pod_namespace, args.pod_name, args.pod_uid) == (
        "default",
        "gpu-pod-1",
        "84b6aa31-78e6-4344-b242-d2eb58f60cb9",
    )
    assert args.candidates() == ["gpu-node-2", "gpu-node-1"]
    args = parse_extender_args(
        b'{"Pod": {}, "Nodes": {"items": [{"metadata": {"name": "a"}}, {"metadata": {"name": "b"}}]}}'
    )
    assert (args.pod_namespace, args.pod_name, args.pod_uid) == ("", "", "")
    assert args.candidates() == ["a", "b"]
    assert parse_extender_args(b'{"Pod": {}}').candidates() == []


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"Pod": {}, "Nodes": {"items": [{"metadata": {}}]}}', "Nodes.items[0] has no metadata.name"),
        (b'{"Pod": {}, "Nodes": {"items": [{}]}}', "Nodes.items[0] has no metadata.name"),
    ],
    ids=["no-name", "no-metadata"],
)
def test_candidates_need_node_names(body: bytes, message: str) -> None:
    with pytest.raises(DecodeError, match=re.escape(message)):
        parse_extender_args(body).candidates()


@pytest.mark.parametrize(
    ("pod", "message"),
    [
        ({"metadata": []}, "Pod.metadata must be an object"),
        ({"metadata": {"name": 1}}, "Pod.metadata.name must be a string"),
    ],
    ids=["metadata-array", "name-number"],
)
def test_pod_identity_rejects_wrong_types(pod: dict[str, object], message: str) -> None:
    args = parse_extender_args(json.dumps({"Pod": pod}).encode())
    with pytest.raises(DecodeError, match=message):
        _ = args.pod_name


def test_refused_nodes_reads_both_maps_as_kube_scheduler_does() -> None:
    answer = {
        "NodeNames": None,
        "FailedNodes": {"a": "waiting for 2 preempted pod(s) to leave node a", "b": "x"},
        "FailedAndUnresolvableNodes": {"b": "2/2 CardInsufficientMemory", "c": "node unregistered"},
        "Error": "",
    }
    assert refused_nodes(answer) == {
        "a": "waiting for 2 preempted pod(s) to leave node a",
        "b": "2/2 CardInsufficientMemory",
        "c": "node unregistered",
    }
    assert refused_nodes({"NodeNames": ["a"], "FailedNodes": None, "FailedAndUnresolvableNodes": None}) == {}
