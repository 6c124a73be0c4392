"""Optional hooks, found fast.

Vendors offer optional parts as methods that a runtime-checkable :class:`typing.Protocol` describes
(:class:`~shared.vendors.base.AdmissionWarnings`, :class:`~shared.vendors.pods.BindPodAnnotations`…).
``isinstance`` against such a protocol inspects every member of the protocol on every call, a few microseconds
each, and the webhook, ``/filter`` and ``/bind`` ask it per vendor, per container, per pod: about 3 % of the
extender's CPU per pod. A hook is a method of the vendor's class, so whether an object offers it is a property of
its class: :func:`implements` answers once per (class, protocol) and remembers. Pure.
"""

from __future__ import annotations

from typing import TypeGuard, TypeVar

T = TypeVar("T")

_answers: dict[tuple[type, type], bool] = {}


def implements(obj: object, protocol: type[T]) -> TypeGuard[T]:
    """``isinstance(obj, protocol)`` for a runtime-checkable protocol whose members are methods of ``obj``'s
    class (never set per instance), remembered per class."""
    key = (type(obj), protocol)
    answer = _answers.get(key)
    if answer is None:
        answer = _answers[key] = isinstance(obj, protocol)
    return answer
