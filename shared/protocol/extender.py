"""kube-scheduler extender v1 wire shapes (``k8s.io/kube-scheduler/extender/v1``), pure: no I/O.

The Go structs carry **no JSON tags**, so ``encoding/json`` writes the Go field names (``Pod``, ``NodeNames``,
``FailedNodes``, ``Error`` ...) and reads keys case-insensitively. We accept any case on input, at every level
Go decodes into a struct (``ExtenderArgs``, the ``NodeList``'s ``items``, ``ExtenderBindingArgs``), and answer
with exactly the bytes Go would (every field present, ``null`` for nil, map keys sorted). The pod and node
objects stay the API's camelCase JSON dicts (hami-wire §5.1, §5.2; docs/extender.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from vgpu_scheduler.shared.errors import DecodeError
from vgpu_scheduler.shared.protocol import gojson
from vgpu_scheduler.shared.protocol.names import check_dns_label, check_dns_subdomain

MAX_BODY_BYTES: Final = 1 << 20
"""HAMi's request body cap (``io.LimitReader(r.Body, 1<<20)``); enforced by the HTTP layer."""

EMPTY_BODY_MESSAGE: Final = "Please send a request body"
"""HAMi's HTTP 400 text for a request without a body."""

MISSING_POD_MESSAGE: Final = "extender args missing pod"
"""HAMi's ``Error`` text when ``ExtenderArgs.Pod`` is nil."""

_ARGS = "extender args"
_BINDING_ARGS = "extender binding args"
_MAX_UID: Final = 128
"""A pod UID is a 36-character UUID; anything far longer is not one (it would become a Redis field)."""


class MissingPodError(DecodeError):
    """``ExtenderArgs`` without a pod. ``str()`` is HAMi's exact text, ``extender args missing pod``."""

    def __init__(self) -> None:
        super().__init__(_ARGS, "missing pod")
        self.args = (MISSING_POD_MESSAGE,)


@dataclass(frozen=True, slots=True)
class ExtenderArgs:
    """The ``/filter`` request: the pod (API JSON) and either candidate names or full nodes.

    ``node_names`` is set when kube-scheduler runs with ``nodeCacheCapable: true``; ``nodes`` (the
    ``NodeList`` items) when it is false, e.g. in cluster-autoscaler simulation. ``None`` means absent/null.
    """

    pod: dict[str, Any]
    node_names: list[str] | None
    nodes: list[dict[str, Any]] | None

    @property
    def pod_namespace(self) -> str:
        value = _meta_str(self.pod, "namespace")
        return check_dns_label(value, _ARGS, "Pod.metadata.namespace") if value else value

    @property
    def pod_name(self) -> str:
        value = _meta_str(self.pod, "name")
        return check_dns_subdomain(value, _ARGS, "Pod.metadata.name") if value else value

    @property
    def pod_uid(self) -> str:
        value = _meta_str(self.pod, "uid")
        if len(value) > _MAX_UID or not value.isprintable():
            raise DecodeError(_ARGS, f"Pod.metadata.uid must be at most {_MAX_UID} printable characters")
        return value

    def candidates(self) -> list[str]:
        """The candidate node names: ``NodeNames``, else the ``metadata.name`` of each full node, else none."""
        if self.node_names is not None:
            return list(self.node_names)
        names = []
        for i, node in enumerate(self.nodes or ()):
            meta = node.get("metadata")
            name = meta.get("name") if isinstance(meta, dict) else None
            if not isinstance(name, str) or not name:
                raise DecodeError(_ARGS, f"Nodes.items[{i}] has no metadata.name")
            names.append(name)
        return names


@dataclass(frozen=True, slots=True)
class ExtenderBindingArgs:
    """The ``/bind`` request (``PodName``, ``PodNamespace``, ``PodUID``, ``Node``)."""

    pod_name: str
    pod_namespace: str
    pod_uid: str
    node: str

    @property
    def pod_key(self) -> str:
        """``namespace/name``, as logs and messages name the pod."""
        return f"{self.pod_namespace}/{self.pod_name}"


def parse_extender_args(body: bytes | str) -> ExtenderArgs:
    """Decode an ``ExtenderArgs`` body; raise :class:`DecodeError` (or :class:`MissingPodError`) on bad input."""
    args = _plain_filter_args(body)
    return args if args is not None else _parse_extender_args(body)


def _plain_filter_args(body: bytes | str) -> ExtenderArgs | None:
    """The body kube-scheduler sends on every ``/filter`` (``Pod`` and ``NodeNames``) decoded with orjson, about
    twice as fast on 1,000 names; None for any other body, which :func:`_parse_extender_args` then decodes (and
    words any error of).

    The answer is the same as that parser's. orjson refuses what it refuses (invalid UTF-8, a lone surrogate
    escape, ``NaN``, a byte-order mark, an infinite float, any syntax error); whatever it takes differently is left
    to it: top-level keys that match one field in two spellings (Go takes the last in document order), full
    ``Nodes``, a float anywhere (an integer literal past uint64 comes back as one), an integer outside int64,
    nesting deeper than :data:`gojson.FAST_DEPTH`. One difference remains, for bodies Go's encoder never writes:
    a value that a duplicate of its key replaces is not checked for out-of-range integers or depth (orjson keeps
    only the last), while that parser refuses such a body.
    """
    if not isinstance(body, bytes):
        return None
    try:
        top = gojson.fast_loads(body)
    except gojson.FastDecodeError:
        return None
    if type(top) is not dict:
        return None
    fields = {key.casefold(): value for key, value in top.items()}
    if len(fields) != len(top):
        return None
    pod = fields.get("pod")
    names = fields.get("nodenames")
    if type(pod) is not dict or type(names) is not list or fields.get("nodes") is not None:
        return None
    try:
        "".join(names)  # every name a string (a C loop)
    except TypeError:
        return None
    if not gojson.plain_values(value for key, value in fields.items() if key != "nodenames"):
        return None
    return ExtenderArgs(pod=pod, node_names=names, nodes=None)


def _parse_extender_args(body: bytes | str) -> ExtenderArgs:
    """:func:`parse_extender_args` for any body, with Go's rules throughout (:func:`gojson.loads`)."""
    doc, top = gojson.loads_object(body, _ARGS)

    pod = doc.fold_get(top, "Pod")
    if pod is gojson.MISSING or pod is None:
        raise MissingPodError()
    if not isinstance(pod, dict):
        raise DecodeError(_ARGS, f"Pod must be an object, got {gojson.type_name(pod)}")

    raw_names = doc.fold_get(top, "NodeNames")
    node_names: list[str] | None = None
    if raw_names is not gojson.MISSING and raw_names is not None:
        if not isinstance(raw_names, list):
            raise DecodeError(_ARGS, f"NodeNames must be an array of strings, got {gojson.type_name(raw_names)}")
        try:
            "".join(raw_names)  # a C loop that stops at the first name that is not a string (cheaper than isinstance)
        except TypeError:
            for i, name in enumerate(raw_names):
                if not isinstance(name, str):
                    raise DecodeError(_ARGS, f"NodeNames[{i}] must be a string, got {gojson.type_name(name)}") from None
        node_names = raw_names  # freshly decoded, held by nothing else: no copy

    raw_nodes = doc.fold_get(top, "Nodes")
    nodes: list[dict[str, Any]] | None = None
    if raw_nodes is not gojson.MISSING and raw_nodes is not None:
        if not isinstance(raw_nodes, dict):
            raise DecodeError(_ARGS, f"Nodes must be a NodeList object, got {gojson.type_name(raw_nodes)}")
        items = doc.fold_get(raw_nodes, "items")
        nodes = []
        if items is not gojson.MISSING and items is not None:
            if not isinstance(items, list):
                raise DecodeError(_ARGS, f"Nodes.items must be an array, got {gojson.type_name(items)}")
            for i, node in enumerate(items):
                if not isinstance(node, dict):
                    raise DecodeError(_ARGS, f"Nodes.items[{i}] must be an object, got {gojson.type_name(node)}")
                nodes.append(node)
    return ExtenderArgs(pod=pod, node_names=node_names, nodes=nodes)


def parse_binding_args(body: bytes | str) -> ExtenderBindingArgs:
    """Decode an ``ExtenderBindingArgs`` body. All four fields must be non-empty strings."""
    doc, top = gojson.loads_object(body, _BINDING_ARGS)
    values: list[str] = []
    for field in ("PodName", "PodNamespace", "PodUID", "Node"):
        value = doc.fold_get(top, field)
        if value is gojson.MISSING or value is None or value == "":
            raise DecodeError(_BINDING_ARGS, f"missing {field}")
        if not isinstance(value, str):
            raise DecodeError(_BINDING_ARGS, f"{field} must be a string, got {gojson.type_name(value)}")
        values.append(value)
    # they go into API paths and Redis: only names the API server could have given (never "../x", never 100k chars)
    check_dns_subdomain(values[0], _BINDING_ARGS, "PodName")
    check_dns_label(values[1], _BINDING_ARGS, "PodNamespace")
    check_dns_subdomain(values[3], _BINDING_ARGS, "Node")
    if len(values[2]) > _MAX_UID or not values[2].isprintable():
        raise DecodeError(_BINDING_ARGS, f"PodUID must be at most {_MAX_UID} printable characters")
    return ExtenderBindingArgs(pod_name=values[0], pod_namespace=values[1], pod_uid=values[2], node=values[3])


@dataclass(frozen=True, slots=True)
class ExtenderFilterResult:
    """The ``/filter`` answer. :meth:`to_json` writes what Go's ``json.Marshal`` writes for the v1 struct."""

    nodes: Sequence[Mapping[str, Any]] | None = None
    node_names: Sequence[str] | None = None
    failed_nodes: Mapping[str, str] | None = None
    failed_and_unresolvable_nodes: Mapping[str, str] | None = None
    error: str = ""

    @classmethod
    def fit(cls, node: str) -> ExtenderFilterResult:
        """Success, ``nodeCacheCapable`` path: only the chosen node (difference 6)."""
        return cls(node_names=[node])

    @classmethod
    def fit_node(cls, node: Mapping[str, Any]) -> ExtenderFilterResult:
        """Success, full-``Nodes`` (simulation) path: only the chosen node object."""
        return cls(nodes=[node])

    @classmethod
    def failure(cls, failed_nodes: Mapping[str, str]) -> ExtenderFilterResult:
        """No node fits now, kube-scheduler's preemption may apply: every candidate with its reason in
        ``FailedNodes`` (``NodeNames`` stays null, as in HAMi)."""
        return cls(failed_nodes=dict(failed_nodes))

    @classmethod
    def refusal(cls, failed_nodes: Mapping[str, str]) -> ExtenderFilterResult:
        """No node fits, and kube-scheduler's preemption cannot change that: every candidate with its reason in
        ``FailedAndUnresolvableNodes``.

        kube-scheduler sends an extender only nodes its own filter plugins passed, and its preemption dry run asks
        those plugins alone (docs/preemption.md), so on a node we refuse it never finds a victim. Listed as
        unresolvable, the node is left out of that dry run, which otherwise costs a filter pass per node and
        lower-priority pod on every attempt of every pending pod. Device-aware preemption is ours
        (:mod:`vgpu_scheduler.services.extender.preempt`) and does not depend on this status."""
        return cls(failed_and_unresolvable_nodes=dict(failed_nodes))

    @classmethod
    def from_error(cls, message: str) -> ExtenderFilterResult:
        """A request or internal error: kube-scheduler fails the scheduling attempt with this text."""
        return cls(error=message)

    @classmethod
    def passthrough(cls, args: ExtenderArgs) -> ExtenderFilterResult:
        """A pod that asks for nothing we manage: echo the candidates unchanged (whichever form was sent)."""
        return cls(nodes=args.nodes, node_names=args.node_names)

    def to_dict(self) -> dict[str, Any]:
        """The JSON object, keys in Go struct order."""
        return {
            "Nodes": None if self.nodes is None else {"metadata": {}, "items": [dict(n) for n in self.nodes]},
            "NodeNames": None if self.node_names is None else list(self.node_names),
            "FailedNodes": _sorted_map(self.failed_nodes),
            "FailedAndUnresolvableNodes": _sorted_map(self.failed_and_unresolvable_nodes),
            "Error": self.error,
        }

    def to_json(self) -> bytes:
        """Compact JSON bytes, as Go's ``json.Marshal`` would produce them."""
        return gojson.dumps(self.to_dict())


def refused_nodes(answer: Mapping[str, Any]) -> dict[str, str]:
    """Every node a decoded ``/filter`` answer refuses, with its reason: ``FailedNodes`` and
    ``FailedAndUnresolvableNodes`` together, as kube-scheduler reads them (an unresolvable reason wins a tie)."""
    refused: dict[str, str] = {}
    for key in ("FailedNodes", "FailedAndUnresolvableNodes"):
        value = answer.get(key)
        if isinstance(value, Mapping):
            refused.update((str(k), str(v)) for k, v in value.items())
    return refused


def binding_result(error: str = "") -> bytes:
    """The ``/bind`` answer ``{"Error":"<msg>"}``; an empty string means success."""
    return gojson.dumps({"Error": error})


def _meta_str(obj: Mapping[str, Any], key: str) -> str:
    """``metadata.<key>`` of an API object, ``""`` when absent; a non-string is a DecodeError."""
    meta = gojson.optional_object(obj, "metadata", _ARGS, "Pod.metadata")
    return "" if meta is None else gojson.optional_string(meta, key, _ARGS, f"Pod.metadata.{key}")


def _sorted_map(m: Mapping[str, str] | None) -> dict[str, str] | None:
    if m is None:
        return None
    return {k: m[k] for k in sorted(m)}
