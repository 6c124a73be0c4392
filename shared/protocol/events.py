"""HAMi's pod events for filter and bind outcomes, as pure data (hami-wire §5.1 steps 4 and 7, §5.2 step 6).

The extender records these on the pod with the component name ``--scheduler-name``. Texts are HAMi's:

* ``FilteringFailed`` (Warning), one per reason type: ``"<k> nodes <ReasonType>(<n1>,<n2>)"`` (nodes sorted),
  then ``"no available node, <N> nodes do not meet"``;
* ``FilteringSucceed`` (Normal): ``"find fit node(<node>), <k> nodes not fit, <m> nodes fit(<n1>:<s1>,...)"``
  with scores printed ``%.2f``;
* ``BindingSucceed`` (Normal): ``"Successfully binding node [<node>] to <ns>/<name>"``; ``BindingFailed``
  (Warning): the error text.

HAMi emits the per-reason events in Go map order; we sort them by reason type so the output is deterministic.
A ``FailedNodes`` value that is not in ``GenReason`` form (``node unregistered``) counts as its own reason type.
Messages longer than :data:`MAX_MESSAGE_BYTES` are cut with ``...`` (the API server rejects huge events).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from vgpu_scheduler.shared.codec.reasons import parse_reason
from vgpu_scheduler.shared.errors import DecodeError

MAX_MESSAGE_BYTES: Final = 1024


class EventType(enum.Enum):
    NORMAL = "Normal"
    WARNING = "Warning"


class EventReason(enum.Enum):
    FILTERING_FAILED = "FilteringFailed"
    FILTERING_SUCCEED = "FilteringSucceed"
    BINDING_FAILED = "BindingFailed"
    BINDING_SUCCEED = "BindingSucceed"


@dataclass(frozen=True, slots=True)
class PodEvent:
    """One event to record on the pod being scheduled."""

    type: EventType
    reason: EventReason
    message: str


def reason_types(text: str) -> tuple[str, ...]:
    """The reason types of one ``FailedNodes`` value: the words of a ``GenReason`` string
    (``"2/4 CardInsufficientMemory, 2/4 CardNotHealth"`` → both), or the whole text when it is a plain
    message such as ``node unregistered``.
    """
    try:
        entries = parse_reason(text)
    except DecodeError:
        return (text,)
    return tuple(dict.fromkeys(e.reason for e in entries))


def invalid_request_event(message: str) -> PodEvent:
    """The Warning event for a pod whose GPU request cannot be honoured as written (the message says what to
    write instead); no node was evaluated."""
    return _event(EventType.WARNING, EventReason.FILTERING_FAILED, message)


def filter_failure_events(failed_nodes: Mapping[str, str], total_nodes: int | None = None) -> list[PodEvent]:
    """The Warning events for a pod no node could take: one per reason type, then the summary.

    ``total_nodes`` is the number of candidates kube-scheduler sent (default: ``len(failed_nodes)``). Each distinct
    ``FailedNodes`` text is parsed once (thousands of nodes share a handful of texts; this runs on ``/filter``).
    """
    by_text: dict[str, list[str]] = {}
    for node, text in failed_nodes.items():
        by_text.setdefault(text, []).append(node)
    by_reason: dict[str, set[str]] = {}
    for text, nodes_with_text in by_text.items():
        for reason_type in reason_types(text):
            by_reason.setdefault(reason_type, set()).update(nodes_with_text)
    events = [
        _event(
            EventType.WARNING,
            EventReason.FILTERING_FAILED,
            f"{len(nodes)} nodes {reason_type}({','.join(sorted(nodes))})",
        )
        for reason_type, nodes in sorted(by_reason.items())
    ]
    total = len(failed_nodes) if total_nodes is None else total_nodes
    events.append(
        _event(EventType.WARNING, EventReason.FILTERING_FAILED, f"no available node, {total} nodes do not meet")
    )
    return events


def filter_success_event(node: str, fit_scores: Sequence[tuple[str, float]], total_nodes: int) -> PodEvent:
    """The Normal event for a pod placed on ``node``.

    ``fit_scores`` lists every node that fit with its score, in ranking order (HAMi prints its sorted list,
    the winner last); ``total_nodes`` is the number of candidates, so ``total_nodes - len(fit_scores)`` did not fit.
    """
    scores = ",".join(f"{name}:{score:.2f}" for name, score in fit_scores)
    message = (
        f"find fit node({node}), {total_nodes - len(fit_scores)} nodes not fit, {len(fit_scores)} nodes fit({scores})"
    )
    return _event(EventType.NORMAL, EventReason.FILTERING_SUCCEED, message)


def filter_events(
    *,
    failed_nodes: Mapping[str, str],
    total_nodes: int,
    chosen: str | None = None,
    fit_scores: Sequence[tuple[str, float]] = (),
) -> list[PodEvent]:
    """The events of one filter call: the success event when ``chosen`` is set, else the failure events."""
    if chosen is None:
        return filter_failure_events(failed_nodes, total_nodes)
    return [filter_success_event(chosen, fit_scores, total_nodes)]


def bind_success_event(node: str, namespace: str, name: str) -> PodEvent:
    """``BindingSucceed``: Go prints the one-element node slice as ``[<node>]``."""
    return _event(
        EventType.NORMAL, EventReason.BINDING_SUCCEED, f"Successfully binding node [{node}] to {namespace}/{name}"
    )


def bind_failure_event(error: str) -> PodEvent:
    """``BindingFailed`` with the error text."""
    return _event(EventType.WARNING, EventReason.BINDING_FAILED, error)


def _event(kind: EventType, reason: EventReason, message: str) -> PodEvent:
    return PodEvent(kind, reason, truncate(message))


def truncate(message: str, max_bytes: int = MAX_MESSAGE_BYTES) -> str:
    """Cut ``message`` to at most ``max_bytes`` UTF-8 bytes, ending in ``...`` when cut."""
    raw = message.encode("utf-8")
    if len(raw) <= max_bytes:
        return message
    return raw[: max_bytes - 3].decode("utf-8", "ignore") + "..."
